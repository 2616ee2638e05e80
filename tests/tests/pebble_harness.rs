//! The Pebble test helper starts a real ACME server that answers.

use calvin_tests::curl;
use calvin_tests::pebble::Pebble;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

#[tokio::test]
async fn pebble_starts_serves_its_directory_and_its_issuing_root() {
    // No DNS server is needed just to start.
    let mut pebble = Pebble::start("127.0.0.1:1".parse().unwrap()).await;

    let dir = curl(&pebble.listener_ca(), &[&pebble.directory()]).await;
    assert_eq!(dir.status, 200, "{}\n{}", dir.stderr, pebble.log());
    let json: serde_json::Value = serde_json::from_slice(&dir.body).unwrap();
    assert!(json["newOrder"].is_string(), "{json}");

    let root = pebble.issued_root().await;
    let certs: Vec<_> = CertificateDer::pem_file_iter(&root)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(certs.len(), 1, "one root certificate in {}", root.display());

    pebble.stop().await;
    pebble.stop().await;
    let down = curl(
        &pebble.listener_ca(),
        &["--max-time", "2", &pebble.directory()],
    )
    .await;
    assert_eq!(down.status, 0, "pebble is gone");
}
