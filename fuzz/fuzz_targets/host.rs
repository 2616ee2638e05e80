//! The edge's host routing on arbitrary Host headers and request targets:
//! `calvin_edge::proxy::host::preview_name` and `calvin_edge::proxy::host::resolve`.
//!
//! Input layout (so seeds stay readable): one flags byte, then the request
//! target, a NUL, the Host header, and optionally a NUL and a second Host
//! header. Flags: bits 0-1 pick the version (0: HTTP/1.1, 1: HTTP/1.0,
//! 2: HTTP/2, 3: HTTP/0.9); bit 2 set drops the Host header. Inputs that
//! `http` refuses to build into a request are skipped.

#![no_main]

use calvin_edge::proxy::host::{HostError, Target, preview_name, request_host, resolve};
use calvin_proto::PreviewName;
use http::header::HOST;
use http::{HeaderValue, Request, Uri, Version};
use libfuzzer_sys::fuzz_target;

const DOMAIN: &str = "preview.localhost";

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(3, |&b| b == 0);
    let uri = parts.next().unwrap_or_default();
    let host = parts.next();
    let second_host = parts.next();

    // `preview_name` on its own takes any string, not only what a header holds.
    for bytes in [Some(uri), host, second_host].into_iter().flatten() {
        if let Ok(s) = std::str::from_utf8(bytes) {
            check_preview_name(s);
        }
    }

    let version = match flags & 3 {
        0 => Version::HTTP_11,
        1 => Version::HTTP_10,
        2 => Version::HTTP_2,
        _ => Version::HTTP_09,
    };
    let Ok(uri) = Uri::try_from(uri) else {
        return;
    };
    let mut req = Request::builder().version(version).uri(uri);
    let mut host_headers = 0;
    if flags & 4 == 0 {
        for h in [host, second_host].into_iter().flatten() {
            let Ok(value) = HeaderValue::from_bytes(h) else {
                return;
            };
            req = req.header(HOST, value);
            host_headers += 1;
        }
    }
    let Ok(req) = req.body(()) else {
        return;
    };

    match resolve(&req, DOMAIN) {
        Ok(Target::Preview(name, to_origin)) => {
            assert_canonical(&name);
            let prefix = format!("{name}.{DOMAIN}");
            let Some(port) = to_origin.strip_prefix(&prefix) else {
                panic!("{to_origin:?} does not start with {prefix:?}");
            };
            // All that follows the name is the visitor's port, if any.
            if let Some(digits) = port.strip_prefix(':') {
                assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{to_origin:?}");
            } else {
                assert_eq!(port, "", "{to_origin:?}");
            }
            // The host the request names, as `request_host` sees it, names
            // the same preview.
            let seen = request_host(&req).expect("a preview came from some host");
            assert_eq!(preview_name(seen, DOMAIN).as_ref(), Some(&name), "{seen:?}");
            assert!(host_headers <= 1);
        }
        Ok(Target::OurDomain) => {
            let seen = request_host(&req).expect("our domain came from some host");
            assert_eq!(preview_name(seen, DOMAIN), None, "{seen:?}");
            assert!(host_headers <= 1);
        }
        Ok(Target::NoHost) => {
            assert_eq!(req.version(), Version::HTTP_10);
            assert!(req.uri().authority().is_none());
            assert_eq!(host_headers, 0);
        }
        Err(HostError::Misdirected(_)) => {
            let seen = request_host(&req).expect("a misdirected host came from some host");
            assert_eq!(preview_name(seen, DOMAIN), None, "{seen:?}");
        }
        Err(HostError::Bad(_)) => {}
    }
});

fn check_preview_name(host: &str) {
    if let Some(name) = preview_name(host, DOMAIN) {
        assert_canonical(&name);
        // The label is the host's first label, case-folded.
        let label = host.split('.').next().unwrap_or_default();
        assert!(
            label.eq_ignore_ascii_case(name.as_str()),
            "{host:?} gave {name:?}"
        );
        assert!(
            host.to_ascii_lowercase()
                .starts_with(&format!("{name}.{DOMAIN}")),
            "{host:?} gave {name:?}"
        );
    }
}

fn assert_canonical(name: &PreviewName) {
    assert_eq!(PreviewName::parse(name.as_str()).as_ref(), Ok(name));
}
