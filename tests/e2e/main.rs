//! End-to-end tests: the real `hale` binary against a real Alertmanager.

mod api;
mod bmc_sim;
mod browser;
mod events;
mod fuzzball;
mod gpu;
mod hardening;
mod harness;
mod kube_fake;
mod kubernetes;
mod monitoring;
mod nats;
mod pipeline;
mod policy;
mod remediation;
mod slurm;
mod ui;
