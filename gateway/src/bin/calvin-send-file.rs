//! `calvin-send-file <path> [comment]`: posts a file into the session's
//! Slack thread from a script, through the session's gateway, with the
//! send_file tool's checks and count.
//!
//! It finds the gateway through `CALVIN_SEND_FILE_URL` (a daemon session's
//! send-file URL), else `CALVIN_SEND_FILE_SOCKET` (the stdio gateway's
//! socket), else `.calvin/send-file.sock` in the working directory or a
//! parent.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, comment) = match args.as_slice() {
        [path] => (path, None),
        [path, comment] => (path, Some(comment.clone())),
        _ => {
            eprintln!("usage: calvin-send-file <path> [comment]");
            return ExitCode::from(2);
        }
    };
    match send(Path::new(path), comment).await {
        Ok(message) => {
            println!("{message}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("calvin-send-file: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn send(path: &Path, comment: Option<String>) -> Result<String, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?;
    // Relative to where the script runs, not to the session directory.
    let absolute = cwd.join(path);
    let body = json!({ "path": absolute.to_string_lossy(), "comment": comment }).to_string();
    let (status, answer) = if let Ok(url) = std::env::var(calvin_gateway::server::SEND_FILE_URL_ENV)
    {
        post_tcp(&url, body).await?
    } else {
        let socket = calvin_gateway::server::find_send_file_socket(&cwd).ok_or(
            "no calvin gateway found: set CALVIN_SEND_FILE_SOCKET or CALVIN_SEND_FILE_URL",
        )?;
        post_unix(&socket, body).await?
    };
    let answer: Value = serde_json::from_slice(&answer)
        .map_err(|e| format!("the gateway answered {status} and unreadable JSON: {e}"))?;
    match answer.get("error").and_then(Value::as_str) {
        Some(error) => Err(error.to_owned()),
        None => Ok(answer["message"].as_str().unwrap_or("sent").to_owned()),
    }
}

type Answer = (http::StatusCode, Bytes);

async fn exchange<S>(stream: S, host: &str, path: &str, body: String) -> Result<Answer, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("cannot talk to the gateway: {e}"))?;
    tokio::spawn(conn);
    let request = http::Request::post(path)
        .header(http::header::HOST, host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("the gateway did not answer: {e}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("the gateway's answer was cut: {e}"))?
        .to_bytes();
    Ok((status, bytes))
}

async fn post_unix(socket: &PathBuf, body: String) -> Result<Answer, String> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("cannot reach the gateway at {}: {e}", socket.display()))?;
    exchange(stream, "localhost", "/send-file", body).await
}

async fn post_tcp(url: &str, body: String) -> Result<Answer, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let authority = uri.authority().ok_or(format!("{url}: no host"))?.clone();
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "{url}: the gateway daemon is plain HTTP on loopback"
        ));
    }
    let stream = tokio::net::TcpStream::connect(authority.as_str())
        .await
        .map_err(|e| format!("cannot reach the gateway at {url}: {e}"))?;
    exchange(stream, authority.as_str(), uri.path(), body).await
}
