"""ModelClient against a local OpenAI-compatible stub: caching, bounded retries, timeouts, re-asks, rollouts,
concurrency, accounting, Router fan-out, and API keys that never reach the SQLite file."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from openai_stub import StubServer, start_stub

from benchfill.models.cache import CallCache
from benchfill.models.client import ModelClient, SyncModelClient
from benchfill.models.config import ModelConfig
from benchfill.models.failures import FailureKind
from benchfill.models.replies import reply_json

SECRET = "sk-test-SECRET-4f2a9c"
MSG = [{"role": "user", "content": "What is 1 + 1?"}]


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("BENCHFILL_TEST_KEY", SECRET)


def cfg(stub: StubServer, **kw) -> ModelConfig:
    base = dict(model="openai/stub-model", api_base=stub.api_base, api_key_env="BENCHFILL_TEST_KEY", timeout=2.0,
                max_retries=3, backoff_initial=0.01, backoff_max=0.05, max_concurrency=4, temperature=0.7)
    base.update(kw)
    return ModelConfig(**base)


def run(coro):
    return asyncio.run(coro)


def log_rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT outcome, attempt, error FROM call_log ORDER BY id").fetchall()


def test_call_then_cache_hit(stub, tmp_path):
    db = tmp_path / "calls.sqlite"

    async def go():
        client = ModelClient(db)
        first = await client.complete(cfg(stub), MSG)
        second = await client.complete(cfg(stub), MSG)
        await client.aclose()
        return first, second

    first, second = run(go())
    assert first.ok and not first.cached and first.attempts == 1
    assert first.tokens_in > 0 and first.tokens_out > 0
    assert second.cached and second.text == first.text and second.key == first.key
    assert stub.calls == 1
    # a new client on the same file (a rerun) makes no call either
    again = run(_one(db, cfg(stub)))
    assert again.cached and stub.calls == 1


async def _one(db, model, messages=MSG, **kw):
    client = ModelClient(db)
    try:
        return await client.complete(model, messages, **kw)
    finally:
        await client.aclose()


def test_retries_recover_from_429_and_500(stub, tmp_path):
    stub.script[:] = ["429", "500", "bad_body"]
    result = run(_one(tmp_path / "c.sqlite", cfg(stub)))
    assert result.ok and result.attempts == 4
    assert stub.calls == 4
    outcomes = [r[0] for r in log_rows(tmp_path / "c.sqlite")]
    assert outcomes == ["retry", "retry", "retry", "ok"]


def test_retries_are_bounded_and_failure_is_logged_not_cached(stub, tmp_path):
    stub.script[:] = ["500"] * 10
    db = tmp_path / "c.sqlite"
    result = run(_one(db, cfg(stub, max_retries=2)))
    assert not result.ok and "InternalServerError" in result.error
    assert stub.calls == 3  # 1 + max_retries
    assert [r[0] for r in log_rows(db)] == ["retry", "retry", "error"]
    stub.script.clear()
    later = run(_one(db, cfg(stub, max_retries=2)))  # not cached: asked again, now succeeds
    assert later.ok and not later.cached and stub.calls == 4


def test_timeout_is_retried(stub, tmp_path):
    stub.hang_s = 1.0
    stub.script[:] = ["hang"]
    result = run(_one(tmp_path / "c.sqlite", cfg(stub, timeout=0.3)))
    assert result.ok and result.attempts == 2 and stub.calls == 2
    assert result.latency_s < 3


def test_bad_request_is_not_retried(stub, tmp_path):
    stub.script[:] = ["400"]
    result = run(_one(tmp_path / "c.sqlite", cfg(stub)))
    assert not result.ok and "BadRequest" in result.error
    assert stub.calls == 1


def test_complete_json_reasks_then_parses(stub, tmp_path):
    stub.responder = lambda body: '{"label": "correct", "score": 0.5}'
    stub.script[:] = ["not_json"]
    db = tmp_path / "c.sqlite"

    async def go():
        client = ModelClient(db)
        res = await client.complete_json(cfg(stub), MSG, lambda o: o if "label" in o else (_ for _ in ()).throw(
            ValueError("no label")))
        await client.aclose()
        return res, client.stats

    res, stats = run(go())
    assert res.ok and res.parsed == {"label": "correct", "score": 0.5}
    assert stub.calls == 2 and stats.malformed == 1
    second = stub.bodies[1]["messages"]
    assert second[-2]["role"] == "assistant" and "could not be used" in second[-1]["content"]
    assert "malformed" in [r[0] for r in log_rows(db)]


def test_complete_json_reasks_are_bounded(stub, tmp_path):
    stub.responder = lambda body: "sorry, no JSON today"

    async def go():
        client = ModelClient(tmp_path / "c.sqlite")
        res = await client.complete_json(cfg(stub), MSG, None, max_reasks=2)
        await client.aclose()
        return res

    res = run(go())
    assert res.parsed is None and "malformed output after 2 re-asks" in res.error
    assert stub.calls == 3


def test_validator_failure_counts_as_malformed(stub, tmp_path):
    from pydantic import BaseModel

    class Verdict(BaseModel):
        label: str
        score: float

    stub.responder = lambda body: ('{"label": "correct"}' if len(body["messages"]) == 1
                                   else '```json\n{"label": "correct", "score": 1}\n```')

    async def go():
        client = ModelClient(tmp_path / "c.sqlite")
        res = await client.complete_json(cfg(stub), MSG, Verdict)
        await client.aclose()
        return res

    res = run(go())
    assert isinstance(res.parsed, Verdict) and res.parsed.score == 1.0 and stub.calls == 2


def test_rollouts_are_separate_keys_with_seeds(stub, tmp_path):
    async def go():
        client = ModelClient(tmp_path / "c.sqlite")
        res = await client.complete_rollouts(cfg(stub, seed=100), MSG, n=4)
        await client.aclose()
        return res

    results = run(go())
    assert len({r.key for r in results}) == 4 and stub.calls == 4
    assert sorted(b["seed"] for b in stub.bodies) == [100, 101, 102, 103]
    assert [r.sample_index for r in results] == [0, 1, 2, 3]


def test_identical_calls_in_flight_are_made_once(stub, tmp_path):
    stub.latency = 0.1

    async def go():
        client = ModelClient(tmp_path / "c.sqlite")
        res = await asyncio.gather(*(client.complete(cfg(stub), MSG) for _ in range(5)))
        await client.aclose()
        return res

    results = run(go())
    assert stub.calls == 1
    assert sum(not r.cached for r in results) == 1 and len({r.text for r in results}) == 1


def test_concurrency_is_bounded_per_model(stub, tmp_path):
    stub.latency = 0.05
    model = cfg(stub, max_concurrency=3)

    async def go():
        client = ModelClient(tmp_path / "c.sqlite")
        msgs = [[{"role": "user", "content": f"q{i}"}] for i in range(12)]
        res = await asyncio.gather(*(client.complete(model, m) for m in msgs))
        await client.aclose()
        return res

    results = run(go())
    assert all(r.ok for r in results) and stub.calls == 12
    assert stub.max_inflight == 3


def test_cost_from_litellm_map_and_zero_for_unknown(stub, tmp_path):
    known = run(_one(tmp_path / "a.sqlite", cfg(stub, model="openai/gpt-4o")))
    local = run(_one(tmp_path / "b.sqlite", cfg(stub, model="hosted_vllm/some-local-model", api_key_env=None)))
    assert known.ok and known.cost > 0
    assert local.ok and local.cost == 0.0


def test_api_keys_never_stored(stub, tmp_path):
    db = tmp_path / "c.sqlite"
    stub.script[:] = ["echo_auth_500", "echo_auth_500", "echo_auth_500", "echo_auth_500"]

    async def go():
        client = ModelClient(db)
        failed = await client.complete(cfg(stub), MSG)
        ok = await client.complete(cfg(stub, params={"top_k": 5}), MSG)
        await client.aclose()
        return failed, ok

    failed, ok = run(go())
    assert f"Bearer {SECRET}" in stub.auth_headers  # the key was used ...
    assert not failed.ok and SECRET not in failed.error and "***" in failed.error
    assert ok.ok
    for path in tmp_path.iterdir():  # ... and is nowhere in the SQLite files (db, -wal, -shm)
        assert SECRET.encode() not in path.read_bytes(), path


def test_sync_client(stub, tmp_path):
    with SyncModelClient(tmp_path / "c.sqlite") as client:
        first = client.complete(cfg(stub), MSG)
        second = client.complete(cfg(stub), MSG)
        rolls = client.complete_rollouts(cfg(stub), MSG, n=2)
    assert first.ok and second.cached and rolls[0].cached and not rolls[1].cached
    assert stub.calls == 2


def test_router_spreads_calls_over_servers(tmp_path):
    a, b = start_stub(), start_stub()
    try:
        model = ModelConfig(model="hosted_vllm/stub", api_bases=[a.api_base, b.api_base], timeout=2.0,
                            backoff_initial=0.01, backoff_max=0.05, max_concurrency=8)

        async def go():
            client = ModelClient(tmp_path / "c.sqlite")
            res = await asyncio.gather(*(
                client.complete(model, [{"role": "user", "content": f"q{i}"}]) for i in range(30)))
            await client.aclose()
            return res

        results = run(go())
        assert all(r.ok for r in results)
        assert a.calls + b.calls == 30 and a.calls > 0 and b.calls > 0
    finally:
        a.stop()
        b.stop()


def test_reply_json_variants():  # the full table: tests/test_json_reply.py
    assert reply_json('{"a": 1}') == {"a": 1}
    assert reply_json('Sure!\n```json\n{"a": 2}\n```') == {"a": 2}
    assert reply_json('<think>{"draft": 0}</think> verdict: {"a": 3} done') == {"a": 3}
    with pytest.raises(ValueError):
        reply_json("no json here")


def test_cache_rows_and_log(stub, tmp_path):
    db = tmp_path / "c.sqlite"
    run(_one(db, cfg(stub), role="judge"))
    cache = CallCache(db)
    totals = cache.totals()
    cache.close()
    assert totals["attempts"] == {"ok": 1} and totals["tokens_in"] > 0
    with sqlite3.connect(db) as conn:
        role, params = conn.execute("SELECT role, params FROM calls").fetchone()
    assert role == "judge" and json.loads(params)["temperature"] == 0.7


# ---- malformed provider replies, cut connections, outages, a server that restarts ---------------------------


@pytest.mark.parametrize("mode", ["no_choices", "no_message", "null_content", "garbage", "cut", "bad_body"])
def test_malformed_provider_replies_are_retried_like_a_5xx(stub, tmp_path, mode):
    clean = run(_one(tmp_path / "clean.sqlite", cfg(stub)))
    stub.reset()
    stub.script[:] = [mode, mode]
    db = tmp_path / "c.sqlite"
    result = run(_one(db, cfg(stub)))
    assert result.ok and result.attempts == 3 and stub.calls == 3
    assert result.text == clean.text  # the answer is the one a fault-free server gives
    assert [r[0] for r in log_rows(db)] == ["retry", "retry", "ok"]


def test_a_malformed_reply_after_every_retry_is_a_failure_never_cached(stub, tmp_path):
    stub.script[:] = ["no_choices"] * 3
    db = tmp_path / "c.sqlite"
    result = run(_one(db, cfg(stub, max_retries=2)))
    assert not result.ok and result.failed and "MalformedReply" in result.error
    assert result.failure_kind is FailureKind.MALFORMED
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 0


def test_finish_reason_length_is_kept_with_the_cached_reply(stub, tmp_path):
    stub.script[:] = ["length"]
    db = tmp_path / "c.sqlite"
    first = run(_one(db, cfg(stub)))
    again = run(_one(db, cfg(stub)))
    assert first.ok and first.finish_reason == "length" and stub.calls == 1
    assert again.cached and again.finish_reason == "length"


def test_an_outage_fails_the_calls_and_a_restarted_server_answers_them(tmp_path):
    server = start_stub()
    port = server.port
    server.down = True
    db = tmp_path / "c.sqlite"
    model = ModelConfig(model="openai/stub-model", api_base=server.api_base, timeout=2.0, max_retries=1,
                        backoff_initial=0.01, backoff_max=0.02)
    down = run(_one(db, model))
    assert not down.ok and down.failed and server.calls == 0
    assert down.failure_kind is FailureKind.UNREACHABLE  # cut connections: told by type, not by the error's text
    server.stop()
    gone = run(_one(db, model))  # nothing listens on the port at all
    assert not gone.ok and gone.failed and gone.failure_kind is FailureKind.UNREACHABLE
    restarted = start_stub(port=port)  # the server comes back on the same port
    try:
        back = run(_one(db, model))
        assert back.ok and not back.cached and restarted.calls == 1
    finally:
        restarted.stop()


def test_failure_kinds_come_from_the_exceptions_types_and_status():
    """One classification, from the exception when a call fails (never from the error line later)."""
    import asyncio

    import httpx
    import litellm

    from benchfill.models.failures import CallFailure, CallsFailed, MalformedReply, classify_failure

    def lit(name: str, **kw):
        return getattr(litellm, name)(message="boom", llm_provider="openai", model="openai/m", **kw)

    assert classify_failure(MalformedReply("no choices")) is FailureKind.MALFORMED
    assert classify_failure(asyncio.TimeoutError()) is FailureKind.TIMED_OUT
    assert classify_failure(ConnectionRefusedError()) is FailureKind.UNREACHABLE
    assert classify_failure(lit("RateLimitError")) is FailureKind.RATE_LIMITED
    assert classify_failure(lit("Timeout")) is FailureKind.TIMED_OUT
    assert classify_failure(lit("AuthenticationError")) is FailureKind.AUTH
    assert classify_failure(lit("BadRequestError")) is FailureKind.REJECTED
    assert classify_failure(lit("ServiceUnavailableError")) is FailureKind.SERVER_ERROR
    assert classify_failure(ValueError("odd")) is FailureKind.OTHER
    # a 500 whose cause is a transport error: the cause decides
    wrapped = lit("InternalServerError")
    wrapped.__cause__ = httpx.ConnectError("refused")
    assert classify_failure(wrapped) is FailureKind.UNREACHABLE
    assert classify_failure(lit("InternalServerError")) is FailureKind.SERVER_ERROR
    # the stop line names the two most common kinds
    stop = CallsFailed([CallFailure(FailureKind.TIMED_OUT, "a"), CallFailure(FailureKind.TIMED_OUT, "b"),
                        CallFailure(FailureKind.RATE_LIMITED, "c"), CallFailure(FailureKind.AUTH, "")])
    assert str(stop) == "4 calls failed (timed out, rate limited); rerun with --resume" and stop.first == "a"
    assert stop.kinds[FailureKind.TIMED_OUT] == 2
