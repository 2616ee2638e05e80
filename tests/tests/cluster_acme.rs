//! One ACME certificate for a cluster: three `calvin-edge serve` on
//! 127.0.0.1, .2 and .3 share one etcd and order from one Pebble. Pebble
//! asks edge 3's DNS alone, while edge 1 orders: the certificate comes
//! only if edge 3 answers the values edge 1 published. During the orders,
//! `dig` at every edge's DNS answers them; afterwards every edge serves
//! the same certificate, chained to Pebble's root. When the orderer dies,
//! another edge takes the renewals over; when it comes back it serves the
//! cluster's newer certificate without ordering.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use calvin_tests::cluster::{CLUSTER_ZONE, edge_host, free_peer_port};
use calvin_tests::free_udp_tcp_port;
use calvin_tests::pebble::Pebble;
use calvin_tests::serve_edge::{ServeEdge, dig, served_serial};
use calvin_tests::{ClusterCerts, Etcd, cluster_toml, eventually, token_for, write_secret};

const CHALLENGE: &str = "_acme-challenge.preview.test";
const ORDERER: &str = "calvin/acme/orderer";

/// A port free for UDP and TCP on `host`, known before the edge starts
/// (Pebble's `-dnsserver` names it).
fn free_dns_port(host: IpAddr) -> u16 {
    for _ in 0..100 {
        let port = free_udp_tcp_port();
        let free = UdpSocket::bind((host, port)).is_ok()
            && std::net::TcpListener::bind((host, port)).is_ok();
        if free {
            return port;
        }
    }
    panic!("no port free for DNS on {host}");
}

/// One edge's files and fixed addresses.
struct Node {
    dns: SocketAddr,
    peer: SocketAddr,
    config: PathBuf,
    log: PathBuf,
}

/// Writes edge `n`'s config, its DNS on `dns`.
fn write_config(
    dir: &Path,
    n: usize,
    dns: SocketAddr,
    etcd: &Etcd,
    pebble: &Pebble,
    certs: &ClusterCerts,
) -> Node {
    let host = edge_host(n);
    let dir = dir.join(format!("edge-{n}"));
    std::fs::create_dir_all(&dir).expect("edge dir");
    let node = Node {
        dns,
        peer: SocketAddr::new(host, free_peer_port(host)),
        config: dir.join("edge.toml"),
        log: dir.join("edge.log"),
    };
    let config = format!(
        r#"domain = "{CLUSTER_ZONE}"
public_ips = ["{host}"]
state_dir = "{state}"
[admin]
listen = "{host}:0"
[listen]
https = "{host}:0"
http = "{host}:0"
quic = "{host}:0"
dns = "{dns}"
[acme]
directory = "{directory}"
contact = "mailto:ops@preview.test"
ca_file = "{ca}"
retry_min_secs = 1
retry_max_secs = 2
[[accounts]]
name = "alice"
token = "{token}"
{cluster}"#,
        state = dir.join("state").display(),
        dns = node.dns,
        directory = pebble.directory(),
        ca = pebble.listener_ca().display(),
        token = token_for("alice"),
        cluster = cluster_toml(&etcd.endpoint(), node.peer, &certs.edges[n - 1], 3),
    );
    write_secret(&node.config, &config);
    node
}

/// The serial an edge's health endpoint reports, once it has one.
async fn health_serial(edge: &ServeEdge) -> Option<String> {
    let (status, body) = edge.admin("/healthz").await;
    let health: serde_json::Value = serde_json::from_str(&body).ok()?;
    let serial = health["certificate"]["serial"].as_str()?.to_owned();
    (status == 200).then_some(serial)
}

/// Waits until every edge of `edges` serves one serial other than `not`.
async fn same_serial(edges: &[&ServeEdge], not: Option<&str>) -> Option<String> {
    eventually(Duration::from_secs(60), || async {
        let mut serials = BTreeSet::new();
        for edge in edges {
            serials.insert(health_serial(edge).await?);
        }
        let serial = serials.pop_first()?;
        (serials.is_empty() && Some(serial.as_str()) != not).then_some(serial)
    })
    .await
}

