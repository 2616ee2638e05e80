//! The edge's TLS: its material and settings ([`tls`]), the certificate
//! every handshake reads ([`cert_store`]), the certificate's renewal by ACME
//! ([`acme`]), and the zone's authoritative DNS ([`dns`]), which answers
//! ACME's challenges.

pub mod acme;
pub mod cert_store;
pub mod dns;
pub mod tls;
