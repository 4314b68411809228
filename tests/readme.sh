#!/usr/bin/env bash
# Runs the README's "Adopting hale, in order" as a new user would: the commands of
# its ```sh blocks, read from README.md as they stand, in order, on the real
# node_exporter, Prometheus and Alertmanager, then the fault the section describes
# (node_exporter stopped on bm-01: heartbeat_missed raised, then cleared when it
# is back) — so the README cannot drift from what works.
#
# The steps run as written on the ports and hostnames the examples name
# (127.0.0.1:9470, :9090, :9093, bm-01:9100, bm-02:9100): in a network namespace
# of their own (only loopback, nothing else listening) with an /etc/hosts that
# puts bm-01 on 127.0.0.2 and bm-02 on 127.0.0.1, each with its node_exporter
# (the textfile collector alone: a collector failing on this machine's hardware
# is not what is tested), on copies of examples/,
# rules/ and alerts/ edited as the section says (the jobs of exporters not run
# removed, the token-less receiver). `cargo install` is the one command not run:
# the hale it would install is the one this checkout built, put on PATH.
# Needs root (or unprivileged user namespaces) for unshare; HALE names the binary
# (default target/debug/hale).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
HALE=${HALE:-$repo/target/debug/hale}

for tool in prometheus promtool prometheus-alertmanager amtool prometheus-node-exporter unshare ip python3; do
    command -v "$tool" >/dev/null || { echo "readme.sh: $tool not found (run tests/run.sh, which installs it)" >&2; exit 1; }
done
[ -x "$HALE" ] || { echo "readme.sh: $HALE not found: build it (cargo build) or set HALE" >&2; exit 1; }

if [ "${HALE_README_NS:-}" != 1 ]; then
    export HALE_README_NS=1 HALE
    if [ "$(id -u)" = 0 ]; then
        exec unshare --net --mount "$0" "$@"
    fi
    exec unshare --map-root-user --net --mount "$0" "$@"
fi

