"""End to end: `benchfill diagnose` / `suite` / `calibrate` on the bundled real MATH-500 data, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from benchfill.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def math500_diagnosis(tmp_path_factory, examples):
    out = tmp_path_factory.mktemp("diag") / "diagnosis.json"
    res = run("diagnose", str(examples / "math500.responses.csv.gz"), "--items", str(examples / "math500.items.jsonl"),
              "--models", "12", "--sampler", "map", "--json", str(out))
    assert res.exit_code == 0, res.output
    return out, res.output


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_diagnose_writes_the_documented_json(math500_diagnosis):
    out, output = math500_diagnosis
    data = json.loads(out.read_text())
    for key in ("n_models", "n_items", "ddm", "ddm_sd", "max_gap", "max_gap_sd", "top5_sum", "uniform_baseline_ratio",
                "flags", "gaps", "checks", "items", "models", "sampler"):
        assert key in data, key
    assert data["n_models"] == 12 and data["n_items"] == 500
    assert [c["name"] for c in data["checks"]] == ["R1", "R2", "R3", "R4", "M1", "M2", "M3"]
    assert set(data["gaps"][0]) >= {"lo", "hi", "mid", "width"}
    widths = [g["width"] for g in data["gaps"]]
    assert widths == sorted(widths, reverse=True) and widths[0] == pytest.approx(data["max_gap"])
    assert {"item_id", "b", "b_sd", "d"} <= set(data["items"][0])
    assert {"model", "theta", "theta_sd"} <= set(data["models"][0])
    assert data["sampler"]["method"] == "map" and data["sampler"]["preview"] is True
    # SPEC reference (12 models spread evenly by accuracy, MAP under the paper's N(0, 1)): MATH-500 DDM ~0.13.
    # The learned population (the default) puts the 2 items no model solved in ~13,200 rollouts where its tail
    # says, beyond the others (measured 0.167: the axis' top is theirs, and the report says so)
    assert data["population"]["kind"] == "spline" and data["population"]["sd"] > 1.5
    assert 0.13 <= data["ddm"] <= 0.19
    assert data["reach"]["solved_by_none"] == 2 and data["reach"]["span_within_reach"] < 1.0
    assert (out.parent / "diagnosis.png").stat().st_size > 10_000
    assert (out.parent / "diagnosis.scale.npz").exists()
    assert "DDM" in output and "max gap" in output and "MAP PREVIEW" in output
    # each verdict other than a plain ok says what it means and what to do next, in the JSON and the terminal
    assert data["schema_version"] == 6 and data["verdicts"]["ddm"] == "flag"
    assert any(a.startswith("DDM flag: ") and "benchfill calibrate" in a for a in data["advice"]), data["advice"]
    assert "next: DDM flag" in " ".join(output.split())


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_calibrate_from_a_diagnosis(math500_diagnosis, tmp_path):
    out, _ = math500_diagnosis
    keep = tmp_path / "keep.txt"
    res = run("calibrate", str(out), "--k", "100", "--out", str(keep), "--json", str(tmp_path / "cal.json"))
    assert res.exit_code == 0, res.output
    cal = json.loads((tmp_path / "cal.json").read_text())
    assert len(keep.read_text().split()) == 100
    assert cal["ddm_after"] < cal["ddm_before"]


@pytest.mark.parametrize(
    "content, needle",
    [
        ("model,item_id,n_correct\na,1,1\n", "missing column(s) n_trials"),
        ("model,item_id,n_correct,n_trials\na,1,3,2\nb,1,1,2\n", "row 2: n_correct=3 > n_trials=2"),
        ("model,item_id,n_correct,n_trials\na,1,1,2\n", "only one model"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    json_out = tmp_path / "out" / "diagnosis.json"
    proc = subprocess.run([sys.executable, "-m", "benchfill.cli", "diagnose", str(bad), "--sampler", "map", "--json",
                           str(json_out)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not json_out.exists()


def test_bad_models_file_and_bad_calibrate_input(tmp_path, examples):
    names = tmp_path / "models.txt"
    names.write_text("qwen3-8b\nno-such-model\n")
    res = run("diagnose", str(examples / "math500.responses.csv.gz"), "--models-file", str(names), "--sampler", "map")
    assert res.exit_code == 2 and "no-such-model" in res.output
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    res = run("calibrate", str(junk), "--k", "3")
    assert res.exit_code == 2 and "not a benchfill diagnosis JSON" in res.output


@pytest.mark.slow  # > 3 s: the full suite (CI) runs it, the fast lane does not
def test_suite_summary_on_a_small_grouped_matrix(tmp_path):
    import numpy as np

    from benchfill.irt.simulate import simulate_responses

    rng = np.random.default_rng(0)
    r = simulate_responses(np.linspace(-2, 2, 6), np.concatenate([rng.normal(-1, 1, 25), rng.normal(1, 1, 25)]), 4,
                           seed=1)
    resp = tmp_path / "suite.csv"
    r.to_long().to_csv(resp, index=False)
    table = tmp_path / "items.csv"
    table.write_text("item_id,benchmark\n" + "".join(f"{i},{'A' if k < 25 else 'B'}\n" for k, i in enumerate(r.item_ids)))
    res = run("suite", str(resp), "--items-table", str(table), "--sampler", "map", "--out", str(tmp_path / "s"))
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert [b["benchmark"] for b in summary["benchmarks"]] == ["A", "B"]
    assert all(b["n_items"] == 25 for b in summary["benchmarks"])
    assert (tmp_path / "s" / "A" / "diagnosis.png").exists()
