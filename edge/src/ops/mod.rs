//! What an operator reads: the admin listener ([`admin`]: `/metrics`,
//! `/healthz`, `/readyz`), the metrics' exposition ([`metrics`]) and the
//! health report ([`health`]).

pub mod admin;
pub mod health;
pub mod metrics;
