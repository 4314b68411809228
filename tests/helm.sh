#!/usr/bin/env bash
# The Helm chart's checks (helm/hale), with no helm binary: helm-python-sdk
# carries Helm's Go SDK. In order:
#   - helm/generate.py --check: the chart's copies of rules/, alerts/ and
#     dashboards/ and its appVersion match their sources;
#   - yamllint on the chart's plain YAML;
#   - helm/check.py: Helm's strict lint and renders of several value sets, each
#     checked with kubernetes-validate, check-jsonschema, promtool, amtool and
#     the real `hale check-config` (see its docstring), and value sets the chart
#     must refuse.
# Python packages go into .venv at the repository root, installed only when
# missing. HALE names the hale binary (default target/debug/hale; this script
# does not build it).
set -euo pipefail
cd "$(dirname "$0")/.."

HALE=${HALE:-target/debug/hale}
export HALE
for tool in promtool amtool python3; do
    command -v "$tool" >/dev/null || { echo "helm.sh: $tool not found (Debian: prometheus, prometheus-alertmanager, python3)" >&2; exit 1; }
done
[ -x "$HALE" ] || { echo "helm.sh: $HALE not found: build it (cargo build --bin hale) or set HALE" >&2; exit 1; }

start=$SECONDS
. tests/install.sh
install_venv helm-python-sdk kubernetes-validate yamllint check-jsonschema pyyaml

.venv/bin/python helm/generate.py --check
.venv/bin/yamllint --strict -c helm/.yamllint.yml helm/hale/values.yaml helm/hale/Chart.yaml helm/hale/files
echo "helm.sh: yamllint: values.yaml, Chart.yaml and files/ are clean"
.venv/bin/python helm/check.py
echo "helm.sh: the chart checks out ($((SECONDS - start))s)"
