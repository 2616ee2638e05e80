//! The edge's authoritative DNS, asked with dig: the zone's records over
//! UDP and TCP, REFUSED outside it, TC when an answer does not fit, and
//! challenge TXT values that a query flood cannot hold up.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use calvin_edge::certs::dns::{Challenges, DnsServer, ZoneAnswers, ZoneSettings};
use calvin_tests::serve_edge::{ServeEdge, dig, dig_flags, dig_status};
use calvin_tests::{token_for, write_secret};

const ZONE: &str = "preview.test";

/// `calvin-edge serve` with a certificate of its own ([tls]) and DNS on.
async fn edge(dir: &std::path::Path) -> ServeEdge {
    let state = calvin_edge::dev::load_or_create(&dir.join("certs"), ZONE).expect("certificate");
    let config = format!(
        r#"
domain = "{ZONE}"
public_ips = ["192.0.2.10", "2001:db8::10"]
state_dir = "{state}"
[admin]
listen = "127.0.0.1:0"
[listen]
https = "127.0.0.1:0"
http = "127.0.0.1:0"
quic = "127.0.0.1:0"
dns = "127.0.0.1:0"
[tls]
cert_file = "{cert}"
key_file = "{key}"
[dns]
nameservers = ["ns1.{ZONE}", "ns2.{ZONE}"]
caa_issuers = ["letsencrypt.org"]
[[accounts]]
name = "a"
token = "{token}"
"#,
        state = dir.join("state").display(),
        cert = state.dir.join("edge.pem").display(),
        key = state.dir.join("edge.key").display(),
        token = token_for("a"),
    );
    let path = dir.join("edge.toml");
    write_secret(&path, &config);
    ServeEdge::start(&path, &dir.join("edge.log")).await
}

