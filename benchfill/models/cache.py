"""The call cache and call log: one SQLite file (WAL) that makes every model call pay-once and inspectable.

Tables (created with sqlite-utils, written through one connection):

- ``calls``: the cache, one row per *successful* call, keyed by :func:`call_key` = sha256 of (model, messages,
  params, sample index). A resumed or repeated run finds its answers here and makes no call.
- ``call_log``: one row per attempt — successes, retried failures (429, timeouts, 5xx), final failures and
  malformed structured output — so nothing is silently dropped.
- ``prompts``: the messages of each call, once per prompt hash (for traces).
- ``grades``: grading results keyed by (call key, item fingerprint), so a rerun need not re-grade.
- ``meta``: free key/value facts about the run (e.g. ``simulated``).

Each write is its own transaction (autocommit), so a call is durable the moment it returns: Ctrl-C or kill -9
never loses a paid-for answer. API keys never reach this file: :func:`strip_secrets` removes them from params
before hashing or storing, and :func:`scrub` masks known secret values in error messages.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import sqlite_utils

_SECRET_PARTS = ("secret", "password", "authorization", "bearer", "credential")
_NOT_SECRET = {"prompt_cache_key", "cache_key"}
_SECRET_NAMES = {"token", "access_token", "auth_token", "api_token", "hf_token", "id_token", "session_token"}


def is_secret_name(name: str) -> bool:
    """Whether a parameter name can carry a credential (``api_key``, ``aws_secret_access_key``, ``token``...)."""
    low = name.lower()
    if low.endswith("_env") or low in _NOT_SECRET:  # the *name* of an environment variable is not a secret
        return False
    return low.endswith("key") or low in _SECRET_NAMES or any(part in low for part in _SECRET_PARTS)


def strip_secrets(params: Any) -> Any:
    """A copy of ``params`` without any field that could hold a credential (recursively)."""
    if isinstance(params, Mapping):
        return {k: strip_secrets(v) for k, v in params.items() if not is_secret_name(str(k))}
    if isinstance(params, (list, tuple)):
        return [strip_secrets(v) for v in params]
    return params


def secret_values(env_names: Iterable[str | None]) -> list[str]:
    """The current values of the named environment variables (to mask them wherever text is stored)."""
    out = []
    for name in env_names:
        value = os.environ.get(name) if name else None
        if value and len(value) >= 4:
            out.append(value)
    return out


def scrub(text: str | None, secrets: Sequence[str]) -> str | None:
    """``text`` with every secret value replaced by ``***``."""
    if not text:
        return text
    for value in secrets:
        text = text.replace(value, "***")
    return text


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def prompt_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    return hashlib.sha256(_canonical(list(messages)).encode("utf-8")).hexdigest()


def call_key(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any], sample_index: int) -> str:
    """The cache key of one call: sha256 over (model, messages, params without secrets, sample index).

    Call ``k`` of ``n`` rollouts is its own key, so rollouts are separate cached answers.
    """
    blob = _canonical({"m": model, "msg": list(messages), "p": strip_secrets(dict(params)), "k": int(sample_index)})
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class CachedCall:
    """A successful call read back from the cache."""

    key: str
    model: str
    text: str
    tokens_in: int
    tokens_out: int
    cost: float
    latency_s: float
    simulated: bool
    finish_reason: str | None = None


class CallCache:
    """SQLite call cache + call log (WAL mode). Safe for many coroutines of one process and for a background
    thread (one connection behind a lock); other processes may read or write the same file concurrently.

    Args:
        path: the SQLite file (created with its folder); ``":memory:"`` for a throwaway cache.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # autocommit (isolation_level=None): each INSERT is committed at once, so a finished call survives kill -9.
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        self.db = sqlite_utils.Database(self._conn)
        if self.path != ":memory:":
            self.db.enable_wal()
        # NORMAL under WAL: a commit is durable against a process crash (kill -9), fsync only at checkpoints.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=30000")
        self._create()

    def _create(self) -> None:
        with self._lock:
            self.db.table("calls").create(
                {
                    "key": str, "model": str, "role": str, "sample_index": int, "prompt_hash": str, "params": str,
                    "text": str, "tokens_in": int, "tokens_out": int, "cost": float, "latency_s": float,
                    "attempts": int, "simulated": int, "created_at": str,
                },
                pk="key", if_not_exists=True,
            )
            if "finish_reason" not in self.db["calls"].columns_dict:  # files written before the column existed
                self._conn.execute("ALTER TABLE calls ADD COLUMN finish_reason TEXT")
            self.db.table("call_log").create(
                {
                    "id": int, "key": str, "model": str, "role": str, "sample_index": int, "attempt": int,
                    "outcome": str, "error": str, "tokens_in": int, "tokens_out": int, "cost": float,
                    "latency_s": float, "simulated": int, "ts": str,
                },
                pk="id", if_not_exists=True,
            )
            self.db.table("prompts").create({"prompt_hash": str, "messages": str}, pk="prompt_hash", if_not_exists=True)
            self.db.table("grades").create(
                {
                    "call_key": str, "item_key": str, "label": str, "score": float, "method": str, "extracted": str,
                    "reason": str, "created_at": str,
                },
                pk=("call_key", "item_key"), if_not_exists=True,
            )
            self.db.table("meta").create({"k": str, "v": str}, pk="k", if_not_exists=True)
            self.db.table("call_log").create_index(["key"], if_not_exists=True)

    # ------------------------------------------------------------------------------------------- cache

    def get(self, key: str) -> CachedCall | None:
        """The cached successful answer for ``key``, or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT key, model, text, tokens_in, tokens_out, cost, latency_s, simulated, finish_reason FROM calls "
                "WHERE key = ?",
                (key,),
            ).fetchone()
        if row is None:
            return None
        return CachedCall(row[0], row[1], row[2] or "", row[3] or 0, row[4] or 0, row[5] or 0.0, row[6] or 0.0,
                          bool(row[7]), row[8])

    def put(
        self, key: str, *, model: str, role: str, sample_index: int, messages: Sequence[Mapping[str, Any]],
        params: Mapping[str, Any], text: str, tokens_in: int, tokens_out: int, cost: float, latency_s: float,
        attempts: int, simulated: bool, finish_reason: str | None = None,
    ) -> None:
        """Store one successful call (cache row + prompt + an ``ok`` log row), committed before returning."""
        phash = prompt_hash(messages)
        ts = _now()
        safe_params = _canonical(strip_secrets(dict(params)))
        with self._lock:
            try:  # BEGIN inside: a signal landing right after it must still roll the transaction back
                self._conn.execute("BEGIN")
                self._conn.execute(
                    "INSERT OR IGNORE INTO prompts (prompt_hash, messages) VALUES (?, ?)",
                    (phash, _canonical(list(messages))),
                )
                self._conn.execute(
                    "INSERT OR REPLACE INTO calls (key, model, role, sample_index, prompt_hash, params, text, "
                    "tokens_in, tokens_out, cost, latency_s, attempts, simulated, created_at, finish_reason) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, model, role, sample_index, phash, safe_params, text, tokens_in, tokens_out, cost,
                     latency_s, attempts, int(simulated), ts, finish_reason),
                )
                self._conn.execute(
                    "INSERT INTO call_log (key, model, role, sample_index, attempt, outcome, error, tokens_in, "
                    "tokens_out, cost, latency_s, simulated, ts) VALUES (?, ?, ?, ?, ?, 'ok', NULL, ?, ?, ?, ?, ?, ?)",
                    (key, model, role, sample_index, attempts, tokens_in, tokens_out, cost, latency_s,
                     int(simulated), ts),
                )
                self._conn.execute("COMMIT")
            except BaseException:
                # a signal (Ctrl-C, SIGTERM) can land just before BEGIN took effect or just after COMMIT did: then
                # there is nothing to undo, and a failing ROLLBACK must not mask the signal's own exception
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def put_many(self, rows: Sequence[dict[str, Any]]) -> None:
        """Store several successful calls at once (the vLLM batch path); each dict has :meth:`put`'s fields."""
        for row in rows:
            self.put(**row)

    def log(
        self, key: str, *, model: str, role: str, sample_index: int, attempt: int, outcome: str,
        error: str | None = None, tokens_in: int = 0, tokens_out: int = 0, cost: float = 0.0,
        latency_s: float = 0.0, simulated: bool = False,
    ) -> None:
        """Record one attempt that did not produce a cached answer (``retry``, ``error``, ``malformed``)."""
        with self._lock:
            self._conn.execute(
                "INSERT INTO call_log (key, model, role, sample_index, attempt, outcome, error, tokens_in, "
                "tokens_out, cost, latency_s, simulated, ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, model, role, sample_index, attempt, outcome, error, tokens_in, tokens_out, cost, latency_s,
                 int(simulated), _now()),
            )

    # ------------------------------------------------------------------------------------------- grades

    def get_grade(self, call_key: str, item_key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT label, score, method, extracted, reason FROM grades WHERE call_key = ? AND item_key = ?",
                (call_key, item_key),
            ).fetchone()
        if row is None:
            return None
        return {"label": row[0], "score": row[1], "method": row[2], "extracted": row[3], "reason": row[4]}

    def put_grade(self, call_key: str, item_key: str, grade: Mapping[str, Any]) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO grades (call_key, item_key, label, score, method, extracted, reason, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (call_key, item_key, grade.get("label"), grade.get("score"), grade.get("method"),
                 grade.get("extracted"), grade.get("reason"), _now()),
            )

    # ------------------------------------------------------------------------------------------- meta / stats

    def set_meta(self, key: str, value: Any) -> None:
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", (key, _canonical(value)))

    def get_meta(self, key: str) -> Any:
        with self._lock:
            row = self._conn.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def totals(self) -> dict[str, Any]:
        """Aggregates of the log: attempts by outcome, tokens and cost of successful calls."""
        with self._lock:
            by = dict(self._conn.execute("SELECT outcome, COUNT(*) FROM call_log GROUP BY outcome").fetchall())
            tin, tout, cost = self._conn.execute(
                "SELECT COALESCE(SUM(tokens_in),0), COALESCE(SUM(tokens_out),0), COALESCE(SUM(cost),0) FROM calls"
            ).fetchone()
        return {"attempts": by, "tokens_in": tin, "tokens_out": tout, "cost": cost}

    def close(self) -> None:
        with self._lock:
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:  # pragma: no cover - another process holds the file; the WAL stays valid
                pass
            self._conn.close()

    def __enter__(self) -> "CallCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

