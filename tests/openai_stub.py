"""A local OpenAI-compatible chat-completions server for offline tests and the throughput benchmark.

It listens on 127.0.0.1 (a free port), answers ``POST /v1/chat/completions`` (and ``/chat/completions``),
counts every request, and misbehaves on demand: HTTP 429, HTTP 500, a hang past the client's timeout, a reply
whose text is not JSON, or an HTTP body that is not JSON at all.

Use it from pytest through :func:`start_stub` (runs in a daemon thread with its own event loop), or as a
separate process for the benchmark::

    python tests/openai_stub.py --port 0 --latency 0.05   # prints "PORT <n>" once listening

Behaviour per request, first match wins:

0. ``StubServer.down``: while true every connection is cut before any reply (an outage; ``stop()`` then
   ``start_stub(port=...)`` is a server that restarts).
1. ``StubServer.script``: a list of modes consumed one per request (``"ok"``, ``"429"``, ``"500"``, ``"400"``,
   ``"hang"``, ``"not_json"``, ``"bad_body"``, ``"echo_auth_500"`` — a 500 whose message repeats the request's
   Authorization header, to prove keys are scrubbed; malformed 200s: ``"no_choices"`` (``"choices": []``),
   ``"no_message"`` (a choice without a message), ``"null_content"`` (content null, no refusal), ``"garbage"``
   (random bytes as the body), ``"cut"`` (the connection is closed mid-reply), ``"length"`` (an answer cut by
   the token limit, ``finish_reason: "length"``)); an empty list means ``"ok"``; then ``fault_rate``: that share
   of requests (seeded) fails with one of ``fault_modes`` (default a 429 or a 500).
2. a marker in the last user message: ``[[stub:429]]``, ``[[stub:500]]``, ``[[stub:hang]]``... applies to the
   first N requests carrying that exact message, where N is ``[[stub:429x2]]``'s count (default: always).
3. ``"ok"``: the reply text is ``StubServer.responder(body)``; the default is deterministic in the request
   (model, messages, seed) so that a resumed run sees exactly what an unbroken one would.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import web

_MARKER = re.compile(r"\[\[stub:(\w+?)(?:x(\d+))?\]\]")


def request_key(body: dict[str, Any]) -> str:
    """What makes two requests the same paid call: model, messages, seed."""
    return json.dumps([body.get("model"), body.get("messages"), body.get("seed")], sort_keys=True)


def default_responder(body: dict[str, Any]) -> str:
    """A deterministic answer in {0, 1, 2} in \\boxed{}, or (one request in 7) an ungradable refusal."""
    blob = json.dumps([body.get("model"), body.get("messages"), body.get("seed")], sort_keys=True)
    h = int(hashlib.sha256(blob.encode()).hexdigest()[:12], 16)
    if h % 7 == 6:
        return "I am not able to solve this problem."
    return f"Working through it carefully... so the final answer is \\boxed{{{h % 3}}}."


@dataclass
class StubServer:
    """State of one running stub: counters, the failure script and the responder; mutate it from tests."""

    latency: float = 0.0
    hang_s: float = 30.0
    responder: Callable[[dict[str, Any]], str] = default_responder
    script: list[str] = field(default_factory=list)
    calls: int = 0
    modes: Counter = field(default_factory=Counter)
    auth_headers: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    keep_bodies: bool = True
    fault_rate: float = 0.0
    fault_seed: int = 0
    fault_modes: tuple[str, ...] = ("429", "500")
    down: bool = False
    ok_keys: list[str] = field(default_factory=list)
    inflight: int = 0
    max_inflight: int = 0
    port: int = 0
    _fault_rng: random.Random | None = None
    _marker_counts: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self) -> None:
        with self._lock:
            self.calls = 0
            self.modes.clear()
            self.auth_headers.clear()
            self.bodies.clear()
            self.script.clear()
            self._marker_counts.clear()
            self.max_inflight = 0
            self._fault_rng = None
            self.ok_keys.clear()

    def _mode_for(self, body: dict[str, Any]) -> str:
        with self._lock:
            self.calls += 1
            if self.script:
                mode = self.script.pop(0)
            else:
                mode = "ok"
                messages = body.get("messages") or []
                text = str(messages[-1].get("content", "")) if messages else ""
                m = _MARKER.search(text)
                if m:
                    key = (m.group(0), text)
                    limit = int(m.group(2)) if m.group(2) else None
                    if limit is None or self._marker_counts[key] < limit:
                        self._marker_counts[key] += 1
                        mode = m.group(1)
            if mode == "ok" and self.fault_rate:
                if self._fault_rng is None:
                    self._fault_rng = random.Random(self.fault_seed)
                if self._fault_rng.random() < self.fault_rate:
                    mode = self._fault_rng.choice(list(self.fault_modes))
            self.modes[mode] += 1
            return mode

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.down:  # an outage: the connection is cut, nothing is answered (or counted)
            request.transport.close()  # type: ignore[union-attr]
            raise asyncio.CancelledError
        body = await request.json()
        mode = self._mode_for(body)
        auth = request.headers.get("Authorization", "")
        with self._lock:
            self.auth_headers.append(auth)
            if self.keep_bodies:
                self.bodies.append(body)
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            return await self._respond(body, mode, auth, request)
        finally:
            with self._lock:
                self.inflight -= 1

    async def _respond(self, body: dict[str, Any], mode: str, auth: str,
                       request: web.Request | None = None) -> web.StreamResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        if mode == "429":
            return web.json_response(
                {"error": {"message": "Rate limit reached (stub)", "type": "rate_limit_error", "code": "rate_limit"}},
                status=429,
            )
        if mode == "500":
            return web.json_response({"error": {"message": "stub internal error", "type": "server_error"}}, status=500)
        if mode == "echo_auth_500":
            return web.json_response({"error": {"message": f"upstream rejected header {auth}", "type": "server_error"}},
                                     status=500)
        if mode == "400":
            return web.json_response({"error": {"message": "stub bad request", "type": "invalid_request_error"}},
                                     status=400)
        if mode == "hang":
            await asyncio.sleep(self.hang_s)
        if mode == "bad_body":
            return web.Response(text="<html>not json</html>", status=200, content_type="application/json")
        if mode == "garbage":
            return web.Response(body=bytes(random.Random(len(str(body))).randrange(256) for _ in range(64)),
                                status=200, content_type="application/json")
        if mode == "cut":  # headers promise a body that never comes: the connection drops mid-reply
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                           "Content-Length": "4096"})
            await resp.prepare(request)  # type: ignore[arg-type]
            await resp.write(b'{"id": "chatcmpl-cut", "choices": [')
            request.transport.close()  # type: ignore[union-attr]
            return resp
        base = {"id": f"chatcmpl-stub-{self.calls}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "stub")}
        if mode == "no_choices":
            return web.json_response({**base, "choices": []})
        if mode == "no_message":
            return web.json_response({**base, "choices": [{"index": 0, "finish_reason": "stop"}]})
        if mode == "null_content":
            return web.json_response({**base, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]})
        text = "this is {not json" if mode == "not_json" else self.responder(body)
        finish = "stop"
        if mode == "length":
            text, finish = text[: max(1, len(text) // 3)], "length"
        elif mode == "ok":
            with self._lock:
                self.ok_keys.append(request_key(body))
        n = int(body.get("n") or 1)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        completion_tokens = len(text.split())
        return web.json_response(
            {
                "id": f"chatcmpl-stub-{self.calls}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "stub"),
                "choices": [
                    {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                    for i in range(n)
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens * n,
                    "total_tokens": prompt_tokens + completion_tokens * n,
                },
            }
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_post("/chat/completions", self.handle)
        return app

    async def _start(self, port: int) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)  # type: ignore[union-attr]
        try:
            fut.result(timeout=5)
        except Exception:  # pragma: no cover - best effort on teardown
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._loop = None


def start_stub(latency: float = 0.0, port: int = 0, **kwargs: Any) -> StubServer:
    """Start a stub in a daemon thread; returns once it listens. Call ``.stop()`` when done."""
    server = StubServer(latency=latency, **kwargs)
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    server._loop = loop

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server._start(port))
        ready.set()
        loop.run_forever()

    server._thread = threading.Thread(target=run, name="openai-stub", daemon=True)
    server._thread.start()
    if not ready.wait(10):  # pragma: no cover
        raise RuntimeError("stub server did not start")
    return server


def main() -> None:  # pragma: no cover - used by the benchmark as a separate process
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    server = StubServer(latency=args.latency, keep_bodies=False)

    async def serve() -> None:
        await server._start(args.port)
        print(f"PORT {server.port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":  # pragma: no cover
    main()