fn answers(output: &str) -> Vec<String> {
    output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with(';'))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dig_sees_the_zone_over_udp_and_tcp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let edge = edge(dir.path()).await;
    let dns = edge.dns.expect("the DNS listener is printed");

    for transport in ["+notcp", "+tcp"] {
        let short = |name: &str, qtype: &str| {
            let (name, qtype) = (name.to_owned(), qtype.to_owned());
            async move { answers(&dig(dns, &[transport, "+short", &name, &qtype]).await) }
        };
        // Any preview name (the wildcard) and the apex: the public addresses.
        assert_eq!(
            short("brisk-otter-7k2qx9.preview.test", "A").await,
            ["192.0.2.10"]
        );
        assert_eq!(short("Web.Preview.Test", "AAAA").await, ["2001:db8::10"]);
        assert_eq!(short(ZONE, "A").await, ["192.0.2.10"]);
        assert_eq!(
            short(ZONE, "NS").await,
            ["ns1.preview.test.", "ns2.preview.test."]
        );
        let soa = short(ZONE, "SOA").await;
        assert_eq!(soa.len(), 1, "{soa:?}");
        assert!(
            soa[0].starts_with("ns1.preview.test. hostmaster.preview.test. "),
            "{soa:?}"
        );
        let caa = short(ZONE, "CAA").await;
        assert!(
            caa.contains(&"0 issue \"letsencrypt.org\"".to_owned())
                && caa.contains(&"0 issuewild \"letsencrypt.org\"".to_owned()),
            "{caa:?}"
        );

        // Authoritative, no recursion offered.
        let full = dig(dns, &[transport, "web.preview.test", "A"]).await;
        assert_eq!(dig_status(&full), "NOERROR", "{full}");
        let flags = dig_flags(&full);
        assert!(flags.contains(&"aa"), "{full}");
        assert!(!flags.contains(&"ra"), "{full}");

        // A type the name lacks: NODATA (NOERROR, no answer, the SOA).
        let mx = dig(dns, &[transport, "web.preview.test", "MX"]).await;
        assert_eq!(dig_status(&mx), "NOERROR", "{mx}");
        assert!(mx.contains("ANSWER: 0"), "{mx}");
        assert!(mx.contains("AUTHORITY: 1"), "{mx}");
        // No challenge is open: no TXT.
        let txt = dig(dns, &[transport, "_acme-challenge.preview.test", "TXT"]).await;
        assert_eq!(dig_status(&txt), "NOERROR", "{txt}");
        assert!(txt.contains("ANSWER: 0"), "{txt}");

        // Deeper names are not previews.
        let deep = dig(dns, &[transport, "a.b.preview.test", "A"]).await;
        assert_eq!(dig_status(&deep), "NXDOMAIN", "{deep}");

        // Outside the zone: refused, never recursed.
        for name in ["example.com", "preview.test.evil.com", "test"] {
            let out = dig(dns, &[transport, name, "A"]).await;
            assert_eq!(dig_status(&out), "REFUSED", "{name}: {out}");
            assert!(out.contains("ANSWER: 0"), "{out}");
        }
    }
    // The metrics count the answers by code: the loop's NXDOMAIN once per
    // transport, its three REFUSED twice.
    let m = edge.metrics().await;
    let answers = |code: &str| m[&format!(r#"calvin_edge_dns_queries_total{{answer="{code}"}}"#)];
    assert_eq!(answers("nxdomain"), 2.0, "{m:?}");
    assert_eq!(answers("refused"), 6.0, "{m:?}");
    assert!(answers("noerror") >= 8.0, "{m:?}");
    edge.stop().await;
}

fn zone(public_ips: Vec<IpAddr>) -> ZoneSettings {
    ZoneSettings {
        domain: ZONE.into(),
        public_ips,
        nameservers: vec![format!("ns.{ZONE}")],
        hostmaster: format!("hostmaster.{ZONE}"),
        ttl: 300,
        caa_issuers: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_too_big_for_udp_is_truncated_and_whole_over_tcp() {
    // 60 addresses: 60 x 16 bytes of A records do not fit in 512 bytes.
    let ips: Vec<IpAddr> = (1..=60u8)
        .map(|i| IpAddr::from([198, 51, 100, i]))
        .collect();
    let answers_ = ZoneAnswers::new(&zone(ips), Challenges::default()).expect("zone");
    let server = DnsServer::bind(
        "127.0.0.1:0".parse().expect("addr"),
        answers_,
        Default::default(),
    )
    .await
    .expect("bind");
    let dns = server.local_addr();

    let udp = dig(
        dns,
        &["+notcp", "+noedns", "+ignore", "web.preview.test", "A"],
    )
    .await;
    assert!(dig_flags(&udp).contains(&"tc"), "{udp}");
    let tcp = dig(dns, &["+tcp", "+short", "web.preview.test", "A"]).await;
    assert_eq!(answers(&tcp).len(), 60, "{tcp}");
    // With EDNS (dig offers 1232 bytes) the whole answer fits in UDP.
    let edns = dig(dns, &["+notcp", "+ignore", "web.preview.test", "A"]).await;
    assert!(!dig_flags(&edns).contains(&"tc"), "{edns}");
    assert!(edns.contains("ANSWER: 60"), "{edns}");

    // What the zone does not do: answered with the code that says so.
    let badvers = dig(dns, &["+edns=1", "+noednsneg", "web.preview.test", "A"]).await;
    assert_eq!(dig_status(&badvers), "BADVERS", "{badvers}");
    let notify = dig(dns, &["+opcode=notify", "preview.test", "SOA"]).await;
    assert_eq!(dig_status(&notify), "NOTIMP", "{notify}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn challenge_values_are_served_at_once_under_a_query_flood() {
    let challenges = Challenges::default();
    let zone_answers = ZoneAnswers::new(
        &zone(vec!["127.0.0.1".parse().expect("ip")]),
        challenges.clone(),
    )
    .expect("zone");
    let server = DnsServer::bind(
        "127.0.0.1:0".parse().expect("addr"),
        zone_answers,
        Default::default(),
    )
    .await
    .expect("bind");
    let dns: SocketAddr = server.local_addr();

    // Four senders flood the server with queries for 3 s.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let query = {
        use hickory_proto::op::{Message, Query};
        use hickory_proto::rr::{Name, RecordType};
        let mut message = Message::query();
        message.add_query(Query::query(
            Name::from_ascii("web.preview.test.").expect("name"),
            RecordType::A,
        ));
        message.to_vec().expect("encode")
    };
    let mut flooders = Vec::new();
    for _ in 0..4 {
        let (stop, sent, answered, query) =
            (stop.clone(), sent.clone(), answered.clone(), query.clone());
        flooders.push(tokio::spawn(async move {
            let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
                .await
                .expect("udp");
            let mut buf = [0u8; 512];
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..32 {
                    let _ = socket.send_to(&query, dns).await;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                // Read what came back without waiting for it.
                while let Ok(Ok(_)) =
                    tokio::time::timeout(Duration::ZERO, socket.recv_from(&mut buf)).await
                {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Setting the two values of an order, flood or not (how long it took
    // is this machine's timing, printed: a benchmark's figure, not this
    // test's)...
    let started = Instant::now();
    challenges.add("apex-value");
    challenges.add("wildcard-value");
    let took = started.elapsed();
    // ...and the next query sees both.
    let txt = dig(
        dns,
        &["+tries=5", "+short", "_acme-challenge.preview.test", "TXT"],
    )
    .await;
    let mut values = answers(&txt);
    values.sort();
    assert_eq!(values, ["\"apex-value\"", "\"wildcard-value\""], "{txt}");
    challenges.remove("apex-value");
    let txt = dig(
        dns,
        &["+tries=5", "+short", "_acme-challenge.preview.test", "TXT"],
    )
    .await;
    assert_eq!(answers(&txt), ["\"wildcard-value\""], "{txt}");

    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.await.expect("flooder");
    }
    // The server was busy answering the flood all along.
    let (sent, answered) = (
        sent.load(Ordering::Relaxed),
        answered.load(Ordering::Relaxed),
    );
    println!("flood: {sent} queries sent, {answered} answered; TXT set in {took:?}");
    assert!(
        answered > 1000,
        "the flood sent {sent} queries, {answered} answered"
    );
    server.shutdown().await;
}
