#!/usr/bin/env python3
"""Regenerate the seed corpora under corpus/<target>/ from /work/shared/samples-style
Alertmanager 0.25 bodies and the repository's example configurations.

    python3 tools/seeds.py [SAMPLES_DIR]     (run in bridge/fuzz; default ../../samples
                                              or /work/shared/samples)

Seeds are named seed-*; files the fuzzer adds (sha1 names) are left alone.
"""
import hashlib
import json
import os
import re
import struct
import sys
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(FUZZ))
MIN_SECS = -62_135_596_800
MAX_SECS = 253_402_300_799
SPAN_MS = (MAX_SECS - MIN_SECS + 1) * 1000


def header(now_iso, later_ms):
    """The clock header of hale_fuzz::split: NUL, now, later."""
    if now_iso.startswith("0001-"):
        ms = MIN_SECS * 1000
    else:
        ms = int(datetime.fromisoformat(now_iso.replace("Z", "+00:00")).timestamp() * 1000)
    seed = (ms - MIN_SECS * 1000) % SPAN_MS
    return b"\0" + struct.pack("<Q", seed) + struct.pack("<Q", later_ms & ((1 << 56) - 1))


# (now, later - now in ms): the sample's own time, year 1, the nanosecond-timestamp
# edges (1677, 2262), year 9999, and a jump of about a century.
CLOCKS = [
    ("2026-11-29T23:19:00Z", 30_000),
    ("2026-11-29T23:19:00Z", 100 * 365 * 86_400_000),
    ("0001-01-01T00:00:00Z", 90_000),
    ("1677-09-21T00:12:44Z", 3_600_000),
    ("2262-04-11T23:47:16Z", 86_400_000),
    ("9999-12-31T23:58:00Z", 60_000),
]


def write(target, name, data):
    d = os.path.join(FUZZ, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def compact(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def main():
    samples = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/samples"
    v2 = json.load(open(os.path.join(samples, "alertmanager-0.25-api-v2-alerts.json")))
    deliveries = json.load(open(os.path.join(samples, "alertmanager-0.25-webhook-deliveries.json")))

    # poll: the whole answer, each alert alone, without the watchdog, all suppressed.
    bodies = {
        "v2-answer": open(os.path.join(samples, "alertmanager-0.25-api-v2-alerts.json"), "rb").read(),
        "v2-compact": compact(v2),
        "v2-no-watchdog": compact([a for a in v2 if a["labels"].get("hale_signal") != "watchdog"]),
        "v2-suppressed": compact([dict(a, status=dict(a["status"], state="suppressed")) for a in v2]),
        "v2-empty": b"[]",
    }
    for i, a in enumerate(v2):
        bodies[f"v2-alert{i}"] = compact([a])
    for name, body in bodies.items():
        write("poll", name, body)
    for i, (now, later) in enumerate(CLOCKS):
        write("poll", f"v2-clock{i}", header(now, later) + compact(v2))

    # webhook: each delivery, all alerts in one, the same resolved, truncated.
    all_alerts = [a for d in deliveries for a in d["alerts"]]
    one = dict(deliveries[0], alerts=all_alerts)
    resolved = dict(one, status="resolved", alerts=[
        dict(a, status="resolved", endsAt="2026-11-29T23:30:00Z") for a in all_alerts])
    wh = {f"delivery{i}": compact(d) for i, d in enumerate(deliveries)}
    wh["all"] = compact(one)
    wh["resolved"] = compact(resolved)
    wh["truncated"] = compact(dict(one, truncatedAlerts=7))
    wh["pretty"] = json.dumps(one, indent=2).encode()
    for name, body in wh.items():
        write("webhook", name, body)
    for i, (now, later) in enumerate(CLOCKS):
        write("webhook", f"all-clock{i}", header(now, later) + compact(one))
        write("webhook", f"resolved-clock{i}", header(now, later) + compact(resolved))

    # config: every example configuration and the chart's config block.
    ex = os.path.join(REPO, "examples")
    for f in sorted(os.listdir(ex)):
        if f.endswith((".yaml", ".yml")):
            write("config", f, open(os.path.join(ex, f), "rb").read())
    values = open(os.path.join(REPO, "helm", "hale", "values.yaml")).read()
    m = re.search(r"^config:\n((?:  .*\n|\s*\n)+)", values, re.M)
    if m:
        block = "".join(line[2:] if line.startswith("  ") else line for line in m.group(1).splitlines(True))
        write("config", "helm-values-config.yaml", block.encode())
    write("config", "webhook-only.yaml", b"alertmanager: { pollInterval: 0 }\n")
    write("config", "empty.yaml", b"")

    # duration_and_labels: each sample alert's labels and annotations, plus edges.
    for i, a in enumerate(v2 + all_alerts):
        lines = [f"{k}={v}" for k, v in a["labels"].items()]
        for k in ("summary", "description", "message"):
            if k in a.get("annotations", {}):
                lines.append(f"@{k} {a['annotations'][k]}")
        lines += [f"@startsAt {a.get('startsAt', '')}", f"@endsAt {a.get('endsAt', '')}"]
        write("duration_and_labels", f"alert{i}", ("\n".join(lines) + "\n").encode())
    write("duration_and_labels", "edges", "\n".join([
        "alertname=CalicoTooManyInterfacesEarly", "priority=P6", "instance=[fe80::1]:9100",
        "hale_signal=heartbeat", "hale_report_interval=36500d", "@identity instance,node",
        "@duration 18446744073709551615ms", "@port 10.0.0.14:9100", "@startsAt 0000-01-01T00:00:00+23:59",
        "@endsAt 9999-12-31T23:59:59.999999999-23:59", "@summary", "@state suppressed", ""]).encode())
    write("duration_and_labels", "sciuro", b"alertname=X\npriority=-0042\n@summary s]x\n@keepport\n")

    # http_query: the documented parameters.
    q = {
        "events": b"since=24h&until=2026-08-05T00:00:00Z&type=SCORE_CHANGED,condition_raised&pageSize=50",
        "events-latest": b"latest=true&type=heartbeat_missed",
        "events-token": b"pageToken=7fffffffffffffff&since=36500d",
        "nodes": b"health=Degraded&status=Cordoned&pool=gpu&cluster=dc1&pageSize=500",
        "nodes-token": b"pageToken=Z3B1LTE0&health=unknown",
        "encoded": b"since=1970-01-01T00%3A00%3A00%2B14%3A00&type=%53CORE_CHANGED",
    }
    for name, body in q.items():
        write("http_query", name, body)
    write("http_query", "events-year1", header("0001-01-01T00:00:00Z", 0) + b"since=1d&until=100y")
    write("http_query", "events-year9999", header("9999-12-31T23:58:00Z", 0) + b"since=0&until=1ms")


if __name__ == "__main__":
    main()
