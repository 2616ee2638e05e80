//! One visitor request: find the preview by Host, rewrite the headers
//! ([`crate::proxy::rewrite`]), forward it over the preview's upstream and stream
//! the answer back.

pub(crate) mod access_log;
pub mod host;
pub mod rates;
pub(crate) mod read_ahead;
pub mod rewrite;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use calvin_proto::PreviewName;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};
use hyper::body::Body as _;
use tracing::{Instrument, debug};

use self::access_log::{AccessRecord, Counted, Finish, RequestId};
use self::host::{HostError, Target};
use self::read_ahead::BodyRules;
use crate::bandwidth::{Bandwidth, ThrottledIo};
use crate::counts::Counts;
use crate::error_page::{self, EdgeError};
use crate::ops::health::{self, Health};
use crate::proxy::rates::Rates;
pub use crate::proxy::rewrite::Scheme;
use crate::proxy::rewrite::{
    drop_zone_cookies, requested_upgrade, rewrite_request, strip_hop_by_hop,
};
use crate::request_body::{BodyOutcome, BodyWatch, MinRate, RequestBody, VisitorBody};
use crate::share;
use crate::tunnel_stream::TunnelStream;
use crate::upstream::origin::{OriginBody, OriginRequest};
use crate::upstream::route_table::{Lookup, RouteTable};
use crate::upstream::{Outgoing, ResponseBody, SendFailed, Upstream, UpstreamError, Waiting};

/// What the edge answers with: an origin's streaming body or its own page,
/// counted (and logged) as it goes.
pub type Body = Counted<Answer>;

/// An origin's streaming body or the edge's own page.
pub type Answer = Either<ResponseBody, Full<Bytes>>;

/// Held by everything a shutdown must wait for (connections, upgraded
/// streams); the edge drains until every clone is dropped.
pub type DrainGuard = tokio::sync::mpsc::Sender<()>;

/// A visitor's connection as an upgrade takes it over.
pub trait VisitorIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> VisitorIo for T {}

/// A visitor's connection once the origin's 101 was written to it: the
/// connection, and what the visitor sent after its request, which the
/// origin gets first.
pub struct Upgraded {
    io: Box<dyn VisitorIo>,
    early: Bytes,
}

impl Upgraded {
    pub(crate) fn new(io: Box<dyn VisitorIo>, early: Bytes) -> Self {
        Self { io, early }
    }
}

/// In a request asking for an upgrade (an extension the HTTP/1 session
/// sets): the visitor's connection, once the answer switched protocols.
/// (Shared, as extensions are cloneable: the first to wait takes it.)
#[derive(Clone)]
pub struct OnUpgrade(Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Receiver<Upgraded>>>>);

impl OnUpgrade {
    pub(crate) fn new(rx: tokio::sync::oneshot::Receiver<Upgraded>) -> Self {
        Self(Arc::new(std::sync::Mutex::new(Some(rx))))
    }

    /// The connection, once switched; `None` if the answer did not switch.
    async fn wait(self) -> Option<Upgraded> {
        let rx = self.0.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        rx.await.ok()
    }
}

/// Who a request comes from: the visitor's address and the scheme it used.
#[derive(Debug, Clone, Copy)]
pub struct Visitor {
    pub peer: SocketAddr,
    pub scheme: Scheme,
}

/// What the edge takes in a visitor's request head, beyond what the HTTP
/// servers enforce themselves (head bytes; header count on HTTP/1.1).
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// Bytes of the request target (path and query).
    pub max_uri_bytes: usize,
    /// Header fields, counted here for HTTP/2.
    pub max_headers: usize,
    /// Body bytes, when capped.
    pub max_body_bytes: Option<u64>,
    /// The least a body must move while it streams, when set.
    pub min_body_rate: Option<MinRate>,
}

impl RequestLimits {
    /// The limit `req` breaks, if any: checked before routing, so a refused
    /// request never reaches an agent.
    fn check<B: hyper::body::Body>(&self, req: &Request<B>) -> Result<(), EdgeError> {
        let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        if target > self.max_uri_bytes {
            return Err(EdgeError::UriTooLong(self.max_uri_bytes));
        }
        if req.headers().len() > self.max_headers {
            return Err(EdgeError::TooManyHeaders(self.max_headers));
        }
        if let Some(cap) = self.max_body_bytes {
            // A declared length past the cap is refused before any byte;
            // an undeclared one is counted as it streams. (The length is
            // the body's own, as its framing was read: Content-Length is
            // parsed once, there.)
            let declared = req.body().size_hint().exact();
            if declared.is_some_and(|len| len > cap) {
                return Err(EdgeError::BodyTooLarge(cap));
            }
        }
        Ok(())
    }
}

