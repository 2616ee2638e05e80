//! Length-prefixed frames: a 4-byte big-endian length, then that many bytes
//! of one message as UTF-8 JSON.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{AgentMessage, EdgeMessage, StreamAnswer, StreamHeader};

/// The largest frame payload either side sends or accepts.
pub const MAX_FRAME_LEN: usize = 64 * 1024;

/// The length prefix of every frame.
pub const PREFIX_LEN: usize = 4;

/// A message that travels in a frame.
pub trait Frame: Serialize + DeserializeOwned + sealed::Sealed {}
impl Frame for AgentMessage {}
impl Frame for EdgeMessage {}
impl Frame for StreamHeader {}
impl Frame for StreamAnswer {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::AgentMessage {}
    impl Sealed for crate::EdgeMessage {}
    impl Sealed for crate::StreamHeader {}
    impl Sealed for crate::StreamAnswer {}
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {MAX_FRAME_LEN}")]
    TooLong { len: usize },
    #[error("malformed frame: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Appends `msg` as one frame to `out`. Fails, leaving `out` as it was, when
/// the message would exceed [`MAX_FRAME_LEN`].
pub fn encode<T: Frame>(msg: &T, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0; PREFIX_LEN]);
    serde_json::to_writer(&mut *out, msg)?;
    let len = out.len() - start - PREFIX_LEN;
    if len > MAX_FRAME_LEN {
        out.truncate(start);
        return Err(FrameError::TooLong { len });
    }
    // MAX_FRAME_LEN fits in a u32, so the cast is exact.
    out[start..start + PREFIX_LEN].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// Decodes one frame from the front of `buf`. `Ok(None)` means the frame is
/// not complete yet: read more bytes and call again. On success, returns the
/// message and the number of bytes it took.
pub fn decode<T: Frame>(buf: &[u8]) -> Result<Option<(T, usize)>, FrameError> {
    let Some(prefix) = buf.first_chunk::<PREFIX_LEN>() else {
        return Ok(None);
    };
    let len = payload_len(*prefix)?;
    let Some(payload) = buf.get(PREFIX_LEN..PREFIX_LEN + len) else {
        return Ok(None);
    };
    Ok(Some((decode_payload(payload)?, PREFIX_LEN + len)))
}

/// The payload length a prefix announces, refused past [`MAX_FRAME_LEN`].
pub fn payload_len(prefix: [u8; PREFIX_LEN]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(prefix) as usize;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLong { len });
    }
    Ok(len)
}

