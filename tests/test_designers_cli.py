"""`benchfill designers card / run` end to end on a tiny simulated config, and bad input -> one line, exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from benchfill.cli import app
from benchfill.designers.config import designers_config_from_dict, load_designers_config, validate_designers_config
from benchfill.errors import InputError

runner = CliRunner()

TINY = """
seed = 1
[run]
batch_size = 4
max_topup_rounds = 1
bootstrap = 200
[sim]
seed = 3
[sim.abilities]
alpha = 1.5
beta = 0.0
gamma = -1.5
[sim.designers.alpha]
broken_rate = 0.1
family_bonus = 0.5
[sim.designers.garbage]
malformed_rate = 1.0
[judge]
model = "sim/judge"
[grader]
model = "sim/grader"
[[designers]]
model = "sim/alpha"
name = "alpha"
family = "A"
[[designers]]
model = "sim/garbage"
name = "garbage"
family = "G"
[[panel]]
model = "sim/alpha"
name = "alpha"
family = "A"
strong = true
[[panel]]
model = "sim/beta"
name = "beta"
family = "A"
[[panel]]
model = "sim/gamma"
name = "gamma"
family = "C"
"""


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, examples):
    folder = tmp_path_factory.mktemp("tiny")
    lines = (examples / "math500.items.jsonl").read_text().splitlines()
    (folder / "items.jsonl").write_text("".join(line + "\n" for line in lines[:24]))
    (folder / "cfg.toml").write_text(TINY)
    (folder / "q.yaml").write_text("total: 8\nformats: {numeric: 0.5, mcq: 0.25, math: 0.25}\n"
                                   "difficulty: {L1: 1, L3: 1, L5: 1}\n")
    return folder


def test_card_then_run_then_rerun(tiny):
    card = tiny / "card.yaml"
    res = invoke("designers", "card", str(tiny / "items.jsonl"), "--out", str(card))
    assert res.exit_code == 0, res.output
    assert card.is_file() and "wrote" in res.output
    out = tiny / "run"
    args = ["designers", "run", "--card", str(card), "--quotas", str(tiny / "q.yaml"), "--config",
            str(tiny / "cfg.toml"), "--out", str(out), "--seed-limit", "6", "--json", str(tiny / "copy.json")]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    assert "SIMULATED" in res.output and "designer leaderboard" in res.output
    for name in ("report.json", "matrix.csv", "heatmap.png", "core.jsonl", "suite.jsonl", "answers.jsonl",
                 "verdicts.jsonl", "plan.json", "seed.json", "seed_responses.csv", "calls.sqlite", "checkpoints.sqlite"):
        assert (out / name).is_file(), name
    report = json.loads((out / "report.json").read_text())
    assert json.loads((tiny / "copy.json").read_text()) == report
    rows = {r["designer"]: r for r in report["designers"]}
    # a designer whose every reply is not JSON: every slot of every round recorded as broken, no crash
    g = rows["garbage"]
    assert g["broken_rate"] == 1.0 and g["n_core"] == 0 and g["n_suite"] == 16  # 8 slots x 2 rounds
    assert set(g["broken_reasons"]) == {"designer reply unusable"}
    assert rows["alpha"]["n_core"] > 0 and report["seed"]["n_items"] == 6
    assert report["plan"]["counts"]["format"] == {"numeric": 4, "mcq": 2, "math": 2}
    assert report["plan"]["counts"]["difficulty"] == {"L1": 3, "L3": 3, "L5": 2}
    # shares summing to 3 are normalised, with one warning line
    assert "warning:" in res.output and "difficulty: shares sum to 3, not 1" in " ".join(res.output.split())
    assert "calibration by requested level" in res.output and "residual" not in res.output
    # the rerun pays nothing and says so
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    assert "calls made 0" in res.output and "stages reused" in res.output


def test_bad_inputs_are_one_line_errors(tiny, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY.replace('family = "G"\n', ""))
    res = runner.invoke(app, ["designers", "run", "--card", str(tmp_path / "none.yaml"), "--quotas",
                              str(tiny / "q.yaml"), "--config", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "card file not found" in res.output
    res = runner.invoke(app, ["designers", "card", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "c.yaml")])
    assert res.exit_code == 2 and "file not found" in res.output


def test_config_rules(examples, tmp_path):
    base = {"judge": {"model": "sim/judge"}, "sim": {"abilities": {"a": 1, "b": 0}, "designers": {"d": {}}},
            "designers": [{"model": "sim/d", "family": "D"}],
            "panel": [{"model": "sim/a", "family": "A"}, {"model": "sim/b", "family": "B"}]}
    cfg = designers_config_from_dict(base)
    validate_designers_config(cfg)
    assert cfg.answerer_of(cfg.designers[0]) is None  # families and identity come from the config only
    with pytest.raises(InputError, match=r"designers\[0\]\.family: Field required"):
        designers_config_from_dict({**base, "designers": [{"model": "sim/d"}]})
    with pytest.raises(InputError, match="not a panel name"):
        designers_config_from_dict({**base, "designers": [{"model": "sim/d", "family": "D", "answerer": "zz"}]})
    with pytest.raises(InputError, match="duplicate name"):
        designers_config_from_dict({**base, "panel": [{"model": "sim/a", "family": "A"}] * 2})
    with pytest.raises(InputError, match="no \\[sim.designers.e\\]"):
        validate_designers_config(designers_config_from_dict({**base, "designers": [{"model": "sim/e",
                                                                                       "family": "E"}]}))
    with pytest.raises(InputError, match="unknown flaw"):
        designers_config_from_dict({**base, "sim": {"designers": {"d": {"flaw_mix": {"typo": 1}}}}})
    bad = tmp_path / "k.toml"
    bad.write_text('[judge]\nmodel = "openai/gpt-5.4"\napi_key = "sk-123"\n')
    with pytest.raises(InputError, match="API keys must not be written"):
        load_designers_config(bad)
    real = load_designers_config(examples / "designers.toml")
    assert {d.label: d.family for d in real.designers}["gpt-5-mini"] == "openai"
    assert [real.answerer_of(d).label for d in real.designers] == [d.label for d in real.designers]
    sim = load_designers_config(examples / "designers_sim.toml")
    validate_designers_config(sim)
    assert sim.simulated


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_failed_calls_are_not_the_designers_fault_and_are_retried(tiny, tmp_path):
    """A designer whose server is down (connection refused, no retries): its slots are 'failed', outside its
    suite; the generate stage stays open so a rerun retries; if every designer call fails the run stops."""
    from benchfill.designers.pipeline import run_designers

    down = ('[[designers]]\nmodel = "hosted_vllm/nobody"\nname = "down"\nfamily = "Z"\n'
            'api_base = "http://127.0.0.1:9/v1"\nmax_retries = 0\ntimeout = 5\n')
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(TINY.replace('[[designers]]\nmodel = "sim/garbage"\nname = "garbage"\nfamily = "G"\n', down))
    card = tmp_path / "card.yaml"
    invoke("designers", "card", str(tiny / "items.jsonl"), "--out", str(card))
    (tmp_path / "seed.csv").write_text("model,item_id,n_correct,n_trials\nalpha,x,9,10\nbeta,x,5,10\ngamma,x,1,10\n")
    res = run_designers(card, tiny / "q.yaml", cfg, tmp_path / "out", seed_responses=tmp_path / "seed.csv")
    rows = {r["designer"]: r for r in res.report.model_dump(mode="json")["designers"]}
    assert rows["down"]["by_status"] == {"failed": 16} and rows["down"]["n_suite"] == 0  # 8 slots x 2 rounds
    assert rows["down"]["broken_rate"] is None and rows["alpha"]["n_core"] > 0
    assert res.usage.errors == 4  # 2 batches of 4 slots x 2 rounds
    again = run_designers(card, tiny / "q.yaml", cfg, tmp_path / "out", seed_responses=tmp_path / "seed.csv")
    assert "generate" not in again.skipped_stages and again.usage.errors == 4  # retried, failed again
    assert again.usage.calls_made == 4  # only the failed calls: every success came from the cache
    only_down = tmp_path / "only.toml"
    only_down.write_text(cfg.read_text().replace('[[designers]]\nmodel = "sim/alpha"\nname = "alpha"\nfamily = "A"\n',
                                                 ""))
    with pytest.raises(InputError, match="every designer call failed"):
        run_designers(card, tiny / "q.yaml", only_down, tmp_path / "out2", seed_responses=tmp_path / "seed.csv")


@pytest.mark.slow  # two runs of the tiny config (~15 s)
def test_a_stage_whose_input_file_changed_is_recomputed_with_every_stage_after_it(tiny, tmp_path):
    """A stage's fingerprint holds the digests of the earlier stages' files it reads: a suite that changed (here:
    edited by hand, the generate stage's own record unchanged) makes the answers, verdicts and report stale."""
    from benchfill.designers.pipeline import STAGES, read_jsonl, run_designers, stage_records, write_jsonl

    card = tmp_path / "card.yaml"
    invoke("designers", "card", str(tiny / "items.jsonl"), "--out", str(card))
    out = tmp_path / "out"
    first = run_designers(card, tiny / "q.yaml", tiny / "cfg.toml", out, seed_limit=6)
    assert first.skipped_stages == [] and set(stage_records(out)) == set(STAGES)
    before = stage_records(out)
    suite = read_jsonl(out / "suite.jsonl")
    usable = [r for r in suite if r["status"] == "ok"]
    write_jsonl(out / "suite.jsonl", [r for r in suite if r["id"] != usable[0]["id"]])
    again = run_designers(card, tiny / "q.yaml", tiny / "cfg.toml", out, seed_limit=6)
    assert again.skipped_stages == ["plan", "generate", "seed"]
    assert again.usage.calls_made == 0  # every answer and verdict it needs is in the call cache
    answered = {a["item"] for a in read_jsonl(out / "answers.jsonl")}
    assert usable[0]["id"] not in answered and usable[1]["id"] in answered
    after = stage_records(out)
    assert [s for s in STAGES if after[s] != before[s]] == ["answer", "judge", "report"]
    third = run_designers(card, tiny / "q.yaml", tiny / "cfg.toml", out, seed_limit=6)
    assert third.skipped_stages == list(STAGES) and third.usage.calls_made == 0


def test_unknown_quota_category_is_one_line_exit_2(tiny, tmp_path):
    card = tmp_path / "card.yaml"
    assert invoke("designers", "card", str(tiny / "items.jsonl"), "--out", str(card)).exit_code == 0
    import yaml

    known = [c["name"] for c in yaml.safe_load(card.read_text())["ontology"]]
    q = tmp_path / "q.yaml"
    q.write_text("total: 8\nsuper_categories: {Algebar: 1}\n")
    res = runner.invoke(app, ["designers", "run", "--card", str(card), "--quotas", str(q), "--config",
                              str(tiny / "cfg.toml"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1, res.output
    assert "unknown category 'Algebar'" in lines[0] and all(k in lines[0] for k in known)
    assert not (tmp_path / "o" / "calls.sqlite").exists()  # no call made


# ---- the Python API (issue 14): typed results, the same as the CLI's --json, inside a running event loop too ----


def test_python_api_returns_typed_results_equal_to_the_cli_json(tiny, tmp_path):
    import asyncio

    from pydantic import BaseModel

    import benchfill as bf
    from benchfill.designers.results import DesignersReport, DesignersRun

    card = bf.designers_card(tiny / "items.jsonl", tmp_path / "card.yaml")
    assert isinstance(card, BaseModel) and (tmp_path / "card.yaml").is_file() and card.n_items == 24
    run = bf.designers_run(tmp_path / "card.yaml", tiny / "q.yaml", tiny / "cfg.toml", tmp_path / "run",
                           seed_limit=6)
    assert isinstance(run, DesignersRun) and isinstance(run.report, DesignersReport)
    assert run.report.row("alpha").n_core > 0 and run.report.row("garbage").broken_rate == 1.0
    assert run.report.row("alpha").generation_order.n > 0
    assert run.usage.calls_made > 0 and run.skipped_stages == []
    # report.json is the model's dump, and reads back into the same model
    assert (tmp_path / "run" / "report.json").read_text() == run.report.model_dump_json(indent=2) + "\n"
    assert DesignersReport.from_json_file(tmp_path / "run" / "report.json") == run.report
    dumped = run.report.model_dump(mode="json")
    assert list(dumped)[0] == "label" and "SIMULATED" in dumped["label"]
    # the CLI's --json - prints the same JSON (a rerun: every stage reused)
    res = runner.invoke(app, ["designers", "run", "--card", str(tmp_path / "card.yaml"), "--quotas",
                              str(tiny / "q.yaml"), "--config", str(tiny / "cfg.toml"), "--out", str(tmp_path / "run"),
                              "--seed-limit", "6", "--json", "-"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == dumped

    async def in_a_loop():  # Jupyter: an event loop is already running
        return bf.designers_run(tmp_path / "card.yaml", tiny / "q.yaml", tiny / "cfg.toml", tmp_path / "run",
                                seed_limit=6)

    again = asyncio.run(in_a_loop())
    assert set(again.skipped_stages) >= {"plan", "generate", "answer", "judge", "report"} and again.report == run.report
    with pytest.raises(InputError, match="choose map"):
        bf.designers_run(tmp_path / "card.yaml", tiny / "q.yaml", tiny / "cfg.toml", tmp_path / "x", irt="gibbs")


def test_designers_commands_and_api_functions_share_their_defaults():
    import inspect

    from benchfill import api
    from benchfill.cli_designers import designers_app

    pairs = {"card": (api.designers_card, {"max_categories": "max_categories", "examples": "examples",
                                           "config": "config", "name": "name", "language": "language"}),
             "run": (api.designers_run_async, {"seed_limit": "seed_limit", "irt": "irt",
                                               "seed_responses": "seed_responses", "seed_items": "seed_items"}),
             "rewriters": (api.designers_rewriters, {"method": "method", "tolerance": "tolerance"})}
    commands = {c.name: c for c in designers_app.registered_commands}
    assert set(commands) == set(pairs)
    for name, (fn, params) in pairs.items():
        cli = inspect.signature(commands[name].callback).parameters
        py = inspect.signature(fn).parameters
        for cli_name, py_name in params.items():
            assert cli[cli_name].default.default == py[py_name].default, (name, cli_name)
