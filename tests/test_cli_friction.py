"""The CLI never breaks: literal text everywhere, one line + exit 2 for bad options, Ctrl-C, help text, widths,
--version, --json PATH|-, loader and config messages with "did you mean", and a second diagnose of the same file."""

from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchfill.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
NASTY = "[/INST] [/note] [bold]x[/bold] [link=http://a]"


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchfill.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, **(env or {})}, timeout=300)


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A small long-format response file (6 models x 40 items, 4 rollouts) with bracketed model names."""
    from benchfill.irt.simulate import simulate_responses

    folder = tmp_path_factory.mktemp("small")
    rng = np.random.default_rng(0)
    r = simulate_responses(np.linspace(-2, 2, 6), rng.normal(0, 1.2, 40), 4, seed=0)
    frame = r.to_long()
    frame["model"] = frame["model"].map(lambda m: f"{m}{NASTY}" if m.endswith("0") else m)
    path = folder / "small.csv"
    frame.to_csv(path, index=False)
    return path


# ---- 1. bad options: one line, exit 2 ---------------------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["--sampler", "nuts"], "NUTS is pymc, nutpie or numpyro"),
    (["--sampler", "pymcc"], "did you mean 'pymc'"),
    (["--guessing", "1.5"], "--guessing: 1.5: a guessing rate must lie in [0, 1)"),
    (["--chains", "0"], "--chains: 0: must be at least 1"),
    (["--draws", "0"], "--draws: 0: must be at least 1"),
    (["--choices", "1"], "--choices: 1"),
])
def test_bad_fit_options_are_one_line_and_exit_2(small, tmp_path, args, needle):
    proc = cli("diagnose", small, "--json", tmp_path / "d.json", *args)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (a folder no file can be made in)")
def test_a_picture_path_that_cannot_be_written_is_one_line_and_exit_2(small, tmp_path):
    """The picture is drawn by another process and written here: a folder where no file can be created is one
    line naming the file asked for (not the temporary one), exit 2."""
    proc = cli("diagnose", small, "--json", tmp_path / "d.json", "--png", "/proc/x.png")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.strip().startswith("error: /proc/x.png:"), proc.stderr


def test_json_into_a_missing_folder_creates_it(small, tmp_path):
    target = tmp_path / "a" / "b" / "c" / "diagnosis.json"
    res = run("diagnose", small, "--json", target)
    assert res.exit_code == 0, res.output
    assert target.exists() and target.with_suffix(".png").exists() and target.with_suffix(".scale.npz").exists()


def test_json_into_an_existing_folder_writes_everything_inside_it(small, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    res = run("diagnose", small, "--json", folder)
    assert res.exit_code == 0, res.output
    for name in ("diagnosis.json", "diagnosis.png", "diagnosis.scale.npz"):
        assert (folder / name).exists(), name
    assert not (tmp_path / "out.png").exists() and "overwrote" not in flat(res.output)
    assert str(folder / "diagnosis.json") in flat(res.output)


def test_json_to_stdout_is_parseable_and_tables_go_to_stderr(small, tmp_path):
    proc = cli("diagnose", small, "--json", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["n_models"] == 6 and "DDM" in proc.stderr


# ---- model- and user-written text is printed literally ---------------------------------------------------

def test_brackets_in_model_names_do_not_break_tables(small, tmp_path):
    res = run("diagnose", small, "--json", tmp_path / "d.json")
    assert res.exit_code == 0, res.output
    scale = tmp_path / "d.scale.npz"
    # place: item ids and model names with brackets
    import pandas as pd

    frame = pd.read_csv(small)
    frame = frame[frame["item_id"].isin(sorted(frame["item_id"].unique())[:2])].copy()
    frame["item_id"] = frame["item_id"].map(lambda i: f"{i}[/note]")
    frame.loc[len(frame)] = ["unknown[/INST]", "x[/note]", 1, 2]
    new = tmp_path / "new.csv"
    frame.to_csv(new, index=False)
    res = run("place", new, "--scale", scale, "--json", tmp_path / "p.json")
    assert res.exit_code == 0, res.output
    assert "[/note]" in res.output and "unknown[/INST]" in res.output


@pytest.fixture(scope="module")
def nasty_run(tmp_path_factory):
    """A finished simulated fill run whose item texts, answers, judge reasons and panel model names hold markup."""
    sys.path.insert(0, str(REPO / "tests"))
    from test_fill import fill, make_benchmark, write_config

    folder = tmp_path_factory.mktemp("nasty")
    items, resp = make_benchmark(folder)
    cfg = write_config(folder)
    res = fill(items, resp, cfg, folder / "out")
    assert res.exit_code == 0, res.output
    from benchfill.memory.bank import MemoryBank

    bank = MemoryBank(folder / "out" / "memory.sqlite")
    for c in bank.candidates():
        counts = c.counts
        if counts:
            counts = {f"{m}{NASTY}": v for m, v in counts.items()}
        bank.update_candidate(c.id, question=f"{NASTY} {c.question} \\[\\sin x\\]", answer=f"7 {NASTY}",
                              verdict=json.dumps({"valid": bool(c.valid), "reason": f"reason {NASTY}"}),
                              counts=counts, error=f"err {NASTY}" if not c.valid else c.error)
    bank.close()
    return folder / "out", res.output


def test_trace_and_review_print_markup_literally(nasty_run):
    out, _ = nasty_run
    for gap in ("1", "2", "3"):
        res = run("trace", out, "--gap", gap, "--full")
        assert res.exit_code == 0, res.output
        assert "[/INST] [/note] [bold]x[/bold]" in res.output
        assert "\\[\\sin x\\]" in res.output  # LaTeX as written (markup used to eat the backslash-bracket)
    res = run("review", out)
    assert res.exit_code == 0, res.output
    assert "[/INST]" in res.output


def test_fill_says_which_models_it_kept(nasty_run):
    _, output = nasty_run
    assert "kept 6 of" not in output  # 6 models asked of 6: nothing dropped, nothing to say
    sys.path.insert(0, str(REPO / "tests"))
    from test_fill import make_benchmark, write_config

    folder = nasty_run[0].parent / "b8"
    folder.mkdir()
    items, resp = make_benchmark(folder, n_models=8)
    cfg = write_config(folder)
    res = runner.invoke(app, ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--out",
                              str(folder / "out"), "--models", "4", "--gaps", "1"])
    assert res.exit_code == 0, res.output
    assert "kept 4 of 8 models (spread evenly by accuracy" in flat(res.output)


# ---- review queue -----------------------------------------------------------------------------------------

def test_review_show_and_json(nasty_run):
    out, _ = nasty_run
    queue = json.loads(cli("review", out, "--json", "-").stdout)["queue"]
    cid = queue[0]["candidate"]
    res = run("review", out, "--show", cid)
    assert res.exit_code == 0, res.output
    text = flat(res.output)
    assert "reference answer: 7 [/INST]" in text and "reason [/INST]" in text and "90 % interval" in text
    assert "± tolerance " in text and "P(inside the gap) = " in text and "panel counts per model" in text


# ---- Ctrl-C ------------------------------------------------------------------------------------------------

@pytest.mark.slow  # a whole command end to end (> 10 s): the full suite runs it
def test_ctrl_c_during_the_irt_step_is_one_line_and_130(tmp_path):
    from benchfill.irt.simulate import simulate_responses

    rng = np.random.default_rng(1)
    r = simulate_responses(np.linspace(-2, 2, 12), rng.normal(0, 1, 4000), 4, seed=1)
    path = tmp_path / "big.csv"
    r.to_long().to_csv(path, index=False)
    proc = subprocess.Popen([sys.executable, "-m", "benchfill.cli", "diagnose", str(path), "--draws", "40000",
                             "--json", str(tmp_path / "d.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    time.sleep(9)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole process group, workers included
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "ForkPoolWorker" not in err, err
    assert err.strip().splitlines()[-1] == "interrupted", err
    assert "resume" not in err


WORKERS = """
import multiprocessing as mp, os, signal, time
from benchfill.cli_support import install_sigint_handler, quiet_worker_start


