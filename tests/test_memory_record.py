"""The typed run record (benchfill/memory/record.py): every column is a documented field, writes are validated,
status changes follow the transition tables, and a bank made before the record (schema_version 1) is migrated."""

from __future__ import annotations

import sqlite3

import pytest
import sqlite_utils
from pydantic import BaseModel, ValidationError

from benchfill.errors import InputError
from benchfill.memory import views
from benchfill.memory.bank import MemoryBank
from benchfill.memory.record import (
    CANDIDATE_TRANSITIONS,
    GAP_TRANSITIONS,
    RECORDS,
    SCHEMA_VERSION,
    CandidateRecord,
    CandidateStatus,
    GapStatus,
    StatusTransitionError,
    UsageTotals,
    check_transition,
)

VIEWS = [m for m in vars(views).values() if isinstance(m, type) and issubclass(m, BaseModel) and m.__module__ ==
         views.__name__]


@pytest.mark.parametrize("model", [*RECORDS, UsageTotals, *VIEWS], ids=lambda m: m.__name__)
def test_every_field_is_documented(model):
    assert model.__doc__
    missing = [name for name, f in model.model_fields.items() if not (f.description or "").strip()]
    assert not missing, missing


def test_a_new_bank_has_every_declared_column(tmp_path):
    bank = MemoryBank(tmp_path / "memory.sqlite")
    for record in RECORDS:
        assert list(bank.db[record.TABLE].columns_dict) == list(record.columns()), record.TABLE
    assert list(bank.db["review_log"].columns_dict) == ["candidate", "reviewer", "decision", "note", "at"]
    assert bank.meta("schema_version") == SCHEMA_VERSION
    bank.close()


def _candidate(**fields):
    return {"id": "be-g1-r1-p0-c0", "method": "benchfill", "gap": 1, "round": 1, "parent": "s1", "question": "q",
            "answer": "a", "status": "proposed", **fields}


def test_writes_are_validated_and_statuses_move_along_the_table(tmp_path):
    bank = MemoryBank(tmp_path / "memory.sqlite")
    with pytest.raises(ValidationError):
        bank.upsert_gap("benchfill", 1, stauts="searching")  # a typo is not a new column
    with pytest.raises(ValidationError):
        bank.upsert_gap("benchfill", 1, status="done")  # not a gap status
    with pytest.raises(StatusTransitionError, match="a new gap cannot become 'filled'"):
        bank.upsert_gap("benchfill", 1, status="filled")
    bank.upsert_gap("benchfill", 1, lo=0.1, hi=0.3, target=0.2, status="searching", rounds=0)
    bank.upsert_gap("benchfill", 1, rounds=2)  # an upsert sets the fields it names, the others stay
    g = bank.gap("benchfill", 1)
    assert (g.status, g.rounds, g.lo, g.chosen) == (GapStatus.SEARCHING, 2, 0.1, None)

    with pytest.raises(StatusTransitionError):
        bank.upsert_candidates([_candidate(status="chosen")])
    bank.upsert_candidates([_candidate(counts={"m": [1, 2]})])
    cid = "be-g1-r1-p0-c0"
    with pytest.raises(StatusTransitionError, match=f"candidate {cid}: a candidate in status 'proposed' cannot "
                                                    "become 'chosen'"):
        bank.update_candidate(cid, status="chosen")
    with pytest.raises(ValidationError):
        bank.update_candidate(cid, valid="perhaps")
    assert bank.candidate(cid).status == CandidateStatus.PROPOSED  # nothing was written
    for status in ("valid", "labelled", "placed", "placed", "chosen"):  # the search's path (and a re-run)
        bank.update_candidate(cid, status=status)
    bank.update_candidate(cid, verdict={"well_posed": True, "reason": "ok"}, valid=True)
    c = bank.candidate(cid)
    assert c.status == "chosen" and c.counts == {"m": [1, 2]} and c.verdict["reason"] == "ok" and c.valid is True
    raw = bank.db.execute("select counts, verdict, valid from candidates").fetchone()  # the stored form
    assert raw == ('{"m": [1, 2]}', '{"well_posed":true,"reason":"ok"}', 1)
    bank.close()


