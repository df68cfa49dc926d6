"""The call cache: keys, secrets, durability, concurrency; vLLM stays an optional import."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys

import pytest

from benchfill.models.cache import CallCache, call_key, scrub, strip_secrets

MSG = [{"role": "user", "content": "hi"}]


def test_key_depends_on_model_messages_params_and_sample():
    base = call_key("m", MSG, {"temperature": 0.5}, 0)
    assert base == call_key("m", MSG, {"temperature": 0.5}, 0)
    assert base != call_key("m", MSG, {"temperature": 0.5}, 1)
    assert base != call_key("m2", MSG, {"temperature": 0.5}, 0)
    assert base != call_key("m", MSG, {"temperature": 0.6}, 0)
    assert base != call_key("m", [{"role": "user", "content": "hi!"}], {"temperature": 0.5}, 0)
    assert base == call_key("m", MSG, {"temperature": 0.5, "api_key": "sk-1"}, 0)  # secrets never enter the key


def test_strip_secrets_and_scrub():
    params = {"api_key": "a", "aws_secret_access_key": "b", "max_tokens": 5, "token": "c", "api_key_env": "X",
              "extra_headers": {"Authorization": "Bearer z", "X-Trace": "1"}, "top_k": 3}
    assert strip_secrets(params) == {"max_tokens": 5, "api_key_env": "X", "extra_headers": {"X-Trace": "1"},
                                     "top_k": 3}
    assert scrub("header Bearer sk-123456 rejected", ["sk-123456"]) == "header Bearer *** rejected"


def _put(cache: CallCache, key: str, text: str = "t") -> None:
    cache.put(key, model="m", role="panel", sample_index=0, messages=MSG, params={}, text=text, tokens_in=1,
              tokens_out=2, cost=0.5, latency_s=0.1, attempts=1, simulated=False)


def test_put_get_wal_and_grades(tmp_path):
    db = tmp_path / "c.sqlite"
    cache = CallCache(db)
    assert cache.get("k") is None
    _put(cache, "k", "hello")
    hit = cache.get("k")
    assert hit.text == "hello" and hit.tokens_out == 2 and hit.cost == 0.5
    cache.put_grade("k", "item", {"label": "correct", "score": 1.0, "method": "math", "extracted": "5"})
    assert cache.get_grade("k", "item")["label"] == "correct"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cache.close()


class _SignalAfter:
    """A connection proxy that lets ``statement`` run, then raises KeyboardInterrupt as a signal handler would
    (Ctrl-C, or SIGTERM through cli_support) landing between two statements."""

    def __init__(self, conn: sqlite3.Connection, statement: str) -> None:
        self.conn, self.statement = conn, statement

    def execute(self, sql: str, *args):
        out = self.conn.execute(sql, *args)
        if sql == self.statement:
            self.statement = ""
            raise KeyboardInterrupt
        return out

    def __getattr__(self, name: str):
        return getattr(self.conn, name)


def test_a_signal_right_after_commit_or_begin_surfaces_as_itself(tmp_path):
    """Seen in CI: a SIGTERM landing just after COMMIT made the cleanup's ROLLBACK fail ("no transaction is
    active"), and that OperationalError replaced the signal's exception, so the command ended in a traceback
    instead of exit 143. Now the signal's own exception surfaces, a committed row stays, an open one is undone."""
    cache = CallCache(tmp_path / "c.sqlite")
    real = cache._conn
    for statement, kept in (("COMMIT", True), ("BEGIN", False)):
        cache._conn = _SignalAfter(real, statement)
        with pytest.raises(KeyboardInterrupt):
            _put(cache, statement, "t")
        cache._conn = real
        assert (cache.get(statement) is not None) is kept and not real.in_transaction
    cache.close()


def test_commit_survives_kill_9(tmp_path):
    """Each put is committed before it returns: a process killed right after still leaves the row."""
    db = tmp_path / "c.sqlite"
    code = (
        "import os, signal\nfrom benchfill.models.cache import CallCache\n"
        f"c = CallCache({str(db)!r})\n"
        "c.put('k', model='m', role='panel', sample_index=0, messages=[], params={}, text='kept', tokens_in=0, "
        "tokens_out=0, cost=0.0, latency_s=0.0, attempts=1, simulated=False)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert proc.returncode == -9
    assert CallCache(db).get("k").text == "kept"


def test_many_coroutines_and_a_second_process(tmp_path):
    db = tmp_path / "c.sqlite"
    cache = CallCache(db)

    async def write(i: int) -> None:
        await asyncio.sleep(0)
        _put(cache, f"k{i}")

    async def go():
        await asyncio.gather(*(write(i) for i in range(200)))

    asyncio.run(go())
    other = CallCache(db)  # another connection (another process would be the same) sees every row
    assert all(other.get(f"k{i}") is not None for i in range(200))
    assert cache.totals()["attempts"] == {"ok": 200}


# ----------------------------------------------------------------------------------------------- vLLM
# (the backend's request construction, seeds, defaults and engine isolation: tests/test_models_vllm.py)


def test_vllm_is_not_imported_at_module_import():
    code = ("import sys\nimport benchfill.models.vllm_backend, benchfill.models.client, benchfill.models.evaluate\n"
            "import benchfill.cli\nassert 'vllm' not in sys.modules\nassert 'litellm' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
