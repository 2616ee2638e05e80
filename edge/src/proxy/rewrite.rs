//! How a visitor's request becomes the one the origin gets, and what of
//! the origin's answer the visitor gets: HTTP/1.1 in origin form, the
//! visitor's Host, no hop-by-hop headers, forwarding headers that the edge
//! alone sets, upgrades kept, and no cookie scoped beyond the preview.

use crate::h1_framing::{connection_tokens, tokens};
use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};

use calvin_proto::PreviewName;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Request, Uri, Version};
use tracing::debug;

/// The scheme a visitor used, for `X-Forwarded-Proto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Drops `Set-Cookie` headers whose `Domain` is not the preview's own host:
/// one preview must not set cookies that every other preview of the zone
/// (another account's, too) would receive. This covers cookies set by the
/// server; a page's script can still try `document.cookie`, which only
/// listing the zone on the Public Suffix List stops.
pub(crate) fn drop_zone_cookies(headers: &mut HeaderMap, name: &PreviewName, domain: &str) {
    if !headers.contains_key(header::SET_COOKIE) {
        return;
    }
    let own_host = format!("{name}.{domain}");
    let cookies: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .cloned()
        .collect();
    headers.remove(header::SET_COOKIE);
    for cookie in cookies {
        if cookie_stays_on(&cookie, &own_host) {
            headers.append(header::SET_COOKIE, cookie);
        } else {
            debug!(%name, "dropped a Set-Cookie scoped beyond the preview");
        }
    }
}

/// Whether a Set-Cookie value stays on `host`: no `Domain` attribute, or
/// exactly one naming `host`. Browsers use the last of several (RFC 6265
/// 5.3); a value with two is dropped rather than guessed at, and so is an
/// unreadable one.
fn cookie_stays_on(cookie: &HeaderValue, host: &str) -> bool {
    let Ok(text) = cookie.to_str() else {
        return false;
    };
    let mut domains = text.split(';').skip(1).filter_map(|attr| {
        let (key, value) = attr.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("domain")
            .then(|| value.trim().trim_start_matches('.'))
    });
    match (domains.next(), domains.next()) {
        (None, _) => true,
        (Some(only), None) => only.eq_ignore_ascii_case(host),
        (Some(_), Some(_)) => false,
    }
}

/// The protocol an HTTP/1.1 request asks to upgrade to, if it asks.
pub(crate) fn requested_upgrade<B>(req: &Request<B>) -> Option<HeaderValue> {
    if req.version() != Version::HTTP_11 {
        return None;
    }
    let asks = connection_tokens(req.headers()).any(|t| t.eq_ignore_ascii_case("upgrade"));
    asks.then(|| req.headers().get(header::UPGRADE).cloned())
        .flatten()
}

/// Makes a visitor's request into the one the origin gets: HTTP/1.1 in
/// origin form, the visitor's Host, no hop-by-hop headers, and forwarding
/// headers that the edge alone sets.
pub(crate) fn rewrite_request<B>(
    req: &mut Request<B>,
    host: &str,
    peer: SocketAddr,
    scheme: Scheme,
    upgrade: Option<HeaderValue>,
) {
    *req.version_mut() = Version::HTTP_11;
    // An HTTP/1.1 request target is in origin form already (most are);
    // HTTP/2's and absolute forms are made so.
    let uri = req.uri();
    if uri.scheme().is_some() || uri.authority().is_some() || uri.path_and_query().is_none() {
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        *req.uri_mut() = Uri::try_from(path).unwrap_or_else(|_| Uri::from_static("/"));
    }

    let h = req.headers_mut();
    strip_hop_by_hop(h);
    remove_any(h, &FORWARDING);
    let ip = canonical_ip(peer.ip());
    let forwarded_for = header_value(format_args!("{ip}"));
    let forwarded = match ip {
        IpAddr::V4(v4) => header_value(format_args!(
            "for={v4};host=\"{host}\";proto={}",
            scheme.as_str()
        )),
        IpAddr::V6(v6) => header_value(format_args!(
            "for=\"[{v6}]\";host=\"{host}\";proto={}",
            scheme.as_str()
        )),
    };
    let proto = HeaderValue::from_static(scheme.as_str());
    // The host is a parsed one, the rest are written from an address: all
    // valid values.
    let host = HeaderValue::from_str(host).ok();
    let set = [
        (header::HOST, host.clone()),
        (X_FORWARDED_FOR, forwarded_for),
        (X_FORWARDED_PROTO, Some(proto)),
        (X_FORWARDED_HOST, host),
        (header::FORWARDED, forwarded),
    ];
    for (name, value) in set {
        if let Some(value) = value {
            h.insert(name, value);
        }
    }
    if let Some(protocol) = upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, protocol);
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that say where a request came from: only the edge sets them.
const FORWARDING: [HeaderName; 6] = [
    X_FORWARDED_FOR,
    X_FORWARDED_PROTO,
    X_FORWARDED_HOST,
    HeaderName::from_static("x-forwarded-port"),
    HeaderName::from_static("x-real-ip"),
    header::FORWARDED,
];

