//! A cluster of `calvin-edge serve` processes sharing one etcd
//! ([`crate::etcd::Etcd`]): edge N listens on 127.0.0.N, all serve the
//! same domain and accounts with the same visitor certificate, and each
//! talks to the others over QUIC with mutual TLS under a cluster CA.
//!
//! [`ClusterCerts`] makes that CA, a certificate per edge (an IP SAN for
//! its host, serverAuth and clientAuth) and an unrelated `rogue` CA and
//! certificate; [`cluster_toml`] writes an edge's `[cluster]` section;
//! [`edge_toml`] a whole config; [`ClusterEdges`] starts, kills, restarts
//! and adds edges.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::harness::{send_signal, token_for, write_secret};
use crate::ports::free_udp_tcp_port;
use crate::serve_edge::ServeEdge;

/// The preview domain of every edge of a test cluster; a visitor reaches
/// an edge with `curl --resolve NAME.preview.test:PORT:127.0.0.N`.
pub const CLUSTER_ZONE: &str = "preview.test";

/// The host of edge `n` (1-based): 127.0.0.n.
pub fn edge_host(n: usize) -> IpAddr {
    let last = u8::try_from(n).ok().filter(|b| (1..255).contains(b));
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last.expect("1 <= n < 255")))
}

/// The certificate of one edge for the edge-to-edge link, as PEM files.
#[derive(Clone, Debug)]
pub struct EdgeCerts {
    /// The host in its IP SAN (what `advertise` must name).
    pub host: IpAddr,
    /// The CA the edge trusts for its peers (`peer_ca`).
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The cluster CA and certificates signed by it, in a directory.
pub struct ClusterCerts {
    pub dir: PathBuf,
    /// The cluster CA (PEM).
    pub ca: PathBuf,
    /// One per host given to [`generate`](Self::generate) or
    /// [`issue`](Self::issue), in order.
    pub edges: Vec<EdgeCerts>,
    /// A certificate for every host given to `generate`, from another CA
    /// (`rogue.ca`): an edge presenting it must be refused.
    pub rogue: EdgeCerts,
    issuer: Issuer<'static, KeyPair>,
}

impl ClusterCerts {
    /// Makes the cluster CA and a certificate per host in `dir` (created
    /// if missing), and the rogue CA and certificate.
    pub fn generate(dir: &Path, hosts: &[IpAddr]) -> ClusterCerts {
        std::fs::create_dir_all(dir).expect("certificate dir");
        let (ca, issuer) = make_ca(dir, "cluster-ca", "calvin test cluster CA");
        let (rogue_ca, rogue_issuer) = make_ca(dir, "rogue-ca", "calvin test rogue CA");
        let rogue = EdgeCerts {
            host: hosts.first().copied().unwrap_or(edge_host(1)),
            ca: rogue_ca.clone(),
            cert: dir.join("rogue.pem"),
            key: dir.join("rogue.key"),
        };
        make_leaf(&rogue_issuer, hosts, "rogue edge", &rogue.cert, &rogue.key);
        let mut certs = ClusterCerts {
            dir: dir.to_owned(),
            ca,
            edges: Vec::new(),
            rogue,
            issuer,
        };
        for &host in hosts {
            certs.issue(host);
        }
        certs
    }

    /// A certificate for one more edge on `host`, signed by the cluster CA
    /// (`edge-<host>.pem` and `.key`); also pushed to `edges`.
    pub fn issue(&mut self, host: IpAddr) -> EdgeCerts {
        let certs = EdgeCerts {
            host,
            ca: self.ca.clone(),
            cert: self.dir.join(format!("edge-{host}.pem")),
            key: self.dir.join(format!("edge-{host}.key")),
        };
        let name = format!("edge {host}");
        make_leaf(&self.issuer, &[host], &name, &certs.cert, &certs.key);
        self.edges.push(certs.clone());
        certs
    }
}

/// Writes `<stem>.pem` (and its key, 0600, to `<stem>.key`); returns the
/// certificate's path and the issuer to sign leaves with.
fn make_ca(dir: &Path, stem: &str, name: &str) -> (PathBuf, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("CA certificate");
    let path = dir.join(format!("{stem}.pem"));
    std::fs::write(&path, cert.pem()).expect("write CA");
    write_secret(&dir.join(format!("{stem}.key")), &key.serialize_pem());
    (path, Issuer::new(params, key))
}

/// A leaf for `hosts` (IP SANs), usable by a server and a client.
fn make_leaf(issuer: &Issuer<'_, KeyPair>, hosts: &[IpAddr], name: &str, cert: &Path, key: &Path) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("leaf params");
    params.subject_alt_names = hosts.iter().map(|&h| SanType::IpAddress(h)).collect();
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf = params
        .signed_by(&leaf_key, issuer)
        .expect("leaf certificate");
    std::fs::write(cert, leaf.pem()).expect("write leaf");
    write_secret(key, &leaf_key.serialize_pem());
}

/// The `[cluster]` section of an edge whose edge-to-edge listener is
/// `peer` (both `peer_listen` and `advertise`).
pub fn cluster_toml(
    etcd: &str,
    peer: SocketAddr,
    certs: &EdgeCerts,
    lease_ttl_secs: u64,
) -> String {
    format!(
        r#"[cluster]
etcd = ["{etcd}"]
peer_listen = "{peer}"
advertise = "{peer}"
peer_ca = "{ca}"
peer_cert = "{cert}"
peer_key = "{key}"
lease_ttl_secs = {lease_ttl_secs}
"#,
        ca = certs.ca.display(),
        cert = certs.cert.display(),
        key = certs.key.display(),
    )
}

/// What differs between the edges of a cluster, and what they share.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Accounts of every edge, each with the token [`token_for`] gives.
    pub accounts: Vec<String>,
    pub lease_ttl_secs: u64,
    /// More TOML sections for every edge (`[limits]`, `[log]`): appended
    /// after `[cluster]`, so no top-level keys.
    pub extra: String,
    /// More arguments of `calvin-edge serve` (`--log-format json`).
    pub args: Vec<String>,
    /// Whether each edge answers the zone's DNS (on its host, any port),
    /// with its host as its `public_ips`.
    pub dns: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            accounts: vec!["alice".to_owned(), "bob".to_owned()],
            lease_ttl_secs: 3,
            extra: String::new(),
            args: Vec::new(),
            dns: false,
        }
    }
}

