"""`benchfill fill` refuses a gap at the design's resolution floor (SPEC section 4.1) unless asked to fill it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from benchfill.cli import app
from benchfill.irt.simulate import simulate_responses

CONFIG = """
seed = 0
[sim]
seed = 0
[rewriter]
model = "sim/rewriter"
[judge]
model = "sim/judge"
[fill]
parents = 1
children_per_parent = 2
max_rounds = 1
sim_panel_rollouts = {rollouts}
"""


def binary_benchmark(folder):
    """12 models answering once: the benchmark's items sit on 13 score levels."""
    r = simulate_responses(np.linspace(-2, 2, 12), np.linspace(-2.5, 2.5, 240), 1, seed=3)
    resp = folder / "responses.csv"
    r.to_long().to_csv(resp, index=False)
    items = folder / "items.jsonl"
    items.write_text("".join(json.dumps({"id": i, "question": f"Problem {i}?", "answer": "7"}) + "\n"
                             for i in r.item_ids))
    return items, resp


def fill(items, resp, cfg, out, *extra):
    return CliRunner().invoke(app, ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--out",
                                    str(out), "--sampler", "fast", "--gaps", "1", *extra], catch_exceptions=False)


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_a_gap_the_labelling_panel_cannot_resolve_is_refused_unless_asked(tmp_path):
    items, resp = binary_benchmark(tmp_path)
    once = tmp_path / "once.toml"
    once.write_text(CONFIG.format(rollouts=1))
    res = fill(items, resp, once, tmp_path / "run1")
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    assert "gap 1" in line and "resolution floor" in line and "--allow-floor-gaps" in line
    assert len(res.output.strip().splitlines()) <= 3  # one message, no traceback
    import sqlite3

    con = sqlite3.connect(tmp_path / "run1" / "memory.sqlite")  # refused before any model was called
    assert "calls" not in {t for (t,) in con.execute("select name from sqlite_master")} or \
        con.execute("select count(*) from calls").fetchone()[0] == 0
    con.close()
    # asked for, the same gap is searched
    res = fill(items, resp, once, tmp_path / "run2", "--allow-floor-gaps")
    assert res.exit_code == 0, res.output
    # a finer labelling design (8 rollouts per model) places children inside the same gap: no refusal
    fine = tmp_path / "fine.toml"
    fine.write_text(CONFIG.format(rollouts=8))
    res = fill(items, resp, fine, tmp_path / "run3")
    assert res.exit_code == 0, res.output
    dg = json.loads((tmp_path / "run3" / "diagnosis.json").read_text())
    assert dg["gaps"][0]["at_floor"]  # with the benchmark's own design (one answer each) it stays at the floor
