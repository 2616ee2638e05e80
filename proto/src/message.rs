//! The messages of the protocol.
//!
//! The control stream (the first bidi stream the agent opens) carries
//! [`AgentMessage`] one way and [`EdgeMessage`] the other. Each data stream,
//! opened by the edge for one upstream connection, starts with a
//! [`StreamHeader`] from the edge and a [`StreamAnswer`] from the agent; raw
//! bytes follow.
//!
//! Unknown fields are ignored, so a newer peer may add optional fields
//! without a new protocol version.

use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU16;

use serde::{Deserialize, Serialize};

use crate::PreviewName;

/// The protocol version an agent announces in [`Hello`].
pub const PROTOCOL_VERSION: u32 = 1;

/// The QUIC ALPN of the agent<->edge protocol.
pub const ALPN: &[u8] = b"calvin/1";

/// The agent sends QUIC keep-alives this often...
pub const KEEP_ALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// ...and both sides take a connection silent this long as dead: within
/// three intervals of its last packet, even when this side sent something
/// after it (RFC 9000 10.1 restarts the idle timer at the first
/// ack-eliciting packet sent after one received). A lost keep-alive is
/// followed by QUIC's probes within a PTO, so loss alone does not end it.
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(12);

/// The data streams an agent lets its edge have open at once (one per
/// upstream connection). The edge keeps its idle connections well under it.
pub const MAX_DATA_STREAMS: u32 = 1024;

/// QUIC application close codes of the agent<->edge connection.
pub mod close_code {
    /// An orderly end (the agent stopping, a finished control stream).
    pub const NORMAL: u32 = 0;
    /// The edge refused the agent (its token, its Hello).
    pub const REFUSED: u32 = 1;
    /// A peer broke the protocol (no Hello in time, a bad message).
    pub const PROTOCOL: u32 = 2;
    /// The edge is shutting down.
    pub const SHUTTING_DOWN: u32 = 3;
    /// The agent stopped acknowledging anything (the edge's liveness
    /// probes went unanswered).
    pub const UNRESPONSIVE: u32 = 4;
}

/// The QUIC stream error code either side resets a data stream with when
/// its transfer was cut off (so the other side never takes it for a whole
/// one).
pub const STREAM_ABORTED: u32 = 1;

/// A TCP port a preview forwards to: 1..=65535.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct Port(NonZeroU16);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("port must be 1 to 65535; got {0}")]
pub struct PortError(pub i64);

impl Port {
    pub fn get(self) -> u16 {
        self.0.get()
    }
}

impl TryFrom<i64> for Port {
    type Error = PortError;
    fn try_from(n: i64) -> Result<Self, PortError> {
        u16::try_from(n)
            .ok()
            .and_then(NonZeroU16::new)
            .map(Port)
            .ok_or(PortError(n))
    }
}

impl TryFrom<u16> for Port {
    type Error = PortError;
    fn try_from(n: u16) -> Result<Self, PortError> {
        NonZeroU16::new(n).map(Port).ok_or(PortError(n.into()))
    }
}

impl From<Port> for u16 {
    fn from(port: Port) -> u16 {
        port.get()
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A name bound to a local port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preview {
    pub name: PreviewName,
    pub port: Port,
    /// Seconds left until the preview ends (made with a time to live);
    /// then a visitor reads "this preview has ended". Absent: no end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u32>,
    /// Set on a protected preview: the salt (see [`ShareSalt`]) its share
    /// tokens are made with; the edge then answers a visitor without a
    /// valid token 401. Absent: public.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protect: Option<ShareSalt>,
}

/// A protected preview's salt: made by the agent (16 random bytes,
/// base64url), sent with the preview, mixed into every share token the
/// edge makes for it. A new salt invalidates every token made before.
/// 16 to 64 characters of the base64url alphabet.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ShareSalt(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a share salt is 16 to 64 characters of A-Z a-z 0-9 - _")]
pub struct SaltError;

impl ShareSalt {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ShareSalt {
    type Error = SaltError;
    fn try_from(text: String) -> Result<Self, SaltError> {
        let alphabet = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
        if (16..=64).contains(&text.len()) && text.bytes().all(alphabet) {
            Ok(Self(text))
        } else {
            Err(SaltError)
        }
    }
}

impl From<ShareSalt> for String {
    fn from(salt: ShareSalt) -> String {
        salt.0
    }
}

impl fmt::Debug for ShareSalt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ShareSalt(<redacted>)")
    }
}

/// A share link's life when none is asked for: 7 days.
pub const SHARE_DEFAULT_SECS: u32 = 7 * 86_400;
/// The shortest life a share link may be given: 60 s.
pub const SHARE_MIN_SECS: u32 = 60;
/// The longest: 365 days.
pub const SHARE_MAX_SECS: u32 = 365 * 86_400;

/// Agent -> edge, on the control stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    /// The first message: who the agent is and what it already holds.
    Hello(Hello),
    /// Bind `name` (or, when `None`, a name the edge generates) to `port`.
    Open {
        id: u64,
        port: Port,
        name: Option<PreviewName>,
        /// Seconds until the preview ends (see [`Preview::ttl_secs`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_secs: Option<u32>,
        /// Protect it (see [`Preview::protect`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protect: Option<ShareSalt>,
    },
    /// Take `name` down.
    Close { id: u64, name: PreviewName },
    /// Make a share token for the protected preview `name`, valid for
    /// `expires_secs` ([`SHARE_MIN_SECS`]..=[`SHARE_MAX_SECS`]; absent:
    /// [`SHARE_DEFAULT_SECS`]). Answered by [`EdgeMessage::Shared`].
    ShareLink {
        id: u64,
        name: PreviewName,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_secs: Option<u32>,
    },
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    pub token: String,
    /// Previews held from an earlier connection, registered again under the
    /// same names.
    pub previews: Vec<Preview>,
}