/// Decodes a payload whose length came from [`payload_len`].
pub fn decode_payload<T: Frame>(payload: &[u8]) -> Result<T, FrameError> {
    Ok(serde_json::from_slice(payload)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;

    fn name(s: &str) -> PreviewName {
        PreviewName::parse(s).unwrap()
    }

    fn port(n: u16) -> Port {
        Port::try_from(n).unwrap()
    }

    fn frame(json: &str) -> Vec<u8> {
        let mut v = (json.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v
    }

    /// Encodes `msg`, checks the exact bytes, and decodes them back.
    fn golden<T: Frame + PartialEq + std::fmt::Debug>(msg: T, json: &str) {
        let mut out = Vec::new();
        encode(&msg, &mut out).unwrap();
        assert_eq!(String::from_utf8_lossy(&out[4..]), json);
        assert_eq!(out, frame(json));
        let (back, used) = decode::<T>(&out).unwrap().unwrap();
        assert_eq!(back, msg);
        assert_eq!(used, out.len());
    }

    fn failure(code: ErrorCode, message: &str) -> Failure {
        Failure::new(code, message)
    }

    #[test]
    fn hello() {
        golden(
            AgentMessage::Hello(Hello {
                version: PROTOCOL_VERSION,
                token: "t0k".into(),
                previews: vec![Preview {
                    name: name("web"),
                    port: port(3000),
                    ttl_secs: Some(3600),
                    protect: None,
                }],
            }),
            r#"{"type":"hello","version":1,"token":"t0k","previews":[{"name":"web","port":3000,"ttl_secs":3600}]}"#,
        );
    }

    #[test]
    fn open_and_close() {
        golden(
            AgentMessage::Open {
                id: 7,
                port: port(8000),
                name: None,
                ttl_secs: None,
                protect: None,
            },
            r#"{"type":"open","id":7,"port":8000,"name":null}"#,
        );
        golden(
            AgentMessage::Open {
                id: 8,
                port: port(65535),
                name: Some(name("api")),
                ttl_secs: Some(7200),
                protect: None,
            },
            r#"{"type":"open","id":8,"port":65535,"name":"api","ttl_secs":7200}"#,
        );
        golden(
            AgentMessage::Close {
                id: 9,
                name: name("api"),
            },
            r#"{"type":"close","id":9,"name":"api"}"#,
        );
    }

    #[test]
    fn protected_previews_and_share_links() {
        let salt = ShareSalt::try_from("c2FsdHNhbHRzYWx0c2FsdA".to_owned()).unwrap();
        golden(
            AgentMessage::Open {
                id: 10,
                port: port(3000),
                name: Some(name("web")),
                ttl_secs: None,
                protect: Some(salt.clone()),
            },
            r#"{"type":"open","id":10,"port":3000,"name":"web","protect":"c2FsdHNhbHRzYWx0c2FsdA"}"#,
        );
        golden(
            AgentMessage::ShareLink {
                id: 11,
                name: name("web"),
                expires_secs: Some(3600),
            },
            r#"{"type":"share_link","id":11,"name":"web","expires_secs":3600}"#,
        );
        golden(
            EdgeMessage::Shared {
                id: 11,
                name: name("web"),
                token: "1700000000.abc".into(),
                expires_unix: 1_700_000_000,
            },
            r#"{"type":"shared","id":11,"name":"web","token":"1700000000.abc","expires_unix":1700000000}"#,
        );
        // An older agent's open (no protect) reads as a public preview.
        let (old, _) =
            decode::<AgentMessage>(&frame(r#"{"type":"open","id":1,"port":80,"name":null}"#))
                .unwrap()
                .unwrap();
        assert!(matches!(old, AgentMessage::Open { protect: None, .. }));
        // A salt outside its alphabet or length is malformed.
        for bad in ["short", "has space in it here", &"a".repeat(65)] {
            let json =
                format!(r#"{{"type":"open","id":1,"port":80,"name":null,"protect":"{bad}"}}"#);
            assert!(decode::<AgentMessage>(&frame(&json)).is_err(), "{bad}");
        }
        assert_eq!(format!("{salt:?}"), "ShareSalt(<redacted>)");
    }

    #[test]
    fn welcome() {
        golden(
            EdgeMessage::Welcome(Welcome {
                account: "dev".into(),
                domain: "preview.localhost".into(),
                url_template: "https://{name}.preview.localhost:4443".into(),
                restored: vec![Preview {
                    name: name("web"),
                    port: port(3000),
                    ttl_secs: Some(3600),
                    protect: None,
                }],
                rejected: vec![Rejected {
                    name: name("old"),
                    failure: failure(ErrorCode::NameTaken, "taken"),
                }],
            }),
            concat!(
                r#"{"type":"welcome","account":"dev","domain":"preview.localhost","#,
                r#""url_template":"https://{name}.preview.localhost:4443","#,
                r#""restored":[{"name":"web","port":3000,"ttl_secs":3600}],"#,
                r#""rejected":[{"name":"old","failure":{"code":"name_taken","message":"taken"}}]}"#
            ),
        );
    }

    #[test]
    fn refused_opened_closed_error() {
        golden(
            EdgeMessage::Refused(failure(ErrorCode::BadToken, "unknown token")),
            r#"{"type":"refused","code":"bad_token","message":"unknown token"}"#,
        );
        golden(
            EdgeMessage::Opened {
                id: 1,
                preview: Preview {
                    name: name("brisk-otter-7k2qx9"),
                    port: port(5173),
                    ttl_secs: None,
                    protect: None,
                },
            },
            r#"{"type":"opened","id":1,"preview":{"name":"brisk-otter-7k2qx9","port":5173}}"#,
        );
        golden(
            EdgeMessage::Closed {
                id: 2,
                name: name("web"),
            },
            r#"{"type":"closed","id":2,"name":"web"}"#,
        );
        golden(
            EdgeMessage::Error {
                id: Some(3),
                failure: failure(ErrorCode::LimitReached, "100 previews at most"),
            },
            r#"{"type":"error","id":3,"failure":{"code":"limit_reached","message":"100 previews at most"}}"#,
        );
        golden(
            EdgeMessage::Error {
                id: None,
                failure: failure(ErrorCode::ShuttingDown, "bye"),
            },
            r#"{"type":"error","id":null,"failure":{"code":"shutting_down","message":"bye"}}"#,
        );
    }

    #[test]
    fn every_error_code_round_trips() {
        use ErrorCode::*;
        for (code, text) in [
            (UnsupportedVersion, "unsupported_version"),
            (BadToken, "bad_token"),
            (TooManyAttempts, "too_many_attempts"),
            (NameTaken, "name_taken"),
            (UnknownName, "unknown_name"),
            (LimitReached, "limit_reached"),
            (Protocol, "protocol"),
            (ShuttingDown, "shutting_down"),
            (Internal, "internal"),
        ] {
            golden(
                EdgeMessage::Refused(failure(code, "m")),
                &format!(r#"{{"type":"refused","code":"{text}","message":"m"}}"#),
            );
        }
    }

    #[test]
    fn stream_header_and_answers() {
        golden(
            StreamHeader {
                name: name("web"),
                port: port(3000),
                client: "203.0.113.9:51000".parse().unwrap(),
                wait_ms: None,
            },
            r#"{"name":"web","port":3000,"client":"203.0.113.9:51000"}"#,
        );
        golden(
            StreamHeader {
                name: name("web"),
                port: port(1),
                client: "[2001:db8::1]:443".parse().unwrap(),
                wait_ms: Some(10_000),
            },
            r#"{"name":"web","port":1,"client":"[2001:db8::1]:443","wait_ms":10000}"#,
        );
        golden(StreamAnswer::Accepted, r#"{"type":"accepted"}"#);
        for (reason, text) in [
            (StreamRefusal::ConnectionRefused, "connection_refused"),
            (StreamRefusal::NotPreviewed, "not_previewed"),
            (StreamRefusal::ConnectFailed, "connect_failed"),
            (StreamRefusal::Offline, "offline"),
        ] {
            golden(
                StreamAnswer::Refused {
                    reason,
                    message: "no".into(),
                },
                &format!(r#"{{"type":"refused","reason":"{text}","message":"no"}}"#),
            );
        }
    }

    #[test]
    fn need_more_bytes_is_not_malformed() {
        let mut out = Vec::new();
        encode(&StreamAnswer::Accepted, &mut out).unwrap();
        for cut in 0..out.len() {
            assert!(
                decode::<StreamAnswer>(&out[..cut]).unwrap().is_none(),
                "{cut} bytes of {} decoded",
                out.len()
            );
        }
        // Bytes after the frame belong to whatever follows it.
        out.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let (msg, used) = decode::<StreamAnswer>(&out).unwrap().unwrap();
        assert_eq!(msg, StreamAnswer::Accepted);
        assert_eq!(used, 4 + r#"{"type":"accepted"}"#.len());
    }

    #[test]
    fn malformed_payloads() {
        for json in [
            "{",
            "null",
            r#"{"type":"teleport"}"#,
            r#"{"type":"open","id":1,"port":0,"name":null}"#,
            r#"{"type":"open","id":1,"port":65536,"name":null}"#,
            r#"{"type":"open","id":1,"port":80,"name":"-x"}"#,
            r#"{"type":"close","id":-1,"name":"x"}"#,
        ] {
            let err = decode::<AgentMessage>(&frame(json)).unwrap_err();
            assert!(matches!(err, FrameError::Malformed(_)), "{json}: {err}");
        }
        let bad_utf8 = [0, 0, 0, 2, 0xff, 0xfe];
        assert!(matches!(
            decode::<StreamAnswer>(&bad_utf8),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn frame_length_limit() {
        // A prefix one past the limit is refused before its payload arrives.
        let past = ((MAX_FRAME_LEN + 1) as u32).to_be_bytes();
        assert!(matches!(
            decode::<AgentMessage>(&past),
            Err(FrameError::TooLong { len }) if len == MAX_FRAME_LEN + 1
        ));
        // At the limit, the prefix is accepted and the decoder waits for the payload.
        let at = (MAX_FRAME_LEN as u32).to_be_bytes();
        assert!(decode::<AgentMessage>(&at).unwrap().is_none());

        // Encoding refuses what would not fit and leaves the buffer unchanged.
        let envelope = r#"{"type":"hello","version":1,"token":"","previews":[]}"#.len();
        let hello = |token_len| {
            AgentMessage::Hello(Hello {
                version: 1,
                token: "x".repeat(token_len),
                previews: vec![],
            })
        };
        let mut out = vec![1, 2, 3];
        encode(&hello(MAX_FRAME_LEN - envelope), &mut out).unwrap();
        assert_eq!(out.len(), 3 + 4 + MAX_FRAME_LEN);
        let mut out = vec![1, 2, 3];
        let err = encode(&hello(MAX_FRAME_LEN - envelope + 1), &mut out).unwrap_err();
        assert!(matches!(err, FrameError::TooLong { len } if len == MAX_FRAME_LEN + 1));
        assert_eq!(out, [1, 2, 3]);
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let (msg, _) = decode::<StreamAnswer>(&frame(r#"{"type":"accepted","later":true}"#))
            .unwrap()
            .unwrap();
        assert_eq!(msg, StreamAnswer::Accepted);
    }

    #[test]
    fn hello_debug_hides_the_token() {
        let hello = Hello {
            version: 1,
            token: "secret-token".into(),
            previews: vec![],
        };
        assert!(!format!("{hello:?}").contains("secret-token"));
    }

    #[test]
    fn welcome_builds_urls() {
        let w = Welcome {
            account: "a".into(),
            domain: "example.com".into(),
            url_template: "https://{name}.example.com".into(),
            restored: vec![],
            rejected: vec![],
        };
        assert_eq!(w.url_for(&name("web")), "https://web.example.com");
    }

    #[test]
    fn port_limits() {
        assert_eq!(Port::try_from(1i64).unwrap().get(), 1);
        assert_eq!(Port::try_from(65535i64).unwrap().get(), 65535);
        assert_eq!(Port::try_from(0i64), Err(PortError(0)));
        assert_eq!(Port::try_from(65536i64), Err(PortError(65536)));
        assert_eq!(Port::try_from(-1i64), Err(PortError(-1)));
        assert_eq!(PortError(0).to_string(), "port must be 1 to 65535; got 0");
    }
}
