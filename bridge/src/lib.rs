//! hale: Prometheus alerts in, node health (conditions, a reliability score, a durable
//! history) out. The decision core in [`core`] is pure; everything that talks to the
//! world — Alertmanager, the store, HTTP, metrics — is an adapter module at the edge.

pub mod alertmanager;
pub mod cli;
pub mod config;
pub mod core;
pub mod http;
pub mod kubernetes;
pub mod liveness;
pub mod metrics;
pub mod notify;
pub mod orchestrator;
pub mod service;
pub mod store;
pub mod view;

/// Install the TLS crypto provider reqwest uses (ring: aws-lc-rs would add a long C
/// build). Idempotent; every HTTP client constructor calls it.
pub fn init_tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