/// Headers that belong to one connection, not to the message (RFC 9110
/// §7.6.1), besides those the Connection header names.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The fields a Connection header names go by name as written (no
    // allocation, unlike a `HeaderName` made of each); its values are
    // cloned first, which counts a reference to hyper's read buffer. A
    // second Connection header is rare: the Vec of the rest allocates
    // only then.
    let mut values = headers.get_all(header::CONNECTION).iter();
    let first = values.next().cloned();
    let rest: Vec<HeaderValue> = values.cloned().collect();
    for value in first.iter().chain(&rest) {
        for token in tokens(value) {
            // A token that is no field name names nothing to remove.
            headers.remove(token);
        }
    }
    remove_any(headers, &HOP_BY_HOP);
}

/// Removes the fields named in `names` from `headers`. A message holds a
/// handful of fields: one pass over them, comparing names (an enum compare
/// for the standard ones), costs less than hashing every name in `names`
/// for a lookup (perf: header rewriting was ~6% of the edge's CPU on 1 KiB
/// GETs). A message holds none of them, or one (`Connection`): a pass per
/// field found, rather than a list of them to allocate.
fn remove_any(headers: &mut HeaderMap, names: &[HeaderName]) {
    while let Some(name) = headers.keys().find(|name| names.contains(name)).cloned() {
        headers.remove(&name);
    }
}

/// A header value formatted on the stack, then allocated once at its
/// length: formatting into a `String` grew it a few times, then handed
/// `Bytes` a buffer with room to spare, one more allocation (perf:
/// allocations were ~6% of the edge's CPU on 1 KiB GETs, ~30 a request).
/// A value longer than the stack's line (a long host) takes the `String`
/// way. `None` for a value that is not a valid header value.
fn header_value(args: std::fmt::Arguments<'_>) -> Option<HeaderValue> {
    let mut line = StackLine {
        bytes: [0; 192],
        len: 0,
    };
    if line.write_fmt(args).is_ok() {
        return HeaderValue::from_bytes(&line.bytes[..line.len]).ok();
    }
    HeaderValue::try_from(args.to_string()).ok()
}

struct StackLine {
    bytes: [u8; 192],
    len: usize,
}

