//! Protected previews: share tokens, and the check a visitor's request
//! passes before it reaches a protected preview's origin.
//!
//! A token is `<expiry>.<mac>`: the expiry in Unix seconds, and the first
//! 16 bytes (base64url, no padding) of HMAC-SHA256 over
//! `calvin-share/1\0<name>\0<salt>\0<expiry>` with the edge's key
//! ([`ShareKey`], kept in its state folder, or the cluster's). The salt is
//! the preview's own, made by its agent ([`ShareSalt`]): a new salt
//! revokes every token made before.
//!
//! A visitor presents the token in the query (`calvin_share`), in
//! `Authorization: Bearer`, or in the cookie [`COOKIE`]. A browser
//! navigating with the token in the query is sent back to the same URL
//! without it, with the cookie set ([`Admitted::Redirect`]), so the token
//! leaves the address bar and never leaks in a `Referer`. The origin never
//! sees the token nor the cookie.

use std::sync::{Arc, RwLock};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use calvin_proto::{PreviewName, ShareSalt};
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body_util::Full;
use ring::hmac;
use subtle::ConstantTimeEq;

use crate::error_page::EdgeError;
use crate::unix_now;

/// The query parameter a share link carries its token in.
pub const QUERY_PARAM: &str = "calvin_share";
/// The cookie a browser keeps the token in: `__Host-` makes browsers
/// keep it only when set `Secure`, `Path=/` and without `Domain`, so it
/// goes back to this one host only.
pub const COOKIE: &str = "__Host-calvin-share";

/// The file in an edge's state folder that holds its share key (64 hex
/// digits, 0600), made at its first start.
pub const SHARE_KEY_FILE: &str = "share.key";

/// Bytes of the MAC a token carries.
const MAC_LEN: usize = 16;
/// Characters of a token's MAC (16 bytes in base64url without padding).
const MAC_CHARS: usize = 22;
/// The longest token taken: 20 digits, a dot, the MAC.
const MAX_TOKEN_LEN: usize = 20 + 1 + MAC_CHARS;

/// The key share tokens are made with: 32 bytes the edge keeps (or the
/// cluster's, in etcd, which replaces the edge's own once read: see
/// [`Self::set`]).
pub struct ShareKey(RwLock<hmac::Key>);

impl ShareKey {
    pub fn new(bytes: &[u8; 32]) -> Self {
        Self(RwLock::new(hmac::Key::new(hmac::HMAC_SHA256, bytes)))
    }

    /// From now on, tokens are made and checked with `bytes`.
    pub fn set(&self, bytes: &[u8; 32]) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) =
            hmac::Key::new(hmac::HMAC_SHA256, bytes);
    }

    fn mac(&self, name: &PreviewName, salt: &ShareSalt, expires: u64) -> [u8; MAC_LEN] {
        let key = self.0.read().unwrap_or_else(|e| e.into_inner());
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(b"calvin-share/1\0");
        ctx.update(name.as_str().as_bytes());
        ctx.update(b"\0");
        ctx.update(salt.as_str().as_bytes());
        ctx.update(b"\0");
        ctx.update(expires.to_string().as_bytes());
        let tag = ctx.sign();
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&tag.as_ref()[..MAC_LEN]);
        out
    }

    /// A token for `name` made with `salt`, valid until `expires` (Unix
    /// seconds).
    pub fn mint(&self, name: &PreviewName, salt: &ShareSalt, expires: u64) -> String {
        let mac = self.mac(name, salt, expires);
        format!("{expires}.{}", URL_SAFE_NO_PAD.encode(mac))
    }

    /// The token's expiry if it is this name's and salt's and not over
    /// at `now` (Unix seconds). The MAC is compared in constant time, and
    /// checked before the expiry: only a genuine token reads as expired.
    /// (ring's own constant-time compare is deprecated; `subtle` is the
    /// one the edge uses for its agents' tokens too.)
    pub fn verify(
        &self,
        name: &PreviewName,
        salt: &ShareSalt,
        token: &str,
        now: u64,
    ) -> Result<u64, TokenError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(TokenError::Invalid);
        }
        let (expires, mac) = token.split_once('.').ok_or(TokenError::Invalid)?;
        // Digits only: `+1` or `01` would parse to a number whose MAC is
        // another text's.
        if expires.is_empty()
            || !expires.bytes().all(|b| b.is_ascii_digit())
            || (expires.len() > 1 && expires.starts_with('0'))
        {
            return Err(TokenError::Invalid);
        }
        let expires: u64 = expires.parse().map_err(|_| TokenError::Invalid)?;
        if mac.len() != MAC_CHARS {
            return Err(TokenError::Invalid);
        }
        let given = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| TokenError::Invalid)?;
        let expected = self.mac(name, salt, expires);
        if !bool::from(given.as_slice().ct_eq(expected.as_slice())) {
            return Err(TokenError::Invalid);
        }
        if expires <= now {
            return Err(TokenError::Expired);
        }
        Ok(expires)
    }
}

