//! A real Pebble ACME server (`/usr/bin/pebble`, Debian package `pebble`)
//! on free loopback ports, for end-to-end tests of the ACME DNS-01 client.
//!
//! Pebble ships no listener certificate, so [`Pebble::start`] makes a CA
//! and a `localhost`/`127.0.0.1` certificate with rcgen. Pebble's issuing
//! root is a different CA, regenerated on every launch: fetch it with
//! [`Pebble::issued_root`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio::process::{Child, Command};

use crate::harness::{curl, eventually};

/// The Pebble binary of the Debian package.
const PEBBLE: &str = "/usr/bin/pebble";

/// A running Pebble, killed when dropped.
pub struct Pebble {
    child: Option<Child>,
    dir: tempfile::TempDir,
    listen: SocketAddr,
    management: SocketAddr,
    dns: SocketAddr,
    authz_reuse: u8,
}

impl Pebble {
    /// Starts pebble on free loopback ports, validating DNS-01 challenges
    /// through `dns` (host:port, e.g. 127.0.0.1:5353).
    ///
    /// Nonces are never rejected at random and valid authorizations are
    /// never reused, so tests are deterministic.
    pub async fn start(dns: SocketAddr) -> Pebble {
        Self::start_with_authz_reuse(dns, 0).await
    }

    /// Like [`start`](Self::start), reusing a valid authorization for a
    /// new order `percent` % of the time, as Let's Encrypt does for 30 days.
    pub async fn start_with_authz_reuse(dns: SocketAddr, percent: u8) -> Pebble {
        let dir = tempfile::tempdir().expect("tempdir");
        write_listener_certificates(dir.path());

        let [listen, management, http, tls]: [u16; 4] =
            std::array::from_fn(|_| crate::ports::free_port());
        let config = serde_json::json!({
            "pebble": {
                "listenAddress": format!("127.0.0.1:{listen}"),
                "managementListenAddress": format!("127.0.0.1:{management}"),
                "certificate": dir.path().join("cert.pem"),
                "privateKey": dir.path().join("key.pem"),
                "httpPort": http,
                "tlsPort": tls,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false,
            }
        });
        let config_path = dir.path().join("pebble-config.json");
        std::fs::write(&config_path, config.to_string()).expect("write pebble config");

        let mut pebble = Pebble {
            child: None,
            dir,
            listen: SocketAddr::from(([127, 0, 0, 1], listen)),
            management: SocketAddr::from(([127, 0, 0, 1], management)),
            dns,
            authz_reuse: percent,
        };
        pebble.restart().await;
        pebble
    }

    /// Starts it again after [`stop`](Self::stop), on the same addresses
    /// (a new CA: its issued root changes); or starts it the first time.
    pub async fn restart(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("pebble.log"))
            .expect("pebble log");
        let child = Command::new(PEBBLE)
            .arg("-config")
            .arg(self.dir.path().join("pebble-config.json"))
            .arg("-dnsserver")
            .arg(self.dns.to_string())
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", self.authz_reuse.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("pebble log"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("pebble runs (apt-get install pebble)");
        self.child = Some(child);
        self.wait_ready().await;
    }

    /// `https://127.0.0.1:<port>/dir`
    pub fn directory(&self) -> String {
        format!("https://{}/dir", self.listen)
    }

    /// PEM file of the CA that signed Pebble's own listener certificate
    /// (what an ACME client must trust to talk to the directory).
    pub fn listener_ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Fetches the root of the chains Pebble issues from the management
    /// port and writes it to a PEM file in the temp dir; returns that path.
    pub async fn issued_root(&self) -> PathBuf {
        let url = format!("https://{}/roots/0", self.management);
        let out = curl(&self.listener_ca(), &["--max-time", "5", &url]).await;
        assert_eq!(
            out.status,
            200,
            "GET {url}: {}{}\npebble log:\n{}",
            out.stderr,
            out.text(),
            self.log()
        );
        let path = self.dir.path().join("issued-root.pem");
        std::fs::write(&path, &out.body).expect("write issued root");
        path
    }

    /// Kills pebble (for "CA unreachable" tests); idempotent.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Kills and reaps; an already exited pebble is fine too.
            let _ = child.kill().await;
        }
    }

    /// Everything pebble wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }

    /// Waits up to 15 s until the directory answers; panics with the log if
    /// pebble exits or never answers.
    async fn wait_ready(&mut self) {
        let ca = self.listener_ca();
        let url = self.directory();
        let child = self.child.as_mut().expect("pebble running");
        let ready = eventually(Duration::from_secs(15), || {
            let exited = child.try_wait().expect("pebble status");
            let (ca, url) = (&ca, &url);
            async move {
                if let Some(status) = exited {
                    return Some(Err(status));
                }
                let out = curl(ca, &["--max-time", "1", url]).await;
                (out.status == 200).then_some(Ok(()))
            }
        })
        .await;
        match ready {
            Some(Ok(())) => {}
            Some(Err(status)) => panic!("pebble exited ({status}):\n{}", self.log()),
            None => panic!("pebble did not answer within 15 s:\n{}", self.log()),
        }
    }
}

/// Writes `ca.pem`, and `cert.pem`/`key.pem` for `localhost` and
/// `127.0.0.1` signed by it, into `dir`.
fn write_listener_certificates(dir: &std::path::Path) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.distinguished_name
        .push(DnType::CommonName, "calvin test pebble listener CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().expect("ca key");
    let ca_cert = ca.self_signed(&ca_key).expect("ca certificate");
    let issuer = Issuer::new(ca, ca_key);

    let mut leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("leaf params");
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf_cert = leaf
        .signed_by(&leaf_key, &issuer)
        .expect("leaf certificate");

    let write = |name: &str, pem: String| {
        std::fs::write(dir.join(name), pem).expect("write listener certificate");
    };
    write("ca.pem", ca_cert.pem());
    write("cert.pem", leaf_cert.pem());
    write("key.pem", leaf_key.serialize_pem());
}
