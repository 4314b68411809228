//! End-to-end tests: the real `hale` binary against a real Alertmanager.

mod api;
mod harness;
mod pipeline;