/// How long a request waits on others.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    /// For the origin's response head, from the end of the upload.
    pub response: Duration,
    /// For an offline preview to come back.
    pub reconnect: Duration,
}

/// Routes and forwards visitor requests.
pub struct Proxy {
    routes: Arc<RouteTable<Arc<Upstream>>>,
    domain: String,
    limits: RequestLimits,
    rates: Arc<Rates>,
    waits: Waits,
    own: OwnAnswers,
    /// Set when a stop's grace period is over, just before the edge closes
    /// every agent's connection: requests cut then are answered as the
    /// edge stopping, not as their agent gone.
    closing_agents: AtomicBool,
    counts: Counts,
    /// Whether each request gets an access line (`[log] access`), and
    /// whether its path has the query (`[log] access_query`).
    access_log: AtomicBool,
    access_query: AtomicBool,
    /// `Alt-Svc` for HTTPS responses over TCP, when HTTP/3 is advertised.
    alt_svc: Option<HeaderValue>,
}

/// What the edge answers itself, besides errors.
pub struct OwnAnswers {
    /// `/healthz` on hosts that are not previews.
    pub health: Arc<Health>,
    /// The URL template plain HTTP requests for previews are redirected
    /// to; `None` serves them.
    pub redirect_to: Option<String>,
}

/// What a request's end is told of its way through the proxy.
#[derive(Default)]
struct Traced {
    /// Whether the preview's name is asked for.
    wants_preview: bool,
    /// The preview's name, once routed (asked only for the access line).
    preview: Option<String>,
    /// The request body's progress, once forwarded.
    upload: Option<BodyWatch>,
}

impl Proxy {
    pub fn new(
        routes: Arc<RouteTable<Arc<Upstream>>>,
        domain: String,
        limits: RequestLimits,
        rates: Arc<Rates>,
        waits: Waits,
        own: OwnAnswers,
        counts: Counts,
    ) -> Self {
        Self {
            routes,
            domain,
            limits,
            rates,
            waits,
            own,
            closing_agents: AtomicBool::new(false),
            counts,
            access_log: AtomicBool::new(true),
            access_query: AtomicBool::new(false),
            alt_svc: None,
        }
    }

    /// Advertises HTTP/3 on `port` in every HTTPS response over TCP.
    pub(crate) fn advertising_http3(mut self, port: u16) -> Self {
        self.alt_svc = Some(alt_svc(port));
        self
    }

    /// Turns the access log on or off, and the query in its paths.
    pub(crate) fn set_access_log(&self, on: bool, query: bool) {
        self.access_log.store(on, Ordering::Relaxed);
        self.access_query.store(query, Ordering::Relaxed);
    }

    pub(crate) fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Marks that the edge is closing every agent's connection to stop.
    pub(crate) fn closing_agents(&self) {
        self.closing_agents.store(true, Ordering::Release);
    }

