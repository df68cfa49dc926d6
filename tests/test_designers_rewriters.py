"""BenchFill rewriters scored like designers, from memory banks populated by hand (MemoryBank API only)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from benchfill.cli import app
from benchfill.designers.rewriters import read_run, rewriter_report, score_rewriters
from benchfill.errors import InputError
from benchfill.memory.bank import MemoryBank


def make_run(folder, rewriter_meta, gaps, candidates_rewriter=None, tolerance=None):
    bank = MemoryBank(folder / "memory.sqlite")
    conf = {"fill": {"tolerance": tolerance}} if tolerance is not None else {}
    if rewriter_meta is not None:
        conf["rewriter"] = {"model": rewriter_meta, "name": None}
    bank.set_meta(config=conf)
    for k, (status, dev, cost, rounds) in enumerate(gaps, start=1):
        bank.upsert_gap("benchfill", k, status="searching")  # statuses move as in a search (memory/record.py)
        bank.upsert_gap("benchfill", k, lo=0.1, hi=0.3, target=0.2, status=status, rounds=rounds,
                        chosen=f"c{k}" if status == "filled" else None,
                        chosen_d=0.2 + dev if dev is not None else None, deviation=dev, n_candidates=16 * rounds,
                        cost=cost)
    bank.upsert_gap("baseline", 1, status="searching")
    bank.upsert_gap("baseline", 1, lo=0.1, hi=0.3, target=0.2, status="filled", rounds=1, deviation=0.2, cost=9.0)
    if candidates_rewriter:
        bank.upsert_candidates([{"id": f"x{k}", "method": "benchfill", "gap": 1, "round": 1, "parent": "p",
                                 "question": "q", "answer": "a", "rewriter": candidates_rewriter,
                                 "status": "proposed"} for k in range(3)])
        for k in range(3):
            for status in ("valid", "labelled", "placed"):
                bank.update_candidate(f"x{k}", status=status)
    return folder


def test_scores_hand_case(tmp_path):
    a1 = make_run(tmp_path / "a1", "openai/gpt-5-mini",
                  [("filled", 0.004, 0.10, 2), ("filled", 0.03, 0.20, 8), ("unfilled", None, 0.30, 8)])
    a2 = make_run(tmp_path / "a2", "openai/gpt-5-mini", [("filled", 0.002, 0.05, 1), ("searching", None, 0.01, 3)])
    b = make_run(tmp_path / "b", None, [("filled", 0.001, 0.0, 1), ("filled", 0.009, 0.0, 2)],
                 candidates_rewriter="sim/rewriter", tolerance=0.005)
    runs = [read_run(p) for p in (a1, a2, b)]
    assert [r.rewriter for r in runs] == ["openai/gpt-5-mini", "openai/gpt-5-mini", "sim/rewriter"]
    assert runs[2].tolerance == 0.005 and runs[2].simulated
    scores = {s.rewriter: s for s in score_rewriters(runs)}
    a = scores["openai/gpt-5-mini"]
    assert (a.n_gaps, a.n_open, a.n_filled) == (5, 1, 3)
    assert a.success_rate == pytest.approx(3 / 4)
    assert a.within_tolerance_rate == pytest.approx(2 / 4)  # 0.004 and 0.002 <= 0.01
    assert a.mean_deviation == pytest.approx((0.004 + 0.03 + 0.002) / 3)
    assert a.total_cost == pytest.approx(0.66) and a.cost_per_filled_gap == pytest.approx(0.66 / 3)
    s = scores["sim/rewriter"]
    assert s.success_rate == 1.0 and s.within_tolerance_rate == 0.5  # run tolerance 0.005
    assert s.cost_per_filled_gap == 0.0
    # the leaderboard: higher success first
    assert [x.rewriter for x in score_rewriters(runs)] == ["sim/rewriter", "openai/gpt-5-mini"]
    # a tolerance given on the command line overrides the runs'
    assert {x.rewriter: x for x in score_rewriters(runs, tolerance=0.05)}["openai/gpt-5-mini"].within_tolerance_rate == 0.75


def test_report_cli_and_errors(tmp_path):
    run = make_run(tmp_path / "r", "anthropic/claude", [("unfilled", None, 0.1, 8)])
    rep = rewriter_report([run])
    row = rep.rewriters[0]
    assert row.success_rate == 0.0 and row.mean_deviation is None and row.cost_per_filled_gap is None
    out = tmp_path / "rw.json"
    res = CliRunner().invoke(app, ["designers", "rewriters", str(run), "--json", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "anthropic/claude" in res.output and json.loads(out.read_text())["rewriters"][0]["n_gaps"] == 1
    assert out.read_text() == rep.model_dump_json(indent=2) + "\n"  # the CLI's --json is the model's dump
    res = CliRunner().invoke(app, ["designers", "rewriters", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "memory.sqlite" in res.output
    with pytest.raises(InputError):
        read_run(tmp_path / "nothing")
    assert score_rewriters([read_run(make_run(tmp_path / "e", "m", []))])[0].success_rate is None  # no gaps
