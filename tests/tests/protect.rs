//! Protected previews (`preview --protect`): the URL alone answers 401;
//! the share link (the URL with a signed, expiring token) opens it, in
//! curl by its query or `Authorization: Bearer`, in a browser by a 303
//! that trades the token for a cookie of that one host. The origin never
//! sees the token nor the cookie; rotation revokes earlier links; an edge
//! restart does not. HTTP/1.1, HTTP/2 and HTTP/3 alike.
//!
//! An expired token is checked by the token module's unit tests (an
//! injected clock, `edge/src/share.rs`): the shortest link lives 60 s.
//! Here, a token whose expiry was edited fails its MAC: invalid.

use calvin_agent::api::{PreviewCreated, PreviewList, PreviewRequest, ProtectRequest, Protected};
use calvin_tests::*;
use serde_json::Value;

const COOKIE: &str = "__Host-calvin-share";

fn protected_request(port: u16, name: &str, expires_secs: Option<i64>) -> PreviewRequest {
    PreviewRequest {
        port: port.into(),
        name: Some(name.into()),
        ttl_secs: None,
        probe: Some(false),
        protect: Some(true),
        expires_secs,
    }
}

/// A protected preview of `port` named `name`, made through the control API.
async fn protected(agent: &TestAgent, port: u16, name: &str) -> PreviewCreated {
    let answer = agent
        .client()
        .create(&protected_request(port, name, None))
        .await
        .expect("control API");
    answer.parse().expect("a protected preview")
}

/// The token of a share link.
fn token_of(share_url: &str) -> String {
    share_url
        .split_once("?calvin_share=")
        .map(|(_, token)| token.to_owned())
        .unwrap_or_else(|| panic!("no token in {share_url}"))
}