    /// Answers a visitor's request: forwarded, or the edge's own answer;
    /// counted, and logged when its response ends.
    pub async fn handle(
        &self,
        req: Request<VisitorBody>,
        visitor: &Visitor,
        drain: &DrainGuard,
    ) -> Response<Body> {
        let arrived = tokio::time::Instant::now();
        let id = access_log::identify(&req);
        let version = req.version();
        let html = error_page::accepts_html(req.headers());
        let logged = self.access_log.load(Ordering::Relaxed)
            && tracing::enabled!(target: access_log::ACCESS_TARGET, tracing::Level::INFO);
        let mut access = logged.then(|| {
            let query = self.access_query.load(Ordering::Relaxed);
            Box::new(AccessRecord::new(&req, id.clone(), visitor.peer, query))
        });
        let mut traced = Traced {
            wants_preview: access.is_some(),
            ..Traced::default()
        };
        // At debug: only debug lines are written within a request, and an
        // enabled span costs every request (its fields formatted, the
        // registry entered on every poll) about 1.7 us.
        let span = tracing::debug_span!("request", id = id.as_str());
        let forwarded = self
            .forward(req, visitor, drain, arrived, &id, &mut traced)
            .instrument(span)
            .await;
        let mut response = match forwarded {
            Ok(response) => response,
            Err(err) => {
                debug!(code = err.code(), "{}", err.message());
                self.counts.refused(&err);
                if access.is_some() && traced.preview.is_none() {
                    traced.preview = err.preview().map(PreviewName::to_string);
                }
                let mut answer = err.response(html, id.as_str());
                // A malformed body leaves nothing after it to read as a
                // request: the connection closes after this answer, and
                // says so.
                if matches!(err, EdgeError::BadRequestBody) && version < Version::HTTP_2 {
                    answer
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                answer.map(Either::Right)
            }
        };
        if let Some(alt_svc) = &self.alt_svc
            && visitor.scheme == Scheme::Https
            && version != Version::HTTP_3
        {
            response
                .headers_mut()
                .insert(header::ALT_SVC, alt_svc.clone());
        }
        let status = response.status();
        self.counts.answered(version, status, arrived.into_std());
        if let Some(access) = &mut access {
            access.preview = traced.preview;
        }
        let finish = Finish {
            counts: self.counts.clone(),
            arrived: arrived.into_std(),
            status: status.as_u16(),
            upload: traced.upload,
            access,
        };
        response.map(|body| Counted::new(body, finish))
    }

    /// Waits for an offline preview's agent to be back, until `reconnect_wait`
    /// after `arrived` (when the request came): its upstream then, `None`
    /// past the wait (or once the name is no longer held). The route table
    /// wakes it when the name changes: no polling.
    async fn back_online(
        &self,
        name: &PreviewName,
        arrived: tokio::time::Instant,
        failed: Option<&Arc<Upstream>>,
    ) -> Option<Arc<Upstream>> {
        let mut deadline = arrived + self.waits.reconnect;
        // One its agent had before the edge restarted is waited for as long
        // again as the agent may take to learn that its connection is gone
        // (its next keep-alive draws the new edge's stateless reset),
        // within the time given to come back.
        if self.routes.is_coming_back(name)
            && let Some(window) = self.routes.coming_back_until()
        {
            let longest = deadline + calvin_proto::KEEP_ALIVE_INTERVAL;
            deadline = deadline.max(longest.min(tokio::time::Instant::from_std(window)));
        }
        // A name made with a time to live is not waited for past its end.
        if let Some(end) = self.routes.ends_at(name) {
            deadline = deadline.min(tokio::time::Instant::from_std(end));
        }
        loop {
            // Woken by the name's next change: armed before the lookup, so
            // an agent that comes back in between is not missed.
            let changed = self.routes.changed(name)?;
            let woken = changed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.routes.lookup(name) {
                // The binding that just failed is not back (another
                // edge's, whose agent left it: the name's next route, from
                // the cluster's store, is).
                Lookup::Live(upstream)
                    if !upstream.agent_gone()
                        && !failed.is_some_and(|f| Arc::ptr_eq(f, &upstream)) =>
                {
                    return Some(upstream);
                }
                // The agent found gone may not have left the table yet: its
                // leaving is a change too, which wakes this.
                Lookup::Live(_) | Lookup::Offline => {}
                Lookup::Unknown | Lookup::Ended => return None,
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return None;
            }
        }
    }

    /// Waits (in the first seconds of a restarted edge) for a name that
    /// was served before the restart to be claimed again: the agents come
    /// back over those seconds (each learns that its connection is gone
    /// at its next packet, a stateless reset, or at the latest at its idle
    /// timeout), and their names would meanwhile answer "no such preview"
    /// (a 404 a link preview may keep). Its upstream once claimed and
    /// online, `None` past the wait or once it is known not to come.
    async fn first_claimed(
        &self,
        name: &PreviewName,
        arrived: tokio::time::Instant,
    ) -> Option<Arc<Upstream>> {
        // As long as for an offline preview, and as long again as an agent
        // may take to learn that its connection is gone (its next
        // keep-alive draws the new edge's stateless reset), within the
        // window.
        let window = self
            .routes
            .coming_back_until()
            .map(tokio::time::Instant::from_std);
        let deadline = (arrived + self.waits.reconnect + calvin_proto::KEEP_ALIVE_INTERVAL)
            .min(window.unwrap_or(arrived));
        loop {
            let woken = self.routes.added().notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.routes.lookup(name) {
                Lookup::Live(upstream) if !upstream.agent_gone() => return Some(upstream),
                Lookup::Live(_) | Lookup::Offline => {
                    return Box::pin(self.back_online(name, arrived, None)).await;
                }
                Lookup::Unknown if self.routes.is_coming_back(name) => {}
                // Claimed and taken down since the restart: not coming.
                Lookup::Unknown | Lookup::Ended => return None,
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return None;
            }
        }
    }

    /// Sends `req` through `upstream`; if its agent turns out to be gone
    /// before the request left the edge (see [`Upstream::send`]), waits for
    /// the agent to be back (as [`Self::back_online`]) and sends it there.
    /// Returns the upstream that answered (or failed last).
    async fn send_or_wait(
        &self,
        mut upstream: Arc<Upstream>,
        mut req: Outgoing,
        peer: SocketAddr,
        arrived: tokio::time::Instant,
    ) -> (
        Arc<Upstream>,
        Result<(Response<OriginBody>, Waiting), UpstreamError>,
    ) {
        loop {
            match upstream.send(req, peer).await {
                Ok(answered) => return (upstream, Ok(answered)),
                Err(SendFailed {
                    error,
                    again: Some(again),
                }) => match Box::pin(self.back_online(upstream.name(), arrived, Some(&upstream)))
                    .await
                {
                    Some(back) => (upstream, req) = (back, again),
                    None => return (upstream, Err(error)),
                },
                Err(SendFailed { error, .. }) => return (upstream, Err(error)),
            }
        }
    }

    /// How a request body is read ahead (see [`crate::proxy::read_ahead`]).
    pub fn body_rules(&self) -> BodyRules {
        BodyRules {
            min_rate: self.limits.min_body_rate,
            stall: self.waits.response,
            cap: self.limits.max_body_bytes,
        }
    }

    /// A request's way: routed, rewritten, its body read ahead, sent, and
    /// its answer made the visitor's.
    async fn forward(
        &self,
        mut req: Request<VisitorBody>,
        visitor: &Visitor,
        drain: &DrainGuard,
        arrived: tokio::time::Instant,
        id: &RequestId,
        traced: &mut Traced,
    ) -> Result<Response<Answer>, EdgeError> {
        if let Err(refused) = self.limits.check(&req) {
            if req.version() == Version::HTTP_2 && !req.body().is_end_stream() {
                linger(req);
            }
            return Err(refused);
        }
        if id.ours() {
            access_log::set(&mut req, id);
        }
        let (name, host, upstream) = match self.route(&req, visitor, arrived).await? {
            Routed::To(name, host, upstream) => (name, host, upstream),
            Routed::Answered(response) => return Ok(*response),
        };
        if traced.wants_preview {
            traced.preview = Some(name.to_string());
        }
        if let Some(protection) = upstream.protection()
            && let share::Admitted::Redirect(to) = protection.admit(&mut req, &name)?
        {
            return Ok(to.map(Either::Right));
        }

        let upgrade = requested_upgrade(&req);
        let visitor_upgrade = match upgrade {
            Some(_) => req.extensions_mut().remove::<OnUpgrade>(),
            None => None,
        };
        rewrite_request(
            &mut req,
            &host,
            visitor.peer,
            visitor.scheme,
            upgrade.clone(),
        );
        let (parts, incoming) = req.into_parts();
        let (mut body, mut body_watch) =
            RequestBody::new(incoming, self.limits.max_body_bytes, upstream.bandwidth());
        traced.upload = Some(body_watch.clone());
        let rules = self.body_rules();
        let limit = rules.stall;
        let expects = parts.headers.contains_key(header::EXPECT);
        let length = body.size_hint().exact();
        if rules.ahead(length, expects, upgrade.is_some()).is_some()
            && let Some(refused) =
                Box::pin(read_ahead::in_proxy(&mut body, &mut body_watch, &rules)).await
        {
            if parts.version == Version::HTTP_2 {
                linger(body);
            }
            return Err(refused);
        }
        let req = OriginRequest::new(Request::from_parts(parts, body));

        // The origin's time to answer runs from the end of the upload, so an
        // upload of any length passes; an upload that stops moving for as
        // long (the visitor stalls, or the origin stops reading) does not.
        // Pinned where it is made: `tokio::pin!` moved it into a second
        // place, and every request's future held room for it twice (6.0 KB
        // in all, 4.5 KB now; hyper's box copies all of it per request).
        let mut sent =
            std::pin::pin!(self.send_or_wait(upstream.clone(), req, visitor.peer, arrived));
        let answered = tokio::select! {
            answered = &mut sent => Some(answered),
            outcome = body_watch.ended_or_stalled(limit, self.limits.min_body_rate) => match outcome {
                BodyOutcome::Ended => tokio::time::timeout(limit, &mut sent).await.ok(),
                BodyOutcome::Stalled => None,
                BodyOutcome::TooSlow => return Err(rules.too_slow()),
            },
        };
        let (upstream, answered) = match answered {
            Some((upstream, answered)) => (upstream, Some(answered)),
            None => (upstream, None),
        };
        let (response, waiting) = match answered {
            None => {
                return Err(EdgeError::Timeout(name, upstream.port(), limit.as_secs()));
            }
            Some(Err(_)) if body_watch.too_large() => {
                return Err(EdgeError::BodyTooLarge(
                    self.limits.max_body_bytes.unwrap_or_default(),
                ));
            }
            Some(Err(_)) if body_watch.failed() => return Err(EdgeError::BadRequestBody),
            Some(Err(_)) if self.closing_agents.load(Ordering::Acquire) => {
                return Err(EdgeError::Stopping);
            }
            Some(Err(err)) => return Err(upstream_error(&upstream, err)),
            Some(Ok(response)) => response,
        };
        let upgrade = visitor_upgrade.map(|visitor| Upgrade {
            visitor,
            bandwidth: upstream.bandwidth(),
            drain: drain.clone(),
            counts: self.counts.clone(),
        });
        self.respond(&name, response, waiting, upgrade)
    }

    /// The preview a request (within the head limits) is for, past the
    /// rates: its name, the host it named, its upstream, once its agent is
    /// online; or the edge's own answer (health, a redirect to HTTPS).
    async fn route<B>(
        &self,
        req: &Request<B>,
        visitor: &Visitor,
        arrived: tokio::time::Instant,
    ) -> Result<Routed, EdgeError> {
        let peer = visitor.peer;
        self.rates.from_address(peer.ip()).map_err(|exceeded| {
            EdgeError::RateLimited(format!("from {}", peer.ip().to_canonical()), exceeded)
        })?;
        let (name, host) = match host::resolve(req, &self.domain) {
            Ok(Target::Preview(name, host)) => (name, host),
            _ if req.uri().path() == health::PATH => {
                return Ok(Routed::Answered(Box::new(
                    self.own.health.response().map(Either::Right),
                )));
            }
            Ok(Target::OurDomain | Target::NoHost) => return Err(EdgeError::NotAPreview),
            Err(HostError::Bad(why)) => return Err(EdgeError::BadHost(why)),
            Err(HostError::Misdirected(why)) => return Err(EdgeError::Misdirected(why)),
        };
        if let (Scheme::Http, Some(template)) = (visitor.scheme, &self.own.redirect_to) {
            let redirect = redirect_to_https(template, &name, req.uri());
            return Ok(Routed::Answered(Box::new(redirect.map(Either::Right))));
        }
        self.rates
            .for_preview(&name)
            .map_err(|exceeded| EdgeError::RateLimited(format!("for preview {name}"), exceeded))?;
        let upstream = match self.routes.lookup(&name) {
            Lookup::Live(upstream) => upstream,
            // Boxed, as the other ways not every request takes (waiting for
            // an agent, reading a body ahead, opening a connection): their
            // state would take room in every request's future, which hyper
            // copies whole; one allocation on those ways instead.
            Lookup::Offline => match Box::pin(self.back_online(&name, arrived, None)).await {
                Some(upstream) => upstream,
                None if self.closing_agents.load(Ordering::Acquire) => {
                    return Err(EdgeError::Stopping);
                }
                // Its time to live ran out while the visitor waited.
                None if matches!(self.routes.lookup(&name), Lookup::Ended) => {
                    return Err(EdgeError::Ended(name));
                }
                // Served before the edge restarted, its agent still on its
                // way back: a 503 to retry.
                None if self.routes.is_coming_back(&name) => {
                    return Err(EdgeError::NotBackYet(name));
                }
                None => return Err(EdgeError::AgentOffline(name)),
            },
            // A name served before the edge restarted, whose agent is not
            // back yet (a cluster's edge: one edge alone holds it offline).
            Lookup::Unknown if self.routes.is_coming_back(&name) => {
                match Box::pin(self.first_claimed(&name, arrived)).await {
                    Some(upstream) => upstream,
                    // Its agent may still be on its way: not a 404 (which
                    // a link preview may keep), a 503 to retry.
                    None if self.routes.is_coming_back(&name) => {
                        return Err(EdgeError::NotBackYet(name));
                    }
                    None if self.closing_agents.load(Ordering::Acquire) => {
                        return Err(EdgeError::Stopping);
                    }
                    None => match self.routes.lookup(&name) {
                        Lookup::Offline => return Err(EdgeError::AgentOffline(name)),
                        Lookup::Ended => return Err(EdgeError::Ended(name)),
                        _ => return Err(EdgeError::UnknownName(name)),
                    },
                }
            }
            Lookup::Unknown => return Err(EdgeError::UnknownName(name)),
            Lookup::Ended => return Err(EdgeError::Ended(name)),
        };
        Ok(Routed::To(name, host, upstream))
    }

    /// The origin's answer, made the visitor's: its headers rewritten, and
    /// a switch of protocols (which `upgrade` must have asked for) spliced
    /// through.
    fn respond(
        &self,
        name: &PreviewName,
        mut response: Response<OriginBody>,
        waiting: Waiting,
        upgrade: Option<Upgrade>,
    ) -> Result<Response<Answer>, EdgeError> {
        // The origin's HTTP version is its own; the visitor's connection has
        // its own version, which hyper writes.
        *response.version_mut() = Version::default();
        drop_zone_cookies(response.headers_mut(), name, &self.domain);
        // The origin's own alternative services are its machine's, which
        // visitors cannot reach; the edge names its own.
        response.headers_mut().remove(header::ALT_SVC);
        let switching = response.status() == StatusCode::SWITCHING_PROTOCOLS;
        let accepted_upgrade = response.headers().get(header::UPGRADE).cloned();
        strip_hop_by_hop(response.headers_mut());
        if response.status() == StatusCode::NO_CONTENT {
            // A 204 has no content, whatever its origin's length says
            // (RFC 9110 8.6): passed on over HTTP/2, a length with an
            // empty stream is a protocol error to the visitor.
            response.headers_mut().remove(header::CONTENT_LENGTH);
        }
        if switching {
            let (Some(upgrade), Some(protocol)) = (upgrade, accepted_upgrade) else {
                return Err(EdgeError::BadGateway(
                    name.clone(),
                    "the server switched protocols without being asked".into(),
                ));
            };
            // The connection is the upgrade's now, never the pool's.
            let Some(origin) = response.body_mut().switched() else {
                return Err(EdgeError::BadGateway(
                    name.clone(),
                    "the server switched protocols before it read the request".into(),
                ));
            };
            tokio::spawn(splice_upgraded(origin, upgrade));
            let h = response.headers_mut();
            h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            h.insert(header::UPGRADE, protocol);
        }
        Ok(response.map(|body| Either::Left(ResponseBody::new(body, waiting))))
    }
}

/// Where [`Proxy::route`] sends a request.
enum Routed {
    /// To a preview: its name, the host the request named, its upstream.
    To(PreviewName, String, Arc<Upstream>),
    /// Nowhere: the edge answers it.
    Answered(Box<Response<Answer>>),
}

/// A visitor's request asking to switch protocols, as the proxy keeps it
/// until the origin answers.
struct Upgrade {
    visitor: OnUpgrade,
    /// The account's bandwidth bucket, for the spliced bytes.
    bandwidth: Option<Arc<Bandwidth>>,
    drain: DrainGuard,
    /// Where the spliced bytes are counted.
    counts: Counts,
}

/// 308 to the same path and query on the preview's HTTPS URL: a POST
/// stays a POST.
fn redirect_to_https(template: &str, name: &PreviewName, uri: &Uri) -> Response<Full<Bytes>> {
    let base = template.replace("{name}", name.as_str());
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let location = format!("{}{path}", base.trim_end_matches('/'));
    let mut response = Response::new(Full::new(Bytes::from(format!(
        "this preview is served over HTTPS: {location}\n"
    ))));
    *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, value);
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn upstream_error(upstream: &Upstream, err: UpstreamError) -> EdgeError {
    let name = upstream.name().clone();
    if upstream.agent_gone() {
        return EdgeError::AgentOffline(name);
    }
    match err {
        UpstreamError::AgentOffline => EdgeError::AgentOffline(name),
        UpstreamError::NotListening(port) => EdgeError::NotListening(name, port),
        UpstreamError::ConnectTimeout(secs) => EdgeError::AgentNotAnswering(name, secs),
        UpstreamError::AccountBusy(max) => EdgeError::AccountBusy(name, max),
        UpstreamError::Origin(e) => match e.malformed() {
            Some(why) => EdgeError::BadGateway(
                name,
                format!(
                    "the server on port {} sent a malformed response: {why}",
                    upstream.port()
                ),
            ),
            None => EdgeError::BadGateway(
                name,
                format!("the server on port {} failed: {e}", upstream.port()),
            ),
        },
        other => EdgeError::BadGateway(name, other.to_string()),
    }
}

/// Keeps an HTTP/2 request's body open a moment after the edge answered
/// without reading it: dropped at once, h2 resets the stream with CANCEL,
/// which clients such as curl report instead of the answer; meanwhile they
/// read the answer and end the upload themselves.
fn linger<B: Send + 'static>(body: B) {
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(body);
    });
}

