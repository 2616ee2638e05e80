//! A network namespace of the test's own, joined to this one by a veth
//! pair, for faults that must cross a real link: packet loss and a
//! blackhole (nftables rules inside the namespace, so nothing else on the
//! machine is touched) and a small MTU. Needs root, iproute2 and nftables;
//! removed when dropped.
//!
//! A contributor who is not root runs the rest: [`Netns::or_skip`] prints
//! why a test is skipped. CI runs as root with `CALVIN_REQUIRE_NETNS=1`,
//! where a skip is a failure.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

pub struct Netns {
    pub name: String,
    /// This side's end of the veth pair.
    pub host_ip: Ipv4Addr,
    /// The namespace's end.
    pub ns_ip: Ipv4Addr,
    host_if: String,
    ns_if: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `program args`, panicking with what it printed when it fails.
fn run(program: &str, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs (install iproute2 and nftables): {e}"));
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Set (to anything but empty or `0`), a test that cannot make its
/// namespace fails instead of skipping: CI sets it.
pub const REQUIRE_ENV: &str = "CALVIN_REQUIRE_NETNS";

impl Netns {
    /// Why this machine cannot make a namespace, if it cannot: not root,
    /// or no `ip` / `nft`.
    pub fn unavailable() -> Option<String> {
        if !rustix::process::geteuid().is_root() {
            return Some(
                "it makes a network namespace, which needs root (CI runs it as root)".into(),
            );
        }
        for (program, package) in [("ip", "iproute2"), ("nft", "nftables")] {
            let found = Command::new(program)
                .arg("-V")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok();
            if !found {
                return Some(format!("{program} is missing (install {package})"));
            }
        }
        None
    }

    /// [`Netns::create`], or `None` after printing why `test` is skipped;
    /// with [`REQUIRE_ENV`] set, a skip panics.
    pub fn or_skip(test: &str) -> Option<Netns> {
        let Some(why) = Self::unavailable() else {
            return Some(Self::create());
        };
        let required = std::env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
        assert!(
            !required,
            "{test} cannot run and {REQUIRE_ENV} is set: {why}"
        );
        eprintln!("skipped {test}: {why}");
        None
    }

    /// A fresh namespace with its loopback up and a /30 to this one.
    pub fn create() -> Netns {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{:x}{n}", pid & 0xf_ffff);
        let name = format!("calvin-{tag}");
        let (host_if, ns_if) = (format!("cv{tag}h"), format!("cv{tag}n"));
        // 10.<pid>.<pid>.<4n>/30: distinct per test process and per namespace.
        let base = [
            10,
            64 | ((pid >> 8) & 0x3f) as u8,
            pid as u8,
            (n as u8 & 0x3f) * 4,
        ];
        let host_ip = Ipv4Addr::new(base[0], base[1], base[2], base[3] + 1);
        let ns_ip = Ipv4Addr::new(base[0], base[1], base[2], base[3] + 2);
        run("ip", &["netns", "add", &name], None);
        let netns = Netns {
            name,
            host_ip,
            ns_ip,
            host_if,
            ns_if,
        };
        let ns = netns.name.as_str();
        let (h, i) = (netns.host_if.as_str(), netns.ns_if.as_str());
        run(
            "ip",
            &["link", "add", h, "type", "veth", "peer", "name", i],
            None,
        );
        run("ip", &["link", "set", i, "netns", ns], None);
        run(
            "ip",
            &["addr", "add", &format!("{host_ip}/30"), "dev", h],
            None,
        );
        run("ip", &["link", "set", h, "up"], None);
        netns.exec(&["ip", "addr", "add", &format!("{ns_ip}/30"), "dev", i]);
        netns.exec(&["ip", "link", "set", i, "up"]);
        netns.exec(&["ip", "link", "set", "lo", "up"]);
        netns
    }

    /// Runs a command inside the namespace and returns its output.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        run("ip", &all, None)
    }

    /// A command that will run `program` inside the namespace.
    pub fn command(&self, program: &Path) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// Loads an nftables script into the namespace's own ruleset.
    pub fn nft(&self, script: &str) {
        run(
            "ip",
            &["netns", "exec", &self.name, "nft", "-f", "-"],
            Some(script),
        );
    }

    /// The namespace's ruleset as `nft list ruleset` prints it.
    pub fn ruleset(&self) -> String {
        self.exec(&["nft", "list", "ruleset"])
    }

    /// Adds a second address to the namespace's end of the link, with a
    /// route to it from this side, and returns it: 10.128.0.0/10 and the
    /// rest as [`Netns::ns_ip`], so distinct per namespace too. It goes
    /// with the link when the namespace is removed.
    pub fn add_address(&self) -> Ipv4Addr {
        let [a, b, c, d] = self.ns_ip.octets();
        let second = Ipv4Addr::new(a, 0x80 | (b & 0x3f), c, d);
        let cidr = format!("{second}/32");
        self.exec(&["ip", "addr", "add", &cidr, "dev", &self.ns_if]);
        run("ip", &["route", "add", &cidr, "dev", &self.host_if], None);
        second
    }

    /// The local ports of the UDP sockets open in the namespace.
    pub fn udp_ports(&self) -> Vec<u16> {
        self.exec(&["ss", "-Huan"])
            .lines()
            .filter_map(|line| {
                let local = line.split_whitespace().nth(3)?;
                local.rsplit_once(':')?.1.parse().ok()
            })
            .collect()
    }

    /// Sets the MTU of both ends of the link.
    pub fn set_mtu(&self, mtu: u16) {
        let mtu = mtu.to_string();
        run("ip", &["link", "set", &self.host_if, "mtu", &mtu], None);
        self.exec(&["ip", "link", "set", &self.ns_if, "mtu", &mtu]);
    }

    /// A TCP listener bound inside the namespace (a dev server there). A
    /// thread of its own joins the namespace to make the socket; the socket
    /// stays in it wherever it is used from.
    pub fn tcp_listener(&self, addr: SocketAddr) -> std::net::TcpListener {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).expect("namespace file");
            move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&ns),
                Some(LinkNameSpaceType::Network),
            )
            .expect("join the namespace");
            let listener = std::net::TcpListener::bind(addr).expect("bind in the namespace");
            listener.set_nonblocking(true).expect("nonblocking");
            listener
        })
        .join()
        .expect("listener thread")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the veth, and with it ours.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// The packet count of every nftables counter in `ruleset`, in order.
pub fn counters(ruleset: &str) -> Vec<u64> {
    ruleset
        .split("counter packets ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}
