#!/usr/bin/env bash
# Checks the shipped monitoring content: rules and alerts are valid, their promtool
# unit tests pass, every alert carries what STYLE.md item 13 asks (for, severity,
# summary, description, a runbook_url whose runbook exists) and is tested both
# firing (with its annotations) and not firing, and every recording rule is tested.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v promtool >/dev/null || { echo "promtool not found (Debian: apt-get install prometheus)" >&2; exit 1; }

promtool check rules rules/*.yml alerts/*.yml
promtool test rules tests/promtool/*.yml

runbooks=https://github.com/hale-dev/hale/blob/main/alerts/runbooks
fail=0
problem() { echo "promtool.sh: $*" >&2; fail=1; }

# Per alert: the keys it must carry, and a runbook_url naming its own runbook.
while read -r file alert missing url; do
    [ "$missing" = "-" ] || problem "$file: alert $alert lacks: ${missing//,/ }"
    [ "$url" = "$runbooks/$alert.md" ] || problem "$file: alert $alert: runbook_url '$url' is not $runbooks/$alert.md"
    [ -f "alerts/runbooks/$alert.md" ] || problem "$file: alert $alert: alerts/runbooks/$alert.md does not exist"
done < <(awk '
    function flush() {
        if (alert == "") return
        missing = ""
        n = split("for severity summary description runbook_url", keys, " ")
        for (i = 1; i <= n; i++) if (!(keys[i] in seen)) missing = missing (missing ? "," : "") keys[i]
        print file, alert, (missing ? missing : "-"), (url ? url : "-")
        alert = ""; url = ""; delete seen
    }
    FNR == 1 { flush(); file = FILENAME }
    /^ *- (alert|record):/ { flush() }
    /^ *- alert:/ { alert = $3 }
    alert != "" && match($0, /^ *(for|severity|summary|description|runbook_url):/) {
        key = $1; sub(/:$/, "", key); seen[key] = 1
        if (key == "runbook_url") url = $2
    }
    END { flush() }
' alerts/*.yml)

alerts=$(grep -hE '^ *- alert:' alerts/*.yml | awk '{print $3}' | sort -u)

# No runbook without its alert.
for f in alerts/runbooks/*.md; do
    name=$(basename "$f" .md)
    grep -qxF "$name" <<<"$alerts" || problem "$f: no alert named $name"
done

# Every alert tested firing (with exp_annotations) and not firing. The Watchdog is
# vector(1): it has no "not firing" to test.
tested=$(awk '
    /^ *- alertname:/ { cur = $3 }
    /exp_alerts: *\[\] *$/ { quiet[cur] = 1 }
    /^ *- exp_labels:/ { fired[cur] = 1 }
    /^ *exp_annotations:/ { annotated[cur] = 1 }
    END { quiet["Watchdog"] = 1; for (a in quiet) if (fired[a] && annotated[a]) print a }
' tests/promtool/*.yml | sort -u)
for a in $alerts; do
    grep -qxF "$a" <<<"$tested" || problem "alert $a is not tested both firing (with exp_annotations) and not firing"
done

# Every recording rule evaluated by a promql_expr_test.
exprs=$(grep -hE '^ *- expr:' tests/promtool/*.yml)
for r in $(grep -hE '^ *- record:' rules/*.yml | awk '{print $3}'); do
    grep -qF -- "$r" <<<"$exprs" || problem "recording rule $r has no promql_expr_test"
done

[ "$fail" -eq 0 ] || exit 1
echo "promtool.sh: $(wc -w <<<"$alerts") alerts and $(grep -hcE '^ *- record:' rules/*.yml | awk '{n += $1} END {print n}') recording rules checked"
