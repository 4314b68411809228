#!/usr/bin/env bash
# Checks the shipped examples and dashboard with the real tools:
#   - examples/alertmanager.yml with amtool (config, and where sample alerts route);
#   - examples/prometheus.yml with promtool (the config and the rule files it loads);
#   - examples/hale-*.yaml with `hale check-config` (the parser and validation
#     `hale serve` uses), on temporary copies whose secret files (tokens, signing
#     secrets, BMC credentials) exist, and the quick start as it is;
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
