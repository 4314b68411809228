#!/usr/bin/env bash
# Checks the shipped examples and dashboard with the real tools:
#   - examples/alertmanager.yml with amtool (config, and where sample alerts route);
#   - examples/prometheus.yml with promtool (the config and the rule files it loads);
#   - examples/hale-*.yaml with `hale check-config` (the parser and validation
#     `hale serve` uses), on temporary copies whose secret files (tokens, signing
#     secrets, BMC credentials) exist, and the quick start as it is;
#   - examples/dcgm-exporter-counters.csv: well formed, NVIDIA's defaults kept,
#     every DCGM field the GPU rules read listed;
#   - examples/scsi-ioerr.sh on a made-up sysfs, its output checked by promtool;
#   - dashboards/*.json: valid JSON, every PromQL expression valid (promtool, as
#     recording rules), every metric it reads documented in README.md.
# HALE names the hale binary (default target/debug/hale; this script does not build it).
set -euo pipefail
cd "$(dirname "$0")/.."

HALE=${HALE:-target/debug/hale}
for tool in amtool promtool python3; do
    command -v "$tool" >/dev/null || { echo "examples.sh: $tool not found (Debian: prometheus-alertmanager, prometheus, python3)" >&2; exit 1; }
done
[ -x "$HALE" ] || { echo "examples.sh: $HALE not found: build it (cargo build) or set HALE" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- Alertmanager -----------------------------------------------------------
amtool check-config examples/alertmanager.yml
# Every alert reaches hale; hale-only signals page nobody; the rest reach `default`.
route() {
    local want=$1; shift
    amtool config routes test --config.file examples/alertmanager.yml --verify.receivers="$want" "$@" 2>/dev/null >/dev/null \
        || { echo "examples.sh: alertmanager.yml routes {$*} to '$(amtool config routes test --config.file examples/alertmanager.yml "$@" 2>/dev/null)', not '$want'" >&2; exit 1; }
}
route hale,default alertname=SmartFailing node=bm-01 severity=critical
route hale,default alertname=NodeCollectorFailed node=bm-01 hale_signal=collector_failed
route hale,blackhole alertname=NodeHeartbeat node=bm-01 hale_signal=heartbeat
route hale,blackhole alertname=Watchdog hale_signal=watchdog
route hale,blackhole alertname=DcgmExporterAbsent node=bm-01 hale_signal=unavailable
echo "examples.sh: alertmanager.yml routes every alert to hale"

# --- Prometheus (rule files included, relative to the config) ----------------
promtool check config examples/prometheus.yml

# --- hale configurations ----------------------------------------------------
# Copies with every secret file (apiTokenFile, secretFile) pointed at a temporary
# file holding a fake secret, and the store under $tmp; nothing else changes.
for f in examples/hale-*.yaml; do
    copy="$tmp/$(basename "$f")"
    python3 - "$f" "$copy" "$tmp" <<'EOF'
import re, sys
src, dst, tmp = sys.argv[1:]
n = 0
def secret(m):
    global n
    n += 1
    path = f"{tmp}/secret-{n}"
    with open(path, "w") as f:
        # BMC credentials are `username:password`; tokens and secrets one word.
        f.write("admin:not-a-real-secret\n" if "credentialsFile" in m.group(1) else "not-a-real-secret\n")
    return f"{m.group(1)}{path}"
text = open(src).read()
text = re.sub(r"(?m)^(\s*(?:-\s+)?(?:apiTokenFile|secretFile|credentialsFile):\s*)[^\s,}]+", secret, text)
text = re.sub(r"(credentialsFile:\s*)/[^\s,}]+", secret, text)
text = re.sub(r"(?m)^(\s+path:\s*)\S+", lambda m: f"{m.group(1)}{tmp}/store", text)
open(dst, "w").write(text)
EOF
    RUST_BACKTRACE=0 "$HALE" check-config "$copy"
    # The check is strict: the same copy with an unknown key must be refused.
    printf 'notAKey: 1\n' | cat "$copy" - >"$copy.bad"
    if RUST_BACKTRACE=0 "$HALE" check-config "$copy.bad" >/dev/null 2>&1; then
        echo "examples.sh: $HALE check-config accepted an unknown key in $copy.bad" >&2
        exit 1
    fi
done

# The quick start runs as it is from the repository root: no file to make first.
RUST_BACKTRACE=0 "$HALE" check-config examples/hale-quickstart.yaml

# --- dcgm-exporter counters -------------------------------------------------
# Every line `FIELD, gauge|counter, help`; the fields of NVIDIA's default list
# (etc/default-counters.csv) and of its chart's DCP list kept; and every DCGM
# field the rules and alerts read listed.
python3 - examples/dcgm-exporter-counters.csv rules/gpu.yml alerts/gpu.yml alerts/collectors.yml <<'EOF'
import re, sys
csv, *rule_files = sys.argv[1:]
fields = {}
for n, line in enumerate(open(csv), 1):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    parts = [p.strip() for p in line.split(",", 2)]
    if len(parts) != 3 or not re.fullmatch(r"DCGM_FI_[A-Z0-9_]+", parts[0]) or parts[1] not in ("gauge", "counter") or not parts[2]:
        sys.exit(f"examples.sh: {csv}:{n}: not `DCGM_FI_FIELD, gauge|counter, help`: {line}")
    fields[parts[0]] = n
defaults = """DCGM_FI_DEV_SM_CLOCK DCGM_FI_DEV_MEM_CLOCK DCGM_FI_DEV_MEMORY_TEMP DCGM_FI_DEV_GPU_TEMP
DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION DCGM_FI_DEV_PCIE_TX_THROUGHPUT
DCGM_FI_DEV_PCIE_RX_THROUGHPUT DCGM_FI_DEV_PCIE_REPLAY_COUNTER DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_MEM_COPY_UTIL
DCGM_FI_DEV_ENC_UTIL DCGM_FI_DEV_DEC_UTIL DCGM_FI_DEV_XID_ERRORS DCGM_FI_DEV_FB_FREE DCGM_FI_DEV_FB_USED
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL DCGM_FI_DEV_VGPU_LICENSE_STATUS DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS DCGM_FI_DEV_ROW_REMAP_FAILURE DCGM_FI_PROF_GR_ENGINE_ACTIVE
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE DCGM_FI_PROF_DRAM_ACTIVE DCGM_FI_PROF_PCIE_TX_BYTES DCGM_FI_PROF_PCIE_RX_BYTES""".split()
missing = [f for f in defaults if f not in fields]
if missing:
    sys.exit(f"examples.sh: {csv} drops dcgm-exporter's own counters: {missing}")
# The old clock field name is read for older exporters; the CSV lists the current one.
read = {m for f in rule_files for m in re.findall(r"DCGM_FI_[A-Z0-9_]+", open(f).read())}
read -= {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_"}
unlisted = sorted(f for f in read if f not in fields and not any(g.startswith(f) for g in fields))
if unlisted:
    sys.exit(f"examples.sh: the rules read {unlisted}, which {csv} does not list")
print(f"examples.sh: {csv}: {len(fields)} counters, every field the rules read among them")
EOF

# --- SCSI I/O error collector ------------------------------------------------
# On a made-up sysfs: two SCSI disks (one count in hexadecimal) and an NVMe one,
# which keeps none; the file must be valid exposition with exactly the two.
sysfs="$tmp/sys"
mkdir -p "$sysfs/block/sda/device" "$sysfs/block/sdb/device" "$sysfs/block/nvme0n1/device" "$tmp/textfile"
echo 0x1a >"$sysfs/block/sda/device/ioerr_cnt"
echo 0x0 >"$sysfs/block/sdb/device/ioerr_cnt"
SYSFS="$sysfs" sh examples/scsi-ioerr.sh "$tmp/textfile"
promtool check metrics <"$tmp/textfile/scsi_ioerr.prom"
series=$(grep -v '^#' "$tmp/textfile/scsi_ioerr.prom")
want=$'node_scsi_ioerr_total{device="sda"} 26\nnode_scsi_ioerr_total{device="sdb"} 0'
[ "$series" = "$want" ] || { echo "examples.sh: scsi-ioerr.sh wrote:"$'\n'"$series" >&2; exit 1; }
[ "$(ls "$tmp/textfile")" = scsi_ioerr.prom ] || { echo "examples.sh: scsi-ioerr.sh left $(ls "$tmp/textfile")" >&2; exit 1; }
echo "examples.sh: scsi-ioerr.sh writes each SCSI device's count"

# --- Dashboards -------------------------------------------------------------
for d in dashboards/*.json; do
    python3 -m json.tool "$d" >/dev/null
    rules="$tmp/$(basename "$d" .json).rules.yml"
    python3 - "$d" "$rules" README.md <<'EOF'
import json, re, sys
dash_file, rules_file, readme_file = sys.argv[1:]
dash = json.load(open(dash_file))
readme = open(readme_file).read()

def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))

exprs = []   # (where, expr)
for p in panels(dash.get("panels", [])):
    for t in p.get("targets", []):
        if t.get("expr"):
            exprs.append((f"panel {p.get('id')} '{p.get('title')}' target {t.get('refId')}", t["expr"]))
for v in dash.get("templating", {}).get("list", []):
    if v.get("type") != "query":
        continue
    q = v.get("query")
    q = q.get("query", "") if isinstance(q, dict) else (q or "")
    m = re.fullmatch(r"\s*label_values\(\s*(.*?)\s*,\s*\w+\s*\)\s*", q)
    if m and m.group(1):
        exprs.append((f"variable {v['name']}", m.group(1)))
    elif not re.fullmatch(r"\s*(label_names|metrics)\(.*\)\s*", q):
        exprs.append((f"variable {v['name']}", q))
if not exprs:
    sys.exit(f"{dash_file}: no expressions found")

DURATIONS = {"__rate_interval": "1m", "__interval": "30s", "__range": "1h",
             "__interval_ms": "30000", "__range_s": "3600", "__range_ms": "3600000"}
def substitute(expr):
    def var(m):
        name = m.group(1) or m.group(2) or m.group(3)
        return DURATIONS.get(name, "example")
    # ${name}, ${name:fmt}, [[name]], $name
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$([A-Za-z_]\w*)", var, expr)

# The metric names an expression reads: identifiers outside strings, label
# matchers, ranges and grouping clauses that are neither functions nor keywords.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and",
            "or", "unless", "bool", "offset", "inf", "nan", "atan2",
            # aggregation operators: `sum by (x) (...)` leaves `sum (` above anyway
            "sum", "min", "max", "avg", "count", "group", "stddev", "stdvar",
            "topk", "bottomk", "quantile", "count_values"}
def metrics(expr):
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    return names

problems = []
with open(rules_file, "w") as out:
    out.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, (where, expr) in enumerate(exprs):
        out.write(f"      # {where}\n      - record: dashboard:expr_{i}\n        expr: {json.dumps(substitute(expr))}\n")
        for name in sorted(metrics(expr)):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if not any(re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", readme) for n in (name, base)):
                problems.append(f"{dash_file}: {where}: metric {name} is not documented in README.md")
if problems:
    sys.exit("\n".join(problems))
print(f"examples.sh: {dash_file}: {len(exprs)} expressions, metrics all in README.md")
EOF
    promtool check rules "$rules"
done

echo "examples.sh: all examples and dashboards check out"
