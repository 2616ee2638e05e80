//! calvin-tests: end-to-end tests of calvin. The real edge and agent run on
//! port 0 (through the libraries their binaries run, or the binaries
//! themselves), an [`origin::Origin`] plays the dev server, and real clients
//! (curl, a WebSocket client) play the visitors.

pub mod chat_world;
pub mod chromium;
pub mod cluster;
pub mod etcd;
pub mod fake_mattermost;
pub mod fake_slack;
pub mod fake_state;
pub mod family;
pub mod gateway;
pub mod git;
pub mod h3;
pub mod harness;
pub mod multi_edge;
pub mod multipart;
pub mod netns;
pub mod origin;
pub mod pebble;
pub mod ports;
pub mod python;
pub mod raw_client;
pub mod raw_origin;
pub mod serve_edge;

pub use chromium::Chromium;
pub use cluster::{ClusterCerts, ClusterEdges, EdgeCerts, cluster_toml};
pub use etcd::Etcd;
pub use harness::*;
pub use origin::{Origin, pattern_bytes, sha256_hex};
pub use ports::{SilentPort, edge_addresses, free_port, free_udp_tcp_port, silent_port};
pub use raw_client::{Exchange, exchange, h1_client, h2_client, read_all, tls_h1, tls_to};
pub use raw_origin::RawOrigin;