/// The TXT values `dig` gets from a DNS server.
async fn txt(dns: SocketAddr) -> BTreeSet<String> {
    dig(dns, &["+short", "TXT", CHALLENGE])
        .await
        .lines()
        .map(|l| l.trim().trim_matches('"').to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The values of an order under way (in etcd), and what each edge's DNS
/// answered right after.
#[derive(Debug)]
struct Sighting {
    values: BTreeSet<String>,
    answers: Vec<BTreeSet<String>>,
}

impl Sighting {
    fn everywhere(&self) -> bool {
        self.answers.iter().all(|a| self.values.is_subset(a))
    }
}

/// Watches etcd for challenge values and digs every edge while there are.
fn spy(
    etcd: Arc<Etcd>,
    dns: Vec<SocketAddr>,
) -> (Arc<Mutex<Vec<Sighting>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sightings = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let values: BTreeSet<String> = etcd
                .get_prefix("calvin/acme/challenges/")
                .await
                .into_iter()
                .map(|(key, _)| key.trim_start_matches("calvin/acme/challenges/").to_owned())
                .collect();
            if !values.is_empty() {
                let mut answers = Vec::new();
                for &server in &dns {
                    answers.push(txt(server).await);
                }
                sightings
                    .lock()
                    .expect("sightings")
                    .push(Sighting { values, answers });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (seen, task)
}

async fn orderer(etcd: &Etcd) -> Option<String> {
    etcd.get_prefix(ORDERER)
        .await
        .into_iter()
        .next()
        .map(|(_, v)| v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_certificate_ordered_through_one_edge_is_served_by_all_three() {
    let etcd = Arc::new(Etcd::start().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let hosts: Vec<IpAddr> = (1..=3).map(edge_host).collect();
    let certs = ClusterCerts::generate(&dir.path().join("cluster"), &hosts);
    let dns: Vec<SocketAddr> = hosts
        .iter()
        .map(|&host| SocketAddr::new(host, free_dns_port(host)))
        .collect();
    // Pebble asks edge 3's DNS alone.
    let pebble = Pebble::start(dns[2]).await;
    let nodes: Vec<Node> = (1..=3)
        .map(|n| write_config(dir.path(), n, dns[n - 1], &etcd, &pebble, &certs))
        .collect();
    let logs = || {
        let mut all = String::new();
        for (i, node) in nodes.iter().enumerate() {
            let log = std::fs::read_to_string(&node.log).unwrap_or_default();
            all += &format!("--- edge {}\n{log}\n", i + 1);
        }
        all + "--- pebble\n" + &pebble.log()
    };

    // Edge 1 comes first and takes the orders (an attempt made before
    // edge 3's DNS is up fails, and is retried within 2 s).
    let mut edge1 = ServeEdge::start(&nodes[0].config, &nodes[0].log).await;
    let first_orderer = eventually(Duration::from_secs(20), || orderer(&etcd)).await;
    assert_eq!(
        first_orderer,
        Some(nodes[0].peer.to_string()),
        "{}",
        edge1.log()
    );
    let edge2 = ServeEdge::start(&nodes[1].config, &nodes[1].log).await;
    let edge3 = ServeEdge::start(&nodes[2].config, &nodes[2].log).await;
    assert_eq!(edge3.dns, Some(dns[2]));
    let (sightings, spying) = spy(etcd.clone(), nodes.iter().map(|n| n.dns).collect());

    // The certificate reaches all three. Pebble's NOSLEEP validation makes
    // an order short: if the spy saw none whole, order again (SIGHUP).
    let mut serial = None;
    for _ in 0..4 {
        serial = same_serial(&[&edge1, &edge2, &edge3], serial.as_deref()).await;
        assert!(serial.is_some(), "no common certificate\n{}", logs());
        if sightings
            .lock()
            .expect("sightings")
            .iter()
            .any(Sighting::everywhere)
        {
            break;
        }
        edge1.signal("HUP").await;
    }
    let serial = serial.expect("a serial");
    {
        let sightings = sightings.lock().expect("sightings");
        assert!(
            sightings.iter().any(Sighting::everywhere),
            "no order's values answered by every edge: {sightings:?}"
        );
    }
    let root = pebble.issued_root().await;
    for edge in [&edge1, &edge2, &edge3] {
        let https = edge.https.expect("https");
        let host = format!("edge.{CLUSTER_ZONE}");
        assert_eq!(served_serial(https, &host, &root).await, serial);
    }
    assert!(edge1.log().contains("ordering a certificate"), "{}", logs());
    for edge in [&edge2, &edge3] {
        let log = edge.log();
        assert!(!log.contains("ordering a certificate"), "{}", logs());
        assert!(
            log.contains("serving the cluster's certificate"),
            "{}",
            logs()
        );
    }

    // In etcd: the certificate on no lease, the orderer and what each
    // edge's DNS answers on theirs, and no challenge left over.
    let entries = etcd.entries("calvin/acme/").await;
    let entry = |key: &str| entries.iter().find(|e| e.key == key);
    let stored = entry("calvin/acme/certificate").expect("the certificate in etcd");
    assert_eq!(stored.lease, None);
    let record: serde_json::Value = serde_json::from_str(&stored.value).expect("JSON");
    assert_eq!(record["directory"], pebble.directory());
    assert!(
        record["key"]
            .as_str()
            .expect("a key")
            .contains("PRIVATE KEY")
    );
    assert!(
        entry(ORDERER).and_then(|e| e.lease).is_some(),
        "{entries:?}"
    );
    let seen: Vec<_> = entries
        .iter()
        .filter(|e| e.key.starts_with("calvin/acme/seen/"))
        .collect();
    assert_eq!(seen.len(), 3, "{entries:?}");
    assert!(seen.iter().all(|e| e.lease.is_some()), "{entries:?}");
    let cleared = eventually(Duration::from_secs(10), || async {
        etcd.get_prefix("calvin/acme/challenges/")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    assert!(cleared.is_some(), "challenges left in etcd");
    spying.abort();

    // The orderer dies: its lease ends, another edge takes the orders over
    // and renews for the two left (Pebble still asks edge 3).
    edge1.kill().await;
    let peers = [nodes[1].peer.to_string(), nodes[2].peer.to_string()];
    let next = eventually(Duration::from_secs(20), || async {
        orderer(&etcd).await.filter(|o| peers.contains(o))
    })
    .await
    .unwrap_or_else(|| panic!("no edge took the orders over\n{}", logs()));
    let next = if next == peers[0] { &edge2 } else { &edge3 };
    next.signal("HUP").await;
    let renewed = same_serial(&[&edge2, &edge3], Some(&serial))
        .await
        .unwrap_or_else(|| panic!("no renewal after the takeover\n{}", logs()));
    for edge in [&edge2, &edge3] {
        let https = edge.https.expect("https");
        assert_eq!(
            served_serial(https, &format!("edge.{CLUSTER_ZONE}"), &root).await,
            renewed
        );
    }
    assert!(next.log().contains("ordering a certificate"), "{}", logs());

    // Edge 1 back, with the older certificate on its disk: it serves the
    // cluster's newer one and orders nothing.
    let orders = |log: &str| log.matches("ordering a certificate").count();
    let before = orders(&edge1.log());
    let edge1 = ServeEdge::start(&nodes[0].config, &nodes[0].log).await;
    let back = same_serial(&[&edge1, &edge2, &edge3], Some(&serial)).await;
    assert_eq!(back.as_deref(), Some(renewed.as_str()), "{}", logs());
    let https = edge1.https.expect("https");
    let host = format!("edge.{CLUSTER_ZONE}");
    assert_eq!(served_serial(https, &host, &root).await, renewed);
    assert_eq!(orders(&edge1.log()), before, "{}", logs());
    for edge in [edge1, edge2, edge3] {
        edge.stop().await;
    }
}
