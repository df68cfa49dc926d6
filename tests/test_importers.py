"""Importers of other harnesses' eval logs (issue 14), on real files written by inspect_ai and lm-eval, and on
schema-following HELM / OpenCompass / Open LLM Leaderboard fixtures (tests/fixtures/importers/README.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchfill.cli import app
from benchfill.data import load_items
from benchfill.errors import InputError
from benchfill.importers import Options, detect, import_logs, load_panel, load_responses
from benchfill.importers.inspect_log import value_to_float

FIX = Path(__file__).parent / "fixtures" / "importers"
runner = CliRunner()


def cells(res, model: str) -> dict[str, tuple[int, int]]:
    return {i: tuple(v) for (m, i), v in res.counts.items() if m == model}


# ---- inspect_ai --------------------------------------------------------------------------------------------


def test_inspect_eval_and_json_logs_epochs_and_errored_samples():
    res = import_logs("inspect", [FIX / "inspect"])
    m = res.matrix("x")
    assert m.models == ["mockllm/alpha", "mockllm/beta", "mockllm/gamma"]
    assert m.item_ids == [f"add_numbers/q{k}" for k in range(1, 7)]
    # alpha: skill 5, 2 epochs (.eval); beta: skill 3 (.json); gamma: skill 1, q4 errored (.eval)
    assert m.n_trials.tolist() == [[2] * 6, [1] * 6, [1, 1, 1, 0, 1, 1]]
    assert m.n_correct.tolist() == [[2, 2, 2, 2, 2, 0], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]]
    assert res.skipped == {"mockllm/gamma": 1}
    summary = "\n".join(res.summary_lines())
    assert "mockllm/gamma: 1 errored sample(s) are not trials" in summary and "scorer match" in summary
    items = {it.id: it for it in res.item_list()}
    assert items["add_numbers/q3"].question.startswith("What is 3 + 3?") and items["add_numbers/q3"].answer == "6"


def test_inspect_second_scorer_and_unknown_scorer():
    res = import_logs("inspect", [FIX / "inspect" / "beta.json"], Options(metric="includes"))
    assert res.chosen["scorer"] == "includes" and sum(c for c, _ in res.counts.values()) == 3
    with pytest.raises(InputError, match="no scorer 'nope'"):
        import_logs("inspect", [FIX / "inspect" / "beta.json"], Options(metric="nope"))


def test_inspect_value_mapping_is_inspects():
    assert [value_to_float(v) for v in ("C", "I", "N", "P", True, False, 1, 0.25, "yes", "No", "0.5")] == \
        [1.0, 0.0, 0.0, 0.5, 1.0, 0.0, 1.0, 0.25, 1.0, 0.0, 0.5]
    assert value_to_float("maybe") is None and value_to_float([1]) is None


def _json_log_with(tmp_path: Path, value) -> Path:
    log = json.loads((FIX / "inspect" / "beta.json").read_text())
    log["samples"][0]["scores"]["match"]["value"] = value
    out = tmp_path / "log.json"
    out.write_text(json.dumps(log))
    return out


def test_inspect_partial_credit_needs_a_threshold(tmp_path):
    path = _json_log_with(tmp_path, "P")
    with pytest.raises(InputError, match=r"is not 0/1 \(pass --threshold"):
        import_logs("inspect", [path])
    res = import_logs("inspect", [path], Options(threshold=0.5))
    assert res.counts[("mockllm/beta", "add_numbers/q1")] == [1, 1]
    with pytest.raises(InputError, match="score value 'maybe'.*not C/P/I/N"):
        import_logs("inspect", [_json_log_with(tmp_path, "maybe")])


def test_inspect_malformed_logs(tmp_path):
    bad = tmp_path / "bad.eval"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="bad.eval: not an inspect .eval archive"):
        import_logs("inspect", [bad])
    log = json.loads((FIX / "inspect" / "beta.json").read_text())
    del log["eval"]["model"]
    (tmp_path / "nomodel.json").write_text(json.dumps(log))
    with pytest.raises(InputError, match="nomodel.json: eval.model is missing"):
        import_logs("inspect", [tmp_path / "nomodel.json"])
    shutil.copy(FIX / "inspect" / "beta.json", tmp_path / "copy.json")
    with pytest.raises(InputError, match="the same eval"):
        import_logs("inspect", [FIX / "inspect" / "beta.json", tmp_path / "copy.json"])


def test_inspect_deflate_archive_reads_like_zstd(tmp_path):
    """Older inspect versions wrote deflate .eval archives: the same content reads the same."""
    src, dst = FIX / "inspect" / "alpha.eval", tmp_path / "alpha.eval"
    pytest.importorskip("zstandard")
    from benchfill.importers.inspect_log import _member

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            zout.writestr(name, _member(zin, src, name))
    a, b = import_logs("inspect", [src]), import_logs("inspect", [dst])
    assert a.counts == b.counts and a.counts


# ---- lm-evaluation-harness ---------------------------------------------------------------------------------


def test_lm_eval_samples_models_from_results_repeated_runs_summed():
    res = import_logs("lm-eval", [FIX / "lmeval"])
    m = res.matrix("x")
    assert m.models == ["toy/alpha", "toy/beta", "toy/gamma"]
    assert len(m.item_ids) == 14 and {res.tasks[i] for i in m.item_ids} == {"toy_mc", "toy_gen"}
    assert (m.n_trials[0] == 2).all() and (m.n_trials[1:] == 1).all()  # toy/alpha ran twice
    assert res.chosen["filter/metric"] == "toy_gen: none/exact_match; toy_mc: none/acc"
    # the dummy model always answers "lol": exactly the three "lol" golds are right, in every run
    gen = [m.item_ids.index(f"toy_gen/{k}") for k in range(6)]
    assert m.n_correct[:, gen].tolist() == [[2, 0, 2, 0, 2, 0], [1, 0, 1, 0, 1, 0], [1, 0, 1, 0, 1, 0]]
    items = {it.id: it for it in res.item_list()}
    assert items["toy_mc/1"].choices == ["blue", "seven", "table", "jump"] and items["toy_mc/1"].answer == "1"
    # acc of a multiple-choice doc matches the argmax of the logged loglikelihoods
    sample_file = next((FIX / "lmeval" / "toy__beta").glob("samples_toy_mc_*"))
    rows = [json.loads(x) for x in sample_file.read_text().splitlines()]
    for r in rows:
        best = int(np.argmax([float(x[0]) for x in r["filtered_resps"]]))
        assert res.counts[("toy/beta", f"toy_mc/{r['doc_id']}")][0] == int(best == int(r["target"]))


def test_lm_eval_filter_and_metric_choices():
    res = import_logs("lm-eval", [FIX / "lmeval"], Options(filter="strict", metric="acc_norm"))
    assert res.chosen["filter/metric"] == "toy_gen: strict/exact_match; toy_mc: none/acc_norm"
    with pytest.raises(InputError, match="--filter nope: no task has this filter"):
        import_logs("lm-eval", [FIX / "lmeval"], Options(filter="nope"))
    with pytest.raises(InputError, match="--metric bleu: no task has this metric"):
        import_logs("lm-eval", [FIX / "lmeval"], Options(metric="bleu"))


def _copy_lmeval(tmp_path: Path, model="toy__beta") -> Path:
    dst = tmp_path / model
    shutil.copytree(FIX / "lmeval" / model, dst)
    return dst


def test_lm_eval_malformed_lines_name_file_and_row(tmp_path):
    folder = _copy_lmeval(tmp_path)
    f = next(folder.glob("samples_toy_mc_*"))
    lines = f.read_text().splitlines()
    f.write_text("\n".join([lines[0], "{not json", *lines[2:]]) + "\n")
    with pytest.raises(InputError, match=r"samples_toy_mc_.*: row 2: invalid JSON"):
        import_logs("lm-eval", [folder])
    f.write_text("\n".join([lines[0], lines[0], *lines[2:]]) + "\n")
    with pytest.raises(InputError, match=r"row 2: doc_id 0 appears twice"):
        import_logs("lm-eval", [folder])
    rec = json.loads(lines[0])
    rec["acc"] = 0.5
    f.write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    with pytest.raises(InputError, match=r"row 1: acc=0.5 is not 0/1"):
        import_logs("lm-eval", [folder])


def test_lm_eval_without_results_file_names_the_model_after_its_folder(tmp_path):
    folder = _copy_lmeval(tmp_path, "toy__gamma")
    for r in folder.glob("results_*.json"):
        r.unlink()
    res = import_logs("lm-eval", [folder])
    assert {m for m, _ in res.counts} == {"toy/gamma"} and "model named after the folder" in res.notes[0]


# ---- HELM, OpenCompass, Open LLM Leaderboard ---------------------------------------------------------------


def test_helm_unperturbed_main_metric_trials():
    res = import_logs("helm", [FIX / "helm"])
    m = res.matrix("x")
    task = "mmlu:subject=anatomy,method=multiple_choice_joint"
    assert m.models == ["meta/llama-7b", "mistralai/mistral-7b", "openai/gpt2"]
    assert m.item_ids == [f"{task}/id1{k}" for k in range(1, 6)]
    assert m.n_trials.tolist() == [[1] * 5, [3] * 5, [1] * 5]  # mistral: num_train_trials 3
    assert m.n_correct.tolist() == [[1, 1, 0, 1, 0], [3, 3, 2, 0, 1], [1, 0, 0, 0, 0]]  # perturbed copies ignored
    assert res.chosen["metric"] == "exact_match"
    it = {i.id: i for i in res.item_list()}[f"{task}/id13"]
    assert it.answer == "four" and it.choices == ["two", "three", "four", "five"]
    with pytest.raises(InputError, match="no unperturbed stat 'bleu_4'"):
        import_logs("helm", [FIX / "helm"], Options(metric="bleu_4"))


def test_opencompass_correct_lists_and_old_style_details():
    res = import_logs("opencompass", [FIX / "opencompass"])
    m = res.matrix("x")
    assert m.item_ids == ["gsm8k/0", "gsm8k/1", "gsm8k/2", "gsm8k/3"]  # "gsm8k_0" and key "0" are one item
    assert m.models == ["internlm2-7b-hf", "llama-3-8b-instruct-hf", "qwen2.5-7b-instruct-hf"]
    assert m.n_trials.tolist() == [[1] * 4, [4] * 4, [4] * 4]
    assert m.n_correct.tolist() == [[1, 0, 1, 0], [2, 1, 0, 0], [4, 3, 2, 0]]


def test_opencompass_detail_without_correct(tmp_path):
    d = tmp_path / "results" / "m"
    d.mkdir(parents=True)
    (d / "ds.json").write_text(json.dumps({"score": 1.0, "details": [{"pred": "a", "answer": "a"}]}))
    with pytest.raises(InputError, match="row 1: details entry 0 has no 'correct'"):
        import_logs("opencompass", [tmp_path])


def test_openllm_parquet_equals_the_lm_eval_samples_and_v1_details():
    res = import_logs("openllm", [FIX / "openllm"])
    ref = import_logs("lm-eval", [FIX / "lmeval" / "toy__beta", FIX / "lmeval" / "toy__gamma"])
    for model in ("toy/beta", "toy/gamma"):
        assert cells(res, model) == cells(ref, model)
    assert cells(res, "toy/delta") == {"harness|toy_yesno|0/0": (1, 1), "harness|toy_yesno|0/1": (0, 1),
                                       "harness|toy_yesno|0/2": (1, 1)}


# ---- detection, the shared loader and the CLI --------------------------------------------------------------


@pytest.mark.parametrize("folder,fmt", [("inspect", "inspect"), ("lmeval", "lm-eval"), ("helm", "helm"),
                                        ("opencompass", "opencompass"), ("openllm", "openllm")])
def test_detect_each_format(folder, fmt):
    assert detect(FIX / folder) == fmt


def test_detect_leaves_response_files_alone_and_refuses_mixed_folders(tmp_path, examples):
    assert detect(examples / "math500_k4.responses.csv.gz") is None
    shutil.copytree(FIX / "inspect", tmp_path / "a")
    shutil.copytree(FIX / "opencompass", tmp_path / "b")
    with pytest.raises(InputError, match="holds logs of several formats"):
        detect(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no eval logs"):
        detect(tmp_path / "empty")


def test_load_responses_and_panel_read_a_log_folder():
    m = load_responses(FIX / "lmeval")
    assert m.shape == (3, 14) and m.meta["format"] == "lm-eval"
    resp, items = load_panel(FIX / "inspect")
    assert resp.shape == (3, 6) and items is None


def test_cli_import_writes_responses_and_items_that_load_back(tmp_path):
    out, items = tmp_path / "r.csv", tmp_path / "items.jsonl"
    res = runner.invoke(app, ["import", "lm-eval", str(FIX / "lmeval"), "--out", str(out), "--items-out", str(items)],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "3 model(s), 14 item(s) in 2 task(s), 56 trial(s)" in res.output
    head = out.read_text().splitlines()[0]
    assert head == "model,item_id,n_correct,n_trials,task"
    back = load_responses(out, items=load_items(items))
    direct = load_responses(FIX / "lmeval")
    order = [back.item_ids.index(i) for i in direct.item_ids]
    assert back.models == direct.models and (back.n_correct[:, order] == direct.n_correct).all()
    assert back.meta["groups"]["task"]["toy_mc/0"] == "toy_mc"


def test_cli_import_bad_input_is_one_line_exit_2(tmp_path):
    (tmp_path / "samples_t_2024-01-01T00-00-00.jsonl").write_text('{"doc_id": 0, "filter": "none"}\n')
    proc = subprocess.run([sys.executable, "-m", "benchfill.cli", "import", "lm-eval", str(tmp_path), "--out",
                           str(tmp_path / "o.csv")], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "samples_t_2024-01-01T00-00-00.jsonl" in lines[0] and "row 1" in lines[0]
    assert not (tmp_path / "o.csv").exists()
    res = runner.invoke(app, ["import", "nope", str(tmp_path), "--out", str(tmp_path / "o.csv")])
    assert res.exit_code == 2 and "unknown import format" in res.output


def test_diagnose_and_suite_by_task_straight_from_a_log_folder(tmp_path):
    res = runner.invoke(app, ["diagnose", str(FIX / "lmeval"), "--json",
                              str(tmp_path / "d.json")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "d.json").read_text())["n_items"] == 14
    res = runner.invoke(app, ["suite", str(FIX / "lmeval"), "--by", "task", "--out",
                              str(tmp_path / "s")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert {b["benchmark"]: b["n_items"] for b in summary["benchmarks"]} == {"toy_gen": 6, "toy_mc": 8}
    # inspect_ai's own logs (.eval zips and .json together), the default sampler, the summary on stdout
    res = runner.invoke(app, ["suite", str(FIX / "inspect"), "--by", "task", "--out", str(tmp_path / "si"),
                              "--json", "-"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "si" / "summary.json").read_text())
    assert out["n_models"] == 3 and [(b["benchmark"], b["n_items"]) for b in out["benchmarks"]] == [("add_numbers", 6)]
    assert (tmp_path / "si" / "add_numbers" / "diagnosis.scale.npz").exists()


def test_suite_without_items_table_needs_a_grouping(tmp_path, examples):
    res = runner.invoke(app, ["suite", str(examples / "math500_k4.responses.csv.gz"), "--by", "task", "--sampler",
                              "map", "--out", str(tmp_path / "s")])
    assert res.exit_code == 2 and "no grouping 'task' in the responses" in res.output


def test_fill_runs_and_resumes_straight_from_a_log_folder(tmp_path):
    """`fill --responses LOGDIR`: the run's fingerprint covers every file of the folder, so it starts, resumes,
    and refuses a resume once a log changed."""
    logs = tmp_path / "logs"
    shutil.copytree(FIX / "inspect", logs)
    items = tmp_path / "items.jsonl"
    assert runner.invoke(app, ["import", "inspect", str(logs), "--out", str(tmp_path / "r.csv"), "--items-out",
                               str(items)]).exit_code == 0
    config = Path(__file__).parents[1] / "examples" / "fill_sim.toml"
    args = ["fill", str(items), "--responses", str(logs), "--config", str(config), "--out", str(tmp_path / "run"),
            "--gaps", "1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert runner.invoke(app, [*args, "--resume"]).exit_code == 0
    (logs / "beta.json").write_text((logs / "beta.json").read_text().replace("mockllm/beta", "mockllm/delta"))
    res = runner.invoke(app, [*args, "--resume"])
    assert res.exit_code == 2 and "differ from the run" in res.output
