//! The admin listener (`[admin] listen`, loopback by default): what an
//! operator's tools ask the edge, apart from visitors.
//!
//! - `GET /metrics`: Prometheus text ([`crate::ops::metrics`]).
//! - `GET /healthz`: live. 200 while the edge serves at all, with the
//!   health report ([`crate::ops::health`]), for a liveness probe (restarting an
//!   edge that waits for its first certificate would not help it).
//! - `GET /readyz`: ready for visitors. 200 when a certificate is loaded
//!   and not expiring within a day, and the listeners (DNS among them) are
//!   serving; 503 with each reason otherwise, and from the moment a stop
//!   begins, so a load balancer turns visitors away before the edge drains.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use calvin_common::metrics_http::{answer, serve_with, text};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use time::OffsetDateTime;
use tokio::net::TcpListener;

use crate::certs::cert_store::CertStore;
use crate::ops::health::Health;
use crate::ops::metrics::{self, Metrics};

/// A certificate expiring sooner than this makes the edge not ready.
pub const READY_MIN_VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// What the admin listener reports on.
pub struct Admin {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub certs: Arc<CertStore>,
    /// True while the listeners serve: from the start of `Edge::run` to the
    /// start of its stop.
    pub serving: Arc<AtomicBool>,
}

impl Admin {
    /// Serves the admin listener; it goes on while the edge drains (its
    /// readiness then says so), until the task is aborted.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        serve_with(listener, move |req| self.answer(req)).await
    }

    fn answer(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
        }
        match req.uri().path() {
            "/metrics" => answer(StatusCode::OK, metrics::CONTENT_TYPE, self.metrics.encode()),
            "/healthz" => {
                let mut response = self.health.response();
                *response.status_mut() = StatusCode::OK;
                response
            }
            "/readyz" => {
                let unready = self.unready();
                if unready.is_empty() {
                    text(StatusCode::OK, "ready\n".into())
                } else {
                    text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not ready: {}\n", unready.join("; ")),
                    )
                }
            }
            _ => text(
                StatusCode::NOT_FOUND,
                "the admin listener serves /metrics, /healthz and /readyz\n".into(),
            ),
        }
    }

    /// Why the edge is not ready for visitors, if it is not.
    pub fn unready(&self) -> Vec<String> {
        let mut why = Vec::new();
        if !self.serving.load(Ordering::Acquire) {
            why.push("the listeners are not serving (starting or stopping)".to_owned());
        }
        why.extend(certificate_unready(&self.certs));
        why
    }
}

/// Why the certificate makes the edge not ready, if it does: none loaded
/// yet, or one that expires within [`READY_MIN_VALIDITY`].
fn certificate_unready(certs: &CertStore) -> Option<String> {
    let Some(info) = certs.info() else {
        return Some("no certificate is loaded yet".to_owned());
    };
    let left = info.not_after - OffsetDateTime::now_utc();
    (left < READY_MIN_VALIDITY).then(|| {
        format!(
            "the certificate expires in {} s (at {}), within a day",
            left.whole_seconds().max(0),
            info.not_after
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::tls::TlsMaterial;

    /// A self-signed certificate for `preview.test` valid for `hours`.
    fn valid_for(hours: i64) -> TlsMaterial {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["preview.test".to_owned()]).expect("params");
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::hours(hours);
        let cert = params.self_signed(&key).expect("certificate");
        TlsMaterial {
            certs: vec![cert.der().clone()],
            key: rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        }
    }

    #[test]
    fn a_certificate_expiring_within_a_day_makes_the_edge_unready() {
        let certs = CertStore::new();
        assert_eq!(
            certificate_unready(&certs).as_deref(),
            Some("no certificate is loaded yet")
        );
        certs.install(&valid_for(12)).expect("install");
        let why = certificate_unready(&certs).expect("unready");
        assert!(why.ends_with("within a day"), "{why}");
        certs.install(&valid_for(23)).expect("install");
        assert!(certificate_unready(&certs).is_some());
        certs.install(&valid_for(25)).expect("install");
        assert_eq!(certificate_unready(&certs), None);
    }
}