/// Copies bytes both ways between an upgraded visitor connection and the
/// upgraded upstream connection until either side ends. A failure on
/// either side cuts the other off too (a reset, not a clean end). Both
/// ways go through the account's bandwidth bucket, when capped.
/// A shutdown waits for it (up to the grace period) through `_drain`.
async fn splice_upgraded(origin: (TunnelStream, Bytes), upgrade: Upgrade) {
    let Upgrade {
        visitor,
        bandwidth,
        drain: _drain,
        counts,
    } = upgrade;
    let (tunnel, early) = origin;
    let mut tunnel = ThrottledIo::new(tunnel, bandwidth);
    let Some(Upgraded {
        io,
        early: from_visitor,
    }) = visitor.wait().await
    else {
        debug!("the upgrade did not complete");
        tunnel.get_mut().abort();
        return;
    };
    let mut visitor = CountedIo { inner: io, counts };
    // What the visitor sent after its request is the new protocol's.
    if !from_visitor.is_empty() {
        visitor.counts.moved(from_visitor.len() as u64, 0);
        if tokio::io::AsyncWriteExt::write_all(&mut tunnel, &from_visitor)
            .await
            .is_err()
        {
            tunnel.get_mut().abort();
            return;
        }
    }
    tunnel.charge_read(early.len());
    if !early.is_empty()
        && tokio::io::AsyncWriteExt::write_all(&mut visitor, &early)
            .await
            .is_err()
    {
        tunnel.get_mut().abort();
        return;
    }
    if let Err(err) = tokio::io::copy_bidirectional(&mut visitor, &mut tunnel).await {
        debug!(%err, "upgraded connection cut off");
        tunnel.get_mut().abort();
    }
}

/// An upgraded visitor connection whose bytes count as they move, each
/// way (a WebSocket that lives for hours shows in the metrics meanwhile,
/// and one cut off counts what it moved).
struct CountedIo<T> {
    inner: T,
    counts: Counts,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CountedIo<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.counts.moved(read as u64, 0);
        }
        polled
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for CountedIo<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &polled {
            self.counts.moved(0, *n as u64);
        }
        polled
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The `Alt-Svc` value advertising HTTP/3 on `port`.
pub fn alt_svc(port: u16) -> http::HeaderValue {
    // A day, as Cloudflare's; a visitor's client forgets it sooner when
    // HTTP/3 fails there.
    http::HeaderValue::from_str(&format!("h3=\":{port}\"; ma=86400"))
        .unwrap_or_else(|_| http::HeaderValue::from_static("clear"))
}
