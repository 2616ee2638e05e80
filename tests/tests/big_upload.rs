//! A 1 GiB upload passes: no size cap, no buffering, no timeout that a long
//! upload meets. Alone in its test binary (it takes ~45 s in a debug build),
//! so it does not load the timing-sensitive tests.

use std::time::Instant;

use calvin_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_gib_upload_passes() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let url = agent.preview(origin.port, None).await.url;
    const LEN: u64 = 1 << 30;
    // 1 GiB of 0xAB from a pipe: chunked, of unknown length, never on disk.
    let script = format!(
        "head -c {LEN} /dev/zero | tr '\\0' '\\253' | curl -sS --cacert {} -T - {}/count",
        edge.ca().display(),
        url
    );
    let started = Instant::now();
    let out = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .await
        .expect("sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{LEN} {}\n", LEN * 0xAB)
    );
    eprintln!("1 GiB upload took {:?}", started.elapsed());
}
