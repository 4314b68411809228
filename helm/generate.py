#!/usr/bin/env python3
"""Copy the repository's monitoring content into the chart, and check the copies.

Helm reads nothing outside a chart, so the PrometheusRule, the bundled
Prometheus and the dashboard ConfigMap are rendered from copies under
helm/hale/files/: rules/*.yml, alerts/*.yml and dashboards/*.json; the
dcgm-exporter counter list (examples/dcgm-exporter-counters.csv)
likewise. The chart's appVersion follows bridge/Cargo.toml for the same reason.

    helm/generate.py           refresh the copies and appVersion
    helm/generate.py --check   exit 1, naming each stale file, when they differ
"""

import argparse
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "hale"
COPIES = [  # (source directory, pattern, destination directory)
    (ROOT / "rules", "*.yml", CHART / "files" / "rules"),
    (ROOT / "alerts", "*.yml", CHART / "files" / "alerts"),
    (ROOT / "dashboards", "*.json", CHART / "files" / "dashboards"),
    (ROOT / "examples", "dcgm-exporter-counters.csv", CHART / "files" / "dcgm"),
]
APP_VERSION = re.compile(r'(?m)^appVersion:.*$')


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def planned() -> dict[Path, tuple[str, bytes]]:
    """Every file the chart should hold: what is wrong when it differs, and its content."""
    want = {}
    for src_dir, pattern, dst_dir in COPIES:
        for src in sorted(src_dir.glob(pattern)):
            want[dst_dir / src.name] = (f"is not a copy of {rel(src)}", src.read_bytes())
    cargo = ROOT / "bridge" / "Cargo.toml"
    version = tomllib.loads(cargo.read_text())["package"]["version"]
    chart_yaml = CHART / "Chart.yaml"
    text = chart_yaml.read_text()
    if not APP_VERSION.search(text):
        sys.exit(f"{rel(chart_yaml)}: no appVersion line")
    want[chart_yaml] = (f"does not carry appVersion {version} of {rel(cargo)}",
                        APP_VERSION.sub(f'appVersion: "{version}"', text).encode())
    return want


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report stale copies instead of writing them")
    args = parser.parse_args()

    want = planned()
    # A copy whose source was deleted is stale too.
    extra = [p for _, pattern, d in COPIES for p in sorted(d.glob(pattern)) if p not in want]
    stale = [p for p, (_, data) in want.items() if not p.exists() or p.read_bytes() != data]

    if args.check:
        for p in stale:
            print(f"generate.py: {rel(p)} {want[p][0]}; run helm/generate.py", file=sys.stderr)
        for p in extra:
            print(f"generate.py: {rel(p)} has no source any more; run helm/generate.py", file=sys.stderr)
        if stale or extra:
            return 1
        print(f"generate.py: {len(want)} chart files match their sources")
        return 0

    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(want[p][1])
        print(f"generate.py: wrote {rel(p)}")
    for p in extra:
        p.unlink()
        print(f"generate.py: removed {rel(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