impl fmt::Debug for Hello {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hello")
            .field("version", &self.version)
            .field("token", &"<redacted>")
            .field("previews", &self.previews)
            .finish()
    }
}

/// Edge -> agent, on the control stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EdgeMessage {
    /// The answer to an accepted [`Hello`].
    Welcome(Welcome),
    /// The answer to a refused [`Hello`]; the edge closes the connection.
    Refused(Failure),
    /// `Open` succeeded.
    Opened { id: u64, preview: Preview },
    /// `Close` succeeded.
    Closed { id: u64, name: PreviewName },
    /// The answer to `ShareLink`: a token a visitor of `name` presents
    /// (`?calvin_share=TOKEN`, `Authorization: Bearer TOKEN`), valid until
    /// `expires_unix` (seconds since the Unix epoch).
    Shared {
        id: u64,
        name: PreviewName,
        token: String,
        expires_unix: u64,
    },
    /// A request failed (`id` is that request's), or, with no `id`, the
    /// connection is failing as a whole.
    Error { id: Option<u64>, failure: Failure },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The account the token belongs to.
    pub account: String,
    /// The preview domain, e.g. `preview.localhost`.
    pub domain: String,
    /// The public URL of a preview, with `{name}` where its name goes.
    pub url_template: String,
    /// The previews of `Hello` that are registered again.
    pub restored: Vec<Preview>,
    /// The previews of `Hello` that are not, with the reason.
    pub rejected: Vec<Rejected>,
}

impl Welcome {
    /// The public URL of the preview called `name`.
    pub fn url_for(&self, name: &PreviewName) -> String {
        self.url_template.replace("{name}", name.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    pub name: PreviewName,
    pub failure: Failure,
}

/// An error with a machine-readable code and a message for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
}

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The agent speaks a protocol version the edge does not.
    UnsupportedVersion,
    /// The token is not known to the edge.
    BadToken,
    /// This source presented too many unknown tokens; the message says
    /// when it may try again.
    TooManyAttempts,
    /// Another account holds the name.
    NameTaken,
    /// No preview of this connection has that name.
    UnknownName,
    /// A cap (previews per account, ...) is reached.
    LimitReached,
    /// The agent sent control messages faster than the edge takes them;
    /// the edge closes the connection.
    TooManyRequests,
    /// The peer sent something the protocol does not allow here.
    Protocol,
    /// The edge is shutting down.
    ShuttingDown,
    /// What the edge needs to grant it cannot be reached now (a cluster's
    /// store); the message says what. Trying again later may work.
    Unavailable,
    /// Anything else; the message says what.
    Internal,
}

/// Edge -> agent, first on each data stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamHeader {
    pub name: PreviewName,
    pub port: Port,
    /// The visitor whose request opened this upstream connection.
    pub client: SocketAddr,
    /// If nothing listens on the port, how long (milliseconds) the agent
    /// keeps trying before it answers `connection_refused`: a dev server
    /// restarting is waited for on the agent's machine, without a stream
    /// and a round trip per try. Absent (older edges): it answers at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u32>,
}

/// Agent -> edge, the answer to a [`StreamHeader`]. After `Accepted` the
/// stream carries the bytes of one TCP connection to the port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamAnswer {
    Accepted,
    Refused {
        reason: StreamRefusal,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamRefusal {
    /// Nothing accepts connections on the port.
    ConnectionRefused,
    /// The agent does not preview this port under this name.
    NotPreviewed,
    /// Connecting to the port failed otherwise (timeout, ...).
    ConnectFailed,
    /// Edge to edge: no agent serves the name on the edge asked (it moved
    /// or went away); the asking edge treats it as an agent gone offline.
    Offline,
}
