//! Mattermost's events over its WebSocket, in the `serve` daemon: one
//! connection to `{url}/api/v4/websocket`, its `posted` and
//! `reaction_added` events turned into [`ChatEvent`]s for the [`EventHub`]
//! (the role [`crate::socket_mode`] plays for Slack).
//!
//! What Mattermost says, and where (API v4 reference, `api/v4/source/`
//! of github.com/mattermost/mattermost, `introduction.yaml`, WebSocket):
//! the socket is authenticated by an `Authorization: Bearer` header or an
//! `authentication_challenge` frame (`{"seq": 1, "action":
//! "authentication_challenge", "data": {"token": ...}}`, answered
//! `{"status": "OK", "seq_reply": 1}`); a `hello` event follows; every
//! event is `{"event", "data", "broadcast": {"channel_id", ...}, "seq"}`.
//! The reference says nothing of resuming, of pings or of the shape of
//! `data`; those come from Mattermost's own clients and server in the same
//! repository:
//!
//! - Resuming (`webapp/platform/client/src/websocket.ts`,
//!   `server/channels/api4/websocket.go`, `.../platform/web_conn.go`):
//!   `hello`'s `data.connection_id` names the connection; a client
//!   reconnects with `?connection_id=ID&sequence_number=N`, N the `seq` it
//!   expects next, and Mattermost replays the events from N out of a
//!   128-event queue (sent again with their own `seq`, and no `hello`).
//!   If it cannot, it sends a `hello` with a new id and `seq` 0: the events
//!   in between are lost (logged). A resume needs the header (the server
//!   looks the connection up by the header's user before any frame), so
//!   the gateway sends both the header and the challenge frame (which a
//!   socket the header authenticated ignores).
//! - Sequence: events come with `seq` 0, 1, 2, ...; one already routed
//!   (a replay) is skipped; a gap closes the socket to resume from the
//!   missing one, as the webapp does.
//! - `posted`'s `data.post` and `reaction_added`'s `data.reaction` are a
//!   Post and a Reaction as JSON strings (`server/public/model`).
//! - Pings: the server pings every 60 s and drops a client silent for
//!   100 s; its Go client gives up after 65 s without a ping. The gateway
//!   answers pings, pings every `ping_interval` itself, and takes a socket
//!   without any frame for 3 intervals for dead.
//!
//! - TLS: TCP, then tokio-rustls (ring, the system's roots, ALPN
//!   `http/1.1`), then tokio-tungstenite's handshake on top; plain `ws://`
//!   only to a loopback host (the token must not cross a network in clear).
//! - Reconnection: a failed attempt waits `backoff_min`, doubling up to
//!   `backoff_max`, each wait drawn between half and all of it; a socket
//!   that worked (a `hello`, or a resume accepted) starts that over.
//! - Logs: never the token, never a frame (a frame that cannot be read is
//!   dropped as "unreadable"). tungstenite logs frames at trace level: the
//!   binary caps its log level above that.
//! - Metrics: each connection, new (a `hello`) or resumed (the upgrade of
//!   a resume; if the server had lost the connection, its `hello` counts
//!   new as well), and each event routed, by kind ([`crate::metrics`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, sleep, sleep_until, timeout};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, RootCertStore, pki_types::ServerName};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, header};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tracing::{Instrument, debug, info, warn};

use crate::events::{ChatEvent, EventHub};
use crate::metrics::{MattermostConnect, MattermostEvent, Metrics};

/// The largest frame (and message) read from the socket. A post's message
/// is at most 16,383 characters; with its props and metadata a `posted`
/// event stays far below this.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// How long a socket must have lived for its end to start the waits
/// between attempts over.
const STABLE_CONNECTION: Duration = Duration::from_secs(10);
/// Ping intervals without a frame after which the socket is dead.
const DEAD_AFTER_PINGS: u32 = 3;
/// The challenge's `seq` (the only request the gateway sends).
const CHALLENGE_SEQ: i64 = 1;
/// The longest `connection_id` taken for a resume (Mattermost's ids are 26).
const MAX_CONNECTION_ID: usize = 64;
/// How long a shutdown waits for the close handshake.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Where and how to listen.
#[derive(Clone)]
pub struct EventsConfig {
    /// The site: `https://host[:port][/subpath]`, or `http://` to a
    /// loopback host.
    pub url: String,
    /// The bot's access token.
    pub token: String,
    /// The first wait after a failed attempt (default 1 s).
    pub backoff_min: Duration,
    /// The longest wait (default 30 s).
    pub backoff_max: Duration,
    /// How often the gateway pings; a socket silent for 3 of these is
    /// dead (default 30 s).
    pub ping_interval: Duration,
    /// Time to open the socket and, on a new connection, see `hello`
    /// (default 10 s).
    pub handshake_timeout: Duration,
}

impl EventsConfig {
    /// `url` and `token` with the default timings.
    pub fn new(url: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            token: token.into(),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            ping_interval: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for EventsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventsConfig")
            .field("url", &self.url)
            .field("token", &"<hidden>")
            .field("backoff_min", &self.backoff_min)
            .field("backoff_max", &self.backoff_max)
            .field("ping_interval", &self.ping_interval)
            .field("handshake_timeout", &self.handshake_timeout)
            .finish()
    }
}

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum EventsSetupError {
    #[error("not the http(s) URL of a Mattermost site (https://host[:port][/path]): {0:?}")]
    InvalidUrl(String),
    /// The token must not travel in clear text beyond this machine.
    #[error("plain http is allowed only to a loopback host, not {0:?}")]
    InsecureUrl(String),
    /// Empty, or not fit for an HTTP header (its text is not shown).
    #[error("the bot token is empty or holds characters a header cannot carry")]
    InvalidToken,
    #[error("{0} must be more than zero")]
    ZeroDuration(&'static str),
    #[error("backoff_max is shorter than backoff_min")]
    BackoffOrder,
    #[error("no root certificate could be loaded from the system's store")]
    NoRoots,
    #[error("TLS setup: {0}")]
    Tls(String),
}

/// A site's address, checked: the scheme, the host to connect to, the
/// port and the path the site is served under (no trailing `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteUrl {
    tls: bool,
    host: Host,
    port: u16,
    path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Name(String),
    Ip(IpAddr),
}

