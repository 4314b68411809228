#!/usr/bin/env python3
"""A fake Fuzzball API for hale's tests: `GET /v4/nodes` and `GET /v4/nodes/{id}` as
the public spec (tests/fuzzball/nodes-schema.json, taken from ctrliq/nf-fuzzball)
defines them, every answer validated against the spec's definitions before it is
sent (an answer that does not validate is a 500 and a line on stderr, so the test
fails), bearer tokens checked, errors as google.rpc.Status.

The stand-in CLI (tests/fuzzball/fuzzball) changes the state through `/test/…`
endpoints, as the real CLI changes the real cluster's; the test sets the state up
through them too. Run: fake.py PORT TOKEN STATE.json
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from jsonschema import Draft4Validator

SPEC = json.loads((Path(__file__).parent / "nodes-schema.json").read_text())
LOCK = threading.Lock()
STATE = {"nodes": [], "drains": {}, "reasons": {}, "refuse": []}


def validator(definition):
    # Swagger 2.0 definitions are JSON Schema draft 4; refs resolve in this file.
    schema = {"$ref": f"#/definitions/{definition}", "definitions": SPEC["definitions"]}
    return Draft4Validator(schema)


LIST = validator("fuzzball.api.v4.ListNodesResponse")
ONE = validator("fuzzball.api.v4.GetNodeInfo")
STATUS = validator("google.rpc.Status")


def list_info(n):
    """A node as ListNodeInfo: runningJobs is a count there."""
    out = {k: v for k, v in n.items() if k not in ("jobs",)}
    out["runningJobs"] = len(n.get("jobs", []))
    return out


def get_info(n):
    """A node as GetNodeInfo: runningJobs is the list of RunningJob there."""
    out = {k: v for k, v in n.items() if k not in ("jobs", "cores", "devices")}
    out["runningJobs"] = n.get("jobs", [])
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def send(self, code, body, check=None):
        if check is not None:
            errors = sorted(check.iter_errors(body), key=str)
            if errors:
                sys.stderr.write(f"fake.py: answer does not match the spec: {errors[0]}\n")
                code, body = 500, {"code": 13, "message": f"fake answer off spec: {errors[0].message}"}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, code, grpc, message):
        self.send(code, {"code": grpc, "message": message, "details": []}, STATUS)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self):
        if self.path == "/test/state":
            with LOCK:
                return self.send(200, STATE)
        given = self.headers.get("Authorization", "")
        with LOCK:
            token, forbidden = STATE.get("token", TOKEN), STATE.get("forbidden", [])
        if given in (f"Bearer {t}" for t in forbidden):
            return self.error(403, 7, "permission denied")
        if given != f"Bearer {token}":
            return self.error(401, 16, "invalid or missing bearer token")
        with LOCK:
            nodes = list(STATE["nodes"])
        if self.path == "/v4/nodes":
            return self.send(200, {"nodes": [list_info(n) for n in nodes]}, LIST)
        if self.path.startswith("/v4/nodes/"):
            wanted = unquote(self.path[len("/v4/nodes/"):])
            for n in nodes:
                if n["id"] == wanted:
                    return self.send(200, get_info(n), ONE)
            return self.error(404, 5, f"node {wanted} not found")
        return self.error(404, 5, "no such endpoint")

    def do_POST(self):
        req = self.body()
        with LOCK:
            if self.path == "/test/state":
                STATE.update(req)
                return self.send(200, STATE)
            if self.path in ("/test/drain", "/test/uncordon"):
                node = next((n for n in STATE["nodes"] if n["id"] == req["id"]), None)
                if node is None:
                    return self.send(404, {"message": f"node {req['id']} not found"})
                STATE["drains"][req["id"]] = STATE["drains"].get(req["id"], 0) + (self.path == "/test/drain")
                if self.path == "/test/uncordon":
                    # Scheduling state, apart from health: an uncordon puts a
                    # cordoned node back, and leaves one offline or not ready so.
                    if node["status"] == "NODE_STATUS_CORDONED":
                        node["status"] = "NODE_STATUS_READY"
                    return self.send(200, {"uncordoned": req["id"]})
                status = node["status"]
                if req["id"] in STATE["refuse"]:
                    status = "NODE_STATUS_NOT_READY"
                if status not in ("NODE_STATUS_READY", "NODE_STATUS_CORDONED"):
                    word = status.removeprefix("NODE_STATUS_")
                    return self.send(409, {"message": f"node {req['id']} is {word} and cannot be drained: only a READY or already cordoned node can be taken out of service"})
                node["status"] = "NODE_STATUS_CORDONED"
                STATE["reasons"][req["id"]] = req.get("reason", "")
                requeued = 0
                if req.get("active"):
                    requeued = len(node.get("jobs", []))
                    node["jobs"] = []
                return self.send(200, {"drained": req["id"], "requeued": requeued})
        return self.send(404, {"message": "no such endpoint"})


if __name__ == "__main__":
    port, TOKEN, state = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    STATE.update(json.loads(Path(state).read_text()))
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.serve_forever()