/// What the origin saw of one request (its `/request` echo).
struct Seen {
    target: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn of(out: &CurlOutput) -> Seen {
        assert_eq!(out.status, 200, "{out:?} {}", out.text());
        let v: Value = serde_json::from_slice(&out.body).expect("the origin's JSON");
        let headers = v["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|pair| {
                (
                    pair[0].as_str().unwrap_or_default().to_owned(),
                    pair[1].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        Seen {
            target: v["target"].as_str().expect("target").to_owned(),
            headers,
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the token appears anywhere the origin can read.
    fn holds(&self, token: &str) -> bool {
        self.target.contains(token)
            || self.target.contains("calvin_share")
            || self
                .headers
                .iter()
                .any(|(_, v)| v.contains(token) || v.contains(COOKIE))
    }
}

/// Asserts a 401 with `code`, `WWW-Authenticate` and a text that sends
/// the visitor to the person who shared the link.
fn assert_refused(out: &CurlOutput, code: &str) {
    assert_eq!(out.status, 401, "{out:?}");
    assert_eq!(out.header("x-calvin-error"), Some(code), "{out:?}");
    assert_eq!(
        out.header("www-authenticate"),
        Some(r#"Bearer realm="calvin""#)
    );
    let text = out.edge_text();
    assert!(
        text.contains("share link") && text.contains("the person who shared it"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_valid_token_a_protected_preview_answers_401_and_the_origin_sees_no_token() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = protected(&agent, origin.port, "guarded").await;
    let share = created.share_url.clone().expect("a share link");
    assert!(
        share.starts_with(&format!("{}/?calvin_share=", created.url)),
        "{share}"
    );
    let expires = time::OffsetDateTime::parse(
        created.share_expires.as_deref().expect("share_expires"),
        &time::format_description::well_known::Rfc3339,
    )
    .expect("RFC 3339");
    let left = expires - time::OffsetDateTime::now_utc();
    assert!(
        left > time::Duration::days(7) - time::Duration::minutes(1)
            && left <= time::Duration::days(7),
        "the default life is 7 days: {left}"
    );
    let token = token_of(&share);
    let ca = edge.ca();
    let url = |path: &str| format!("{}{path}", created.url);

    // No token, a wrong one, one whose expiry was moved (its MAC fails),
    // a Basic Authorization: 401, and the origin never asked.
    assert_refused(&curl(&ca, &[&url("/request")]).await, "share-token-missing");
    assert_refused(
        &curl(
            &ca,
            &["-H", "Authorization: Basic dXNlcjpwYXNz", &url("/request")],
        )
        .await,
        "share-token-missing",
    );
    let wrong = format!("{}.AAAAAAAAAAAAAAAAAAAAAA", u32::MAX);
    assert_refused(
        &curl(&ca, &[&url(&format!("/request?calvin_share={wrong}"))]).await,
        "share-token-invalid",
    );
    let (expiry, mac) = token.split_once('.').expect("expiry.mac");
    let later: u64 = expiry.parse::<u64>().expect("expiry") + 86_400;
    assert_refused(
        &curl(
            &ca,
            &[&url(&format!("/request?calvin_share={later}.{mac}"))],
        )
        .await,
        "share-token-invalid",
    );
    assert_refused(
        &curl(
            &ca,
            &["-H", "Authorization: Bearer 12.nope", &url("/request")],
        )
        .await,
        "share-token-invalid",
    );
    assert_eq!(origin.requests(), 0, "a refused request reached the origin");
    // The browser's answer is the edge's page, with the same words.
    let page = curl(&ca, &["-H", "Accept: text/html", &url("/")]).await;
    assert_eq!(page.status, 401);
    assert!(page.text().contains("<html") && page.text().contains("share link"));

    // The share link as given (path /) opens it: the origin answers.
    let out = curl(&ca, &[&share]).await;
    assert_eq!(out.header("x-calvin-error"), None, "{out:?}");
    assert_eq!(out.text(), "origin: not found\n");

    // curl with the token in the query: served at once (no cookie kept,
    // so no redirect), the parameter taken out and the others kept in
    // order; over HTTP/1.1 and HTTP/2 (an absolute target).
    for version in ["--http1.1", "--http2"] {
        let target = format!("/request/q?a=1&calvin_share={token}&b=2&a=3");
        let out = curl(&ca, &[version, &url(&target)]).await;
        let seen = Seen::of(&out);
        assert_eq!(seen.target, "/request/q?a=1&b=2&a=3", "{version}");
        assert!(!seen.holds(&token), "{version}: {:?}", seen.headers);
    }
    let seen = Seen::of(&curl(&ca, &[&url(&format!("/request?calvin_share={token}"))]).await);
    assert_eq!(seen.target, "/request");

    // Bearer: taken out, as the token it is.
    let bearer = format!("Authorization: Bearer {token}");
    let seen = Seen::of(&curl(&ca, &["-H", &bearer, &url("/request/b")]).await);
    assert_eq!(seen.header("authorization"), None);
    assert!(!seen.holds(&token));

    // The cookie: taken out, the app's other cookies and its own
    // Authorization passed as they were.
    let cookies = format!("Cookie: a=1; {COOKIE}={token}; b=2");
    let seen = Seen::of(
        &curl(
            &ca,
            &[
                "-H",
                &cookies,
                "-H",
                "Authorization: Bearer app-own",
                &url("/request/c"),
            ],
        )
        .await,
    );
    assert_eq!(seen.header("cookie"), Some("a=1; b=2"));
    assert_eq!(seen.header("authorization"), Some("Bearer app-own"));
    assert!(!seen.holds(&token));
    let only = format!("Cookie: {COOKIE}={token}");
    let seen = Seen::of(&curl(&ca, &["-H", &only, &url("/request/c")]).await);
    assert_eq!(seen.header("cookie"), None, "an empty Cookie is dropped");

    // A browser's navigation with the token in the query: 303 to the same
    // path and query without it, the cookie set for this host only; the
    // origin is not asked.
    let before = origin.requests();
    let nav = curl(
        &ca,
        &[
            "-H",
            "Sec-Fetch-Mode: navigate",
            &url(&format!("/request/page?x=1&calvin_share={token}&y=2")),
        ],
    )
    .await;
    assert_eq!(nav.status, 303, "{nav:?}");
    assert_eq!(nav.header("location"), Some("/request/page?x=1&y=2"));
    let set = nav.header("set-cookie").expect("Set-Cookie");
    let max_age: u64 = set
        .split("; ")
        .find_map(|a| a.strip_prefix("Max-Age="))
        .and_then(|n| n.parse().ok())
        .expect("Max-Age");
    assert!((604_700..=604_800).contains(&max_age), "{set}");
    assert_eq!(
        set,
        format!("{COOKIE}={token}; Max-Age={max_age}; Path=/; Secure; HttpOnly; SameSite=Lax")
    );
    assert!(!set.contains("Domain"), "host-only: {set}");
    assert_eq!(nav.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(nav.header("cache-control"), Some("no-store"));
    assert_eq!(origin.requests(), before, "the redirect is the edge's own");

    // A navigation without a token in the query is not redirected: the
    // cookie that came back serves the page.
    let seen = Seen::of(
        &curl(
            &ca,
            &[
                "-H",
                "Sec-Fetch-Mode: navigate",
                "-H",
                &only,
                &url("/request/page?x=1"),
            ],
        )
        .await,
    );
    assert_eq!(seen.target, "/request/page?x=1");
    assert!(!seen.holds(&token));

    // The agent's list says it is protected.
    let list: PreviewList = agent.list().await;
    assert!(list.previews[0].protected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_opens_its_own_preview_only_and_a_public_preview_is_unchanged() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let (one, two, open) = (
        Origin::start().await,
        Origin::start().await,
        Origin::start().await,
    );
    let first = protected(&agent, one.port, "first").await;
    let second = protected(&agent, two.port, "second").await;
    let public = agent.preview(open.port, Some("public")).await;
    assert_eq!(public.share_url, None);
    let ca = edge.ca();
    let token = token_of(first.share_url.as_deref().expect("link"));

    let cookie = format!("Cookie: {COOKIE}={token}");
    let mine = curl(&ca, &["-H", &cookie, &format!("{}/hello", first.url)]).await;
    assert_eq!(
        (mine.status, mine.text().as_str()),
        (200, "hello from origin\n")
    );
    // The first preview's cookie, query token or Bearer at the second: 401.
    let theirs = format!("{}/hello", second.url);
    assert_refused(
        &curl(&ca, &["-H", &cookie, &theirs]).await,
        "share-token-invalid",
    );
    let query = format!("{theirs}?calvin_share={token}");
    assert_refused(&curl(&ca, &[&query]).await, "share-token-invalid");
    let bearer = format!("Authorization: Bearer {token}");
    assert_refused(
        &curl(&ca, &["-H", &bearer, &theirs]).await,
        "share-token-invalid",
    );
    assert_eq!(two.requests(), 0);

    // A public preview is as before: no token asked, and a calvin_share
    // parameter, an Authorization and cookies reach its origin untouched.
    let target = format!("/request?calvin_share={token}");
    let seen = Seen::of(
        &curl(
            &ca,
            &[
                "-H",
                &cookie,
                "-H",
                &bearer,
                &format!("{}{target}", public.url),
            ],
        )
        .await,
    );
    assert_eq!(seen.target, target);
    assert_eq!(
        seen.header("authorization"),
        Some(bearer["Authorization: ".len()..].trim())
    );
    assert_eq!(seen.header("cookie"), Some(&cookie["Cookie: ".len()..]));
    let list = agent.list().await;
    let access: Vec<(String, bool)> = list
        .previews
        .iter()
        .map(|p| (p.name.clone(), p.protected))
        .collect();
    assert_eq!(
        access,
        [
            ("first".into(), true),
            ("public".into(), false),
            ("second".into(), true)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_revokes_earlier_links_and_off_makes_the_preview_public() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let ca = edge.ca();
    // Public first; `protect` turns protection on and makes a link.
    let made = agent.preview(origin.port, Some("turns")).await;
    let hello = format!("{}/hello", made.url);
    assert_eq!(curl(&ca, &[&hello]).await.status, 200);
    let protect = |request: ProtectRequest| {
        let client = agent.client();
        async move {
            let answer = client
                .protect("turns", &request)
                .await
                .expect("control API");
            answer.parse::<Protected>()
        }
    };
    let on = protect(ProtectRequest::default()).await.expect("protected");
    assert!(on.protected);
    let first = token_of(on.share_url.as_deref().expect("link"));
    assert_refused(&curl(&ca, &[&hello]).await, "share-token-missing");
    let with = |token: &str| format!("{hello}?calvin_share={token}");
    assert_eq!(curl(&ca, &[&with(&first)]).await.status, 200);

    // Another link without rotating: both work (same salt).
    let again = protect(ProtectRequest {
        expires_secs: Some(3600),
        ..Default::default()
    })
    .await
    .expect("a second link");
    let second = token_of(again.share_url.as_deref().expect("link"));
    assert_ne!(first, second);
    assert_eq!(curl(&ca, &[&with(&first)]).await.status, 200);
    assert_eq!(curl(&ca, &[&with(&second)]).await.status, 200);

    // Rotation: every earlier link (and its cookie) fails; the new one works.
    let rotated = protect(ProtectRequest {
        rotate: true,
        ..Default::default()
    })
    .await
    .expect("rotated");
    let third = token_of(rotated.share_url.as_deref().expect("link"));
    assert_refused(&curl(&ca, &[&with(&first)]).await, "share-token-invalid");
    assert_refused(&curl(&ca, &[&with(&second)]).await, "share-token-invalid");
    let old_cookie = format!("Cookie: {COOKIE}={first}");
    assert_refused(
        &curl(&ca, &["-H", &old_cookie, &hello]).await,
        "share-token-invalid",
    );
    assert_eq!(curl(&ca, &[&with(&third)]).await.status, 200);

    // Off: public again, no link.
    let off = protect(ProtectRequest {
        off: true,
        ..Default::default()
    })
    .await
    .expect("off");
    assert!(!off.protected && off.share_url.is_none());
    assert_eq!(curl(&ca, &[&hello]).await.status, 200);
    assert!(!agent.list().await.previews[0].protected);

    // Bad asks: an unknown name, off with rotate.
    let unknown = agent
        .client()
        .protect("nosuch", &ProtectRequest::default())
        .await
        .expect("control API");
    assert_eq!(unknown.status, 404);
    let both = agent
        .client()
        .protect(
            "turns",
            &ProtectRequest {
                off: true,
                rotate: true,
                ..Default::default()
            },
        )
        .await
        .expect("control API");
    assert_eq!(both.status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_s_life_is_60_s_to_365_days_each_bound_with_its_own_message() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let create = |name: &'static str, secs: i64| {
        let client = agent.client();
        let request = protected_request(origin.port, name, Some(secs));
        async move { client.create(&request).await.expect("control API") }
    };
    let left = |created: &PreviewCreated| {
        let at = time::OffsetDateTime::parse(
            created.share_expires.as_deref().expect("share_expires"),
            &time::format_description::well_known::Rfc3339,
        )
        .expect("RFC 3339");
        (at - time::OffsetDateTime::now_utc()).whole_seconds()
    };
    let low = create("low", 59).await;
    assert_eq!(low.status, 400);
    assert_eq!(
        low.parse::<PreviewCreated>().unwrap_err().error,
        "expires_secs is 59; at least 60 (one minute)"
    );
    let min: PreviewCreated = create("min", 60).await.parse().expect("60 s");
    assert!((55..=60).contains(&left(&min)), "{}", left(&min));
    let max: PreviewCreated = create("max", 31_536_000).await.parse().expect("365 days");
    assert!((31_535_990..=31_536_000).contains(&left(&max)));
    let high = create("high", 31_536_001).await;
    assert_eq!(high.status, 400);
    assert_eq!(
        high.parse::<PreviewCreated>().unwrap_err().error,
        "expires_secs is 31536001; at most 31536000 (365 days)"
    );
    // expires_secs alone (no protect) is refused: it is the link's life.
    let mut lone = protected_request(origin.port, "lone", Some(3600));
    lone.protect = None;
    let lone = agent.client().create(&lone).await.expect("control API");
    assert_eq!(lone.status, 400);

    // The CLI's --expires: the same bounds, in words.
    let socket = agent.socket.to_str().expect("path").to_owned();
    let port = origin.port.to_string();
    for (expires, ok, says) in [
        ("59s", false, "at least 60s (one minute), got 59 s"),
        ("60s", true, ""),
        ("365d", true, ""),
        (
            "31536001s",
            false,
            "at most 365d (31536000 s), got 31536001 s",
        ),
    ] {
        let out = tokio::process::Command::new(binary("calvin-agent"))
            .args(["preview", &port, "--name", "cli", "--no-probe", "--protect"])
            .args(["--expires", expires, "--socket", &socket])
            .output()
            .await
            .expect("calvin-agent runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), ok, "{expires}: {stderr}");
        assert!(stderr.contains(says), "{expires}: {stderr}");
        if ok {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.trim().contains("?calvin_share="), "{stdout}");
            assert!(
                stderr.contains("calvin-agent protect cli --rotate"),
                "{stderr}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_protects_rotates_lists_and_turns_it_off() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let socket = agent.socket.to_str().expect("path").to_owned();
    let cli = |args: Vec<String>| async move {
        tokio::process::Command::new(binary("calvin-agent"))
            .args(&args)
            .output()
            .await
            .expect("calvin-agent runs")
    };
    let args = |list: &[&str]| {
        let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        v.extend(["--socket".to_owned(), socket.clone()]);
        v
    };
    let port = origin.port.to_string();
    let out = cli(args(&[
        "preview",
        &port,
        "--name",
        "cli",
        "--no-probe",
        "--protect",
        "--json",
    ]))
    .await;
    assert!(out.status.success(), "{out:?}");
    let made: PreviewCreated = serde_json::from_slice(&out.stdout).expect("JSON");
    let link = made.share_url.expect("share_url in --json");
    assert!(made.share_expires.is_some());
    let ca = edge.ca();
    let hello = format!("{}/hello", made.url);
    assert_eq!(curl(&ca, &[&hello]).await.status, 401);

    let out = cli(args(&["ls"])).await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("cli ") && l.contains("protected")),
        "{table}"
    );

    let out = cli(args(&["protect", "cli", "--rotate", "--expires", "2h"])).await;
    assert!(out.status.success(), "{out:?}");
    let fresh = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        fresh.starts_with(&made.url) && fresh.contains("?calvin_share="),
        "{fresh}"
    );
    let old = format!("{hello}?calvin_share={}", token_of(&link));
    assert_refused(&curl(&ca, &[&old]).await, "share-token-invalid");
    let new = format!("{hello}?calvin_share={}", token_of(&fresh));
    assert_eq!(curl(&ca, &[&new]).await.status, 200);

    let out = cli(args(&["protect", "cli", "--off", "--rotate"])).await;
    assert!(!out.status.success(), "--off with --rotate is refused");
    let out = cli(args(&["protect", "cli", "--off"])).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), made.url);
    assert_eq!(curl(&ca, &[&hello]).await.status, 200);
    let out = cli(args(&["ls"])).await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("cli ") && l.contains("public")),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issued_link_still_works_after_the_edge_restarts() {
    let state = tempfile::tempdir().expect("tempdir");
    let listen = edge_addresses();
    let options = || EdgeOptions {
        state_dir: Some(state.path().join("edge")),
        listen: Some(listen),
        ..Default::default()
    };
    let edge = TestEdge::start_with(options()).await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = protected(&agent, origin.port, "lasting").await;
    let hello = format!("{}/hello", created.url);
    let link = format!(
        "{hello}?calvin_share={}",
        token_of(created.share_url.as_deref().expect("link"))
    );
    assert_eq!(curl(&edge.ca(), &[&link]).await.status, 200);
    edge.stop().await;

    let edge = TestEdge::start_again(options()).await;
    let ca = edge.ca();
    // The first request waits for the agent to be back (with its salt).
    let out = curl(&ca, &["--max-time", "15", &link]).await;
    assert_eq!(
        (out.status, out.text().as_str()),
        (200, "hello from origin\n"),
        "{out:?}"
    );
    // Still protected: the agent's hello carried the salt.
    assert_refused(&curl(&ca, &[&hello]).await, "share-token-missing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_follows_a_share_link_renders_the_page_and_keeps_no_token_in_the_url() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = protected(&agent, origin.port, "browsed").await;
    let token = token_of(created.share_url.as_deref().expect("link"));
    // The share link on a page of the origin (the link works on any path).
    let link = format!("{}/hello?calvin_share={token}", created.url);
    // The test edge's CA is its own: Chromium is told to take it.
    let mut page = Chromium::open_with(&link, &["--ignore-certificate-errors"]).await;
    let text = page
        .wait_for(
            "document.body && document.body.innerText.includes('hello from origin') \
             && document.body.innerText",
            "the origin's page",
        )
        .await;
    assert_eq!(text.as_str().map(str::trim), Some("hello from origin"));
    let href = page.eval("location.href").await;
    assert_eq!(
        href.as_str(),
        Some(format!("{}/hello", created.url).as_str())
    );
    // The cookie is HttpOnly: the page's script cannot read it.
    assert_eq!(page.eval("document.cookie").await.as_str(), Some(""));
    // The next page of the same preview opens on the cookie alone.
    page.eval(&format!(
        "location.href = '{}/request/next'; true",
        created.url
    ))
    .await;
    let next = page
        .wait_for(
            "location.pathname === '/request/next' && document.body \
             && document.body.innerText",
            "the next page",
        )
        .await;
    let seen: Value = serde_json::from_str(next.as_str().unwrap_or_default()).expect("JSON");
    assert_eq!(seen["target"], "/request/next");
    let sent = seen["headers"].to_string();
    assert!(!sent.contains(&token) && !sent.contains(COOKIE), "{sent}");
    page.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http3_the_same_check_holds() {
    use calvin_tests::h3::{h3_url, h3client};
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = protected(&agent, origin.port, "quick").await;
    let token = token_of(created.share_url.as_deref().expect("link"));

    let alone = h3client(&edge, &h3_url(&edge, "quick", "/request"), &[]).await;
    assert_eq!(alone.code, 0, "{}", alone.stderr);
    assert_eq!(alone.status(), 401, "{:?}", alone.summary);
    assert_eq!(
        alone.header("x-calvin-error").as_deref(),
        Some("share-token-missing")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let body = dir.path().join("body");
    let body_arg = body.display().to_string();
    let target = format!("/request/h3?a=1&calvin_share={token}");
    let passed = h3client(
        &edge,
        &h3_url(&edge, "quick", &target),
        &[
            "-H",
            &format!("cookie: z=1; {COOKIE}={token}"),
            "-o",
            &body_arg,
        ],
    )
    .await;
    assert_eq!(
        passed.status(),
        200,
        "{:?} {}",
        passed.summary,
        passed.stderr
    );
    let seen: Value = serde_json::from_slice(&std::fs::read(&body).expect("body")).expect("JSON");
    assert_eq!(seen["target"], "/request/h3?a=1");
    let sent = seen["headers"].to_string();
    assert!(!sent.contains(&token) && !sent.contains(COOKIE), "{sent}");
    assert!(sent.contains("z=1"), "{sent}");

    let nav = h3client(
        &edge,
        &h3_url(&edge, "quick", &format!("/p?calvin_share={token}")),
        &["-H", "sec-fetch-mode: navigate"],
    )
    .await;
    assert_eq!(nav.status(), 303, "{:?}", nav.summary);
    assert_eq!(nav.header("location").as_deref(), Some("/p"));
    assert!(
        nav.header("set-cookie")
            .is_some_and(|c| c.starts_with(&format!("{COOKIE}={token}; Max-Age="))),
        "{:?}",
        nav.summary
    );
}