impl SiteUrl {
    pub fn parse(raw: &str) -> Result<SiteUrl, EventsSetupError> {
        let invalid = || EventsSetupError::InvalidUrl(raw.to_owned());
        let url = url::Url::parse(raw).map_err(|_| invalid())?;
        if !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
        {
            return Err(invalid());
        }
        let host = match url.host().ok_or_else(invalid)? {
            url::Host::Domain(name) => Host::Name(name.to_ascii_lowercase()),
            url::Host::Ipv4(ip) => Host::Ip(ip.into()),
            url::Host::Ipv6(ip) => Host::Ip(ip.into()),
        };
        let loopback = match &host {
            Host::Name(name) => name == "localhost",
            Host::Ip(ip) => ip.is_loopback(),
        };
        let tls = match url.scheme() {
            "https" => true,
            "http" if loopback => false,
            "http" => return Err(EventsSetupError::InsecureUrl(raw.to_owned())),
            _ => return Err(invalid()),
        };
        let port = url.port_or_known_default().ok_or_else(invalid)?;
        let path = url.path().trim_end_matches('/').to_owned();
        Ok(SiteUrl {
            tls,
            host,
            port,
            path,
        })
    }

    /// The WebSocket's URL, resuming `resume` when given.
    fn websocket(&self, resume: Option<&Resume>) -> String {
        let scheme = if self.tls { "wss" } else { "ws" };
        let host = match &self.host {
            Host::Name(name) => name.clone(),
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
            Host::Ip(ip) => ip.to_string(),
        };
        let mut url = format!(
            "{scheme}://{host}:{}{}/api/v4/websocket",
            self.port, self.path
        );
        if let Some(r) = resume {
            url.push_str(&format!(
                "?connection_id={}&sequence_number={}",
                r.connection_id, r.next_seq
            ));
        }
        url
    }

    fn server_name(&self) -> Result<ServerName<'static>, String> {
        match &self.host {
            Host::Name(name) => ServerName::try_from(name.clone())
                .map_err(|_| format!("{name:?} is not a DNS name")),
            Host::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
        }
    }

    async fn tcp(&self) -> std::io::Result<TcpStream> {
        let stream = match &self.host {
            Host::Name(name) => TcpStream::connect((name.as_str(), self.port)).await?,
            Host::Ip(ip) => TcpStream::connect((*ip, self.port)).await?,
        };
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

/// The TLS settings for the site: ring, `roots`, HTTP/1.1 (the WebSocket
/// upgrade is HTTP/1.1's).
fn client_tls(roots: RootCertStore) -> Result<TlsConnector, EventsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EventsSetupError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

fn system_roots() -> Result<RootCertStore, EventsSetupError> {
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(EventsSetupError::NoRoots);
    }
    Ok(roots)
}

/// A running listener; [`MattermostEvents::shutdown`] closes its socket.
pub struct MattermostEvents {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl MattermostEvents {
    /// Connects (in the background, on the current Tokio runtime) and
    /// routes events to `hub`, counting connections and events in
    /// `metrics`.
    pub fn start(
        config: EventsConfig,
        hub: Arc<EventHub>,
        metrics: Metrics,
    ) -> Result<MattermostEvents, EventsSetupError> {
        let site = SiteUrl::parse(&config.url)?;
        let tls = match site.tls {
            true => Some(client_tls(system_roots()?)?),
            false => None,
        };
        Self::start_with(config, site, tls, hub, metrics)
    }

    fn start_with(
        config: EventsConfig,
        site: SiteUrl,
        tls: Option<TlsConnector>,
        hub: Arc<EventHub>,
        metrics: Metrics,
    ) -> Result<MattermostEvents, EventsSetupError> {
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", config.token))
            .ok()
            .filter(|_| !config.token.is_empty())
            .ok_or(EventsSetupError::InvalidToken)?;
        authorization.set_sensitive(true);
        for (name, value) in [
            ("backoff_min", config.backoff_min),
            ("ping_interval", config.ping_interval),
            ("handshake_timeout", config.handshake_timeout),
        ] {
            if value.is_zero() {
                return Err(EventsSetupError::ZeroDuration(name));
            }
        }
        if config.backoff_max < config.backoff_min {
            return Err(EventsSetupError::BackoffOrder);
        }
        let span = tracing::info_span!("mattermost_websocket", site = %config.url);
        let (stop, stopped) = watch::channel(false);
        let listener = Listener {
            site,
            tls,
            authorization,
            config,
            hub,
            metrics,
            resume: None,
            opened: None,
        };
        let task = tokio::spawn(listener.run(stopped).instrument(span));
        Ok(MattermostEvents { stop, task })
    }

    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Where the last connection was: its id and the `seq` expected next.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resume {
    connection_id: String,
    next_seq: i64,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Socket = WebSocketStream<Box<dyn Io>>;

/// How a connection ended.
#[derive(Debug)]
enum Ended {
    Stopped,
    /// Before it worked: the next wait grows.
    Failed(String),
    /// After it worked: the waits start over.
    Dropped(String),
}

/// What a text frame asks of the connection.
enum Step {
    Continue,
    /// The challenge was answered FAIL.
    Refused,
    /// An event's `seq` skipped some: resume from the first missing one.
    Gap {
        expected: i64,
        got: i64,
    },
}

/// What the connection loop woke up for.
enum Wake {
    Stop,
    Deadline,
    Ping,
    Frame(Option<Result<Message, tungstenite::Error>>),
}

struct Listener {
    site: SiteUrl,
    tls: Option<TlsConnector>,
    /// `Bearer <token>`, marked sensitive.
    authorization: HeaderValue,
    config: EventsConfig,
    hub: Arc<EventHub>,
    metrics: Metrics,
    resume: Option<Resume>,
    /// When the latest socket opened (its handshake not counted).
    opened: Option<Instant>,
}

/// Resolves when the listener is told to stop (or its handle is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl Listener {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        // Consecutive failed attempts (0: connect at once).
        let mut failures = 0u32;
        loop {
            if failures > 0 {
                let wait = backoff(&self.config, failures);
                tokio::select! {
                    () = sleep(wait) => {}
                    () = stopped(&mut stop) => return,
                }
            }
            self.opened = None;
            match self.connection(&mut stop).await {
                Ended::Stopped => return,
                Ended::Failed(reason) => {
                    failures = failures.saturating_add(1);
                    warn!(%reason, attempt = failures, "the Mattermost WebSocket could not connect");
                }
                // A socket that lived a while starts the waits over; one
                // closed at once (a proxy that accepts and hangs up, a
                // resume the server drops) counts as a failure, so the
                // waits keep growing instead of spinning.
                Ended::Dropped(reason)
                    if self
                        .opened
                        .is_some_and(|t| t.elapsed() >= STABLE_CONNECTION) =>
                {
                    failures = 1;
                    info!(%reason, "the Mattermost WebSocket closed; reconnecting");
                }
                Ended::Dropped(reason) => {
                    failures = failures.saturating_add(1);
                    warn!(%reason, attempt = failures, "the Mattermost WebSocket closed at once");
                }
            }
        }
    }

