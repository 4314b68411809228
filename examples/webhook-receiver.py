#!/usr/bin/env python3
"""A receiver for hale's node-event webhooks that verifies what it is sent.

    HALE_WEBHOOK_SECRET_FILE=/etc/hale/webhook-secret ./webhook-receiver.py --port 8080

For every POST it checks, in order:
  1. X-Hale-Signature is sha256=HMAC-SHA256(secret, X-Hale-Timestamp + "." + body),
     compared in constant time (hmac.compare_digest)      -> 401 otherwise;
  2. X-Hale-Timestamp is within 5 minutes of this clock   -> 401 otherwise (replays);
  3. the event id was not seen before                      -> 200, ignored (hale retries
     with the same id, so a retry of a delivery that did arrive is a duplicate).
Accepted events are printed as one JSON line each on stdout. Standard library only.
"""

import argparse
import collections
import hashlib
import hmac
import json
import os
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_SKEW_SECONDS = 300
REMEMBERED_IDS = 100_000


def verify(secret: bytes, timestamp: str, body: bytes, signature: str, now: float) -> str:
    """Return "" when the delivery is authentic and fresh, else why it is not."""
    expected = "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return "bad signature"
    try:
        sent = int(timestamp)
    except ValueError:
        return "bad timestamp"
    if abs(now - sent) > MAX_SKEW_SECONDS:
        return "timestamp more than 5 minutes off"
    return ""


class Seen:
    """Event ids already accepted, oldest forgotten first."""

    def __init__(self, size: int):
        self.size = size
        self.ids = collections.OrderedDict()

    def add(self, event_id: str) -> bool:
        if event_id in self.ids:
            return False
        self.ids[event_id] = None
        if len(self.ids) > self.size:
            self.ids.popitem(last=False)
        return True


def handler(secret: bytes, seen: Seen):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            why = verify(
                secret,
                self.headers.get("X-Hale-Timestamp", ""),
                body,
                self.headers.get("X-Hale-Signature", ""),
                time.time(),
            )
            if why:
                return self.answer(401, why)
            event_id = self.headers.get("X-Hale-Event-Id", "")
            if not seen.add(event_id):
                return self.answer(200, "duplicate")
            event = json.loads(body)
            print(json.dumps(event), flush=True)
            self.answer(200, "ok")

        def answer(self, code: int, text: str):
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *args):
            pass

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    path = os.environ.get("HALE_WEBHOOK_SECRET_FILE")
    if not path:
        sys.exit("set HALE_WEBHOOK_SECRET_FILE to the file holding the shared secret")
    with open(path, "rb") as f:
        secret = f.read().strip()
    # An IPv6 address (`--host ::1`) needs an IPv6 socket.
    server_class = ThreadingHTTPServer
    if ":" in args.host:
        server_class = type("ThreadingHTTPServer6", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
    server = server_class((args.host, args.port), handler(secret, Seen(REMEMBERED_IDS)))
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"listening on {shown}:{server.server_port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
