"""The review queue: the documented rule (3 approvals, a rejection blocks until re-reviewed, 3 rejections reject),
votes stored in the memory bank with their history, and `benchfill review --show / --approve / --reject`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from benchfill.cli import app
from benchfill.memory.bank import MemoryBank
from benchfill.memory.trace import review_item, review_queue

runner = CliRunner()


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def run_dir(tmp_path):
    """A run folder holding one filled gap whose chosen item awaits review (no search needed)."""
    bank = MemoryBank.create(tmp_path / "memory.sqlite", simulated=True, params={"tolerance": 0.01})
    bank.upsert_gap("benchfill", 1, status="searching")  # statuses move as in a search (memory/record.py)
    bank.upsert_gap("benchfill", 1, lo=0.4, hi=0.6, target=0.5, status="filled", rounds=2, chosen="c1",
                    chosen_d=0.52, chosen_d_sd=0.05, deviation=0.02, n_candidates=4, cost=0.0, note="")
    bank.upsert_candidates([{
        "id": "c1", "method": "benchfill", "gap": 1, "round": 2, "parent": "s1",
        "question": "What is $\\sqrt{16}$? [/INST] keep [bold]this[/bold]", "answer": "4",
        "rewriter": "sim/rw", "judge": "sim/j", "valid": 1, "verdict": json.dumps({"valid": True, "reason": "fine [/note]"}),
        "counts": {"m1": [3, 4], "m2[/x]": [1, 4]}, "b": 0.1, "b_sd": 0.3, "d": 0.52, "d_sd": 0.05,
        "deviation": 0.02, "status": "proposed", "error": "", "format": "numeric"}])
    for status in ("valid", "labelled", "placed", "chosen"):
        bank.update_candidate("c1", status=status)
    bank.close()
    return tmp_path


def test_the_rule(run_dir):
    bank = MemoryBank(run_dir / "memory.sqlite")
    assert bank.review_status("c1") == "pending"
    for who in ("ann", "bob"):
        bank.review("c1", who, "approve")
    assert bank.review_status("c1") == "pending"
    bank.review("c1", "cy", "reject", "ambiguous")
    bank.review("c1", "dan", "approve")
    assert bank.approvals("c1") == (3, 1) and bank.review_status("c1") == "blocked"  # one rejection blocks
    bank.review("c1", "cy", "approve", "fixed after discussion")  # re-reviewed: the vote is replaced
    assert bank.approvals("c1") == (4, 0) and bank.review_status("c1") == "accepted"
    for who in ("ann", "bob", "cy"):
        bank.review("c1", who, "reject")
    assert bank.review_status("c1") == "rejected"
    log = bank.review_log("c1")
    assert len(log) == 8 and log[2].decision == "reject" and log[2].note == "ambiguous"
    with pytest.raises(ValueError):
        bank.review("c1", "eve", "maybe")


def test_review_item_has_everything_a_reviewer_needs(run_dir):
    bank = MemoryBank(run_dir / "memory.sqlite")
    item = review_item(bank, "c1")
    assert item.question.startswith("What is") and item.answer == "4"
    assert item.verdict["reason"] == "fine [/note]" and item.judge == "sim/j"
    assert item.counts == {"m1": [3, 4], "m2[/x]": [1, 4]}
    p = item.placement
    assert p.d_lo == pytest.approx(0.52 - 1.645 * 0.05, abs=1e-3) and p.target == 0.5
    assert p.tolerance == 0.01 and p.target_in_interval is True
    assert [q.candidate for q in review_queue(bank)] == ["c1"]


def test_cli_show_approve_reject(run_dir):
    res = runner.invoke(app, ["review", str(run_dir), "--show", "c1"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    text = flat(res.output)
    for needle in ("[/INST] keep [bold]this[/bold]", "reference answer: 4", "fine [/note]", "m2[/x]",
                   "90 % interval [0.438, 0.602]", "target 0.500 ± tolerance 0.010"):
        assert needle in text, needle
    res = runner.invoke(app, ["review", str(run_dir), "--reject", "c1", "--reviewer", "ann", "--note", "typo"])
    assert res.exit_code == 0 and "c1: blocked" in flat(res.output)
    res = runner.invoke(app, ["review", str(run_dir), "--json", "-"])
    queue = json.loads(res.output[res.output.index("{\n  \"rule\""):])["queue"]  # CliRunner mixes stderr into output
    assert queue[0]["status"] == "blocked" and queue[0]["rejections"] == 1
    bad = runner.invoke(app, ["review", str(run_dir), "--approve", "c9", "--reviewer", "ann"])
    assert bad.exit_code == 2 and "queued: c1" in flat(bad.output)
    anon = runner.invoke(app, ["review", str(run_dir), "--approve", "c1"])
    assert anon.exit_code == 2 and "--reviewer" in anon.output
    bank = MemoryBank(run_dir / "memory.sqlite")
    assert bank.reviews("c1")[0].note == "typo"
