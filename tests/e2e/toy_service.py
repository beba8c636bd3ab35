"""A toy model server for the services tests (standard library only): listens on $PORT, answers
`/` with its version and job, `/work?ms=N` after N ms (at most TOY_CONCURRENCY at once, like a model that batches
so many requests), `/sse` with five server-sent events 50 ms apart, and `/healthz` with 200, or 500 when
TOY_UNHEALTHY is set (a version that never becomes ready). It ends cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

VERSION = os.environ.get("VERSION", "1")
JOB = os.environ.get("CORRAL_JOB_ID", "?")
SLOTS = threading.BoundedSemaphore(int(os.environ.get("TOY_CONCURRENCY", "4")))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms wait for a delayed ACK

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._send(500 if os.environ.get("TOY_UNHEALTHY") else 200, b"{}")
        elif url.path == "/work":
            ms = float(parse_qs(url.query).get("ms", ["50"])[0])
            with SLOTS:
                time.sleep(ms / 1000)
            self._send(200, json.dumps({"version": VERSION, "job": JOB}).encode())
        elif url.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(5):
                chunk = f"data: token {i}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
        else:
            self._send(200, json.dumps({"version": VERSION, "job": JOB, "path": url.path}).encode())

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"toy service version {VERSION} on port {os.environ['PORT']}", flush=True)
    server.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
