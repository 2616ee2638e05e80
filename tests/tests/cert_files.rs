//! An edge with a certificate of its own ([tls] files): SIGHUP reads the
//! files again, so a certificate renewed by other tooling is served without
//! a restart; a broken file keeps the previous certificate serving.

use std::time::Duration;

use calvin_tests::serve_edge::{ServeEdge, served_serial};
use calvin_tests::{eventually, token_for, write_secret};

const ZONE: &str = "preview.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reads_the_certificate_files_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Two certificates for the zone from two local CAs.
    let first = calvin_edge::dev::load_or_create(&dir.path().join("first"), ZONE).expect("first");
    let second =
        calvin_edge::dev::load_or_create(&dir.path().join("second"), ZONE).expect("second");
    let (cert, key) = (dir.path().join("edge.pem"), dir.path().join("edge.key"));
    std::fs::copy(first.dir.join("edge.pem"), &cert).expect("copy");
    std::fs::copy(first.dir.join("edge.key"), &key).expect("copy");
    let config = format!(
        r#"
domain = "{ZONE}"
state_dir = "{state}"
[admin]
listen = "127.0.0.1:0"
[listen]
https = "127.0.0.1:0"
http = "127.0.0.1:0"
quic = "127.0.0.1:0"
[tls]
cert_file = "{cert}"
key_file = "{key}"
[[accounts]]
name = "a"
token = "{token}"
"#,
        state = dir.path().join("state").display(),
        cert = cert.display(),
        key = key.display(),
        token = token_for("a"),
    );
    // It holds a token: private.
    write_secret(&dir.path().join("edge.toml"), &config);
    let edge = ServeEdge::start(&dir.path().join("edge.toml"), &dir.path().join("edge.log")).await;
    let https = edge.https.expect("https");

    let (status, health) = edge.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["certificate"]["source"], "files");
    let first_serial = served_serial(https, "web.preview.test", &first.ca_path()).await;
    assert_eq!(health["certificate"]["serial"], first_serial.as_str());

    // New files, then SIGHUP: new handshakes get the new certificate.
    std::fs::copy(second.dir.join("edge.pem"), &cert).expect("copy");
    std::fs::copy(second.dir.join("edge.key"), &key).expect("copy");
    edge.signal("HUP").await;
    let second_serial = eventually(Duration::from_secs(10), || async {
        let (_, health) = edge.health().await;
        let serial = health["certificate"]["serial"].as_str()?.to_owned();
        (serial != first_serial).then_some(serial)
    })
    .await
    .unwrap_or_else(|| panic!("the files were not read again\n{}", edge.log()));
    assert_eq!(
        served_serial(https, "web.preview.test", &second.ca_path()).await,
        second_serial
    );

    // A key that does not match the certificate: refused, the second
    // certificate keeps serving, and the health endpoint says why.
    std::fs::copy(first.dir.join("edge.key"), &key).expect("copy");
    edge.signal("HUP").await;
    let health = eventually(Duration::from_secs(10), || async {
        let (status, health) = edge.health().await;
        (status == 200 && health["renewal"]["last_error"].is_string()).then_some(health)
    })
    .await
    .unwrap_or_else(|| panic!("no error reported\n{}", edge.log()));
    assert_eq!(health["certificate"]["serial"], second_serial.as_str());
    assert_eq!(
        served_serial(https, "web.preview.test", &second.ca_path()).await,
        second_serial
    );
    assert!(
        edge.log().contains("cannot read the certificate files"),
        "{}",
        edge.log()
    );
    edge.stop().await;
}
