# Sourced by the test scripts: install_missing COMMAND=PACKAGE ... installs, with
# apt, the Debian package of each command that is not on PATH yet.
install_missing() {
    local missing=() pair
    for pair in "$@"; do
        command -v "${pair%%=*}" >/dev/null || missing+=("${pair#*=}")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Keep Debian's init scripts from starting the daemons with their default configs.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# install_venv PACKAGE ... installs, into the repository's .venv (created when
# missing), each Python package not installed there yet.
install_venv() {
    [ -x .venv/bin/python ] || python3 -m venv .venv
    local missing
    # Asking importlib is instant; `pip show` would cost a second on every run.
    mapfile -t missing < <(.venv/bin/python - "$@" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, distribution
for name in sys.argv[1:]:
    try:
        distribution(name)
    except PackageNotFoundError:
        print(name)
PY
)
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "installing into .venv: ${missing[*]}"
    .venv/bin/pip install --quiet --disable-pip-version-check "${missing[@]}"
}
