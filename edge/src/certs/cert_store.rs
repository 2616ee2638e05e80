//! The certificate the edge serves, swappable at run time.
//!
//! HTTPS and QUIC handshakes ask [`CertStore`] (a rustls
//! `ResolvesServerCert`) for the current certificate, so a renewal changes
//! what new handshakes see while connections already open go on with the
//! one they started with.

use std::fmt;
use std::sync::{Arc, RwLock};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::certs::tls::{TlsError, TlsMaterial, provider};

/// What is known about a certificate: for logs, the health endpoint and
/// the renewal schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Hex, as `openssl x509 -serial` prints it.
    pub serial: String,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    /// DNS names of the subjectAltName extension.
    pub names: Vec<String>,
}

impl CertInfo {
    /// Reads the leaf of a chain.
    pub fn of(leaf: &[u8]) -> Result<CertInfo, TlsError> {
        let (_, cert) = X509Certificate::from_der(leaf)
            .map_err(|e| TlsError::Parse(format!("the certificate does not parse: {e}")))?;
        let validity = cert.validity();
        let names = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|n| match n {
                        GeneralName::DNSName(name) => Some(name.to_ascii_lowercase()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(CertInfo {
            serial: cert.raw_serial_as_string().replace(':', ""),
            not_before: validity.not_before.to_datetime(),
            not_after: validity.not_after.to_datetime(),
            names,
        })
    }

    /// Whether the certificate is for exactly what the edge serves:
    /// `domain` and `*.domain`.
    pub fn covers_zone(&self, domain: &str) -> bool {
        let wildcard = format!("*.{domain}");
        self.names.iter().any(|n| n == domain) && self.names.contains(&wildcard)
    }
}

impl fmt::Display for CertInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "serial {} for {} valid until {}",
            self.serial,
            self.names.join(", "),
            self.not_after
        )
    }
}

struct Current {
    key: Arc<CertifiedKey>,
    info: CertInfo,
}

/// The current certificate; empty until the first one is installed (an
/// ACME edge on its first start), when handshakes fail.
#[derive(Default)]
pub struct CertStore {
    current: RwLock<Option<Current>>,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("info", &self.info())
            .finish()
    }
}

impl CertStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks the chain and key and makes them current for new handshakes.
    pub fn install(&self, material: &TlsMaterial) -> Result<CertInfo, TlsError> {
        let leaf = material.certs.first().ok_or(TlsError::Empty)?;
        let info = CertInfo::of(leaf)?;
        let key = CertifiedKey::from_der(
            material.certs.clone(),
            material.key.clone_key(),
            &provider(),
        )?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Current {
            key: Arc::new(key),
            info: info.clone(),
        });
        Ok(info)
    }

    pub fn info(&self) -> Option<CertInfo> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current.as_ref().map(|c| c.info.clone())
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current.as_ref().map(|c| c.key.clone())
    }
}
