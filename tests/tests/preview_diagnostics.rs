//! What `preview` tells about the server behind a port: the real dev
//! servers (Vite and webpack-dev-server from npm, in tests/devservers;
//! Django from PyPI) in their default configuration refuse the preview's
//! Host, and the warning names the setting; made as the warning says, the
//! warning goes and the page is served through the edge. Also: a server on
//! [::1] only, one speaking TLS, one on another interface, one that never
//! answers, and a preview made without the probe.
//!
//! The dev servers allow `*.localhost` by default, so their tests run an
//! edge for `preview.test` (curl is pointed at it with `--connect-to`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use calvin_agent::api::{PreviewCreated, PreviewRequest, Warning};
use calvin_tests::netns::Netns;
use calvin_tests::*;

/// A preview domain no dev server trusts by default.
const TEST_DOMAIN: &str = "preview.test";

/// An in-process edge for [`TEST_DOMAIN`].
struct DomainEdge(TestEdge);

impl std::ops::Deref for DomainEdge {
    type Target = TestEdge;
    fn deref(&self) -> &TestEdge {
        &self.0
    }
}

impl DomainEdge {
    async fn start() -> DomainEdge {
        DomainEdge(
            TestEdge::start_with(EdgeOptions {
                accounts: vec!["alice"],
                domain: TEST_DOMAIN,
                ..Default::default()
            })
            .await,
        )
    }

    async fn agent(&self) -> TestAgent {
        TestAgent::start(&self.0, "alice").await
    }

    /// curl to a preview URL of this edge, as a visitor.
    async fn visit(&self, url: &str, extra: &[&str]) -> CurlOutput {
        let connect = format!("::127.0.0.1:{}", self.https.port());
        let mut args = vec!["--connect-to", connect.as_str()];
        args.extend_from_slice(extra);
        args.push(url);
        curl(&self.ca(), &args).await
    }
}

/// A dev server as a child process, killed when dropped; its output goes
/// to a log shown when an assertion about it fails.
struct DevServer {
    child: tokio::process::Child,
    log: PathBuf,
}

