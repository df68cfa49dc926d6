"""The memory bank of a BenchFill run: one SQLite file (sqlite-utils) holding gaps, seed items, candidates, the
review queue, and (through the models layer's call log, in the same file) every model call.

Every write is an upsert keyed by a deterministic id, so a node that LangGraph re-runs after a crash rewrites the
same rows instead of adding new ones.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import sqlite_utils

REVIEW_APPROVALS_NEEDED = 3
REVIEW_REJECTIONS_TO_DROP = 3
REVIEW_RULE = (f"accepted after {REVIEW_APPROVALS_NEEDED} approvals and no standing rejection; a rejection blocks "
               f"until that reviewer votes again; {REVIEW_REJECTIONS_TO_DROP} rejections reject it")


@dataclass(frozen=True)
class MemoryItem:
    """An item with a known place on the difficulty axis: a seed (existing benchmark item) or a labelled candidate."""

    id: str
    question: str
    answer: str
    d: float
    b: float
    b_sd: float
    kind: str  # "seed" | "candidate"


# decision columns, added to a bank made before them
GAP_DECISION_COLUMNS = {"tolerance": float, "resolution": float, "stop_reason": str, "p_inside": float,
                        "p_within": float, "children_mu": float, "children_sigma": float, "chosen_gap_sd": float}
CANDIDATE_DECISION_COLUMNS = {"p_inside": float, "p_within": float, "confirm_steps": int}


def _add_missing(table: Any, columns: dict[str, type]) -> None:
    have = set(table.columns_dict)
    for name, kind in columns.items():
        if name not in have:
            table.add_column(name, kind)


class MemoryBank:
    """Typed access to the run's SQLite file. Tables: runs, gaps, seeds, candidates, reviews."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # LangGraph may run nodes on worker threads; they run one at a time, so one shared connection is safe.
        conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        self.db = sqlite_utils.Database(conn)
        self.db.execute("PRAGMA journal_mode=WAL")
        self._ensure_tables()

    def _ensure_tables(self) -> None:
        t = self.db.table
        if not t("runs").exists():
            t("runs").create({"key": str, "value": str}, pk="key")
        if not t("gaps").exists():
            t("gaps").create(
                {"gap": int, "lo": float, "hi": float, "target": float, "status": str, "rounds": int,
                 "chosen": str, "chosen_d": float, "chosen_d_sd": float, "deviation": float, "n_candidates": int,
                 "cost": float, "method": str, "note": str},
                pk=("method", "gap"),
            )
        _add_missing(t("gaps"), GAP_DECISION_COLUMNS)
        if not t("seeds").exists():
            t("seeds").create({"method": str, "gap": int, "id": str, "question": str, "answer": str, "b": float,
                               "b_sd": float, "d": float, "format": str}, pk=("method", "gap", "id"))
        if not t("usage").exists():
            t("usage").create({"method": str, "gap": int, "round": int, "node": str, "calls": int, "cached": int,
                               "tokens": int, "cost": float}, pk=("method", "gap", "round", "node"))
        if not t("candidates").exists():
            t("candidates").create(
                {"id": str, "method": str, "gap": int, "round": int, "parent": str, "question": str, "answer": str,
                 "rewriter": str, "judge": str, "valid": int, "verdict": str, "counts": str, "b": float, "b_sd": float,
                 "d": float, "d_sd": float, "deviation": float, "status": str, "error": str, "format": str,
                 "created": float},
                pk="id",
            )
            t("candidates").create_index(["method", "gap", "round"])
        _add_missing(t("candidates"), CANDIDATE_DECISION_COLUMNS)
        if not t("reviews").exists():
            t("reviews").create({"candidate": str, "reviewer": str, "decision": str, "note": str, "at": float},
                                pk=("candidate", "reviewer"))

    @classmethod
    def create(cls, path: str | Path, **meta: Any) -> "MemoryBank":
        """Create the bank with its run metadata (the fingerprint) in one step: it is built under a temporary name
        and renamed into place, so ``path`` either does not exist or holds a complete, fingerprinted start — a kill
        at any instant leaves a folder that ``--resume`` continues or that starts afresh."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f".{path.name}.creating-*"):  # a start killed before its rename
            stale.unlink(missing_ok=True)
        tmp = path.parent / f".{path.name}.creating-{os.getpid()}"
        bank = cls(tmp)
        bank.set_meta(**meta)
        bank.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)
        os.replace(tmp, path)
        return cls(path)

    def close(self) -> None:
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:  # pragma: no cover - another connection holds the file; the WAL stays valid
            pass
        self.db.conn.close()

    # ---- run metadata -------------------------------------------------------------------------------------
    def set_meta(self, **values: Any) -> None:
        self.db.table("runs").upsert_all([{"key": k, "value": json.dumps(v)} for k, v in values.items()], pk="key")

    def meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("select value from runs where key = ?", [key]).fetchone()
        return default if row is None else json.loads(row[0])

    # ---- seeds: the existing items nearest each gap's target ------------------------------------------------
    def set_seeds(self, method: str, gap: int, rows: Iterable[dict[str, Any]]) -> None:
        self.db.table("seeds").upsert_all([{"method": method, "gap": gap, **r} for r in rows], pk=("method", "gap", "id"))

    def seeds_for(self, method: str, gap: int) -> list[MemoryItem]:
        rows = self.db["seeds"].rows_where("method = ? and gap = ?", [method, gap], order_by="d, id")
        return [MemoryItem(r["id"], r["question"], r["answer"], r["d"], r["b"], r["b_sd"], "seed") for r in rows]

    # ---- model usage per node (idempotent: a re-run node replaces its row) ------------------------------------
    def record_usage(self, method: str, gap: int, round: int, node: str, spent: dict[str, float]) -> None:
        self.db.table("usage").upsert({"method": method, "gap": gap, "round": round, "node": node,
                                 "calls": int(spent["calls"]), "cached": int(spent["cached"]),
                                 "tokens": int(spent["tokens"]), "cost": float(spent["cost"])},
                                pk=("method", "gap", "round", "node"))

    def gap_usage(self, method: str, gap: int) -> dict[str, float]:
        row = self.db.execute("select coalesce(sum(calls),0), coalesce(sum(tokens),0), coalesce(sum(cost),0) "
                              "from usage where method = ? and gap = ?", [method, gap]).fetchone()
        return {"calls": row[0], "tokens": row[1], "cost": row[2]}

    def usage_by_round(self, method: str, gap: int) -> dict[int, dict[str, float]]:
        out: dict[int, dict[str, float]] = {}
        for r in self.db.execute("select round, sum(calls), sum(tokens), sum(cost) from usage where method = ? and "
                                 "gap = ? group by round", [method, gap]).fetchall():
            out[r[0]] = {"calls": r[1], "tokens": r[2], "cost": r[3]}
        return out

    # ---- gaps ----------------------------------------------------------------------------------------------
    def upsert_gap(self, method: str, gap: int, **fields: Any) -> None:
        self.db.table("gaps").upsert({"method": method, "gap": gap, **fields}, pk=("method", "gap"))

    def gap(self, method: str, gap: int) -> dict[str, Any] | None:
        rows = list(self.db["gaps"].rows_where("method = ? and gap = ?", [method, gap]))
        return rows[0] if rows else None

    def gaps(self, method: str | None = None) -> list[dict[str, Any]]:
        where, args = ("method = ?", [method]) if method else (None, None)
        return list(self.db["gaps"].rows_where(where, args, order_by="method, gap"))

    # ---- candidates ----------------------------------------------------------------------------------------
    def upsert_candidates(self, rows: Iterable[dict[str, Any]]) -> None:
        rows = [{"created": time.time(), **r} for r in rows]
        for r in rows:
            if isinstance(r.get("counts"), dict):
                r["counts"] = json.dumps(r["counts"])
        if rows:
            self.db.table("candidates").upsert_all(rows, pk="id", alter=True)

    def update_candidate(self, cid: str, **fields: Any) -> None:
        if isinstance(fields.get("counts"), dict):
            fields["counts"] = json.dumps(fields["counts"])
        self.db.table("candidates").update(cid, fields, alter=True)

    def candidates(self, method: str, gap: int, round: int | None = None) -> list[dict[str, Any]]:
        if round is None:
            rows = self.db["candidates"].rows_where("method = ? and gap = ?", [method, gap], order_by="round, id")
        else:
            rows = self.db["candidates"].rows_where("method = ? and gap = ? and round = ?", [method, gap, round],
                                                    order_by="id")
        out = []
        for r in rows:
            r = dict(r)
            r["counts"] = json.loads(r["counts"]) if r.get("counts") else None
            out.append(r)
        return out

    def candidate(self, cid: str) -> dict[str, Any] | None:
        rows = list(self.db["candidates"].rows_where("id = ?", [cid]))
        if not rows:
            return None
        r = dict(rows[0])
        r["counts"] = json.loads(r["counts"]) if r.get("counts") else None
        return r

    def best_candidate(self, method: str, gap: int, target: float) -> dict[str, Any] | None:
        """The valid, placed child most likely within tolerance of the target so far: the largest
        P(|d - t| <= tolerance), then the largest P(d inside the gap), then the nearest d (ties: smaller id)."""
        row = self.db.execute(
            "select id from candidates where method = ? and gap = ? and status in ('placed', 'chosen') "
            "order by coalesce(p_within, 0) desc, coalesce(p_inside, 0) desc, abs(d - ?), id limit 1",
            [method, gap, target]).fetchone()
        return None if row is None else self.candidate(row[0])

    def placed(self, method: str, gap: int) -> list[MemoryItem]:
        """Valid, labelled candidates of one gap's search (they join the memory as potential parents)."""
        return [
            MemoryItem(r["id"], r["question"], r["answer"], r["d"], r["b"], r["b_sd"], "candidate")
            for r in self.candidates(method, gap)
            if r["status"] in ("placed", "chosen")
        ]

    # ---- review queue ----------------------------------------------------------------------------------------
    # The rule (README, `benchfill review`): each reviewer has one standing vote per item (a new vote replaces
    # theirs). An item is "accepted" with >= 3 approvals and no standing rejection; a rejection "blocks" it until the
    # rejecting reviewer re-reviews (votes again); 3 rejections make it "rejected" for good. Only accepted items are
    # exported. Every vote is also appended to ``review_log`` (who, what, when), so a changed vote stays visible.
    def review(self, candidate: str, reviewer: str, decision: str, note: str = "") -> None:
        if decision not in ("approve", "reject"):
            raise ValueError(f"decision must be approve or reject, not {decision!r}")
        at = time.time()
        with self.db.conn:
            self.db.table("reviews").upsert(
                {"candidate": candidate, "reviewer": reviewer, "decision": decision, "note": note, "at": at},
                pk=("candidate", "reviewer"),
            )
            self.db.table("review_log").insert(
                {"candidate": candidate, "reviewer": reviewer, "decision": decision, "note": note, "at": at},
                alter=True)

    def reviews(self, candidate: str) -> list[dict[str, Any]]:
        return list(self.db["reviews"].rows_where("candidate = ?", [candidate], order_by="at"))

    def approvals(self, candidate: str) -> tuple[int, int]:
        rows = self.reviews(candidate)
        return sum(r["decision"] == "approve" for r in rows), sum(r["decision"] == "reject" for r in rows)

    def review_status(self, candidate: str) -> str:
        approve, reject = self.approvals(candidate)
        if reject >= REVIEW_REJECTIONS_TO_DROP:
            return "rejected"
        if reject:
            return "blocked"
        return "accepted" if approve >= REVIEW_APPROVALS_NEEDED else "pending"
