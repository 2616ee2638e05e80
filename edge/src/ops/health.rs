//! `GET /healthz` on any host that is not a preview (the zone's apex, the
//! edge's address): the certificate being served and its renewal, and how
//! many agents are connected and previews online, as JSON.
//! 200 while a valid certificate is served, 503 otherwise, so a load
//! balancer or a monitor can act on the status alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;
use time::OffsetDateTime;

use crate::certs::acme::{Renewal, RenewalStatus};
use crate::certs::cert_store::CertStore;

pub const PATH: &str = "/healthz";

pub struct Health {
    certs: Arc<CertStore>,
    renewal: Renewal,
    source: &'static str,
    started: Instant,
    tunnel: Tunnel,
}

/// Where the health report reads what the tunnel carries now.
pub struct Tunnel {
    /// Agents connected (welcomed and not yet gone).
    pub agents: Arc<AtomicUsize>,
    /// Previews served now (their agent connected).
    pub previews: Box<dyn Fn() -> usize + Send + Sync>,
}

#[derive(Serialize)]
struct Report {
    status: &'static str,
    uptime_secs: u64,
    certificate: Option<CertificateReport>,
    renewal: RenewalStatus,
    agents_connected: usize,
    previews_online: usize,
}

#[derive(Serialize)]
struct CertificateReport {
    /// "acme", "files" or "fixed".
    source: &'static str,
    serial: String,
    names: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    not_before: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    not_after: OffsetDateTime,
    expires_in_secs: i64,
}

impl Health {
    pub fn new(
        certs: Arc<CertStore>,
        renewal: Renewal,
        source: &'static str,
        tunnel: Tunnel,
    ) -> Self {
        Self {
            certs,
            renewal,
            source,
            started: Instant::now(),
            tunnel,
        }
    }

    pub fn response(&self) -> Response<Full<Bytes>> {
        let now = OffsetDateTime::now_utc();
        let certificate = self.certs.info().map(|info| CertificateReport {
            source: self.source,
            expires_in_secs: (info.not_after - now).whole_seconds(),
            serial: info.serial,
            names: info.names,
            not_before: info.not_before,
            not_after: info.not_after,
        });
        let status = match &certificate {
            None => "no-certificate",
            Some(c) if c.expires_in_secs <= 0 => "certificate-expired",
            Some(_) => "ok",
        };
        let report = Report {
            status,
            uptime_secs: self.started.elapsed().as_secs(),
            certificate,
            renewal: self.renewal.status(),
            agents_connected: self.tunnel.agents.load(Ordering::Relaxed),
            previews_online: (self.tunnel.previews)(),
        };
        let body = serde_json::to_vec_pretty(&report).unwrap_or_default();
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = if status == "ok" {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}
