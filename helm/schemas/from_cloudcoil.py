#!/usr/bin/env python3
"""Write the JSON schemas tests/helm.sh checks the chart's ServiceMonitor and
PrometheusRule against.

kubernetes-validate knows only built-in kinds, and no pip package ships the
prometheus-operator CRD schemas as such. cloudcoil-models-prometheus-operator
ships pydantic models generated from those CRDs' OpenAPI schemas, so the
schemas are derived from the models, then made strict the way the API server
is (unknown fields rejected). Run it with a Python that has the package (not
the test venv, which does not need it):

    python3 -m venv /tmp/cc && /tmp/cc/bin/pip install cloudcoil-models-prometheus-operator
    /tmp/cc/bin/python helm/schemas/from_cloudcoil.py
"""

import json
import re
from importlib.metadata import version
from pathlib import Path

from cloudcoil.models.prometheus_operator import v1

HERE = Path(__file__).resolve().parent


def caseless(pattern):
    """Go's `^(?i)(abort|warn)?$` in the regex dialect of JSON Schema, which has
    no inline flags: each letter becomes a class of both cases."""
    plain = pattern.replace("(?i)", "")
    assert not re.search(r"[\\\[]", plain), f"cannot rewrite {pattern!r}"
    return re.sub(r"[A-Za-z]", lambda m: f"[{m[0].upper()}{m[0].lower()}]", plain)


def strict(node):
    """Reject unknown fields in every object that lists its fields."""
    if isinstance(node, dict):
        if node.get("properties") and "additionalProperties" not in node:
            node["additionalProperties"] = False
        if "(?i)" in node.get("pattern", ""):
            node["pattern"] = caseless(node["pattern"])
        for value in node.values():
            strict(value)
    elif isinstance(node, list):
        for value in node:
            strict(value)


for model in (v1.ServiceMonitor, v1.PrometheusRule):
    schema = model.model_json_schema(by_alias=True, mode="validation")
    strict(schema)
    kind = model.__name__
    schema["properties"]["apiVersion"] = {"const": "monitoring.coreos.com/v1"}
    schema["properties"]["kind"] = {"const": kind}
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    pkg = "cloudcoil.models.prometheus_operator"
    out = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"{kind} (monitoring.coreos.com/v1) from {pkg} {version(pkg)} by helm/schemas/from_cloudcoil.py",
        **schema,
    }
    path = HERE / f"{kind.lower()}_v1.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")
