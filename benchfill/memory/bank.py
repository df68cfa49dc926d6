"""The memory bank of a BenchFill run: one SQLite file (sqlite-utils) holding gaps, seed items, candidates, the
review queue, and (through the models layer's call log, in the same file) every model call.

The bank reads and writes only the typed run record (:mod:`benchfill.memory.record`): each table's columns are
its record's fields, created with the bank (and added to a bank file made by an older benchfill when it is opened:
``schema_version`` in the ``runs`` table), and every write is validated through the record, status changes
through :func:`~benchfill.memory.record.check_transition`.

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
from typing import Any, Iterable, Mapping

import sqlite_utils

from benchfill.errors import InputError
from benchfill.memory.record import (
    PLACED_STATUSES,
    RECORDS,
    SCHEMA_VERSION,
    CandidateRecord,
    CandidateStatus,
    GapRecord,
    ReviewDecision,
    ReviewRecord,
    ReviewStatus,
    SeedRecord,
    UsageRecord,
    UsageTotals,
    check_transition,
)

REVIEW_APPROVALS_NEEDED = 3
REVIEW_REJECTIONS_TO_DROP = 3
REVIEW_RULE = (f"accepted after {REVIEW_APPROVALS_NEEDED} approvals and no standing rejection; a rejection blocks "
               f"until that reviewer votes again; {REVIEW_REJECTIONS_TO_DROP} rejections reject it")
REVIEW_LOG = "review_log"  # every vote, appended (ReviewRecord rows, no key)


@dataclass(frozen=True)
class MemoryItem:
    """An item with a known place on the difficulty axis: a seed (existing benchmark item) or a labelled candidate."""

    id: str
    question: str
    answer: str
    d: float
    b: float
    b_sd: float | None
    kind: str  # "seed" | "candidate"


def _add_missing(table: Any, columns: dict[str, type]) -> None:
    have = set(table.columns_dict)
    for name, kind in columns.items():
        if name not in have:
            table.add_column(name, kind)


class MemoryBank:
    """Typed access to the run's SQLite file. Tables: runs, gaps, seeds, candidates, usage, reviews, review_log
    (their records: :mod:`benchfill.memory.record`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # LangGraph may run nodes on worker threads; they run one at a time, so one shared connection is safe.
        conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        self.db = sqlite_utils.Database(conn)
        self.db.execute("PRAGMA journal_mode=WAL")
        try:
            self._ensure_tables()
        except BaseException:
            conn.close()
            raise

    def _ensure_tables(self) -> None:
        """Create the tables of the run record, or add the columns an older bank lacks (its ``schema_version``
        is then raised to this one's)."""
        t = self.db.table
        if not t("runs").exists():
            t("runs").create({"key": str, "value": str}, pk="key")
        version = self.meta("schema_version")
        if version is not None and int(version) > SCHEMA_VERSION:
            raise InputError(str(self.path), f"this memory bank has schema_version {version}, newer than this "
                                             f"benchfill reads ({SCHEMA_VERSION}): upgrade benchfill")
        for record in RECORDS:
            table = t(record.TABLE)
            if table.exists():
                _add_missing(table, record.columns())
            else:
                table.create(record.columns(), pk=record.KEY if len(record.KEY) > 1 else record.KEY[0])
        t("candidates").create_index(["method", "gap", "round"], if_not_exists=True)
        if t(REVIEW_LOG).exists():
            _add_missing(t(REVIEW_LOG), ReviewRecord.columns())
        else:
            t(REVIEW_LOG).create(ReviewRecord.columns())
        if version != SCHEMA_VERSION:
            self.set_meta(schema_version=SCHEMA_VERSION)

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
    def set_seeds(self, method: str, gap: int, rows: Iterable[SeedRecord | Mapping[str, Any]]) -> None:
        """The gap's seeds (records, or their fields without method and gap)."""
        records = [r if isinstance(r, SeedRecord) else SeedRecord.model_validate({"method": method, "gap": gap, **r})
                   for r in rows]
        self.db.table("seeds").upsert_all([r.to_row(r.model_fields_set) for r in records], pk=SeedRecord.KEY)

    def seeds(self, method: str, gap: int) -> list[SeedRecord]:
        rows = self.db["seeds"].rows_where("method = ? and gap = ?", [method, gap], order_by="d, id")
        return [SeedRecord.from_row(r) for r in rows]

    def seeds_for(self, method: str, gap: int) -> list[MemoryItem]:
        return [MemoryItem(s.id, s.question, s.answer, s.d, s.b, s.b_sd, "seed") for s in self.seeds(method, gap)]

    # ---- model usage per node (idempotent: a re-run node replaces its row) ------------------------------------
    def record_usage(self, method: str, gap: int, round: int, node: str, spent: Mapping[str, float]) -> None:
        rec = UsageRecord(method=method, gap=gap, round=round, node=node, calls=int(spent["calls"]),
                          cached=int(spent["cached"]), tokens=int(spent["tokens"]), cost=float(spent["cost"]))
        self.db.table("usage").upsert(rec.to_row(), pk=UsageRecord.KEY)

    def usage(self, method: str, gap: int) -> list[UsageRecord]:
        """The gap's usage rows, one per (round, node)."""
        rows = self.db["usage"].rows_where("method = ? and gap = ?", [method, gap], order_by="round, node")
        return [UsageRecord.from_row(r) for r in rows]

    def gap_usage(self, method: str, gap: int) -> UsageTotals:
        row = self.db.execute("select coalesce(sum(calls),0), coalesce(sum(tokens),0), coalesce(sum(cost),0) "
                              "from usage where method = ? and gap = ?", [method, gap]).fetchone()
        return UsageTotals(calls=row[0], tokens=row[1], cost=row[2])

    def usage_by_round(self, method: str, gap: int) -> dict[int, UsageTotals]:
        out: dict[int, UsageTotals] = {}
        for r in self.db.execute("select round, sum(calls), sum(tokens), sum(cost) from usage where method = ? and "
                                 "gap = ? group by round", [method, gap]).fetchall():
            out[r[0]] = UsageTotals(calls=r[1], tokens=r[2], cost=r[3])
        return out

    def calls_by_node(self, method: str, gap: int) -> dict[str, int]:
        """Model calls of the gap's search per graph node."""
        out: dict[str, int] = {}
        for u in self.usage(method, gap):
            out[u.node] = out.get(u.node, 0) + u.calls
        return out

    # ---- gaps ----------------------------------------------------------------------------------------------
    def upsert_gap(self, method: str, gap: int, **fields: Any) -> None:
        """Write the named fields of a gap (:class:`GapRecord`; the others keep their values)."""
        rec = GapRecord.model_validate({"method": method, "gap": gap, **fields})
        if rec.status is not None:
            old = self.gap(method, gap)
            check_transition(None if old is None else old.status, rec.status, f"gap {gap} of {method}")
        self.db.table("gaps").upsert(rec.to_row(rec.model_fields_set), pk=GapRecord.KEY)

    def gap(self, method: str, gap: int) -> GapRecord | None:
        rows = list(self.db["gaps"].rows_where("method = ? and gap = ?", [method, gap]))
        return GapRecord.from_row(rows[0]) if rows else None

    def gaps(self, method: str | None = None) -> list[GapRecord]:
        where, args = ("method = ?", [method]) if method else (None, None)
        return [GapRecord.from_row(r) for r in self.db["gaps"].rows_where(where, args, order_by="method, gap")]

    # ---- candidates ----------------------------------------------------------------------------------------
    def upsert_candidates(self, rows: Iterable[CandidateRecord | Mapping[str, Any]]) -> None:
        """Write candidates (records, or their fields): the fields each one sets, ``created`` (now) unless given;
        a row that exists keeps its other fields and must be allowed its new status."""
        records = [r if isinstance(r, CandidateRecord) else CandidateRecord.model_validate(r) for r in rows]
        if not records:
            return
        ids = [r.id for r in records]
        old = {cid: CandidateStatus(status) for cid, status in self.db.execute(
            f"select id, status from candidates where id in ({', '.join('?' * len(ids))})", ids).fetchall()}
        for r in records:
            check_transition(old.get(r.id), r.status, f"candidate {r.id}")
        now = time.time()
        self.db.table("candidates").upsert_all(
            [{"created": now, **r.to_row(r.model_fields_set)} for r in records], pk="id")

    def update_candidate(self, cid: str, **fields: Any) -> None:
        """Write the named fields of an existing candidate (validated with the rest of its record)."""
        old = self.candidate(cid)
        if old is None:
            raise sqlite_utils.db.NotFoundError(cid)
        rec = CandidateRecord.model_validate({**old.model_dump(), **fields})
        if "status" in fields:
            check_transition(old.status, rec.status, f"candidate {cid}")
        self.db.table("candidates").update(cid, rec.to_row(fields))

    def candidates(self, method: str | None = None, gap: int | None = None,
                   round: int | None = None) -> list[CandidateRecord]:
        """Candidates of a method (all: None), gap and round, in (method, gap, round, id) order."""
        where = [(c, v) for c, v in (("method", method), ("gap", gap), ("round", round)) if v is not None]
        rows = self.db["candidates"].rows_where(" and ".join(f"{c} = ?" for c, _ in where) or None,
                                                [v for _, v in where], order_by="method, gap, round, id")
        return [CandidateRecord.from_row(r) for r in rows]

    def candidate(self, cid: str) -> CandidateRecord | None:
        rows = list(self.db["candidates"].rows_where("id = ?", [cid]))
        return CandidateRecord.from_row(rows[0]) if rows else None

    def best_candidate(self, method: str, gap: int, target: float) -> CandidateRecord | None:
        """The valid, placed child most likely within tolerance of the target so far: the largest
        P(|d - t| <= tolerance), then the largest P(d inside the gap), then the nearest d (ties: smaller id)."""
        top = self.top_candidates(method, gap, target, 1)
        return top[0] if top else None

    def top_candidates(self, method: str, gap: int, target: float, k: int, among: Iterable[str] | None = None
                       ) -> list[CandidateRecord]:
        """The ``k`` first placed children in :meth:`best_candidate`'s order (the confirmation's finalists);
        ``among``: only these ids."""
        ids = None if among is None else list(among)
        where = "" if ids is None else f" and id in ({', '.join('?' * len(ids))})"
        rows = self.db.execute(
            f"select id from candidates where method = ? and gap = ? and status in (?, ?){where} "
            "order by coalesce(p_within, 0) desc, coalesce(p_inside, 0) desc, abs(d - ?), id limit ?",
            [method, gap, *(s.value for s in PLACED_STATUSES), *(ids or []), target, int(k)]).fetchall()
        out = [self.candidate(r[0]) for r in rows]
        return [c for c in out if c is not None]

    def placed(self, method: str, gap: int) -> list[MemoryItem]:
        """Valid, labelled candidates of one gap's search (they join the memory as potential parents)."""
        out = []
        for c in self.candidates(method, gap):
            if c.placed:
                assert c.d is not None and c.b is not None, c.id  # placement writes b and d with the status
                out.append(MemoryItem(c.id, c.question or "", c.answer or "", c.d, c.b, c.b_sd, "candidate"))
        return out

    # ---- review queue ----------------------------------------------------------------------------------------
    # The rule (README, `benchfill review`): each reviewer has one standing vote per item (a new vote replaces
    # theirs). An item is "accepted" with >= 3 approvals and no standing rejection; a rejection "blocks" it until the
    # rejecting reviewer re-reviews (votes again); 3 rejections make it "rejected" for good. Only accepted items are
    # exported. Every vote is also appended to ``review_log`` (who, what, when), so a changed vote stays visible.
    def review(self, candidate: str, reviewer: str, decision: str, note: str = "") -> None:
        if decision not in tuple(ReviewDecision):
            raise ValueError(f"decision must be approve or reject, not {decision!r}")
        row = ReviewRecord(candidate=candidate, reviewer=reviewer, decision=ReviewDecision(decision), note=note,
                           at=time.time()).to_row()
        with self.db.conn:
            self.db.table("reviews").upsert(row, pk=ReviewRecord.KEY)
            self.db.table(REVIEW_LOG).insert(row)

    def reviews(self, candidate: str) -> list[ReviewRecord]:
        """The item's standing votes, oldest first."""
        return [ReviewRecord.from_row(r) for r in self.db["reviews"].rows_where("candidate = ?", [candidate],
                                                                                order_by="at")]

    def review_log(self, candidate: str) -> list[ReviewRecord]:
        """Every vote on the item, in the order cast (changed votes included)."""
        return [ReviewRecord.from_row(r) for r in self.db[REVIEW_LOG].rows_where("candidate = ?", [candidate],
                                                                                 order_by="rowid")]

    def approvals(self, candidate: str) -> tuple[int, int]:
        rows = self.reviews(candidate)
        return (sum(r.decision == ReviewDecision.APPROVE for r in rows),
                sum(r.decision == ReviewDecision.REJECT for r in rows))

    def review_status(self, candidate: str) -> ReviewStatus:
        approve, reject = self.approvals(candidate)
        if reject >= REVIEW_REJECTIONS_TO_DROP:
            return ReviewStatus.REJECTED
        if reject:
            return ReviewStatus.BLOCKED
        return ReviewStatus.ACCEPTED if approve >= REVIEW_APPROVALS_NEEDED else ReviewStatus.PENDING