def test_the_transition_tables():
    for table, kind in ((CANDIDATE_TRANSITIONS, CandidateStatus), (GAP_TRANSITIONS, GapStatus)):
        assert set(table) == {None, *kind}  # every status has its row
        for old, allowed in table.items():
            for new in kind:
                if new in allowed:
                    check_transition(old, new)
                else:
                    with pytest.raises(StatusTransitionError):
                        check_transition(old, new)
            if old is not None:
                assert old in allowed  # a re-run node writes the same status again
    assert CANDIDATE_TRANSITIONS[None] == {"proposed", "duplicate", "rewrite_failed"}


def test_a_bank_made_before_the_record_is_migrated(tmp_path):
    """A schema_version 1 bank: the columns of the older created schema only (no decision, adaptive or prescreen
    columns, no review_log, no schema_version); opening it adds them, and its rows read as records."""
    path = tmp_path / "memory.sqlite"
    db = sqlite_utils.Database(sqlite3.connect(path))
    db["runs"].create({"key": str, "value": str}, pk="key")
    db["gaps"].create({"gap": int, "lo": float, "hi": float, "target": float, "status": str, "rounds": int,
                       "chosen": str, "chosen_d": float, "chosen_d_sd": float, "deviation": float,
                       "n_candidates": int, "cost": float, "method": str, "note": str}, pk=("method", "gap"))
    db["candidates"].create({"id": str, "method": str, "gap": int, "round": int, "parent": str, "question": str,
                             "answer": str, "rewriter": str, "judge": str, "valid": int, "verdict": str,
                             "counts": str, "b": float, "b_sd": float, "d": float, "d_sd": float,
                             "deviation": float, "status": str, "error": str, "format": str, "created": float},
                            pk="id")
    db["gaps"].insert({"method": "benchfill", "gap": 1, "lo": 0.1, "hi": 0.3, "target": 0.2, "status": "filled",
                       "rounds": 2, "chosen": "be-g1-r1-p0-c0"})
    db["candidates"].insert(_candidate(status="chosen", valid=1, verdict='{"well_posed":true}', counts="{}",
                                       judge="", error="", format=""))
    db.conn.close()
    bank = MemoryBank(path)
    assert bank.meta("schema_version") == SCHEMA_VERSION
    for record in RECORDS:
        assert set(record.columns()) <= set(bank.db[record.TABLE].columns_dict), record.TABLE
    g, c = bank.gap("benchfill", 1), bank.candidate("be-g1-r1-p0-c0")
    assert g.status == "filled" and g.tolerance is None and g.p_inside is None
    assert c.counts == {} and c.verdict == {"well_posed": True} and c.labelling is None and c.prescreen_d is None
    bank.review("be-g1-r1-p0-c0", "ann", "approve")
    assert [r.reviewer for r in bank.review_log("be-g1-r1-p0-c0")] == ["ann"]
    bank.set_meta(schema_version=SCHEMA_VERSION + 1)
    bank.close()
    with pytest.raises(InputError, match="newer than this benchfill reads"):
        MemoryBank(path)


def test_candidates_are_records_in_search_order(tmp_path):
    bank = MemoryBank(tmp_path / "memory.sqlite")
    bank.upsert_candidates([CandidateRecord(id=f"be-g{g}-r{r}-p0-c{k}", method="benchfill", gap=g, round=r,
                                            status=CandidateStatus.PROPOSED)
                            for g in (2, 1) for r in (2, 1) for k in (1, 0)])
    assert [c.id for c in bank.candidates("benchfill", 1)] == ["be-g1-r1-p0-c0", "be-g1-r1-p0-c1",
                                                               "be-g1-r2-p0-c0", "be-g1-r2-p0-c1"]
    assert [c.id for c in bank.candidates("benchfill", 2, 2)] == ["be-g2-r2-p0-c0", "be-g2-r2-p0-c1"]
    assert len(bank.candidates()) == 8 and bank.candidates("baseline") == []
    assert all(c.created is not None for c in bank.candidates())
    bank.close()