/// Why a token does not let a visitor in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TokenError {
    /// Not one this edge made for this preview as it is now: malformed,
    /// altered, another preview's, or made before a rotation.
    Invalid,
    /// Genuine, but past its expiry.
    Expired,
}

/// A protected preview's salt and the key its tokens are checked with:
/// what a route to a protected preview carries.
pub struct Protection {
    key: Arc<ShareKey>,
    salt: ShareSalt,
}

/// What the check makes of a request to a protected preview.
#[derive(Debug)]
pub enum Admitted {
    /// It goes on to the origin, the token taken out.
    Pass,
    /// A browser came with a share link: sent to the same URL without
    /// the token, with the cookie set.
    Redirect(Response<Full<Bytes>>),
}

/// Where a token was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Query,
    Bearer,
    Cookie,
}

impl Protection {
    pub fn new(key: Arc<ShareKey>, salt: ShareSalt) -> Self {
        Self { key, salt }
    }

    /// A token for `name`, `secs` from now: (token, expiry in Unix seconds).
    pub fn mint(&self, name: &PreviewName, secs: u32) -> (String, u64) {
        let expires = unix_now() + u64::from(secs);
        (self.key.mint(name, &self.salt, expires), expires)
    }

    /// Lets `req` (for the preview `name`) in, or refuses it. A request
    /// let in has the token taken out of its query, its cookies and (when
    /// it held the token) its `Authorization`.
    pub fn admit<B>(
        &self,
        req: &mut Request<B>,
        name: &PreviewName,
    ) -> Result<Admitted, EdgeError> {
        self.admit_at(req, name, unix_now())
    }

    fn admit_at<B>(
        &self,
        req: &mut Request<B>,
        name: &PreviewName,
        now: u64,
    ) -> Result<Admitted, EdgeError> {
        let query = query_token(req.uri());
        let bearer = bearer_token(req.headers());
        let cookie = cookie_token(req.headers());
        let mut worst: Option<TokenError> = None;
        let mut valid = None;
        for (source, token) in [
            (Source::Query, query.as_deref()),
            (Source::Bearer, bearer.as_deref()),
            (Source::Cookie, cookie.as_deref()),
        ] {
            let Some(token) = token else { continue };
            match self.key.verify(name, &self.salt, token, now) {
                Ok(expires) => {
                    valid = Some((source, token.to_owned(), expires));
                    break;
                }
                // An expired genuine token says more than a malformed one.
                Err(err) => worst = worst.max(Some(err)),
            }
        }
        let Some((source, token, expires)) = valid else {
            return Err(match worst {
                None => EdgeError::ShareTokenMissing(name.clone()),
                Some(TokenError::Invalid) => EdgeError::ShareTokenInvalid(name.clone()),
                Some(TokenError::Expired) => EdgeError::ShareTokenExpired(name.clone()),
            });
        };
        let navigating = source == Source::Query
            && matches!(*req.method(), Method::GET | Method::HEAD)
            && req
                .headers()
                .get("sec-fetch-mode")
                .is_some_and(|mode| mode.as_bytes() == b"navigate");
        if query.is_some() {
            let stripped = strip_query(req.uri());
            if navigating {
                return Ok(Admitted::Redirect(redirect(
                    &stripped,
                    &token,
                    expires.saturating_sub(now),
                )));
            }
            *req.uri_mut() = stripped;
        }
        // The share token never reaches the origin, from whichever place
        // it came, even when another place's opened the request.
        let bearer_is_ours = source == Source::Bearer
            || bearer
                .as_deref()
                .is_some_and(|b| self.key.verify(name, &self.salt, b, now).is_ok());
        if bearer_is_ours {
            req.headers_mut().remove(header::AUTHORIZATION);
        }
        if cookie.is_some() {
            strip_cookie(req.headers_mut());
        }
        strip_referer(req.headers_mut());
        Ok(Admitted::Pass)
    }
}

