"""`benchfill evaluate` end to end against the local stub: counts, skips, reruns from the cache, fault injection,
kill -9 and resume, and configuration errors that stop before any call."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from openai_stub import default_responder

from benchfill.models.evaluate import evaluate
from benchfill.models.failures import CallsFailed

SECRET = "sk-test-SECRET-evaluate-77"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("BENCHFILL_EVAL_KEY", SECRET)


def make_items(path: Path, n: int = 8) -> Path:
    rows = [{"id": f"q{i}", "question": f"Compute problem number {i}.", "answer": str(i % 3)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_config(path: Path, stub, *, concurrency: int = 4, retries: int = 4, rollouts: int = 3,
                models=("alpha", "beta")) -> Path:
    parts = [f"""
[defaults]
api_base = "{stub.api_base}"
api_key_env = "BENCHFILL_EVAL_KEY"
timeout = 2.0
max_retries = {retries}
backoff_initial = 0.01
backoff_max = 0.05
max_concurrency = {concurrency}
rollouts = {rollouts}
temperature = 0.8
"""]
    for name in models:
        parts.append(f'[[panel]]\nmodel = "openai/{name}"\nname = "{name}"\n')
    path.write_text("\n".join(parts))
    return path


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_evaluate_counts_skips_and_rerun_from_cache(stub, tmp_path):
    items = make_items(tmp_path / "items.jsonl")
    config = make_config(tmp_path / "run.toml", stub)
    out = tmp_path / "run"
    result = evaluate(items, config, out)
    assert stub.calls == 2 * 8 * 3
    rows = read_rows(out / "responses.csv")
    assert list(rows[0]) == ["model", "item_id", "n_correct", "n_trials"]
    # every item x rollout is a trial: the stub's refusals (no final answer) count, as wrong (SPEC section 6)
    skipped = read_rows(out / "skipped.csv")
    assert sum(int(r["n_trials"]) for r in rows) == 2 * 8 * 3 and not skipped
    assert len({(r["model"], r["item_id"]) for r in rows}) == len(rows)
    assert all(0 <= int(r["n_correct"]) <= int(r["n_trials"]) <= 3 for r in rows)
    refusals = sum("boxed" not in default_responder(b) for b in stub.bodies)
    assert refusals > 0 and result.counted == result.answers
    assert sum(n for v in result.wrong_form.values() for n in v.values()) == refusals
    assert all(set(v) == {"no final answer found"} for v in result.wrong_form.values())
    # the counts agree with the stub's own (deterministic) answers, graded independently here
    expect: dict[tuple[str, str], list[int]] = {}
    for body in stub.bodies:
        text = default_responder(body)
        item = int(body["messages"][-1]["content"].split("problem number ")[1].split(".")[0])
        cell = expect.setdefault((body["model"], f"q{item}"), [0, 0])
        cell[1] += 1
        cell[0] += text.endswith(f"\\boxed{{{item % 3}}}.")
    got = {(r["model"], r["item_id"]): [int(r["n_correct"]), int(r["n_trials"])] for r in rows}
    assert got == {k: v for k, v in expect.items() if v[1] > 0}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["calls_made"] == 48 and summary["simulated"] is False
    # rerun: no model call, identical response file
    before = (out / "responses.csv").read_bytes()
    again = evaluate(items, config, out)
    assert stub.calls == 48 and again.calls_made == 0 and again.cached == 48
    assert (out / "responses.csv").read_bytes() == before
    for path in out.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path


def test_faults_change_nothing_but_the_call_count(stub, tmp_path):
    items = make_items(tmp_path / "items.jsonl", 6)
    clean_cfg = make_config(tmp_path / "clean.toml", stub, retries=8)
    evaluate(items, clean_cfg, tmp_path / "clean")
    clean_calls = stub.calls
    stub.reset()
    stub.fault_rate, stub.fault_seed = 0.3, 7
    result = evaluate(items, clean_cfg, tmp_path / "faulty")
    assert (tmp_path / "clean" / "responses.csv").read_bytes() == (tmp_path / "faulty" / "responses.csv").read_bytes()
    faults = stub.modes["429"] + stub.modes["500"]
    assert faults > 0 and stub.calls == clean_calls + faults
    assert result.retries == faults and result.call_errors == 0


def test_limit_and_rollouts_override(stub, tmp_path):
    items = make_items(tmp_path / "items.jsonl")
    config = make_config(tmp_path / "run.toml", stub)
    result = evaluate(items, config, tmp_path / "run", limit=3, rollouts=2)
    assert stub.calls == 2 * 3 * 2 and result.n_items == 3 and result.rollouts == {"alpha": 2, "beta": 2}


def test_failed_calls_stop_the_run_and_are_retried_on_rerun(stub, tmp_path):
    items = make_items(tmp_path / "items.jsonl", 2)
    config = make_config(tmp_path / "run.toml", stub, retries=0, rollouts=1, models=("alpha",))
    stub.script[:] = ["500"]
    with pytest.raises(CallsFailed, match=r"^1 call failed \(server errors\); rerun"):
        evaluate(items, config, tmp_path / "run")
    assert not (tmp_path / "run" / "responses.csv").exists()  # counts with a hole are no result
    skipped = read_rows(tmp_path / "run" / "skipped.csv")
    assert any(s["method"] == "call" for s in skipped)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["complete"] is False and summary["failed_calls"] == 1
    again = evaluate(items, config, tmp_path / "run")  # the failed call was not cached: asked again
    assert again.call_errors == 0 and again.calls_made == 1 and again.complete
    assert (tmp_path / "run" / "responses.csv").exists()


def _cli(args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "BENCHFILL_EVAL_KEY": SECRET, "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "benchfill.cli", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _start_slow_evaluate(stub, items, config, out) -> subprocess.Popen:
    """``evaluate`` in a subprocess against a slowed stub, returned once 12 calls have reached the server."""
    stub.reset()
    stub.latency = 0.05
    proc = _cli(["evaluate", str(items), "--config", str(config), "--out", str(out), "--no-progress"])
    deadline = time.time() + 60
    while stub.calls < 12 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    return proc


@pytest.mark.slow  # a whole command end to end (> 10 s): the full suite runs it
def test_kill_9_and_resume_equals_unbroken_run(stub, tmp_path):
    items = make_items(tmp_path / "items.jsonl", 10)
    config = make_config(tmp_path / "run.toml", stub, concurrency=2, rollouts=2)
    total = 2 * 10 * 2
    # the unbroken reference run
    evaluate(items, config, tmp_path / "unbroken")
    out = tmp_path / "resumed"
    proc = _start_slow_evaluate(stub, items, config, out)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "responses.csv").exists()  # nothing half-written
    with sqlite3.connect(out / "calls.sqlite") as conn:
        done_before = conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    assert 0 < done_before < total
    calls_before = stub.calls
    stub.latency = 0.0
    proc = _cli(["evaluate", str(items), "--config", str(config), "--out", str(out), "--no-progress"])
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert (out / "responses.csv").read_bytes() == (tmp_path / "unbroken" / "responses.csv").read_bytes()
    # nothing finished before the kill was paid for again; only calls in flight at the kill (<= 2 per model)
    resumed_calls = stub.calls - calls_before
    assert resumed_calls == total - done_before
    seen: dict[str, int] = {}
    for body in stub.bodies:
        key = json.dumps([body["model"], body["messages"], body.get("seed")], sort_keys=True)
        seen[key] = seen.get(key, 0) + 1
    assert len(seen) == total
    assert sum(n - 1 for n in seen.values()) <= 2 * 2


def _cli_inprocess(args: list[str]):
    from typer.testing import CliRunner

    from benchfill.cli import app

    return CliRunner().invoke(app, args, env={"BENCHFILL_EVAL_KEY": SECRET, "COLUMNS": "200"})


@pytest.mark.parametrize("panel,expect", [
    ('model = "nosuchprovider/model-x"', "unknown model string"),
    ('model = "openai/gpt-4o"\napi_key_env = "BENCHFILL_SURELY_UNSET_KEY"', "BENCHFILL_SURELY_UNSET_KEY is not set"),
])
def test_config_errors_exit_2_before_any_call(stub, tmp_path, panel, expect):
    items = make_items(tmp_path / "items.jsonl", 2)
    config = tmp_path / "bad.toml"
    config.write_text(f'[[panel]]\nmodel = "openai/fine"\napi_base = "{stub.api_base}"\n'
                      f'api_key_env = "BENCHFILL_EVAL_KEY"\n\n[[panel]]\n{panel}\n')
    result = _cli_inprocess(["evaluate", str(items), "--config", str(config), "--out", str(tmp_path / "out"),
                             "--no-progress"])
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and expect in lines[0] and "Traceback" not in result.output
    assert str(config) in lines[0]
    assert stub.calls == 0
    assert not (tmp_path / "out").exists()


def test_simulated_run_is_labelled(tmp_path):
    items = make_items(tmp_path / "items.jsonl", 5)
    config = tmp_path / "sim.toml"
    config.write_text('[[panel]]\nmodel = "sim/a"\nrollouts = 2\n[[panel]]\nmodel = "sim/b"\nrollouts = 2\n'
                      '[sim.abilities]\na = 1.0\nb = -1.0\n')
    result = _cli_inprocess(["evaluate", str(items), "--config", str(config), "--out", str(tmp_path / "out"),
                             "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "SIMULATED" in result.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["simulated"] is True and summary["label"].startswith("SIMULATED")
    with sqlite3.connect(tmp_path / "out" / "calls.sqlite") as conn:
        assert conn.execute("SELECT MIN(simulated) FROM calls").fetchone()[0] == 1
        assert conn.execute("SELECT v FROM meta WHERE k = 'simulated'").fetchone()[0] == "true"
    rows = read_rows(tmp_path / "out" / "responses.csv")
    assert {r["model"] for r in rows} == {"sim/a", "sim/b"}


def test_open_items_go_to_the_grader_model_and_mcq_is_objective(stub, tmp_path):
    rows = [
        {"id": "o1", "question": "Explain why the sky is blue.", "answer": "Rayleigh scattering", "format": "open"},
        {"id": "o2", "question": "Explain tides.", "answer": "The moon's gravity", "format": "open"},
        {"id": "c1", "question": "Which is a colour?", "answer": "B", "choices": ["dog", "red", "car"]},
    ]
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def responder(body):
        last = body["messages"][-1]["content"]
        if "<response>" in last:
            return '{"label": "correct", "score": 0.8, "reason": "matches"}' if "Rayleigh" in last else \
                '{"label": "incorrect", "score": 0.1}'
        if "Options:" in last:
            return "Red is a colour.\nAnswer: B"
        return "Because of Rayleigh scattering." if "sky" in last else "No idea, honestly."

    stub.responder = responder
    config = make_config(tmp_path / "run.toml", stub, rollouts=2, models=("alpha",))
    config.write_text(config.read_text() + f'\n[grader]\nmodel = "openai/judge"\napi_base = "{stub.api_base}"\n'
                      'api_key_env = "BENCHFILL_EVAL_KEY"\nrollouts = 1\n')
    evaluate(items, config, tmp_path / "run")
    got = {r["item_id"]: (int(r["n_correct"]), int(r["n_trials"])) for r in read_rows(tmp_path / "run" / "responses.csv")}
    assert got == {"o1": (2, 2), "o2": (0, 2), "c1": (2, 2)}
    judge_calls = [b for b in stub.bodies if b["model"] == "judge"]
    assert len(judge_calls) == 2  # one per distinct answer text: rollouts with the same text share a judgement


def test_an_outage_exits_3_with_one_line_and_a_restarted_server_completes_the_run(tmp_path):
    from openai_stub import start_stub

    server = start_stub()
    port = server.port
    items = make_items(tmp_path / "items.jsonl", 3)
    config = make_config(tmp_path / "run.toml", server, retries=1, rollouts=2, models=("alpha",))
    evaluate(items, config, tmp_path / "unbroken")
    server.down = True  # the whole run meets a server that cuts every connection
    args = ["evaluate", str(items), "--config", str(config), "--out", str(tmp_path / "run"), "--no-progress"]
    res = _cli_inprocess(args)
    assert res.exit_code == 3, res.output
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert lines == ["benchfill: 6 calls failed (server unreachable); rerun the same command to retry them "
                     "(answers received are kept)"], lines
    assert not (tmp_path / "run" / "responses.csv").exists()
    server.stop()  # ... and restarts on the same port
    server = start_stub(port=port)
    try:
        res = _cli_inprocess(args)
        assert res.exit_code == 0, res.output
        assert server.calls == 6  # exactly the failed calls, retried
        assert (tmp_path / "run" / "responses.csv").read_bytes() == \
            (tmp_path / "unbroken" / "responses.csv").read_bytes()
    finally:
        server.stop()


@pytest.mark.slow
def test_sigterm_stops_evaluate_like_ctrl_c_and_a_rerun_completes(stub, tmp_path):
    """SIGTERM (a scheduler, kill): one line, exit 143, nothing half-written; the rerun pays only what was not
    answered and writes what an unbroken run writes (issue 27)."""
    items = make_items(tmp_path / "items.jsonl", 10)
    config = make_config(tmp_path / "run.toml", stub, concurrency=2, rollouts=2)
    evaluate(items, config, tmp_path / "unbroken")
    out = tmp_path / "stopped"
    proc = _start_slow_evaluate(stub, items, config, out)
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "terminated (SIGTERM)" in stderr and "Traceback" not in stderr, stderr
    assert not (out / "responses.csv").exists()
    stub.latency = 0.0
    proc = _cli(["evaluate", str(items), "--config", str(config), "--out", str(out), "--no-progress"])
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert (out / "responses.csv").read_bytes() == (tmp_path / "unbroken" / "responses.csv").read_bytes()
