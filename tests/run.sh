#!/usr/bin/env bash
# The one test command: installs the real components the tests use when they are
# missing (Debian packages), then checks formatting and lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v prometheus-alertmanager >/dev/null || missing+=(prometheus-alertmanager)
command -v promtool >/dev/null || missing+=(prometheus)
command -v mtail >/dev/null || missing+=(mtail)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Keep Debian's init scripts from starting the daemons with their default configs.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
tests/promtool.sh
tests/mtail.sh
cargo build --locked --bin hale
tests/examples.sh
cargo test --all-targets --locked