/// A request's path and query as logs show it: a share token's value
/// masked (`calvin_share=(masked)`), the rest as it came.
pub fn masked(target: &str) -> std::borrow::Cow<'_, str> {
    let Some((path, query)) = target.split_once('?') else {
        return target.into();
    };
    let marker = format!("{QUERY_PARAM}=");
    if !query.split('&').any(|pair| pair.starts_with(&marker)) {
        return target.into();
    }
    let query: Vec<&str> = query
        .split('&')
        .map(|pair| {
            if pair.starts_with(&marker) {
                "calvin_share=(masked)"
            } else {
                pair
            }
        })
        .collect();
    format!("{path}?{}", query.join("&")).into()
}

/// The query's `calvin_share` value (the first, when there are several).
fn query_token(uri: &Uri) -> Option<String> {
    uri.query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == QUERY_PARAM).then(|| value.to_owned())
    })
}

/// The token of `Authorization: Bearer TOKEN`, if that is what it holds.
fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
}

/// The `name=value` pairs of every `Cookie` field (HTTP/2 may send one
/// per cookie), as bytes: a cookie may hold bytes past ASCII, which must
/// not hide the others.
fn cookie_pairs(headers: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .map(<[u8]>::trim_ascii)
        .filter(|pair| !pair.is_empty())
}

/// Whether a cookie pair is [`COOKIE`]'s.
fn is_ours(pair: &[u8]) -> bool {
    pair.strip_prefix(COOKIE.as_bytes())
        .is_some_and(|rest| rest.first() == Some(&b'='))
}

/// The value of the cookie [`COOKIE`].
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    cookie_pairs(headers)
        .find(|pair| is_ours(pair))
        .map(|pair| String::from_utf8_lossy(&pair[COOKIE.len() + 1..]).into_owned())
}

/// `uri` without any `calvin_share` parameter, the others kept in order.
/// A `Referer` naming a URL with a share token (a page a browser loaded
/// with its link, without the redirect: no `Sec-Fetch-Mode`) loses the
/// token, as the request's own target does.
fn strip_referer(headers: &mut HeaderMap) {
    let Some(referer) = headers.get(header::REFERER) else {
        return;
    };
    if !referer
        .as_bytes()
        .windows(QUERY_PARAM.len())
        .any(|w| w == QUERY_PARAM.as_bytes())
    {
        return;
    }
    let stripped = referer
        .to_str()
        .ok()
        .and_then(|r| r.parse::<Uri>().ok())
        .map(|uri| strip_query(&uri).to_string())
        .and_then(|r| http::HeaderValue::from_str(&r).ok());
    match stripped {
        Some(value) => headers.insert(header::REFERER, value),
        None => headers.remove(header::REFERER),
    };
}

