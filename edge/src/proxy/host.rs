//! From a request's Host (or `:authority`) to the preview name it asks for.

use calvin_proto::PreviewName;
use http::Request;
use http::header::HOST;

/// Where a request's host points.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// A preview, and the host to hand its origin: `<name>.<domain>` with
    /// the visitor's port, however the visitor spelled it.
    Preview(PreviewName, String),
    /// The bare domain, or a name under it that is not a preview label.
    OurDomain,
    /// No host, on a request that may lack one (HTTP/1.0).
    NoHost,
}

/// Why a request's host is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum HostError {
    /// Malformed: 400.
    Bad(&'static str),
    /// Not this edge's to answer (a foreign host): 421.
    Misdirected(String),
}

/// Resolves a request's host: one Host header at most, agreeing with the
/// request target's authority when both are given, plain ASCII without
/// userinfo.
///
/// A TLS connection's server name is not compared: browsers reuse one
/// HTTP/2 connection for every name the wildcard certificate covers, and
/// each request names its own preview.
pub fn resolve<B>(req: &Request<B>, domain: &str) -> Result<Target, HostError> {
    let mut hosts = req.headers().get_all(HOST).iter();
    let header = hosts.next();
    if hosts.next().is_some() {
        return Err(HostError::Bad("the request has more than one Host header"));
    }
    let header = header
        .map(|v| {
            v.to_str()
                .map_err(|_| HostError::Bad("the Host header is not plain ASCII"))
        })
        .transpose()?;
    let authority = req.uri().authority().map(|a| a.as_str());
    let host = match (authority, header) {
        (Some(a), Some(h)) if !same_host(a, h) => {
            return Err(HostError::Bad(
                "the Host header and the request target name different hosts",
            ));
        }
        (Some(a), _) => a,
        (None, Some(h)) => h,
        (None, None) if req.version() == http::Version::HTTP_10 => return Ok(Target::NoHost),
        (None, None) => return Err(HostError::Bad("the request has no Host header")),
    };
    if host.contains('@') {
        return Err(HostError::Bad("the host carries userinfo"));
    }
    if !host.starts_with('[') && strip_port(host).is_none() {
        return Err(HostError::Bad(
            "the host's port is not a number from 1 to 65535",
        ));
    }
    if let Some(name) = preview_name(host, domain) {
        let port = strip_port(host)
            .and_then(|h| host.strip_prefix(h))
            .unwrap_or_default();
        let to_origin = format!("{name}.{domain}{port}");
        return Ok(Target::Preview(name, to_origin));
    }
    let bare = canonical(host);
    if bare.eq_ignore_ascii_case(domain)
        || bare.to_ascii_lowercase().ends_with(&format!(".{domain}"))
    {
        return Ok(Target::OurDomain);
    }
    Err(HostError::Misdirected(format!("{bare} is not served here")))
}

/// A host without its port and trailing dot.
fn canonical(host: &str) -> String {
    let host = strip_port(host).unwrap_or(host);
    host.strip_suffix('.').unwrap_or(host).to_owned()
}

fn same_host(a: &str, b: &str) -> bool {
    canonical(a).eq_ignore_ascii_case(&canonical(b))
}

/// The host a request is for, as the visitor sent it: the URI's authority
/// for HTTP/2 and absolute-form HTTP/1 requests, else the Host header.
pub fn request_host<B>(req: &Request<B>) -> Option<&str> {
    if let Some(authority) = req.uri().authority() {
        return Some(authority.as_str());
    }
    req.headers().get(HOST)?.to_str().ok()
}

/// The preview a host names: exactly `<label>.<domain>`, compared without
/// case, port and trailing dot. `domain` must be lower-case without a
/// trailing dot. Anything else (the bare domain, a deeper name, a foreign
/// host, userinfo) is `None`.
pub fn preview_name(host: &str, domain: &str) -> Option<PreviewName> {
    let host = strip_port(host)?;
    let host = host.strip_suffix('.').unwrap_or(host);
    let label_len = host.len().checked_sub(domain.len() + 1)?;
    let (label, rest) = host.split_at_checked(label_len)?;
    let suffix = rest.strip_prefix('.')?;
    if !suffix.eq_ignore_ascii_case(domain) || label.contains('.') {
        return None;
    }
    PreviewName::parse(label).ok()
}

/// `host[:port]` without the port; `None` for a malformed port or an IPv6
/// literal (never a preview).
fn strip_port(authority: &str) -> Option<&str> {
    if authority.starts_with('[') || authority.contains('@') {
        return None;
    }
    match authority.rsplit_once(':') {
        // An empty port is allowed (RFC 3986); a present one is 1..=65535.
        Some((host, "")) => Some(host),
        Some((host, port))
            if port.len() <= 5
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok_and(|p| p > 0) =>
        {
            Some(host)
        }
        Some(_) => None,
        None => Some(authority),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "preview.localhost";

    fn name(host: &str) -> Option<String> {
        preview_name(host, D).map(|n| n.to_string())
    }

    #[test]
    fn canonical_label_under_the_domain() {
        assert_eq!(name("web.preview.localhost").as_deref(), Some("web"));
        assert_eq!(name("WEB.Preview.LocalHost").as_deref(), Some("web"));
        assert_eq!(name("web.preview.localhost:4443").as_deref(), Some("web"));
        assert_eq!(name("web.preview.localhost.").as_deref(), Some("web"));
        assert_eq!(name("web.preview.localhost.:80").as_deref(), Some("web"));
        assert_eq!(name("a-1.preview.localhost").as_deref(), Some("a-1"));
    }

    #[test]
    fn everything_else_is_not_a_preview() {
        for host in [
            "preview.localhost",
            ".preview.localhost",
            "a.b.preview.localhost",
            "web.preview.localhost.evil.com",
            "webpreview.localhost",
            "web.xpreview.localhost",
            "localhost",
            "example.com",
            "",
            "-bad.preview.localhost",
            "we_b.preview.localhost",
            "user@web.preview.localhost",
            "web.preview.localhost:http",
            "web.preview.localhost:99999999",
            "web.preview.localhost:65536",
            "web.preview.localhost:0",
            "[::1]:4443",
            "127.0.0.1:4443",
        ] {
            assert_eq!(name(host), None, "{host}");
        }
    }

    #[test]
    fn authority_wins_over_host_header() {
        let req = Request::builder()
            .uri("http://a.preview.localhost/x")
            .header(HOST, "b.preview.localhost")
            .body(())
            .unwrap();
        assert_eq!(request_host(&req), Some("a.preview.localhost"));
        let req = Request::builder()
            .uri("/x")
            .header(HOST, "b.preview.localhost")
            .body(())
            .unwrap();
        assert_eq!(request_host(&req), Some("b.preview.localhost"));
        let req = Request::builder().uri("/x").body(()).unwrap();
        assert_eq!(request_host(&req), None);
    }
}