impl Write for StackLine {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let room = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().uri("http://web.preview.localhost/a?b=1");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn visitor_forwarding_headers_are_replaced() {
        let mut req = request(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "gopher"),
            ("forwarded", "for=6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
        ]);
        let peer: SocketAddr = "203.0.113.7:5555".parse().unwrap();
        rewrite_request(
            &mut req,
            "web.preview.localhost:4443",
            peer,
            Scheme::Https,
            None,
        );
        let h = req.headers();
        assert_eq!(h["x-forwarded-for"], "203.0.113.7");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-host"], "web.preview.localhost:4443");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(
            h["forwarded"],
            "for=203.0.113.7;host=\"web.preview.localhost:4443\";proto=https"
        );
        assert!(h.get("x-real-ip").is_none());
        assert_eq!(h["host"], "web.preview.localhost:4443");
        assert_eq!(req.uri(), "/a?b=1");
        assert_eq!(req.version(), Version::HTTP_11);
    }

    #[test]
    fn long_hosts_keep_their_forwarded_header() {
        // `for=1.2.3.4;host="";proto=http` is 30 bytes: a host of 162 fills
        // the 192-byte stack line exactly, one more takes the String way.
        for len in [161, 162, 163, 253] {
            let host = format!("{}.x", "a".repeat(len - 2));
            let mut req = request(&[]);
            rewrite_request(
                &mut req,
                &host,
                "1.2.3.4:1".parse().unwrap(),
                Scheme::Http,
                None,
            );
            let want = format!("for=1.2.3.4;host=\"{host}\";proto=http");
            assert_eq!(req.headers()["forwarded"], want.as_str(), "host of {len}");
            assert_eq!(req.headers().get_all("forwarded").iter().count(), 1);
            assert_eq!(req.headers()["x-forwarded-host"], host.as_str());
        }
        for len in [192, 193] {
            let value = "a".repeat(len);
            let made = header_value(format_args!("{value}")).unwrap();
            assert_eq!(made, value.as_str());
        }
        assert!(header_value(format_args!("a\nb")).is_none());
    }

    #[test]
    fn ipv6_and_mapped_peers() {
        let mut req = request(&[]);
        rewrite_request(
            &mut req,
            "h",
            "[2001:db8::1]:1".parse().unwrap(),
            Scheme::Http,
            None,
        );
        assert_eq!(req.headers()["x-forwarded-for"], "2001:db8::1");
        assert_eq!(
            req.headers()["forwarded"],
            "for=\"[2001:db8::1]\";host=\"h\";proto=http"
        );
        let mut req = request(&[]);
        rewrite_request(
            &mut req,
            "h",
            "[::ffff:10.0.0.1]:1".parse().unwrap(),
            Scheme::Http,
            None,
        );
        assert_eq!(req.headers()["x-forwarded-for"], "10.0.0.1");
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_go() {
        let mut req = request(&[
            ("connection", "keep-alive, x-secret, X-Forwarded-For"),
            // Every Connection header counts; a token that is no field
            // name, or empty, names nothing.
            ("connection", "X-Two, not a name, "),
            ("keep-alive", "timeout=5"),
            ("keep-alive", "max=9"),
            ("x-secret", "1"),
            ("x-two", "2"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("proxy-authorization", "Basic eA=="),
            ("x-kept", "yes"),
        ]);
        let peer: SocketAddr = "192.0.2.1:1".parse().unwrap();
        rewrite_request(&mut req, "web.preview.localhost", peer, Scheme::Http, None);
        let h = req.headers();
        for gone in [
            "connection",
            "keep-alive",
            "x-secret",
            "x-two",
            "te",
            "transfer-encoding",
            "proxy-authorization",
        ] {
            assert!(h.get(gone).is_none(), "{gone} was kept");
        }
        assert_eq!(h["x-kept"], "yes");
        // Naming X-Forwarded-For in Connection cannot remove what the edge sets.
        assert_eq!(h["x-forwarded-for"], "192.0.2.1");
    }

    #[test]
    fn upgrades_keep_their_headers() {
        let mut req = request(&[("connection", "Upgrade"), ("upgrade", "websocket")]);
        *req.version_mut() = Version::HTTP_11;
        let upgrade = requested_upgrade(&req);
        assert_eq!(upgrade.as_ref().unwrap(), "websocket");
        rewrite_request(
            &mut req,
            "h",
            "192.0.2.1:1".parse().unwrap(),
            Scheme::Http,
            upgrade,
        );
        assert_eq!(req.headers()["connection"], "upgrade");
        assert_eq!(req.headers()["upgrade"], "websocket");

        let plain = request(&[("upgrade", "websocket")]);
        assert!(
            requested_upgrade(&plain).is_none(),
            "Upgrade without Connection: upgrade"
        );
    }
}
