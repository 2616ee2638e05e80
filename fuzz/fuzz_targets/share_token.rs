//! A protected preview's share-token check (`calvin_edge::share`) on
//! arbitrary request targets, `Authorization` and `Cookie` values: it must
//! not panic; a request it lets through carries no `calvin_share`
//! parameter and no share cookie on to the origin; only the token minted
//! for the preview opens it (a forged one never does), and a redirect
//! names a path of this host without the parameter.
//!
//! Input layout: one flags byte, then the request target, a NUL, the
//! `Authorization` value, a NUL, the `Cookie` value. Flag bit 0 adds
//! `Sec-Fetch-Mode: navigate`; bit 1 puts the genuine token in the query
//! after the target's own parameters; bit 2 sends it as the cookie.

#![no_main]

use std::sync::Arc;

use calvin_edge::share::{Admitted, COOKIE, Protection, QUERY_PARAM, ShareKey};
use calvin_proto::{PreviewName, ShareSalt};
use http::header::{AUTHORIZATION, COOKIE as COOKIE_HEADER, LOCATION};
use http::{HeaderValue, Request, Uri};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(3, |&b| b == 0);
    let target = parts.next().unwrap_or_default();
    let authorization = parts.next();
    let cookie = parts.next();

    let name = PreviewName::parse("web").expect("a name");
    let salt = ShareSalt::try_from("s".repeat(22)).expect("a salt");
    let key = Arc::new(ShareKey::new(&[7; 32]));
    // One token for every run (a fixed expiry, far ahead): what the fuzzer
    // learns of it in one run is the token of the next.
    let token = key.mint(&name, &salt, 4_000_000_000);
    let protection = Protection::new(key, salt);

    let Ok(target) = std::str::from_utf8(target) else {
        return;
    };
    let mut target = target.to_owned();
    if flags & 2 != 0 {
        let sep = if target.contains('?') { '&' } else { '?' };
        target = format!("{target}{sep}{QUERY_PARAM}={token}");
    }
    let Ok(uri) = target.parse::<Uri>() else {
        return;
    };
    let mut req = Request::get(uri);
    if flags & 1 != 0 {
        req = req.header("sec-fetch-mode", "navigate");
    }
    if let Some(v) = authorization.and_then(|v| HeaderValue::from_bytes(v).ok()) {
        req = req.header(AUTHORIZATION, v);
    }
    if let Some(v) = cookie.and_then(|v| HeaderValue::from_bytes(v).ok()) {
        req = req.header(COOKIE_HEADER, v);
    }
    if flags & 4 != 0 {
        req = req.header(COOKIE_HEADER, format!("{COOKIE}={token}"));
    }
    let Ok(mut req) = req.body(()) else {
        return;
    };
    let genuine = flags & 6 != 0
        || req
            .headers()
            .get_all(AUTHORIZATION)
            .iter()
            .any(|v| v.as_bytes().ends_with(token.as_bytes()));
    match protection.admit(&mut req, &name) {
        Ok(Admitted::Pass) => {
            let query = req.uri().query().unwrap_or_default();
            assert!(
                !query
                    .split('&')
                    .any(|p| p.split('=').next() == Some(QUERY_PARAM)),
                "the parameter passed: {query}"
            );
            for v in req.headers().get_all(COOKIE_HEADER) {
                let v = String::from_utf8_lossy(v.as_bytes());
                assert!(
                    // Cookie pairs are split at `;` and trimmed of spaces
                    // and tabs (RFC 6265): a name with other bytes before
                    // it is another cookie.
                    !v.split(';')
                        .any(|p| p.trim_ascii().starts_with(&format!("{COOKIE}="))),
                    "the cookie passed: {v}"
                );
            }
            // Only the genuine token (or a forged MAC, which must not
            // happen) lets a request in.
            let any_genuine = genuine
                || target.contains(&token)
                || cookie.is_some_and(|c| String::from_utf8_lossy(c).contains(&token));
            assert!(any_genuine, "let in without the token: {target}");
        }
        Ok(Admitted::Redirect(answer)) => {
            // The target's bytes as they came (obs-text included).
            let location = String::from_utf8_lossy(answer.headers()[LOCATION].as_bytes());
            assert!(location.starts_with('/'), "{location}");
            assert!(
                !location.starts_with("//") && !location.starts_with("/\\"),
                "{location}"
            );
            let query = location.split_once('?').map_or("", |(_, q)| q);
            assert!(
                !query
                    .split('&')
                    .any(|p| p.split('=').next() == Some(QUERY_PARAM)),
                "the parameter stays in {location}"
            );
        }
        Err(_) => {}
    }
});