def run(ctx):
    with mp.get_context(ctx).Pool(1) as pool:
        r = pool.map_async(time.sleep, [1.5])
        time.sleep(0.7)
        for p in pool._pool:  # Ctrl-C reaches every process of the terminal's process group: the workers too
            os.kill(p.pid, signal.SIGINT)
        try:
            r.get(timeout=20)
            print(ctx, "ok", flush=True)
        except Exception as exc:
            print(ctx, "lost", type(exc).__name__, flush=True)


if __name__ == "__main__":
    install_sigint_handler()  # what every benchfill command does first
    run("fork")
    quiet_worker_start()  # what diagnose / fill do before the fit
    run("forkserver")
"""


@pytest.mark.slow  # > 3 s: the full suite (CI) runs it, the fast lane does not
def test_ctrl_c_does_not_reach_the_irt_workers(tmp_path):
    """Deterministic: SIGINT sent to pool workers (forked, and forked by the fork server) neither kills them nor
    prints a ForkPoolWorker traceback (without the two helpers both workers died with one)."""
    script = tmp_path / "workers.py"
    script.write_text(WORKERS)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "BENCHFILL_WORKER_STDERR": "1"})
    assert proc.stdout.split("\n")[:2] == ["fork ok", "forkserver ok"], (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr


# ---- help, flags, version, width -----------------------------------------------------------------------------

def test_help_keeps_square_brackets_and_flags_show_no_bool():
    res = run("fill", "--help")
    assert "[fill] parameters" in flat(res.output)
    res = run("diagnose", "--help")
    assert "<bool>" not in res.output and "--robustness" in res.output


def test_version():
    from benchfill import __version__

    res = run("--version")
    assert res.exit_code == 0 and res.output.strip() == f"benchfill {__version__}"


def test_unknown_option_gets_a_suggestion(small, tmp_path):
    res = runner.invoke(app, ["diagnose", str(small), "--jsn", "x"])
    assert res.exit_code == 2 and "--json" in res.output
    res = runner.invoke(app, ["trac", "x"])
    assert res.exit_code == 2 and "Did you mean 'trace'" in res.output
    for args, needle in ((["import", "helmm", str(tmp_path), "--out", str(tmp_path / "o.csv")], "did you mean 'helm'?"),
                         (["trace", str(tmp_path), "--method", "basline"], "did you mean 'baseline'?")):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and needle in flat(res.output), res.output


@pytest.mark.slow  # > 3 s: the full suite (CI) runs it, the fast lane does not
def test_tables_are_not_cut_to_80_columns_when_piped(nasty_run):
    out, _ = nasty_run
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "benchfill.cli", "review", str(out)], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) > 80
    assert "…" not in proc.stdout.split("question")[0]  # ids and numbers whole
    proc = subprocess.run([sys.executable, "-m", "benchfill.cli", "review", str(out)], capture_output=True,
                          text=True, env={**env, "COLUMNS": "100"})
    assert max(len(line) for line in proc.stdout.splitlines()) <= 100


def test_math_verify_timeout_notice_is_silenced(caplog):
    import threading

    import math_verify.grader as mvg
    import math_verify.parser as mvp

    from benchfill.cli_support import quiet_libraries
    from benchfill.models.grading import _math_verify_equal

    def grade_off_the_main_thread():  # where benchfill grades without math-verify's alarm-based timeout
        mvp.TIMEOUT_WARNING_SHOWN = mvg.TIMEOUT_WARNING_SHOWN = False
        t = threading.Thread(target=_math_verify_equal, args=("1/2", "0.5"))
        t.start()
        t.join()

    names = ("math_verify", "math_verify.parser", "math_verify.grader")
    levels = {n: logging.getLogger(n).level for n in names}
    try:
        for n in names:
            logging.getLogger(n).setLevel(logging.NOTSET)
        with caplog.at_level(logging.WARNING):
            grade_off_the_main_thread()
        # the grader silences it itself: a library call prints it no more than the CLI does (issue 28)
        assert "Timeout is disabled" not in caplog.text
        caplog.clear()
        quiet_libraries()
        with caplog.at_level(logging.WARNING):
            grade_off_the_main_thread()
        assert "Timeout is disabled" not in caplog.text
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


# ---- loaders and configs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, content, needle", [
    ("mis.csv", "model,item,correct,trials\na,1,1,2\nb,1,0,2\n", "misspelt column name(s)? 'item' (did you mean 'item_id'?)"),
    ("mis2.csv", "model,item_id,n_corect,n_trials\na,1,1,2\nb,1,0,2\n", "'n_corect' (did you mean 'n_correct'?)"),
    ("rand.csv.gz", b"\x00\x01 not gzip at all", "corrupt gzip file (the name ends in .gz but the data is not gzip)"),
    ("trunc.csv.gz", gzip.compress(b"model,item_id,n_correct,n_trials\n" * 200)[:60], "corrupt gzip file"),
])
def test_loader_messages(tmp_path, name, content, needle):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    proc = cli("diagnose", path, "--json", tmp_path / "d.json")
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert "missing columns" not in proc.stderr and "wide matrix cell" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("text, needle", [
    ('[defaults]\nrolouts = 4\n[rewriter]\nmodel = "sim/r"\n[judge]\nmodel = "sim/j"\n',
     "[defaults].rolouts: unknown field (did you mean 'rollouts'?)"),
    ('[fill]\nparnts = 2\n[rewriter]\nmodel = "sim/r"\n', "[fill].parnts: unknown field (did you mean 'parents'?)"),
    ('[fil]\nparents = 2\n', "fil: unknown field (did you mean 'fill'?)"),
])
def test_config_typos_are_reported_where_written_with_a_suggestion(tmp_path, text, needle):
    from benchfill.errors import InputError
    from benchfill.models.config import load_config

    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(InputError) as exc:
        load_config(cfg)
    assert needle in str(exc.value)


# ---- a second diagnose of the same file --------------------------------------------------------------------------

@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_second_diagnose_refuses_without_force(small, tmp_path):
    first = cli("diagnose", small, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    target = tmp_path / "runs" / "small" / "diagnosis.json"
    before = target.read_text()
    second = cli("diagnose", small, "--seed", "3", cwd=tmp_path)
    assert second.returncode == 2 and "--force" in second.stderr and target.read_text() == before
    third = cli("diagnose", small, "--seed", "3", "--force", cwd=tmp_path)
    assert third.returncode == 0 and "overwrote the earlier diagnosis" in flat(third.stdout)


def test_diagnoses_of_one_file_with_different_models_get_their_own_folders(small, tmp_path, monkeypatch):
    """The default folder names the model selection: `--models 4` after a diagnose of all models is not refused
    and overwrites nothing."""
    monkeypatch.chdir(tmp_path)
    assert run("diagnose", small).exit_code == 0
    everything = (tmp_path / "runs" / "small" / "diagnosis.json").read_text()
    four = run("diagnose", small, "--models", "4")
    assert four.exit_code == 0, four.output
    assert json.loads((tmp_path / "runs" / "small-m4" / "diagnosis.json").read_text())["n_models"] == 4
    assert (tmp_path / "runs" / "small" / "diagnosis.json").read_text() == everything


# ---- --json PATH|- on every command that prints a result -----------------------------------------------------------

@pytest.mark.slow  # a whole command end to end (> 10 s): the full suite runs it
def test_json_dash_on_result_commands(small, nasty_run, tmp_path):
    out, _ = nasty_run
    diag = tmp_path / "d.json"
    assert run("diagnose", small, "--json", diag).exit_code == 0
    cases = {
        "calibrate": ["calibrate", diag, "--k", "10"],
        "trace": ["trace", out, "--gap", "1"],
        "review": ["review", out],
        "detect": ["detect", small, "--model-a", "m01", "--model-b", "m05", "--permutations", "200"],
    }
    for name, args in cases.items():
        proc = cli(*args, "--json", "-")
        assert proc.returncode == 0, (name, proc.stderr)
        json.loads(proc.stdout)  # nothing but the JSON on stdout
    proc = cli("trace", out, "--gap", "1", "--json")  # bare --json, as before: stdout
    assert json.loads(proc.stdout)["gap"] == 1
    proc = cli("export", out, "--out", tmp_path / "filled.jsonl", "--include-pending", "--json", "-")
    assert json.loads(proc.stdout)["added"] == 3, proc.stderr
    proc = cli("import", "lm-eval", REPO / "tests" / "fixtures" / "importers" / "lmeval", "--out", tmp_path / "i.csv",
               "--json", "-")
    assert proc.returncode == 0 and json.loads(proc.stdout)["rows"] > 0, proc.stderr
    proc = cli("suite", small, "--items-table", _groups(small, tmp_path), "--out", tmp_path / "s",
               "--json", "-")
    assert proc.returncode == 0 and [b["benchmark"] for b in json.loads(proc.stdout)["benchmarks"]] == ["A[/x]", "B"]
    assert "A[/x]" in proc.stderr  # the group name from the data, printed literally in the table


def _groups(responses: Path, folder: Path) -> Path:
    import pandas as pd

    ids = sorted(pd.read_csv(responses)["item_id"].astype(str).unique())
    table = folder / "groups.csv"
    table.write_text("item_id,benchmark\n" + "".join(f"{i},{'A[/x]' if k < 20 else 'B'}\n" for k, i in enumerate(ids)))
    return table


@pytest.mark.slow  # > 3 s: the full suite (CI) runs it, the fast lane does not
def test_evaluate_json_to_stdout(tmp_path):
    examples = REPO / "examples"
    proc = cli("evaluate", examples / "math500.items.jsonl", "--config", examples / "sim.toml", "--out", tmp_path / "ev",
               "--limit", "3", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # the banner and tables went to stderr
    assert data["n_items"] == 3 and "SIMULATED" in proc.stderr


def test_tables_of_diagnose_evaluate_and_designers_print_names_literally(tmp_path, examples):
    """File, model, designer and category names are the user's: a `[/x]` in one neither breaks nor vanishes."""
    from rich.console import Console

    from benchfill.designers.report import preference_table
    from benchfill.models.progress import summary_table

    odd = tmp_path / "[red]m500[bold].csv.gz"
    odd.write_bytes((examples / "math500_k4.responses.csv.gz").read_bytes())
    res = CliRunner().invoke(app, ["diagnose", str(odd), "--models", "6", "--json",
                                   str(tmp_path / "d.json")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "[red]m500[bold].csv.gz" in res.output

    class Result:  # the fields summary_table reads
        simulated = False
        models = ["model[/INST]"]
        rollouts = {"model[/INST]": 2}
        accuracy = {"model[/INST]": 0.5}
        wrong_form = {}
        skipped = {"model[/INST]": {"call failed: [/note]": 1}}

    con = Console(record=True, width=200)
    con.print(summary_table(Result()))
    text = con.export_text()
    assert "model[/INST]" in text and "call failed: [/note] x1" in text
    con = Console(record=True, width=200)
    con.print(preference_table({"preferences": [{"kind": "self", "designer": "d[/x]", "answerers": ["a[/INST]"],
                                                 "estimate": 0.5, "ci_low": 0.1, "ci_high": 0.9, "p_value": 0.01,
                                                 "detected": True}]}))
    text = con.export_text()
    assert "d[/x]" in text and "a[/INST]" in text


def test_dash_h_is_help_everywhere():
    for args in ((), ("fill",), ("diagnose",), ("designers",), ("designers", "run")):
        res = run(*args, "-h")
        assert res.exit_code == 0 and "Usage" in res.output, (args, res.output[-300:])


def test_more_models_than_the_file_has_is_said(small, tmp_path):
    res = run("diagnose", small, "--models", "100", "--json", tmp_path / "d.json")
    assert res.exit_code == 0, res.output
    assert "--models 100:" in flat(res.output) and "all 6 are kept" in flat(res.output)


def test_command_summaries_use_a_wide_terminal():
    """On a 120-column terminal the command list shows each summary's whole first sentence (click's default
    width of 80 cut them at ~60 characters)."""
    res = runner.invoke(app, ["--help"], terminal_width=120)
    assert "Fill the largest difficulty gaps with the BenchFill search (rewrite -> validate -> label -> place)." \
        in res.output, res.output


def test_every_option_of_every_command_is_documented():
    import click
    import typer

    def commands(group, prefix=""):
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                yield from commands(cmd, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", cmd

    undocumented = [f"{name} {opt.opts[0]}" for name, cmd in commands(typer.main.get_command(app))
                    for opt in cmd.params if isinstance(opt, click.Option) and opt.opts[0] not in ("--help",)
                    and not opt.help]
    assert undocumented == []


@pytest.mark.parametrize("columns", [80, 200])
def test_help_at_80_and_200_columns_shows_whole_summaries_within_the_width(columns):
    """In a terminal of 80 or 200 columns (COLUMNS, as a shell sets it) every command's first sentence is in the
    command list whole (wrapped, not cut with "..."), and no help line is wider than the terminal, or than 120
    columns on a wide one."""
    import typer

    from benchfill.cli_support import first_sentence

    env = {**os.environ, "COLUMNS": str(columns)}
    group = typer.main.get_command(app)
    for path, sub in (([], group), (["designers"], group.commands["designers"]), (["diagnose"], None)):
        proc = subprocess.run([sys.executable, "-m", "benchfill.cli", *path, "--help"], capture_output=True,
                              text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert max(len(line) for line in lines) <= min(columns, 120)
        assert not any(line.rstrip().endswith("...") for line in lines[1:])
        for name, cmd in (sub.commands.items() if sub is not None else ()):
            doc = cmd.help if isinstance(cmd, typer.core.TyperGroup) else cmd.callback.__doc__
            squeeze = "".join  # wrapping may break a line after a hyphen: compare without whitespace
            assert squeeze(first_sentence(doc).split()) in squeeze(proc.stdout.split()), name
