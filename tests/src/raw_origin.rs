//! A dev server that records the exact bytes of every request it gets, to
//! check what an edge passes on, and answers each with a fixed response
//! (or one given per test).
//!
//! It reads a request head, then the body its framing announces
//! (`content-length`, or chunks up to the final `0` chunk and trailers),
//! records the whole request and answers. It does not reuse connections;
//! [`next_request`] reads requests one after another for an origin that
//! does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running recording origin; dropped, it stops accepting.
pub struct RawOrigin {
    pub port: u16,
    /// Connections that carried bytes so far: one per request stream an
    /// agent opened. (The agent's listening probe, which sends nothing,
    /// is not counted.)
    pub accepted: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The answer of an origin that has nothing to say.
pub const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

impl RawOrigin {
    /// An origin answering every request with [`OK`].
    pub async fn start() -> RawOrigin {
        Self::answering(OK.to_vec()).await
    }

    /// An origin answering every request with `response`, byte for byte,
    /// then closing.
    pub async fn answering(response: Vec<u8>) -> RawOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let port = listener.local_addr().expect("origin addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let record = requests.clone();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let response = Arc::new(response);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (record, response, count) = (record.clone(), response.clone(), count.clone());
                tokio::spawn(async move { serve(stream, &response, &count, &record).await });
            }
        });
        RawOrigin {
            port,
            accepted,
            requests,
            task,
        }
    }

    /// Connections that carried bytes so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Every request received so far, whole, as received.
    pub fn requests(&self) -> Vec<Vec<u8>> {
        self.requests.lock().expect("record").clone()
    }
}

/// Reads one request, records its bytes in `record`, then answers it:
/// recorded before answered, so a visitor that has the answer finds the
/// request recorded. Nothing is recorded when the connection ends before a
/// whole request.
async fn serve(
    mut stream: TcpStream,
    response: &[u8],
    count: &AtomicUsize,
    record: &Mutex<Vec<Vec<u8>>>,
) -> Option<()> {
    let mut buffered = Vec::new();
    read_more(&mut stream, &mut buffered).await?;
    count.fetch_add(1, Ordering::SeqCst);
    let request = next_request(&mut stream, &mut buffered).await?;
    record.lock().expect("record").push(request);
    stream.write_all(response).await.ok()?;
    let _ = stream.shutdown().await;
    Some(())
}

/// The next whole request on `stream`, its head and the body its framing
/// announces (`content-length`, or chunks up to the last and the trailers),
/// taken from `buffered` (what was read before and not used yet), reading
/// more as needed; what follows it stays in `buffered`. `None` when the
/// connection ends first.
pub async fn next_request(stream: &mut TcpStream, buffered: &mut Vec<u8>) -> Option<Vec<u8>> {
    let head_end = loop {
        if let Some(at) = find(buffered, b"\r\n\r\n") {
            break at + 4;
        }
        read_more(stream, buffered).await?;
    };
    let head = String::from_utf8_lossy(&buffered[..head_end]).to_ascii_lowercase();
    let header = |name: &str| {
        head.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}: ")).map(str::to_owned))
    };
    let end = if header("transfer-encoding").is_some_and(|te| te.contains("chunked")) {
        loop {
            if let Some(len) = chunks_end(&buffered[head_end..]) {
                break head_end + len;
            }
            read_more(stream, buffered).await?;
        }
    } else {
        let length: usize = match header("content-length") {
            Some(length) => length.trim().parse().ok()?,
            None => 0,
        };
        while buffered.len() < head_end + length {
            read_more(stream, buffered).await?;
        }
        head_end + length
    };
    Some(buffered.drain(..end).collect())
}

async fn read_more(stream: &mut TcpStream, into: &mut Vec<u8>) -> Option<()> {
    let mut buf = [0u8; 16 * 1024];
    match stream.read(&mut buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            into.extend_from_slice(&buf[..n]);
            Some(())
        }
    }
}

/// The length of the whole chunked body at the start of `body` (chunks,
/// the final `0` chunk and the trailer section), once it is all there.
fn chunks_end(body: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line_end = at + find(&body[at..], b"\r\n")?;
        let size_text = String::from_utf8_lossy(&body[at..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            // Trailer lines, each ending in CRLF, up to an empty one.
            loop {
                let line_end = at + find(&body[at..], b"\r\n")?;
                let empty = line_end == at;
                at = line_end + 2;
                if empty {
                    return Some(at);
                }
            }
        }
        if body.len() < at + size + 2 {
            return None;
        }
        at += size + 2;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
