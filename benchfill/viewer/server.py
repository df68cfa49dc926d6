"""``benchfill view RUN``: the run's report served on 127.0.0.1 (a free port unless one is asked for). GET / is the
page, built fresh from the memory bank; POST /api/review stores a vote (same rule and checks as
``benchfill review``). Votes need the page's per-server token (header ``X-Benchfill-Token``), so another web page
open in the same browser cannot vote through it."""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchfill.errors import InputError
from benchfill.memory.bank import MemoryBank


class ViewServer:
    def __init__(self, run_dir: str | Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.run_dir = Path(run_dir)
        self.token = secrets.token_urlsafe(16)
        self.lock = threading.Lock()
        self.bank_path = self.run_dir / "memory.sqlite"
        handler = _handler(self)
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}/"

    def page(self) -> str:
        from benchfill.viewer.report import build_report

        with self.lock:
            bank = MemoryBank(self.bank_path)
            try:
                return build_report(self.run_dir, served=True, token=self.token, bank=bank)
            finally:
                bank.close()

    def vote(self, body: dict[str, Any]) -> dict[str, Any]:
        from benchfill.memory.trace import review_item

        cid = str(body.get("candidate") or "")
        reviewer = str(body.get("reviewer") or "").strip()
        decision = str(body.get("decision") or "")
        if decision not in ("approve", "reject"):
            raise InputError("decision", f"{decision!r}: approve or reject")
        if not reviewer:
            raise InputError("reviewer", "say who you are (your name)")
        with self.lock:
            bank = MemoryBank(self.bank_path)
            try:
                review_item(bank, cid)
                bank.review(cid, reviewer, decision, str(body.get("note") or ""))
                item = review_item(bank, cid)
            finally:
                bank.close()
        return {"candidate": cid, "status": item.status, "approvals": item.approvals,
                "rejections": item.rejections, "reviews": [r.model_dump() for r in item.reviews]}

    def serve_in_thread(self) -> "ViewServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        self.httpd.shutdown() if self._thread else None
        self.httpd.server_close()


def _handler(server: ViewServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the terminal shows the URL only
            return

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, code: int, obj: Any) -> None:
            self._send(code, json.dumps(obj, default=str).encode(), "application/json")

        def _local_host(self) -> bool:
            """Only requests addressed to this server by its loopback name (a page on another domain rebound to
            127.0.0.1 sends its own Host and is refused)."""
            port = server.httpd.server_address[1]
            ok = self.headers.get("Host", "") in {f"127.0.0.1:{port}", f"localhost:{port}"}
            if not ok:
                self._json(403, {"error": "wrong Host"})
            return ok

        def do_GET(self) -> None:
            if not self._local_host():
                return
            if self.path.split("?")[0] not in ("/", "/index.html", "/report.html"):
                self._json(404, {"error": "not found"})
                return
            self._send(200, server.page().encode("utf-8"), "text/html; charset=utf-8")

        def do_POST(self) -> None:
            if not self._local_host():
                return
            if self.path != "/api/review":
                self._json(404, {"error": "not found"})
                return
            if not secrets.compare_digest(self.headers.get("X-Benchfill-Token", ""), server.token):
                self._json(403, {"error": "missing or wrong token: reload the page"})
                return
            try:
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("expected a JSON object")
            except ValueError as exc:
                self._json(400, {"error": f"bad request: {exc}"})
                return
            try:
                self._json(200, server.vote(body))
            except InputError as exc:
                self._json(400, {"error": exc.rule})

    return Handler