impl DevServer {
    fn start(
        program: impl AsRef<std::ffi::OsStr>,
        args: &[&str],
        dir: &Path,
        log: PathBuf,
    ) -> DevServer {
        let program = program.as_ref();
        let out = std::fs::File::create(&log).expect("log file");
        let child = tokio::process::Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        DevServer { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the server answers `GET /` on 127.0.0.1 with 200 (a
    /// webpack build done); panics with its log after 60 s.
    async fn serving(&self, port: u16) {
        let url = format!("http://127.0.0.1:{port}/");
        let up = eventually(Duration::from_secs(60), || async {
            (curl(Path::new("/dev/null"), &[&url]).await.status == 200).then_some(())
        })
        .await;
        assert!(up.is_some(), "not serving on {port}:\n{}", self.log());
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

fn devservers() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("devservers");
    assert!(
        dir.join("node_modules/.bin/vite").exists(),
        "the dev servers are not installed: run tests/run --install-only (npm ci in {})",
        dir.display()
    );
    dir
}

/// `POST /v1/previews` with the probe, as the API and the CLI make a
/// preview by default (the harness's `TestAgent::preview` leaves it off).
async fn probed(agent: &TestAgent, port: u16) -> PreviewCreated {
    let answer = agent
        .client()
        .preview(port.into(), None)
        .await
        .expect("control API answers");
    answer
        .parse()
        .unwrap_or_else(|e| panic!("preview {port}: {e:?}"))
}

fn codes(created: &PreviewCreated) -> Vec<&str> {
    created.warnings.iter().map(|w| w.code.as_str()).collect()
}

fn warning<'a>(created: &'a PreviewCreated, code: &str) -> &'a Warning {
    created
        .warnings
        .iter()
        .find(|w| w.code == code)
        .unwrap_or_else(|| panic!("no {code} warning in {created:#?}"))
}

/// The backquoted values of a fix: what a user pastes.
fn values(warning: &Warning) -> Vec<&str> {
    warning.fix.split('`').skip(1).step_by(2).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vite_refuses_the_preview_host_until_allowed_hosts_has_the_domain() {
    let fixtures = devservers();
    let edge = DomainEdge::start().await;
    let agent = edge.agent().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let port_arg = port.to_string();
    let vite = fixtures.join("node_modules/.bin/vite");
    let vite = vite.to_str().expect("utf-8 path");

    let server = DevServer::start(
        vite,
        &["--port", &port_arg, "--strictPort"],
        &fixtures.join("vite"),
        dir.path().join("vite.log"),
    );
    server.serving(port).await;
    let created = probed(&agent, port).await;
    let blocked = warning(&created, "vite_host_blocked");
    assert!(blocked.message.contains("Vite"), "{blocked:?}");
    assert_eq!(
        values(blocked),
        ["server: { allowedHosts: ['.preview.test'] }"]
    );
    // The visitor gets Vite's answer as it is.
    let out = edge.visit(&created.url, &[]).await;
    assert_eq!(out.status, 403, "{out:?}");
    assert!(out.text().starts_with("Blocked request."), "{}", out.text());
    server.stop().await;

    let config = dir.path().join("vite.config.js");
    std::fs::write(
        &config,
        format!("export default {{ {} }};\n", values(blocked)[0]),
    )
    .expect("config");
    let server = DevServer::start(
        vite,
        &[
            "--port",
            &port_arg,
            "--strictPort",
            "--config",
            config.to_str().expect("utf-8 path"),
        ],
        &fixtures.join("vite"),
        dir.path().join("vite-allowed.log"),
    );
    server.serving(port).await;
    let again = probed(&agent, port).await;
    assert_eq!(again.name, created.name);
    assert!(
        !codes(&again).contains(&"vite_host_blocked"),
        "{again:#?}\n{}",
        server.log()
    );
    let out = edge.visit(&again.url, &[]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert!(out.text().contains("hello from vite"), "{}", out.text());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webpack_dev_server_refuses_the_host_until_allowed_hosts_has_the_domain() {
    let fixtures = devservers();
    let edge = DomainEdge::start().await;
    let agent = edge.agent().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let port_arg = port.to_string();
    let webpack = fixtures.join("node_modules/.bin/webpack");
    let webpack = webpack.to_str().expect("utf-8 path");
    let project = fixtures.join("webpack");

    let server = DevServer::start(
        webpack,
        &["serve", "--port", &port_arg],
        &project,
        dir.path().join("webpack.log"),
    );
    server.serving(port).await;
    let created = probed(&agent, port).await;
    let invalid = warning(&created, "webpack_invalid_host");
    assert!(
        invalid.message.contains("webpack-dev-server"),
        "{invalid:?}"
    );
    assert_eq!(
        values(invalid)[0],
        "devServer: { allowedHosts: ['.preview.test'] }"
    );
    let out = edge.visit(&created.url, &[]).await;
    assert_eq!(out.status, 403, "{out:?}");
    assert_eq!(out.text(), "Invalid Host header");
    server.stop().await;

    // The fixture's configuration with the fix's section added.
    let config = dir.path().join("webpack.config.js");
    std::fs::write(
        &config,
        format!(
            "module.exports = {{ mode: \"development\", entry: \"./src/index.js\", {} }};\n",
            values(invalid)[0]
        ),
    )
    .expect("config");
    let server = DevServer::start(
        webpack,
        &[
            "serve",
            "--port",
            &port_arg,
            "--config",
            config.to_str().expect("utf-8 path"),
        ],
        &project,
        dir.path().join("webpack-allowed.log"),
    );
    server.serving(port).await;
    let again = probed(&agent, port).await;
    assert!(codes(&again).is_empty(), "{again:#?}\n{}", server.log());
    let out = edge.visit(&again.url, &[]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert!(
        out.text().contains("calvin webpack fixture"),
        "{}",
        out.text()
    );
    server.stop().await;
}

/// A Django project made by `startproject` in `dir`, and how to run it.
struct Django {
    dir: PathBuf,
    port: u16,
}

impl Django {
    fn python() -> PathBuf {
        let python = calvin_tests::python::python();
        let found = std::process::Command::new(&python)
            .args(["-c", "import django"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "Django is not installed for {}: run tests/run --install-only",
            python.display()
        );
        python
    }

    async fn new(dir: &Path) -> Django {
        let python = Self::python();
        let made = tokio::process::Command::new(python)
            .args(["-m", "django", "startproject", "devsite"])
            .arg(dir)
            .status()
            .await
            .expect("django-admin runs");
        assert!(made.success());
        Django {
            dir: dir.to_owned(),
            port: free_port(),
        }
    }

    async fn manage(&self, args: &[&str], env: &[(&str, &str)]) {
        let status = tokio::process::Command::new(Self::python())
            .arg("manage.py")
            .args(args)
            .envs(env.iter().copied())
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .status()
            .await
            .expect("manage.py runs");
        assert!(status.success(), "manage.py {args:?}");
    }

    /// Adds `line` at the end of settings.py (later assignments win).
    fn set(&self, line: &str) {
        use std::io::Write;
        let path = self.dir.join("devsite/settings.py");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .expect("settings.py");
        writeln!(file, "{line}").expect("write settings.py");
    }

    /// `manage.py runserver` in its default configuration (autoreload off:
    /// a test restarts it).
    async fn run(&self, log: &str) -> DevServer {
        let addr = format!("127.0.0.1:{}", self.port);
        let server = DevServer::start(
            Self::python(),
            &["manage.py", "runserver", &addr, "--noreload"],
            &self.dir,
            self.dir.join(log),
        );
        let url = format!("http://127.0.0.1:{}/", self.port);
        let up = eventually(Duration::from_secs(30), || async {
            (curl(Path::new("/dev/null"), &[&url]).await.status != 0).then_some(())
        })
        .await;
        assert!(up.is_some(), "runserver did not start:\n{}", server.log());
        server
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn django_disallowed_host_until_allowed_hosts_has_the_domain() {
    let edge = DomainEdge::start().await;
    let agent = edge.agent().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let django = Django::new(dir.path()).await;

    let server = django.run("runserver.log").await;
    let created = probed(&agent, django.port).await;
    let disallowed = warning(&created, "django_disallowed_host");
    assert!(disallowed.message.contains("Django"), "{disallowed:?}");
    assert_eq!(
        values(disallowed)[0],
        "ALLOWED_HOSTS = ['.preview.test', 'localhost', '127.0.0.1', '[::1]']"
    );
    let out = edge.visit(&created.url, &[]).await;
    assert_eq!(out.status, 400, "{out:?}");
    assert!(out.text().contains("DisallowedHost"));
    server.stop().await;

    django.set(values(disallowed)[0]);
    let server = django.run("runserver-allowed.log").await;
    let again = probed(&agent, django.port).await;
    assert!(codes(&again).is_empty(), "{again:#?}\n{}", server.log());
    let out = edge.visit(&again.url, &[]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert!(
        out.text().contains("The install worked successfully!"),
        "{}",
        out.text()
    );
    server.stop().await;
}

/// Logs in to Django's admin through the edge as a browser would: the
/// login page, its CSRF cookie and token, then the form POST with the
/// page's origin. The POST's answer.
async fn admin_login(edge: &DomainEdge, url: &str, jar: &Path) -> CurlOutput {
    let jar = jar.to_str().expect("utf-8 path");
    let login = format!("{url}/admin/login/");
    let page = edge.visit(&login, &["-c", jar]).await;
    assert_eq!(page.status, 200, "{page:?}");
    let text = page.text();
    let token = text
        .split("name=\"csrfmiddlewaretoken\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF token in the login page");
    let form =
        format!("csrfmiddlewaretoken={token}&username=admin&password=s3cret-pw&next=/admin/");
    let origin = format!("Origin: {url}");
    let referer = format!("Referer: {login}");
    edge.visit(
        &login,
        &[
            "-b", jar, "-c", jar, "-H", &origin, "-H", &referer, "--data", &form,
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn django_admin_login_over_https_needs_a_trusted_origin() {
    let edge = DomainEdge::start().await;
    let agent = edge.agent().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let django = Django::new(dir.path()).await;
    django.set("ALLOWED_HOSTS = ['.preview.test', 'localhost', '127.0.0.1', '[::1]']");
    django.manage(&["migrate"], &[]).await;
    django
        .manage(
            &[
                "createsuperuser",
                "--noinput",
                "--username",
                "admin",
                "--email",
                "admin@example.com",
            ],
            &[("DJANGO_SUPERUSER_PASSWORD", "s3cret-pw")],
        )
        .await;

    let server = django.run("runserver.log").await;
    let created = probed(&agent, django.port).await;
    assert!(codes(&created).is_empty(), "{created:#?}");
    let out = admin_login(&edge, &created.url, &dir.path().join("jar-1")).await;
    assert_eq!(out.status, 403, "{out:?}");
    let origin_failure = format!(
        "Origin checking failed - {} does not match any trusted origins.",
        created.url
    );
    assert!(out.text().contains(&origin_failure), "{}", out.text());
    // What the agent made of the answer the visitor got: a hint on the
    // preview, in its request log and in `ls`, once however often the
    // visitor meets it.
    let again = admin_login(&edge, &created.url, &dir.path().join("jar-2")).await;
    assert_eq!(again.status, 403, "{again:?}");
    let log = eventually(Duration::from_secs(5), || async {
        let log: calvin_agent::api::RequestLog = agent
            .client()
            .requests(&created.name, "")
            .await
            .ok()?
            .parse()
            .ok()?;
        let posts = log
            .requests
            .iter()
            .filter(|r| r.method == "POST" && r.status == Some(403))
            .count();
        (posts == 2).then_some(log)
    })
    .await
    .expect("both refused POSTs in the request log");
    let hints: Vec<&str> = log.hints.iter().map(|h| h.code.as_str()).collect();
    assert_eq!(hints, ["django_csrf_origin"], "{:#?}", log.hints);
    let hint = log.hints[0].clone();
    let listed = agent.list().await;
    assert_eq!(listed.previews[0].hints, log.hints);
    let port = edge.https.port();
    let fixes = values(&hint);
    assert_eq!(
        fixes,
        [
            format!("CSRF_TRUSTED_ORIGINS = [\"https://*.preview.test:{port}\"]"),
            "SECURE_PROXY_SSL_HEADER = (\"HTTP_X_FORWARDED_PROTO\", \"https\")".to_owned(),
        ]
    );
    server.stop().await;

    // Either fix lets the login through: Django redirects to the admin.
    for (n, fix) in fixes.iter().enumerate() {
        let project = tempfile::tempdir().expect("tempdir");
        let copy = Django {
            dir: project.path().to_owned(),
            port: django.port,
        };
        copy_dir(&django.dir, &copy.dir);
        copy.set(fix);
        let server = copy.run("runserver-fixed.log").await;
        let out = admin_login(&edge, &created.url, &dir.path().join(format!("jar-f{n}"))).await;
        assert_eq!(out.status, 302, "{fix}: {out:?}\n{}", server.log());
        assert_eq!(out.header("location"), Some("/admin/"));
        let peek = &out.body[..out.body.len().min(4096)];
        assert_eq!(
            calvin_agent::refusals::recognise(out.status, &out.headers, peek, &created.url),
            None
        );
        server.stop().await;
    }
}

fn copy_dir(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .expect("cp runs");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_ipv6_loopback_only_is_reached_there() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let listener = std::net::TcpListener::bind("[::1]:0").expect("bind [::1]");
    listener.set_nonblocking(true).expect("nonblocking");
    let origin = Origin::start_in(listener);

    let created = probed(&agent, origin.port).await;
    assert!(created.listening);
    assert_eq!(
        created.reached.as_deref(),
        Some(format!("[::1]:{}", origin.port).as_str())
    );
    assert_eq!(codes(&created), ["ipv6_loopback_only"]);
    let info = &created.warnings[0];
    assert!(
        info.message.contains(&format!("[::1]:{}", origin.port)),
        "{info:?}"
    );
    let out = curl(&edge.ca(), &[&format!("{}/hello", created.url)]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.text(), "hello from origin\n");
}

/// A self-signed certificate for localhost, as (cert PEM, key PEM).
fn self_signed() -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    (cert.pem(), key.serialize_pem())
}

/// An HTTPS server (rustls) answering every request with 200.
async fn tls_server() -> (u16, tokio::task::JoinHandle<()>) {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (cert, key) = self_signed();
    let config = rustls::ServerConfig::builder_with_provider(calvin_edge::certs::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(cert.as_bytes()).expect("cert")],
            PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key"),
        )
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let _ = tls.read(&mut buf).await;
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_speaking_tls_is_told() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;

    let (port, server) = tls_server().await;
    let created = probed(&agent, port).await;
    assert!(created.listening);
    assert_eq!(codes(&created), ["tls_not_http"], "{created:#?}");
    assert!(
        values(&created.warnings[0])
            .iter()
            .any(|v| v.contains("--https"))
    );
    server.abort();

    // openssl's own server.
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = self_signed();
    std::fs::write(dir.path().join("cert.pem"), cert).expect("cert");
    std::fs::write(dir.path().join("key.pem"), key).expect("key");
    let port = free_port();
    let accept = format!("127.0.0.1:{port}");
    let openssl = DevServer::start(
        "openssl",
        &[
            "s_server", "-accept", &accept, "-cert", "cert.pem", "-key", "key.pem", "-www",
            "-quiet",
        ],
        dir.path(),
        dir.path().join("openssl.log"),
    );
    let up = eventually(Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(drop)
    })
    .await;
    assert!(up.is_some(), "openssl s_server:\n{}", openssl.log());
    let created = probed(&agent, port).await;
    assert_eq!(
        codes(&created),
        ["tls_not_http"],
        "{created:#?}\n{}",
        openssl.log()
    );
    openssl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_probe_no_request_reaches_the_server() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;

    let request = PreviewRequest {
        port: origin.port.into(),
        name: None,
        ttl_secs: None,
        probe: Some(false),
        protect: None,
        expires_secs: None,
    };
    let answer = agent.client().create(&request).await.expect("control API");
    let created: PreviewCreated = answer.parse().expect("created");
    assert!(created.listening);
    assert_eq!(
        created.reached.as_deref(),
        Some(format!("127.0.0.1:{}", origin.port).as_str())
    );
    assert!(created.warnings.is_empty());
    assert_eq!(origin.requests(), 0, "no request without the probe");

    // With it: one request, and a plain HTTP server has nothing to fix.
    let again = probed(&agent, origin.port).await;
    assert_eq!(again.name, created.name);
    assert!(again.warnings.is_empty(), "{again:#?}");
    assert_eq!(origin.requests(), 1, "the probe is one request");
    // Visitors never set it off again.
    for _ in 0..3 {
        let out = curl(&edge.ca(), &[&format!("{}/hello", again.url)]).await;
        assert_eq!(out.status, 200, "{out:?}");
    }
    assert_eq!(origin.requests(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_holds_the_preview_for_a_second_at_most() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let mute = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });

    let started = Instant::now();
    let created = probed(&agent, port).await;
    let took = started.elapsed();
    assert!(created.listening);
    assert!(created.warnings.is_empty(), "{created:#?}");
    // It waited for the answer (the server was asked), and not longer.
    assert!(took >= Duration::from_millis(900), "preview took {took:?}");
    assert!(took < Duration::from_secs(3), "preview took {took:?}");
    mute.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_another_interface_only_is_told() {
    let Some(netns) = Netns::or_skip("a_server_on_another_interface_only_is_told") else {
        return;
    };
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    // This side's end of the namespace's link: an address of this machine
    // that is not loopback.
    let elsewhere = std::net::TcpListener::bind((netns.host_ip, 0)).expect("bind");
    let addr = elsewhere.local_addr().expect("addr");

    let created = probed(&agent, addr.port()).await;
    assert!(!created.listening);
    assert_eq!(created.reached, None);
    assert_eq!(codes(&created), ["other_interface_only"], "{created:#?}");
    let told = &created.warnings[0];
    assert!(told.message.contains(&addr.to_string()), "{told:?}");
    assert!(
        values(told).contains(&format!("127.0.0.1:{}", addr.port()).as_str()),
        "{told:?}"
    );

    // Listening on loopback as the fix says, the warning goes.
    let origin = Origin::start_on(addr.port()).await;
    let again = probed(&agent, origin.port).await;
    assert!(again.listening);
    assert!(again.warnings.is_empty(), "{again:#?}");
    drop(elsewhere);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_each_warning_and_its_fix() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let (port, server) = tls_server().await;
    let socket = agent.socket.to_str().expect("utf-8 path").to_owned();
    let port_arg = port.to_string();

    let out = tokio::process::Command::new(binary("calvin-agent"))
        .args(["preview", &port_arg, "--socket", &socket])
        .output()
        .await
        .expect("calvin-agent runs");
    assert!(out.status.success(), "{out:?}");
    let created = probed(&agent, port).await;
    let told = &created.warnings[0];
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("warning: {}\n  fix: {}\n", told.message, told.fix)),
        "{stderr}"
    );

    let out = tokio::process::Command::new(binary("calvin-agent"))
        .args(["preview", &port_arg, "--no-probe", "--socket", &socket])
        .output()
        .await
        .expect("calvin-agent runs");
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning:"));
    server.abort();
}