    /// One connection, from the TCP connect to its end.
    async fn connection(&mut self, stop: &mut watch::Receiver<bool>) -> Ended {
        let handshake = self.config.handshake_timeout;
        let opened = tokio::select! {
            opened = timeout(handshake, self.open()) => opened,
            () = stopped(stop) => return Ended::Stopped,
        };
        let mut ws = match opened {
            Ok(Ok(ws)) => ws,
            Ok(Err(reason)) => return Ended::Failed(reason),
            Err(_) => return Ended::Failed(format!("no WebSocket within {handshake:?}")),
        };
        self.opened = Some(Instant::now());
        let challenge = json!({
            "seq": CHALLENGE_SEQ,
            "action": "authentication_challenge",
            "data": {"token": self.config.token},
        });
        if let Err(err) = ws.send(Message::text(challenge.to_string())).await {
            return Ended::Failed(describe(&err));
        }
        // A resume the server accepted works already (the header was
        // checked at the upgrade, and no hello comes); a new connection
        // works once Mattermost says hello.
        let mut established = self.resume.is_some();
        if established {
            self.metrics
                .mattermost_connected(MattermostConnect::Resumed);
            info!("Mattermost WebSocket resumed");
        }
        let hello_by = Instant::now() + handshake;
        let ping_every = self.config.ping_interval;
        let mut ping = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_frame = Instant::now();
        let end = |established: bool, reason: String| match established {
            true => Ended::Dropped(reason),
            false => Ended::Failed(reason),
        };
        loop {
            let deadline = match established {
                true => last_frame + ping_every * DEAD_AFTER_PINGS,
                false => hello_by,
            };
            let wake = tokio::select! {
                () = stopped(stop) => Wake::Stop,
                () = sleep_until(deadline) => Wake::Deadline,
                _ = ping.tick() => Wake::Ping,
                frame = ws.next() => Wake::Frame(frame),
            };
            match wake {
                Wake::Stop => {
                    let _ = timeout(CLOSE_GRACE, ws.close(None)).await;
                    return Ended::Stopped;
                }
                Wake::Deadline if established => {
                    return end(true, format!("no frame for {:?}", deadline - last_frame));
                }
                Wake::Deadline => {
                    return end(false, format!("no hello within {handshake:?}"));
                }
                Wake::Ping => {
                    if let Err(err) = ws.send(Message::Ping(Default::default())).await {
                        return end(established, describe(&err));
                    }
                }
                Wake::Frame(None) => return end(established, "the connection ended".into()),
                Wake::Frame(Some(Err(err))) => return end(established, describe(&err)),
                Wake::Frame(Some(Ok(message))) => {
                    last_frame = Instant::now();
                    match message {
                        Message::Text(text) => match self.on_text(&text, &mut established) {
                            Step::Continue => {}
                            Step::Refused => {
                                return Ended::Failed("Mattermost refused the token".into());
                            }
                            Step::Gap { expected, got } => {
                                return Ended::Dropped(format!(
                                    "event {got} came where {expected} was expected; resuming \
                                     from {expected}"
                                ));
                            }
                        },
                        // tungstenite queued the pong; it leaves now.
                        Message::Ping(_) => {
                            if let Err(err) = ws.flush().await {
                                return end(established, describe(&err));
                            }
                        }
                        Message::Close(_) => {
                            return end(established, "Mattermost closed the connection".into());
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// TCP, TLS when https, the WebSocket handshake with the token.
    async fn open(&self) -> Result<Socket, String> {
        let tcp = self
            .site
            .tcp()
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let io: Box<dyn Io> = match &self.tls {
            Some(tls) => Box::new(
                tls.connect(self.site.server_name()?, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?,
            ),
            None => Box::new(tcp),
        };
        let url = self.site.websocket(self.resume.as_ref());
        let mut request = url.into_client_request().map_err(|e| describe(&e))?;
        request
            .headers_mut()
            .insert(header::AUTHORIZATION, self.authorization.clone());
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_EVENT_BYTES))
            .max_frame_size(Some(MAX_EVENT_BYTES));
        let (ws, _) = tokio_tungstenite::client_async_with_config(request, io, Some(config))
            .await
            .map_err(|e| describe(&e))?;
        Ok(ws)
    }

    /// Handles a text frame: a reply, `hello`, or an event to route.
    fn on_text(&mut self, text: &str, established: &mut bool) -> Step {
        let Ok(frame) = serde_json::from_str::<Frame>(text) else {
            debug!("an unreadable frame was dropped");
            return Step::Continue;
        };
        if let Some(reply) = frame.seq_reply {
            if reply == CHALLENGE_SEQ && frame.status.as_deref() == Some("FAIL") {
                return Step::Refused;
            }
            return Step::Continue;
        }
        let Some(event) = frame.event.as_deref() else {
            return Step::Continue;
        };
        if event == "hello" {
            // New unless it names the connection resumed (a server that
            // lost it says hello with another id).
            if self.on_hello(&frame) || !*established {
                *established = true;
                self.metrics.mattermost_connected(MattermostConnect::New);
                info!("Mattermost WebSocket connected");
            }
            return Step::Continue;
        }
        // A new connection's events come after its hello.
        if !*established {
            return Step::Continue;
        }
        if let (Some(seq), Some(resume)) = (frame.seq, self.resume.as_mut()) {
            if seq < resume.next_seq {
                debug!(seq, "an event already routed came again; skipped");
                return Step::Continue;
            }
            if seq > resume.next_seq {
                return Step::Gap {
                    expected: resume.next_seq,
                    got: seq,
                };
            }
            resume.next_seq += 1;
        }
        if let Some(chat_event) = chat_event(event, &frame.data, &frame.broadcast) {
            self.metrics.mattermost_event(match chat_event {
                ChatEvent::Message { .. } => MattermostEvent::Message,
                ChatEvent::Reaction { .. } => MattermostEvent::Reaction,
            });
            self.hub.on_event(chat_event);
        }
        Step::Continue
    }

    /// Remembers the connection `hello` names, to resume it; whether it
    /// is another than the one resumed.
    fn on_hello(&mut self, frame: &Frame) -> bool {
        let id = frame
            .data
            .get("connection_id")
            .and_then(Value::as_str)
            .filter(|id| {
                !id.is_empty()
                    && id.len() <= MAX_CONNECTION_ID
                    && id.bytes().all(|b| b.is_ascii_alphanumeric())
            });
        let lost = self
            .resume
            .as_ref()
            .is_some_and(|old| id != Some(old.connection_id.as_str()));
        if lost {
            warn!(
                "Mattermost could not resume the connection; events since it dropped may be lost"
            );
        }
        self.resume = id.map(|id| Resume {
            connection_id: id.to_owned(),
            next_seq: frame.seq.unwrap_or(0) + 1,
        });
        lost
    }
}

/// The wait before attempt `failures + 1`: `backoff_min` doubled per
/// failure after the first, at most `backoff_max`, drawn between half and
/// all of that.
fn backoff(config: &EventsConfig, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    let ceiling = config
        .backoff_min
        .saturating_mul(1 << doublings)
        .min(config.backoff_max);
    let ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::random_range(ms / 2..=ms))
}

/// A WebSocket error in words, without any frame or header it carries.
fn describe(err: &tungstenite::Error) -> String {
    match err {
        tungstenite::Error::Http(response) => {
            format!("Mattermost answered HTTP {}", response.status())
        }
        tungstenite::Error::Capacity(_) => format!("a frame over {MAX_EVENT_BYTES} bytes"),
        tungstenite::Error::Io(e) => format!("I/O: {e}"),
        tungstenite::Error::Tls(_) => "TLS failed".into(),
        tungstenite::Error::Protocol(e) => format!("WebSocket protocol: {e}"),
        tungstenite::Error::Url(_) => "a bad WebSocket URL".into(),
        tungstenite::Error::HttpFormat(_) => "a bad HTTP request or answer".into(),
        other => format!("WebSocket: {other}"),
    }
}

/// A frame from the server: an event or a reply.
#[derive(Deserialize)]
struct Frame {
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    data: Value,
    #[serde(default)]
    broadcast: Broadcast,
    #[serde(default)]
    seq: Option<i64>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    seq_reply: Option<i64>,
}

#[derive(Deserialize, Default)]
struct Broadcast {
    #[serde(default)]
    channel_id: String,
}

/// What the gateway reads of a Post (`server/public/model/post.go`).
#[derive(Deserialize)]
struct Post {
    id: String,
    channel_id: String,
    #[serde(default)]
    root_id: String,
    #[serde(default)]
    user_id: String,
    #[serde(default)]
    message: String,
    #[serde(default, rename = "type")]
    kind: String,
}

/// What the gateway reads of a Reaction (`server/public/model/reaction.go`).
#[derive(Deserialize)]
struct Reaction {
    user_id: String,
    post_id: String,
    emoji_name: String,
    #[serde(default)]
    channel_id: String,
}

/// The [`ChatEvent`] an event is, if any: a person's or a bot's post (not
/// a system message: joins, header changes, ephemeral posts, whose type
/// starts `system_`), or a reaction added.
fn chat_event(event: &str, data: &Value, broadcast: &Broadcast) -> Option<ChatEvent> {
    match event {
        "posted" => {
            let post: Post = serde_json::from_str(data.get("post")?.as_str()?).ok()?;
            if post.kind.starts_with("system_") || post.id.is_empty() || post.channel_id.is_empty()
            {
                return None;
            }
            Some(ChatEvent::Message {
                channel: post.channel_id,
                ts: post.id,
                thread_ts: Some(post.root_id).filter(|r| !r.is_empty()),
                user: Some(post.user_id).filter(|u| !u.is_empty()),
                text: post.message,
            })
        }
        "reaction_added" => {
            let reaction: Reaction = serde_json::from_str(data.get("reaction")?.as_str()?).ok()?;
            let channel = match broadcast.channel_id.is_empty() {
                true => reaction.channel_id,
                false => broadcast.channel_id.clone(),
            };
            if channel.is_empty() || reaction.post_id.is_empty() {
                return None;
            }
            Some(ChatEvent::Reaction {
                channel,
                ts: reaction.post_id,
                user: reaction.user_id,
                reaction: reaction.emoji_name,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use tokio::net::TcpListener;
    use tokio::sync::mpsc;
    use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

    use crate::secret_request::SecretRequests;

    /// The longest any step of a test waits.
    const WITHIN: Duration = Duration::from_secs(10);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn hub() -> Arc<EventHub> {
        // A client that is never called: no click or form here.
        let chat = crate::slack::backend("http://127.0.0.1:9/api/", "xoxb-unused".into())
            .expect("a client");
        let requests = SecretRequests::new(
            chat,
            Err(crate::secrets::NoStore::NoKey),
            PathBuf::from("/nonexistent"),
        );
        Arc::new(EventHub::new(Arc::new(requests)))
    }

    fn config(url: &str) -> EventsConfig {
        EventsConfig {
            backoff_min: ms(20),
            backoff_max: ms(100),
            handshake_timeout: Duration::from_secs(5),
            ..EventsConfig::new(url, "tok-1")
        }
    }

    async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
        timeout(WITHIN, f)
            .await
            .unwrap_or_else(|_| panic!("{what}: nothing within {WITHIN:?}"))
    }

    async fn next(rx: &mut mpsc::Receiver<Value>) -> Value {
        within("an event", rx.recv()).await.expect("subscribed")
    }

    /// The value of the series `series` (its name and labels).
    fn count(metrics: &Metrics, series: &str) -> f64 {
        let text = metrics.encode();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// A fake Mattermost's WebSocket endpoint on loopback.
    struct Fake {
        listener: TcpListener,
    }

    /// One connection to it: what its upgrade asked for, and the socket.
    struct Conn<S> {
        target: String,
        authorization: Option<String>,
        ws: WebSocketStream<S>,
    }

    impl Fake {
        async fn bind() -> (Fake, String) {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let port = listener.local_addr().expect("addr").port();
            (Fake { listener }, format!("http://127.0.0.1:{port}"))
        }

        async fn tcp(&self) -> TcpStream {
            within("a connection", self.listener.accept())
                .await
                .expect("accept")
                .0
        }

        async fn accept(&self) -> Conn<TcpStream> {
            let tcp = self.tcp().await;
            upgrade(tcp).await
        }

        /// Answers the next upgrade with `status`; its request target.
        // The callback's type is tungstenite's (an `http::Response` error).
        #[allow(clippy::result_large_err)]
        async fn refuse(&self, status: u16) -> String {
            let tcp = self.tcp().await;
            let mut target = String::new();
            let refused = tokio_tungstenite::accept_hdr_async(tcp, |req: &Request, _: Response| {
                target = req.uri().to_string();
                let answer: ErrorResponse = http::Response::builder()
                    .status(status)
                    .body(None)
                    .expect("a response");
                Err(answer)
            })
            .await;
            assert!(refused.is_err(), "the upgrade was refused");
            target
        }
    }

    #[allow(clippy::result_large_err)]
    async fn upgrade<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> Conn<S> {
        let mut seen = (String::new(), None);
        let ws = tokio_tungstenite::accept_hdr_async(stream, |req: &Request, resp: Response| {
            seen = (
                req.uri().to_string(),
                req.headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
            );
            Ok(resp)
        })
        .await
        .expect("an upgrade");
        Conn {
            target: seen.0,
            authorization: seen.1,
            ws,
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
        /// The next frame that is not a ping or pong.
        async fn read(&mut self) -> Message {
            loop {
                let frame = within("a frame", self.ws.next()).await;
                match frame.expect("open").expect("a frame") {
                    Message::Ping(_) | Message::Pong(_) => continue,
                    other => return other,
                }
            }
        }

        /// Reads the authentication challenge; its token.
        async fn challenge(&mut self) -> String {
            let Message::Text(text) = self.read().await else {
                panic!("the challenge is a text frame");
            };
            let frame: Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(frame["action"], "authentication_challenge", "{frame}");
            assert_eq!(frame["seq"], 1, "{frame}");
            frame["data"]["token"].as_str().expect("a token").to_owned()
        }

        async fn send(&mut self, frame: Value) {
            self.send_text(frame.to_string()).await;
        }

        async fn send_text(&mut self, text: String) {
            self.ws.send(Message::text(text)).await.expect("sent");
        }

        /// What a new connection gets after its challenge.
        async fn greet(&mut self, connection_id: &str) {
            assert_eq!(self.challenge().await, "tok-1");
            self.send(json!({"status": "OK", "seq_reply": 1})).await;
            self.send(hello(connection_id, 0)).await;
        }
    }

    fn hello(connection_id: &str, seq: i64) -> Value {
        json!({
            "event": "hello",
            "data": {"server_version": "10.5.0", "connection_id": connection_id},
            "broadcast": {"omit_users": null, "user_id": "bot1", "channel_id": "", "team_id": ""},
            "seq": seq,
        })
    }

    fn post_event(seq: i64, post: Value) -> Value {
        let channel = post["channel_id"].clone();
        json!({
            "event": "posted",
            "data": {"post": post.to_string(), "channel_type": "O", "sender_name": "@ann"},
            "broadcast": {"omit_users": null, "user_id": "", "channel_id": channel, "team_id": ""},
            "seq": seq,
        })
    }

    /// A person's post `id` in `root`'s thread of channel `ch1`.
    fn posted(seq: i64, id: &str, root: &str, message: &str) -> Value {
        post_event(
            seq,
            json!({
                "id": id, "create_at": 1, "update_at": 1, "delete_at": 0, "user_id": "u1",
                "channel_id": "ch1", "root_id": root, "original_id": "", "message": message,
                "type": "", "props": {}, "hashtags": "", "pending_post_id": "",
            }),
        )
    }

    fn reaction(seq: i64, channel: &str, post_id: &str, emoji: &str) -> Value {
        let reaction = json!({
            "user_id": "u2", "post_id": post_id, "emoji_name": emoji, "create_at": 2,
        });
        json!({
            "event": "reaction_added",
            "data": {"reaction": reaction.to_string()},
            "broadcast": {"omit_users": null, "user_id": "", "channel_id": channel, "team_id": ""},
            "seq": seq,
        })
    }

    #[tokio::test]
    async fn posts_and_reactions_reach_their_thread_and_channel() {
        let (fake, url) = Fake::bind().await;
        let (hub, metrics) = (hub(), Metrics::default());
        let mut thread = hub.subscribe("ch1", "root1");
        let mut watcher = hub.watch_reactions("ch1");
        let events =
            MattermostEvents::start(config(&url), hub.clone(), metrics.clone()).expect("started");
        let mut conn = fake.accept().await;
        assert_eq!(conn.target, "/api/v4/websocket");
        assert_eq!(conn.authorization.as_deref(), Some("Bearer tok-1"));
        conn.greet("conn1").await;
        conn.send(posted(1, "p1", "root1", "hello there")).await;
        let mut joined = posted(2, "p2", "root1", "ann joined the channel");
        let post = json!({"id": "p2", "channel_id": "ch1", "root_id": "root1", "user_id": "u1",
                          "message": "ann joined", "type": "system_join_channel"});
        joined["data"]["post"] = Value::String(post.to_string());
        conn.send(joined).await;
        conn.send(
            json!({"event": "typing", "data": {"parent_id": "", "user_id": "u1"},
                         "broadcast": {"channel_id": "ch1"}, "seq": 3}),
        )
        .await;
        conn.send(reaction(4, "ch1", "p1", "+1")).await;
        conn.send(posted(5, "p3", "", "a new thread")).await;
        conn.send(posted(6, "p4", "root1", "last")).await;

        assert_eq!(
            next(&mut thread).await,
            json!({"type": "message", "channel": "ch1", "thread_ts": "root1", "ts": "p1",
                   "user": "u1", "text": "hello there"})
        );
        let expected = json!({"type": "reaction_added", "channel": "ch1", "thread_ts": "root1",
                              "ts": "p1", "user": "u2", "reaction": "+1"});
        assert_eq!(next(&mut thread).await, expected);
        assert_eq!(next(&mut watcher).await, expected);
        assert_eq!(
            next(&mut thread).await["text"],
            "last",
            "the system post, the typing and the other thread's post are not this thread's"
        );
        events.shutdown().await;
        assert!(
            matches!(conn.read().await, Message::Close(_)),
            "a shutdown closes the socket"
        );
        let prefix = "calvin_gateway_mattermost";
        assert_eq!(
            count(
                &metrics,
                &format!(r#"{prefix}_websocket_connects_total{{how="new"}}"#)
            ),
            1.0
        );
        assert_eq!(
            count(
                &metrics,
                &format!(r#"{prefix}_events_total{{kind="message"}}"#)
            ),
            3.0
        );
        assert_eq!(
            count(
                &metrics,
                &format!(r#"{prefix}_events_total{{kind="reaction"}}"#)
            ),
            1.0
        );
    }

    #[tokio::test]
    async fn a_dropped_socket_resumes_where_it_stopped_and_nothing_is_routed_twice() {
        let (fake, url) = Fake::bind().await;
        let (hub, metrics) = (hub(), Metrics::default());
        let mut thread = hub.subscribe("ch1", "root1");
        let events =
            MattermostEvents::start(config(&url), hub.clone(), metrics.clone()).expect("started");

        let mut conn = fake.accept().await;
        conn.greet("conn1").await;
        conn.send(posted(1, "p1", "root1", "one")).await;
        conn.ws.close(None).await.expect("closed");

        // Resumed: no hello; Mattermost replays from the seq asked for
        // (here one too early, as a replay may).
        let mut conn = fake.accept().await;
        assert_eq!(
            conn.target,
            "/api/v4/websocket?connection_id=conn1&sequence_number=2"
        );
        assert_eq!(conn.authorization.as_deref(), Some("Bearer tok-1"));
        assert_eq!(conn.challenge().await, "tok-1");
        conn.send(posted(1, "p1", "root1", "one")).await;
        conn.send(posted(2, "p2", "root1", "two")).await;
        drop(conn);

        // The server lost the connection: a new one, seq from 0; then a
        // gap (3 where 2 is expected).
        let mut conn = fake.accept().await;
        assert_eq!(
            conn.target,
            "/api/v4/websocket?connection_id=conn1&sequence_number=3"
        );
        conn.send(hello("conn2", 0)).await;
        conn.send(posted(1, "p3", "root1", "three")).await;
        conn.send(posted(3, "p5", "root1", "five")).await;

        let mut conn = within("a resume after the gap", fake.accept()).await;
        assert_eq!(
            conn.target,
            "/api/v4/websocket?connection_id=conn2&sequence_number=2"
        );
        conn.send(posted(2, "p4", "root1", "four")).await;
        conn.send(posted(3, "p5", "root1", "five")).await;

        for text in ["one", "two", "three", "four", "five"] {
            assert_eq!(next(&mut thread).await["text"], text);
        }
        events.shutdown().await;
        assert!(thread.try_recv().is_err(), "nothing routed twice");
        let connects = "calvin_gateway_mattermost_websocket_connects_total";
        assert_eq!(count(&metrics, &format!(r#"{connects}{{how="new"}}"#)), 2.0);
        assert_eq!(
            count(&metrics, &format!(r#"{connects}{{how="resumed"}}"#)),
            3.0
        );
    }

    #[tokio::test]
    async fn a_refused_token_routes_nothing_and_is_retried_with_growing_waits() {
        let (fake, url) = Fake::bind().await;
        let (hub, metrics) = (hub(), Metrics::default());
        let mut thread = hub.subscribe("ch1", "root1");
        let config = EventsConfig {
            backoff_min: ms(100),
            backoff_max: ms(400),
            handshake_timeout: Duration::from_secs(5),
            ..EventsConfig::new(&url, "tok-bad")
        };
        let events =
            MattermostEvents::start(config, hub.clone(), metrics.clone()).expect("started");
        let mut attempts = Vec::new();
        assert_eq!(fake.refuse(401).await, "/api/v4/websocket");
        attempts.push(Instant::now());
        // A server that takes the socket but fails the challenge, then
        // sends an event anyway.
        let mut conn = fake.accept().await;
        attempts.push(Instant::now());
        assert_eq!(conn.challenge().await, "tok-bad");
        conn.send(json!({"status": "FAIL", "seq_reply": 1,
                         "error": {"id": "api.web_socket_router.not_authenticated.app_error",
                                   "message": "invalid session"}}))
            .await;
        conn.send(posted(1, "p1", "root1", "not for you")).await;
        for _ in 0..2 {
            assert_eq!(
                fake.refuse(401).await,
                "/api/v4/websocket",
                "no resume without a hello"
            );
            attempts.push(Instant::now());
        }
        events.shutdown().await;
        let waits: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
        // The waits are drawn in [50, 100], [100, 200], [200, 400] ms.
        assert!(waits[1] >= ms(100), "{waits:?}");
        assert!(waits[2] >= ms(200), "{waits:?}");
        assert!(
            waits[1] < Duration::from_secs(4),
            "the FAIL ends the attempt, not the hello's timeout: {waits:?}"
        );
        assert!(thread.try_recv().is_err(), "nothing routed");
        assert!(
            !metrics.encode().contains("mattermost_websocket_connects"),
            "no connection counted"
        );
    }

    #[tokio::test]
    async fn pings_are_answered_and_a_silent_socket_is_replaced() {
        let (fake, url) = Fake::bind().await;
        let hub = hub();
        let mut thread = hub.subscribe("ch1", "root1");
        let config = EventsConfig {
            ping_interval: ms(100),
            ..config(&url)
        };
        let events = MattermostEvents::start(config, hub.clone(), Metrics::default()).expect("up");
        let mut silent = fake.accept().await;
        silent.greet("conn1").await;
        // The gateway pings; this server stops reading, so it never pongs
        // and the gateway hears nothing more.
        let frame = within("the gateway's ping", silent.ws.next()).await;
        assert!(matches!(frame, Some(Ok(Message::Ping(_)))), "{frame:?}");
        let mut conn = fake.accept().await;
        assert_eq!(
            conn.target,
            "/api/v4/websocket?connection_id=conn1&sequence_number=1"
        );
        conn.ws
            .send(Message::Ping(bytes::Bytes::from_static(b"are you there")))
            .await
            .expect("ping sent");
        loop {
            let frame = within("the pong", conn.ws.next()).await;
            match frame.expect("open").expect("a frame") {
                Message::Pong(payload) => {
                    assert_eq!(&payload[..], b"are you there");
                    break;
                }
                Message::Ping(_) | Message::Text(_) => continue,
                other => panic!("{other:?}"),
            }
        }
        conn.send(posted(1, "p1", "root1", "still here")).await;
        assert_eq!(next(&mut thread).await["text"], "still here");
        drop(silent);
        events.shutdown().await;
    }

    /// `posted` as one text frame of exactly `len` bytes.
    fn posted_of_len(seq: i64, id: &str, len: usize) -> String {
        let mut text = posted(seq, id, "root1", id).to_string();
        assert!(text.len() <= len);
        text.extend(std::iter::repeat_n(' ', len - text.len()));
        text
    }

    #[tokio::test]
    async fn a_frame_over_the_cap_ends_the_socket_and_is_not_routed() {
        let (fake, url) = Fake::bind().await;
        let hub = hub();
        let mut thread = hub.subscribe("ch1", "root1");
        let events =
            MattermostEvents::start(config(&url), hub.clone(), Metrics::default()).expect("up");
        let mut conn = fake.accept().await;
        conn.greet("conn1").await;
        conn.send_text(posted_of_len(1, "at-the-cap", MAX_EVENT_BYTES))
            .await;
        conn.send_text(posted_of_len(2, "over-the-cap", MAX_EVENT_BYTES + 1))
            .await;
        assert_eq!(next(&mut thread).await["text"], "at-the-cap");
        let mut conn = fake.accept().await;
        assert_eq!(
            conn.target, "/api/v4/websocket?connection_id=conn1&sequence_number=2",
            "event 2 was not routed"
        );
        conn.send(posted(2, "p2", "root1", "smaller")).await;
        assert_eq!(next(&mut thread).await["text"], "smaller");
        events.shutdown().await;
    }

    #[tokio::test]
    async fn wss_goes_through_rustls_with_the_sites_name() {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a cert");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rustls::pki_types::PrivatePkcs8KeyDer::from(signing_key.serialize_der());
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key.into())
            .expect("server config");
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let mut roots = RootCertStore::empty();
        roots.add(cert.der().clone()).expect("a root");

        let (fake, url) = Fake::bind().await;
        let url = url.replace("http://127.0.0.1", "https://localhost");
        let hub = hub();
        let mut thread = hub.subscribe("ch1", "root1");
        let site = SiteUrl::parse(&url).expect("a site");
        let tls = client_tls(roots).expect("TLS");
        let events = MattermostEvents::start_with(
            config(&url),
            site,
            Some(tls),
            hub.clone(),
            Metrics::default(),
        )
        .expect("up");
        let tls = within("TLS", acceptor.accept(fake.tcp().await))
            .await
            .expect("a TLS handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_eq!(tls.get_ref().1.server_name(), Some("localhost"));
        let mut conn = upgrade(tls).await;
        conn.greet("conn1").await;
        conn.send(posted(1, "p1", "root1", "over TLS")).await;
        assert_eq!(next(&mut thread).await["text"], "over TLS");
        events.shutdown().await;
    }

    #[tokio::test]
    async fn site_urls_and_settings_are_checked_before_anything_starts() {
        let ws = |raw: &str, resume: Option<&Resume>| {
            SiteUrl::parse(raw).map(|site| site.websocket(resume))
        };
        assert_eq!(
            ws("https://chat.example.com", None).expect("https"),
            "wss://chat.example.com:443/api/v4/websocket"
        );
        let resume = Resume {
            connection_id: "abc123".into(),
            next_seq: 7,
        };
        assert_eq!(
            ws("https://Chat.Example.com:8443/mm/", Some(&resume)).expect("a subpath"),
            "wss://chat.example.com:8443/mm/api/v4/websocket?connection_id=abc123&sequence_number=7"
        );
        assert_eq!(
            ws("http://127.0.0.1:8065", None).expect("loopback"),
            "ws://127.0.0.1:8065/api/v4/websocket"
        );
        assert_eq!(
            ws("http://[::1]:8065", None).expect("loopback v6"),
            "ws://[::1]:8065/api/v4/websocket"
        );
        assert!(ws("http://localhost:8065", None).is_ok());
        assert!(matches!(
            SiteUrl::parse("http://chat.example.com"),
            Err(EventsSetupError::InsecureUrl(_))
        ));
        assert!(matches!(
            SiteUrl::parse("http://10.0.0.1:8065"),
            Err(EventsSetupError::InsecureUrl(_))
        ));
        for bad in [
            "chat.example.com",
            "ftp://chat.example.com",
            "https://user:pw@chat.example.com",
            "https://chat.example.com/?x=1",
            "https://chat.example.com/#x",
            "",
        ] {
            assert!(
                matches!(SiteUrl::parse(bad), Err(EventsSetupError::InvalidUrl(_))),
                "{bad:?}"
            );
        }

        let start = |config: EventsConfig| {
            MattermostEvents::start(config, hub(), Metrics::default()).map(|_| ())
        };
        let url = "http://127.0.0.1:9";
        for token in ["", "tok\nen"] {
            let err = start(EventsConfig::new(url, token)).expect_err("a bad token");
            assert!(matches!(err, EventsSetupError::InvalidToken), "{err}");
        }
        let err = start(EventsConfig {
            ping_interval: Duration::ZERO,
            ..EventsConfig::new(url, "t")
        })
        .expect_err("no pings");
        assert_eq!(err.to_string(), "ping_interval must be more than zero");
        let err = start(EventsConfig {
            backoff_min: ms(500),
            backoff_max: ms(100),
            ..EventsConfig::new(url, "t")
        })
        .expect_err("backwards");
        assert!(matches!(err, EventsSetupError::BackoffOrder), "{err}");
        let shown = format!("{:?}", EventsConfig::new(url, "secret-token"));
        assert!(!shown.contains("secret-token"), "{shown}");
    }

    #[test]
    fn waits_double_from_the_minimum_up_to_the_maximum_with_jitter() {
        let config = EventsConfig {
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            ..EventsConfig::new("http://127.0.0.1", "t")
        };
        let secs = Duration::from_secs;
        for (failures, ceiling) in [(1, secs(1)), (2, secs(2)), (3, secs(4)), (5, secs(16))] {
            for _ in 0..50 {
                let wait = backoff(&config, failures);
                assert!(
                    wait >= ceiling / 2 && wait <= ceiling,
                    "{failures}: {wait:?}"
                );
            }
        }
        for failures in [6, 40, u32::MAX] {
            let wait = backoff(&config, failures);
            assert!(wait >= secs(15) && wait <= secs(30), "{failures}: {wait:?}");
        }
    }

    #[test]
    fn events_map_to_the_hubs_terms() {
        let no_broadcast = Broadcast::default();
        let reaction = json!({"user_id": "u2", "post_id": "p1", "emoji_name": "eyes",
                              "channel_id": "ch9"});
        let data = json!({"reaction": reaction.to_string()});
        assert_eq!(
            chat_event("reaction_added", &data, &no_broadcast),
            Some(ChatEvent::Reaction {
                channel: "ch9".into(),
                ts: "p1".into(),
                user: "u2".into(),
                reaction: "eyes".into(),
            }),
            "the reaction's own channel when the broadcast has none"
        );
        assert_eq!(chat_event("reaction_removed", &data, &no_broadcast), None);
        let post = json!({"id": "p1", "channel_id": "ch1", "root_id": "", "user_id": "",
                          "message": "from a webhook"});
        assert_eq!(
            chat_event("posted", &json!({"post": post.to_string()}), &no_broadcast),
            Some(ChatEvent::Message {
                channel: "ch1".into(),
                ts: "p1".into(),
                thread_ts: None,
                user: None,
                text: "from a webhook".into(),
            })
        );
        for data in [
            json!({"post": {"id": "p1"}}),
            json!({"post": "{not json"}),
            json!({"post": json!({"id": "p1", "channel_id": "ch1", "type": "system_ephemeral"}).to_string()}),
            json!({}),
        ] {
            assert_eq!(chat_event("posted", &data, &no_broadcast), None, "{data}");
        }
    }
}