# --- Inside the namespace ---------------------------------------------------
ip link set lo up
tmp=$(mktemp -d)
pids=()
cleanup() {
    local status=$?
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "$status" != 0 ]; then
        for log in "$tmp"/*.log; do
            echo "--- $log (last 40 lines)" >&2
            tail -n 40 "$log" >&2
        done
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

printf '127.0.0.1 localhost bm-02\n127.0.0.2 bm-01\n' >"$tmp/hosts"
mount --bind "$tmp/hosts" /etc/hosts
mkdir -p "$tmp/bin" "$tmp/work"
ln -s "$HALE" "$tmp/bin/hale"
export PATH="$tmp/bin:$PATH"
cp -r examples rules alerts dashboards "$tmp/work/"
cd "$tmp/work"

# The edits the section asks for: no smartctl_exporter, dcgm-exporter or mtail
# here, and a hale without a token.
python3 - <<'EOF'
import re
p = "examples/prometheus.yml"
text = open(p).read()
for job in ("smartctl", "dcgm", "mtail"):
    text, n = re.subn(r"(?ms)^  - job_name: %s\b.*?(?=^  - job_name:|^  #|\Z)" % job, "", text)
    assert n == 1, f"no {job} job in {p}"
open(p, "w").write(text)
p = "examples/alertmanager.yml"
text = open(p).read()
text, n = re.subn(r"(?ms)^        http_config:\n(?:^          .*\n)+", "", text)
assert n == 1, f"no http_config block in {p}"
open(p, "w").write(text)
EOF

# The sites' exporters (not among the README's commands: sites run them already),
# one per host, on the addresses /etc/hosts gives them.
start() {
    local name=$1; shift
    "$@" >"$tmp/$name.log" 2>&1 &
    pids+=($!)
    echo $! >"$tmp/$name.pid"
}
wait_port() {
    local host=$1 port=$2 what=$3
    for _ in $(seq 1 300); do
        if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "readme.sh: $what never listened on :$port" >&2
    exit 1
}
exporter() {
    start "node-exporter-$1" prometheus-node-exporter --web.listen-address="$2:9100" \
        --collector.disable-defaults --collector.textfile --collector.textfile.directory="$tmp"
    wait_port "$2" 9100 "node_exporter of $1"
}
exporter bm-01 127.0.0.2
exporter bm-02 127.0.0.1

# The section's commands, in order.
python3 - "$repo/README.md" >"$tmp/steps" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
section = re.search(r"(?ms)^## Adopting hale, in order\n(.*?)^## ", text).group(1)
blocks = re.findall(r"(?ms)^ *```sh\n(.*?)^ *```", section)
assert len(blocks) >= 4, f"only {len(blocks)} sh blocks in the section"
for block in blocks:
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line:
            print(line)
EOF
port_of() {
    case "$1" in
        "hale serve"*) echo 9470 ;;
        prometheus-alertmanager*) echo 9093 ;;
        prometheus*) echo 9090 ;;
        *) echo "readme.sh: no port known for the server '$1'" >&2; exit 1 ;;
    esac
}
n=0
while IFS= read -r step; do
    n=$((n + 1))
    case "$step" in
        "cargo install "*)
            echo "readme.sh: [$n] $step (skipped: hale on PATH is this checkout's build)"
            ;;
        *" &")
            cmd=${step% &}
            echo "readme.sh: [$n] $cmd &"
            start "step-$n" bash -c "exec $cmd"
            wait_port 127.0.0.1 "$(port_of "$cmd")" "$cmd"
            ;;
        *)
            # Once servers run, a command may need them to have met (step 4 says
            # "within a minute"): it is asked again, as a user would, for 3 minutes.
            echo "readme.sh: [$n] $step"
            deadline=$((SECONDS + (${#pids[@]} > 1 ? 180 : 0)))
            until bash -c "$step" >"$tmp/step-$n.log" 2>&1; do
                if [ $SECONDS -ge $deadline ]; then
                    echo "readme.sh: '$step' failed:" >&2
                    cat "$tmp/step-$n.log" >&2
                    exit 1
                fi
                sleep 2
            done
            ;;
    esac
done <"$tmp/steps"

# What step 4 says to expect, then the fault it describes.
eventually() {
    local what=$1 seconds=$2; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if [ $SECONDS -ge $deadline ]; then
            echo "readme.sh: $what: not within ${seconds}s" >&2
            "$@" >&2 || true
            exit 1
        fi
        sleep 2
    done
    echo "readme.sh: $what ($((seconds - deadline + SECONDS))s)"
}
node_json() { hale node show "$1" -o json; }
healthy() { node_json "$1" | python3 -c 'import json,sys; n=json.load(sys.stdin); sys.exit(not (n["health"] == "Healthy" and n["score"] == 100 and n["lastHeartbeat"]))'; }
has() { node_json "$1" | python3 -c 'import json,sys; n=json.load(sys.stdin); sys.exit(not any(c["type"] == sys.argv[1] for c in n["conditions"]))' "$2"; }
lacks() { ! has "$@"; }
trusted() { hale alerts -o json | python3 -c 'import json,sys; a=json.load(sys.stdin); sys.exit(not (a["source"]["up"] and not a["source"]["stale"]))'; }

eventually "the source is up and trusted" 120 trusted
eventually "bm-01 is Healthy at 100 with a heartbeat" 180 healthy bm-01
eventually "bm-02 is Healthy at 100 with a heartbeat" 60 healthy bm-02
hale node list

# "Stop node_exporter on bm-01", then start it again.
kill "$(cat "$tmp/node-exporter-bm-01.pid")"
eventually "bm-01: heartbeat_missed raised" 300 has bm-01 heartbeat_missed
eventually "bm-02 still Healthy" 5 healthy bm-02
exporter bm-01 127.0.0.2
eventually "bm-01: heartbeat_missed cleared" 180 lacks bm-01 heartbeat_missed
hale node events bm-01
hale node events bm-01 -o json | python3 -c '
import json, sys
kinds = [e["type"] for e in json.load(sys.stdin)["events"]]
assert "HEARTBEAT_MISSED" in kinds and "HEARTBEAT_RESUMED" in kinds, kinds'
echo "readme.sh: the README's adoption steps work as written"