/// The addresses of an edge's own listeners; port 0 for "any".
#[derive(Clone, Copy, Debug)]
pub struct EdgeListen {
    pub https: SocketAddr,
    pub http: SocketAddr,
    pub quic: SocketAddr,
    pub admin: SocketAddr,
}

impl EdgeListen {
    /// Every listener on `host`, port 0.
    pub fn any_port(host: IpAddr) -> EdgeListen {
        let any = SocketAddr::new(host, 0);
        EdgeListen {
            https: any,
            http: any,
            quic: any,
            admin: any,
        }
    }
}

/// A whole `calvin-edge serve` config: `listen`, the visitor certificate
/// (`tls_cert`, `tls_key`), `state_dir`, the accounts and `[cluster]`.
pub fn edge_toml(
    listen: &EdgeListen,
    state_dir: &Path,
    tls_cert: &Path,
    tls_key: &Path,
    cluster: &str,
    options: &ClusterOptions,
) -> String {
    let (public_ips, dns) = if options.dns {
        let host = listen.https.ip();
        (
            format!("public_ips = [\"{host}\"]\n"),
            format!("dns = \"{}\"\n", SocketAddr::new(host, 0)),
        )
    } else {
        (String::new(), String::new())
    };
    let mut config = format!(
        r#"domain = "{CLUSTER_ZONE}"
{public_ips}state_dir = "{state}"
[admin]
listen = "{admin}"
[listen]
https = "{https}"
http = "{http}"
quic = "{quic}"
plain_http = "serve"
{dns}[tls]
cert_file = "{cert}"
key_file = "{key}"
"#,
        state = state_dir.display(),
        admin = listen.admin,
        https = listen.https,
        http = listen.http,
        quic = listen.quic,
        cert = tls_cert.display(),
        key = tls_key.display(),
    );
    for account in &options.accounts {
        config += &format!(
            "[[accounts]]\nname = \"{account}\"\ntoken = \"{}\"\n",
            token_for(account)
        );
    }
    config += cluster;
    config += &options.extra;
    config
}

/// A UDP port free on `host`, below the ephemeral range: `advertise` must
/// be written before the edge starts, and stay its own across restarts.
pub fn free_peer_port(host: IpAddr) -> u16 {
    for _ in 0..100 {
        let port = free_udp_tcp_port();
        if UdpSocket::bind((host, port)).is_ok() {
            return port;
        }
    }
    panic!("no UDP port free on {host}");
}

/// Where one edge of a [`ClusterEdges`] lives.
#[derive(Clone, Debug)]
pub struct ClusterNode {
    /// 1-based: the edge listens on 127.0.0.n.
    pub n: usize,
    /// Its edge-to-edge address (`peer_listen` and `advertise`).
    pub peer: SocketAddr,
    pub certs: EdgeCerts,
    pub config: PathBuf,
    /// Its stderr, appended across restarts.
    pub log: PathBuf,
    pub state_dir: PathBuf,
}

/// Edges 1..=n of a cluster on one etcd, as `calvin-edge serve` processes.
/// `edges[i]` runs `nodes[i]` (edge i + 1).
pub struct ClusterEdges {
    pub edges: Vec<ServeEdge>,
    pub nodes: Vec<ClusterNode>,
    pub certs: ClusterCerts,
    /// The CA a visitor (`curl --cacert`) and an agent trust.
    pub visitor_ca: PathBuf,
    visitor_cert: PathBuf,
    visitor_key: PathBuf,
    etcd: String,
    options: ClusterOptions,
    dir: tempfile::TempDir,
}

impl ClusterEdges {
    /// Starts `n` edges on `etcd` with the default options.
    pub async fn start(n: usize, etcd: &crate::etcd::Etcd) -> ClusterEdges {
        Self::start_with(n, &etcd.endpoint(), ClusterOptions::default()).await
    }