fn strip_query(uri: &Uri) -> Uri {
    let Some(query) = uri.query() else {
        return uri.clone();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| pair.split_once('=').map_or(*pair, |(k, _)| k) != QUERY_PARAM)
        .collect();
    let path_and_query = if kept.is_empty() {
        uri.path().to_owned()
    } else {
        format!("{}?{}", uri.path(), kept.join("&"))
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// Every `Cookie` field without [`COOKIE`], the others kept in order in
/// one field; none when nothing is left.
fn strip_cookie(headers: &mut HeaderMap) {
    let kept: Vec<&[u8]> = cookie_pairs(headers)
        .filter(|pair| !is_ours(pair))
        .collect();
    let value = (!kept.is_empty())
        .then(|| HeaderValue::from_bytes(&kept.join(&b"; "[..])).ok())
        .flatten();
    headers.remove(header::COOKIE);
    if let Some(value) = value {
        headers.insert(header::COOKIE, value);
    }
}

/// 303 to `to`'s path and query, setting the cookie for `max_age` seconds.
fn redirect(to: &Uri, token: &str, max_age: u64) -> Response<Full<Bytes>> {
    let target = to.path_and_query().map_or("/", |p| p.as_str());
    // `//host/...` (or `/\host`, which browsers read the same) would name
    // another site: `/.` before it keeps it a path of this one.
    let location = if target.starts_with("//") || target.starts_with("/\\") {
        format!("/.{target}")
    } else {
        target.to_owned()
    };
    let cookie =
        format!("{COOKIE}={token}; Max-Age={max_age}; Path=/; Secure; HttpOnly; SameSite=Lax");
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SEE_OTHER;
    let h = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&location) {
        h.insert(header::LOCATION, location);
    }
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        h.insert(header::SET_COOKIE, cookie);
    }
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn name(s: &str) -> PreviewName {
        PreviewName::parse(s).unwrap()
    }

    fn salt(s: &str) -> ShareSalt {
        ShareSalt::try_from(format!("{s:_<16}")).unwrap()
    }

    fn key(byte: u8) -> Arc<ShareKey> {
        Arc::new(ShareKey::new(&[byte; 32]))
    }

    fn protection() -> Protection {
        Protection::new(key(7), salt("one"))
    }

    fn request(uri: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut req = Request::builder().uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(()).unwrap()
    }

    #[test]
    fn a_minted_token_verifies_until_its_expiry() {
        let key = key(7);
        let token = key.mint(&name("web"), &salt("one"), NOW + 60);
        let (expiry, mac) = token.split_once('.').unwrap();
        assert_eq!(expiry, (NOW + 60).to_string());
        assert_eq!(mac.len(), MAC_CHARS);
        let verify = |now| key.verify(&name("web"), &salt("one"), &token, now);
        assert_eq!(verify(NOW), Ok(NOW + 60));
        assert_eq!(verify(NOW + 59), Ok(NOW + 60));
        assert_eq!(verify(NOW + 60), Err(TokenError::Expired));
        assert_eq!(verify(NOW + 600), Err(TokenError::Expired));
    }

    #[test]
    fn another_name_salt_or_key_makes_it_invalid() {
        let token = key(7).mint(&name("web"), &salt("one"), NOW + 60);
        let invalid = Err(TokenError::Invalid);
        assert_eq!(
            key(7).verify(&name("api"), &salt("one"), &token, NOW),
            invalid
        );
        assert_eq!(
            key(7).verify(&name("web"), &salt("two"), &token, NOW),
            invalid
        );
        assert_eq!(
            key(8).verify(&name("web"), &salt("one"), &token, NOW),
            invalid
        );
    }

    #[test]
    fn every_part_tampered_or_cut_is_invalid() {
        let key = key(7);
        let token = key.mint(&name("web"), &salt("one"), NOW + 60);
        let (expiry, mac) = token.split_once('.').unwrap();
        let verify = |t: &str| key.verify(&name("web"), &salt("one"), t, NOW);
        let later = (NOW + 6000).to_string();
        let mut flipped = mac.to_owned().into_bytes();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        for bad in [
            format!("{later}.{mac}"),                      // a later expiry
            format!("{expiry}.{flipped}"),                 // a changed MAC
            format!("{expiry}.{}", &mac[..MAC_CHARS - 1]), // cut short
            format!("{expiry}.{mac}A"),                    // one more
            format!("0{expiry}.{mac}"),                    // same number, other text
            format!("+{expiry}.{mac}"),
            format!("{expiry}{mac}"), // no dot
            format!(".{mac}"),
            format!("{expiry}."),
            String::new(),
            format!("{expiry}.{}", "=".repeat(MAC_CHARS)),
            "x".repeat(4096),
        ] {
            assert_eq!(verify(&bad), Err(TokenError::Invalid), "{bad}");
        }
        assert_eq!(verify(&token), Ok(NOW + 60));
    }

    #[test]
    fn no_token_is_missing_a_bad_one_invalid_an_old_one_expired() {
        let p = protection();
        let web = name("web");
        let err = |uri: &str, h: &[(&str, &str)]| {
            p.admit_at(&mut request(uri, h), &web, NOW)
                .unwrap_err()
                .code()
        };
        assert_eq!(err("/", &[]), "share-token-missing");
        assert_eq!(
            err("/", &[("authorization", "Basic dXNlcjpwYXNz")]),
            "share-token-missing"
        );
        assert_eq!(err("/?calvin_share=1.x", &[]), "share-token-invalid");
        let old = p.key.mint(&web, &salt("one"), NOW - 1);
        assert_eq!(
            err(&format!("/?calvin_share={old}"), &[]),
            "share-token-expired"
        );
        // An expired genuine token is told apart even beside a bad one.
        assert_eq!(
            err(
                "/?calvin_share=bad",
                &[("cookie", &format!("{COOKIE}={old}"))]
            ),
            "share-token-expired"
        );
    }

    #[test]
    fn a_query_token_is_taken_out_and_other_params_kept_in_order() {
        let p = protection();
        let web = name("web");
        let token = p.key.mint(&web, &salt("one"), NOW + 60);
        let mut req = request(&format!("/a/b?x=1&calvin_share={token}&y=2&x=3"), &[]);
        assert!(matches!(
            p.admit_at(&mut req, &web, NOW),
            Ok(Admitted::Pass)
        ));
        assert_eq!(req.uri(), "/a/b?x=1&y=2&x=3");
        let mut req = request(&format!("/?calvin_share={token}"), &[]);
        assert!(matches!(
            p.admit_at(&mut req, &web, NOW),
            Ok(Admitted::Pass)
        ));
        assert_eq!(req.uri(), "/");
        // An absolute URI (HTTP/2) keeps its scheme and authority.
        let mut req = request(
            &format!("https://web.preview.localhost/p?calvin_share={token}"),
            &[],
        );
        assert!(matches!(
            p.admit_at(&mut req, &web, NOW),
            Ok(Admitted::Pass)
        ));
        assert_eq!(req.uri(), "https://web.preview.localhost/p");
    }

    #[test]
    fn a_browser_navigation_is_redirected_with_the_cookie() {
        let p = protection();
        let web = name("web");
        let token = p.key.mint(&web, &salt("one"), NOW + 3600);
        let nav = [("sec-fetch-mode", "navigate")];
        let mut req = request(&format!("/page?q=1&calvin_share={token}"), &nav);
        let Ok(Admitted::Redirect(resp)) = p.admit_at(&mut req, &web, NOW) else {
            panic!("no redirect");
        };
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
        let h = resp.headers();
        assert_eq!(h[header::LOCATION], "/page?q=1");
        assert_eq!(
            h[header::SET_COOKIE],
            format!(
                "__Host-calvin-share={token}; Max-Age=3600; Path=/; Secure; HttpOnly; SameSite=Lax"
            )
        );
        assert_eq!(h[header::REFERRER_POLICY], "no-referrer");
        assert_eq!(h[header::CACHE_CONTROL], "no-store");
        // A path that reads as another host stays a path of this one.
        let mut req = request(&format!("//evil.example/x?calvin_share={token}"), &nav);
        let Ok(Admitted::Redirect(resp)) = p.admit_at(&mut req, &web, NOW) else {
            panic!("no redirect");
        };
        assert_eq!(resp.headers()[header::LOCATION], "/.//evil.example/x");
        // A POST navigation (a form) is served, not redirected.
        let mut req = Request::post(format!("/f?calvin_share={token}"))
            .header("sec-fetch-mode", "navigate")
            .body(())
            .unwrap();
        assert!(matches!(
            p.admit_at(&mut req, &web, NOW),
            Ok(Admitted::Pass)
        ));
    }

    #[test]
    fn the_cookie_and_a_share_bearer_are_taken_out_an_apps_own_kept() {
        let p = protection();
        let web = name("web");
        let token = p.key.mint(&web, &salt("one"), NOW + 60);
        let cookies = format!("a=1; {COOKIE}={token}; b=2");
        let mut req = request(
            "/",
            &[("cookie", &cookies), ("authorization", "Bearer app-token")],
        );
        assert!(matches!(
            p.admit_at(&mut req, &web, NOW),
            Ok(Admitted::Pass)
        ));
        assert_eq!(req.headers()[header::COOKIE], "a=1; b=2");
        assert_eq!(req.headers()[header::AUTHORIZATION], "Bearer app-token");

        let bearer = format!("Bearer {token}");
        let mut req = request(
            "/",
            &[
                ("authorization", &bearer),
                ("cookie", &format!("{COOKIE}=old")),
            ],
        );
        assert!(matches!(
            p.admit_at(&mut req, &web, NOW),
            Ok(Admitted::Pass)
        ));
        assert!(req.headers().get(header::AUTHORIZATION).is_none());
        assert!(req.headers().get(header::COOKIE).is_none());

        // The query's token opens it; the same token in Authorization is
        // taken out all the same, and a Referer loses it.
        let uri = format!("/x?{QUERY_PARAM}={token}&q=1");
        let referer = format!("https://web.preview.test/page?{QUERY_PARAM}={token}&r=2");
        let mut req = request(&uri, &[("authorization", &bearer), ("referer", &referer)]);
        assert!(matches!(
            p.admit_at(&mut req, &web, NOW),
            Ok(Admitted::Pass)
        ));
        assert!(req.headers().get(header::AUTHORIZATION).is_none());
        assert_eq!(
            req.headers()[header::REFERER],
            "https://web.preview.test/page?r=2"
        );
        assert_eq!(req.uri(), "/x?q=1");
    }

    #[test]
    fn logs_see_a_masked_token() {
        assert_eq!(
            masked("/a?x=1&calvin_share=9.abc&y=2"),
            "/a?x=1&calvin_share=(masked)&y=2"
        );
        assert_eq!(masked("/a?x=1"), "/a?x=1");
        assert_eq!(masked("/a"), "/a");
        assert_eq!(masked("/a?my_calvin_share=1"), "/a?my_calvin_share=1");
    }

    #[test]
    fn a_cookie_past_ascii_hides_neither_the_share_cookie_nor_the_others() {
        let p = protection();
        let web = name("web");
        let token = p.key.mint(&web, &salt("one"), NOW + 60);
        let mut req = request("/", &[]);
        let value = format!("caf\u{e9}=cr\u{e8}me; {COOKIE}={token}; b=2");
        req.headers_mut().insert(
            header::COOKIE,
            HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        );
        // HTTP/2's one field per cookie, too.
        req.headers_mut()
            .append(header::COOKIE, HeaderValue::from_static("c=3"));
        assert!(matches!(
            p.admit_at(&mut req, &web, NOW),
            Ok(Admitted::Pass)
        ));
        let cookies: Vec<&[u8]> = req
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .map(HeaderValue::as_bytes)
            .collect();
        assert_eq!(cookies, ["caf\u{e9}=cr\u{e8}me; b=2; c=3".as_bytes()]);
        // A cookie named with ours as a prefix is another's.
        let mut req = request("/", &[("cookie", &format!("{COOKIE}x={token}"))]);
        assert_eq!(
            p.admit_at(&mut req, &web, NOW).unwrap_err().code(),
            "share-token-missing"
        );
    }

    #[test]
    fn a_cookie_of_one_name_does_not_open_another() {
        let p = protection();
        let token = p.key.mint(&name("web"), &salt("one"), NOW + 60);
        let mut req = request("/", &[("cookie", &format!("{COOKIE}={token}"))]);
        assert_eq!(
            p.admit_at(&mut req, &name("api"), NOW).unwrap_err().code(),
            "share-token-invalid"
        );
    }
}
