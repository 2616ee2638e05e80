//! The front's own steps, over in-memory streams: telling HTTP/2's
//! preface from an HTTP/1 request, however the bytes come, and the
//! answer it gives a request it refuses itself.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::counts::Counts;
use crate::error_page::EdgeError;

/// `read_opening` over a stream that brings `pieces` one read at a time,
/// then ends (`close`) or stays open.
async fn opening_of(pieces: &[&[u8]], close: bool) -> (Vec<u8>, bool) {
    let (mut visitor, mut edge) = tokio::io::duplex(1024);
    let pieces: Vec<Vec<u8>> = pieces.iter().map(|p| p.to_vec()).collect();
    let writer = tokio::spawn(async move {
        for piece in pieces {
            visitor.write_all(&piece).await.expect("write");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !close {
            // Held open: the answer must not wait for more.
            std::future::pending::<()>().await;
        }
    });
    let read = tokio::time::timeout(Duration::from_secs(5), read_opening(&mut edge))
        .await
        .expect("the opening is told without more bytes")
        .expect("read");
    writer.abort();
    read
}

#[tokio::test]
async fn the_http2_preface_is_told_whole_or_in_pieces() {
    assert_eq!(
        opening_of(&[H2_PREFACE], false).await,
        (H2_PREFACE.to_vec(), true)
    );
    let (first, rest) = H2_PREFACE.split_at(5);
    let (middle, last) = rest.split_at(10);
    assert_eq!(
        opening_of(&[first, middle, last], false).await,
        (H2_PREFACE.to_vec(), true)
    );
}

#[tokio::test]
async fn an_http1_request_is_told_by_the_first_read_that_departs_from_the_preface() {
    // What was read is kept, for HTTP/1 to read as the request's start
    // (no more than the preface's length at once).
    let request = b"POST / HTTP/1.1\r\nHost: a\r\n\r\n";
    let (bytes, preface) = opening_of(&[request], false).await;
    assert_eq!(
        (bytes.as_slice(), preface),
        (&request[..H2_PREFACE.len()], false)
    );
    let (bytes, preface) = opening_of(&[b"GET / HTTP/1.1\r\n"], false).await;
    assert_eq!((bytes, preface), (b"GET / HTTP/1.1\r\n".to_vec(), false));
    // The preface's first bytes, then something else.
    let (bytes, preface) = opening_of(&[&H2_PREFACE[..8], b"X"], false).await;
    assert_eq!((bytes, preface), ([&H2_PREFACE[..8], b"X"].concat(), false));
}

#[tokio::test]
async fn a_visitor_that_closes_at_once_reads_as_http1() {
    assert_eq!(opening_of(&[], true).await, (Vec::new(), false));
    assert_eq!(opening_of(&[b"PRI"], true).await, (b"PRI".to_vec(), false));
}

#[tokio::test]
async fn a_refused_request_is_answered_counted_and_closed() {
    let (mut visitor, edge) = tokio::io::duplex(8192);
    let counts = Counts::default();
    counts.start();
    let limits = crate::h1_framing::HeadLimits {
        max_head_bytes: 8192,
        max_headers: 100,
    };
    let answer = tokio::spawn({
        let counts = counts.clone();
        async move {
            let mut reading = h1::Reading::with_opening(edge, limits, b"");
            while !reading.first_head_done() {
                reading.read_more().await.expect("read");
            }
            h1::refuse_first(reading, &EdgeError::UriTooLong(8192), &counts).await
        }
    });
    visitor
        .write_all(b"GET /long HTTP/1.1\r\nHost: a\r\nX-Request-Id: seen-1\r\n\r\n")
        .await
        .expect("write");
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(5), visitor.read_to_string(&mut text))
        .await
        .expect("the edge closes after its answer")
        .expect("read");
    answer.await.expect("refuse");
    assert!(text.starts_with("HTTP/1.1 414 "), "{text}");
    let head = text.to_ascii_lowercase();
    assert!(head.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(
        head.contains("\r\nx-calvin-error: uri-too-long\r\n"),
        "{text}"
    );
    assert!(head.contains("\r\nx-request-id: seen-1\r\n"), "{text}");
    use crate::ops::metrics::{Live, Metrics};
    let exposed = Metrics::new(counts, Live::nothing()).encode();
    assert!(
        exposed.contains("calvin_edge_refusals_total{code=\"uri-too-long\"} 1"),
        "{exposed}"
    );
}

#[test]
fn a_header_timeout_is_never_below_the_configured_one() {
    let configured = Duration::from_secs(10);
    for _ in 0..1000 {
        let drawn = header_timeout(configured);
        assert!(
            (configured..=configured.mul_f64(1.25)).contains(&drawn),
            "{drawn:?}"
        );
    }
}