    /// Starts `n` edges on the etcd at `etcd` (`http://127.0.0.1:PORT`),
    /// one after the other.
    pub async fn start_with(n: usize, etcd: &str, options: ClusterOptions) -> ClusterEdges {
        let dir = tempfile::tempdir().expect("tempdir");
        let visitor = calvin_edge::dev::load_or_create(&dir.path().join("visitor"), CLUSTER_ZONE)
            .expect("visitor certificate");
        let hosts: Vec<IpAddr> = (1..=n).map(edge_host).collect();
        let certs = ClusterCerts::generate(&dir.path().join("cluster"), &hosts);
        let mut cluster = ClusterEdges {
            edges: Vec::new(),
            nodes: Vec::new(),
            certs,
            visitor_ca: visitor.ca_path(),
            visitor_cert: visitor.dir.join("edge.pem"),
            visitor_key: visitor.dir.join("edge.key"),
            etcd: etcd.to_owned(),
            options,
            dir,
        };
        for i in 0..n {
            let certs = cluster.certs.edges[i].clone();
            cluster.start_node(i + 1, certs).await;
        }
        cluster
    }

    /// Adds edge n + 1 (a new certificate from the cluster CA) and starts
    /// it; returns its index in `edges`.
    pub async fn add(&mut self) -> usize {
        let n = self.nodes.len() + 1;
        let certs = self.certs.issue(edge_host(n));
        self.start_node(n, certs).await;
        n - 1
    }

    /// The directory holding every edge's files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The etcd endpoint the edges use.
    pub fn etcd(&self) -> &str {
        &self.etcd
    }

    /// `edges[i]`'s log, for assertion messages.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }

    /// Every edge's log, each under a header.
    pub fn logs(&self) -> String {
        (0..self.nodes.len())
            .map(|i| format!("--- edge {} ---\n{}", i + 1, self.log(i)))
            .collect()
    }

    /// SIGKILLs `edges[i]` (no deregistration: its lease runs out).
    pub async fn kill(&mut self, i: usize) {
        self.edges[i].kill().await;
    }

    /// SIGTERMs `edges[i]` and waits for its exit.
    pub async fn stop(&mut self, i: usize) {
        let edge = &mut self.edges[i];
        if edge.child.try_wait().ok().flatten().is_none() {
            send_signal(&edge.child, "TERM").await;
        }
        let exited = tokio::time::timeout(Duration::from_secs(40), edge.child.wait()).await;
        assert!(
            exited.is_ok(),
            "edge {} did not stop:\n{}",
            i + 1,
            self.log(i)
        );
    }

    /// Starts `edges[i]` again with its state, certificate and peer port,
    /// on the addresses it had (stopping it first if it still runs).
    pub async fn restart(&mut self, i: usize) {
        self.stop(i).await;
        let edge = &self.edges[i];
        let host = self.nodes[i].certs.host;
        let listen = EdgeListen {
            https: edge.https.unwrap_or(SocketAddr::new(host, 0)),
            http: edge.http.unwrap_or(SocketAddr::new(host, 0)),
            quic: edge.quic,
            admin: edge.admin.unwrap_or(SocketAddr::new(host, 0)),
        };
        self.write_config(i, &listen);
        self.edges[i] = self.launch(i).await;
    }

    async fn start_node(&mut self, n: usize, certs: EdgeCerts) {
        let dir = self.dir.path().join(format!("edge-{n}"));
        std::fs::create_dir_all(&dir).expect("edge dir");
        let peer = SocketAddr::new(certs.host, free_peer_port(certs.host));
        self.nodes.push(ClusterNode {
            n,
            peer,
            config: dir.join("edge.toml"),
            log: dir.join("edge.log"),
            state_dir: dir.join("state"),
            certs: certs.clone(),
        });
        let i = self.nodes.len() - 1;
        self.write_config(i, &EdgeListen::any_port(certs.host));
        let edge = self.launch(i).await;
        self.edges.push(edge);
    }

    /// Writes `nodes[i]`'s config (0600: it holds tokens).
    fn write_config(&self, i: usize, listen: &EdgeListen) {
        let node = &self.nodes[i];
        let cluster = cluster_toml(
            &self.etcd,
            node.peer,
            &node.certs,
            self.options.lease_ttl_secs,
        );
        let config = edge_toml(
            listen,
            &node.state_dir,
            &self.visitor_cert,
            &self.visitor_key,
            &cluster,
            &self.options,
        );
        write_secret(&node.config, &config);
    }

    async fn launch(&self, i: usize) -> ServeEdge {
        let node = &self.nodes[i];
        let args: Vec<&str> = self.options.args.iter().map(String::as_str).collect();
        let edge = ServeEdge::start_with(&node.config, &node.log, &args).await;
        assert_eq!(
            edge.peer,
            Some(node.peer),
            "edge {} printed no `listening peer {}/udp` before `previews`:\n{}",
            node.n,
            node.peer,
            edge.log()
        );
        edge
    }
}
