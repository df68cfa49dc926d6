"""The core install (``pip install benchfill``, no extras) runs diagnose, suite, place, calibrate, detect and import;
a command that needs an extra says which, in one line with the pip command, and exits 2 (README: Install options).

The commands run in a subprocess whose import system does not see the modules of the optional extras (as if they
were not installed), so a module-level import of one of them anywhere on a core command's path fails here."""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from benchfill.errors import EXTRA_MODULES, MissingExtra, extra_of, require_extra

REPO = Path(__file__).resolve().parents[1]
BLOCKED = sorted({m for mods in EXTRA_MODULES.values() for m in mods})

# runs `benchfill ARGS` for each ARGS of argv[2] (JSON) in one process, with the modules of argv[1] not installed;
# prints each command's exit code and standard error, as JSON
RUNNER = """
import contextlib, io, json, sys

blocked = set(json.loads(sys.argv[1]))


# each of the import system's finders, blind to the blocked modules: find_spec gives None for them and import
# raises ModuleNotFoundError, as when they are not installed
class NotInstalled:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attr):
        return getattr(self.finder, attr)


sys.meta_path[:] = [NotInstalled(f) if hasattr(f, "find_spec") else f for f in sys.meta_path]
early = sorted(m for m in sys.modules if m.partition(".")[0] in blocked)
assert not early, f"imported before the block: {early}"
from benchfill.cli import app

results = []
for args in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            app(args, prog_name="benchfill")
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        except BaseException as exc:  # typer has printed its traceback (into err)
            code = repr(exc)
    results.append({"args": args, "rc": code, "stderr": err.getvalue()})
loaded = sorted({m.partition(".")[0] for m in sys.modules} & blocked)
print(json.dumps({"results": results, "loaded": loaded}))
"""


def run_blocked(*commands: list) -> tuple[list[dict], list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "400"}
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(BLOCKED),
                           json.dumps([list(map(str, c)) for c in commands])],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["results"], out["loaded"]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """40 items of the bundled MATH-500 responses (4 rollouts): about a second per command."""
    folder = tmp_path_factory.mktemp("core")
    with gzip.open(REPO / "examples" / "math500_k4.responses.csv.gz", "rt", newline="") as fh:
        rows = list(csv.reader(fh))
    items = sorted({r[1] for r in rows[1:]})[:40]
    keep = set(items)
    with open(folder / "small.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([rows[0]] + [r for r in rows[1:] if r[1] in keep])
    with open(folder / "groups.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([["item_id", "benchmark"]] + [[it, "AB"[i % 2]] for i, it in enumerate(items)])
    with open(folder / "new.csv", "w", newline="") as fh:  # 3 other items, to place on the small file's scale
        others = sorted({r[1] for r in rows[1:]} - keep)[:3]
        csv.writer(fh).writerows([rows[0]] + [r for r in rows[1:] if r[1] in others])
    for name, k in (("a.csv", 2), ("b.csv", 30)):
        (folder / name).write_text("model,item_id,n_correct,n_trials\n" +
                                   "".join(f"ck{k},q{i},{k},32\n" for i in range(10)))
    return folder


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_core_commands_run_without_the_extras(small):
    fit = ["--models", "6", "--chains", "2", "--tune", "50", "--draws", "100"]
    fixtures = REPO / "tests" / "fixtures" / "importers"
    results, loaded = run_blocked(
        ["diagnose", small / "small.csv", *fit, "--json", small / "dx" / "diagnosis.json"],
        ["suite", small / "small.csv", "--items-table", small / "groups.csv", *fit, "--out", small / "suite"],
        ["place", small / "new.csv", "--scale", small / "dx" / "diagnosis.scale.npz", "--json", small / "p.json"],
        ["calibrate", small / "dx" / "diagnosis.json", "--k", 20, "--json", small / "c.json"],
        ["detect", small / "a.csv", small / "b.csv", "--permutations", 2000, "--json", small / "d.json"],
        ["import", "inspect", fixtures / "inspect", "--out", small / "i.csv", "--items-out", small / "i.jsonl"],
        ["import", "lm-eval", fixtures / "lmeval", "--out", small / "l.csv"])
    for res in results:
        assert res["rc"] == 0 and "Traceback" not in res["stderr"], (res["args"][0], res["stderr"][-3000:])
    assert not loaded
    for name in ("dx/diagnosis.json", "dx/diagnosis.png", "dx/diagnosis.scale.npz", "suite/summary.json",
                 "p.json", "c.json", "d.json", "i.csv", "i.jsonl", "l.csv"):
        assert (small / name).is_file(), name
    assert json.loads((small / "dx" / "diagnosis.json").read_text())["n_items"] == 40
    assert len(json.loads((small / "p.json").read_text())["items"]) == 3
    assert json.loads((small / "d.json").read_text())["significant"]


def test_a_missing_extra_is_one_line_naming_it_and_exit_2(tmp_path):
    ex = REPO / "examples"
    openllm = REPO / "tests" / "fixtures" / "importers" / "openllm"
    cases = [  # (command, what the line starts with, the extra)
        (["fill", ex / "math500.items.jsonl", "--responses", ex / "math500_k4.responses.csv.gz", "--config",
          ex / "fill_sim.toml", "--out", tmp_path / "run"], "benchfill fill", "llm"),
        (["evaluate", ex / "math500.items.jsonl", "--config", ex / "sim.toml", "--out", tmp_path / "ev"],
         "benchfill evaluate", "llm"),
        (["diagnose", ex / "math500_k4.responses.csv.gz", "--sampler", "map", "--json", tmp_path / "dx/"],
         "--sampler map", "pymc"),
        (["diagnose", ex / "math500_k4.responses.csv.gz", "--robustness", "--json", tmp_path / "dx/"],
         "--robustness", "pymc"),
        (["import", "openllm", openllm, "--out", tmp_path / "ol.csv"], str(openllm), "parquet"),
    ]
    results, _ = run_blocked(*(args for args, _, _ in cases))
    for res, (_, what, extra) in zip(results, cases):
        lines = res["stderr"].strip().splitlines()
        assert res["rc"] == 2 and len(lines) == 1, (res["args"][0], res["stderr"][-3000:])
        name = {"llm": "LLM", "pymc": "PyMC", "parquet": "Parquet"}[extra]
        assert lines[0].startswith(f"error: {what}") and f": needs the {name} extra (" in lines[0], lines[0]
        assert lines[0].endswith(f" is not installed): pip install 'benchfill[{extra}]'"), lines[0]
    assert not any((tmp_path / d).exists() for d in ("run", "ev", "dx", "ol.csv"))  # nothing was started


def test_the_extras_table_matches_pyproject():
    """errors.EXTRA_MODULES names pyproject's extras; [all] is the LLM stack, PyMC and Parquet, [dev] includes [all],
    and no package of an extra is a core dependency."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(EXTRA_MODULES) <= set(extras)
    assert extras["all"] == ["benchfill[llm,pymc,parquet]"] and "benchfill[all]" in extras["dev"]

    def name(req: str) -> str:
        return req.split(">")[0].split("[")[0].split("=")[0].strip().lower().replace("-", "_")

    core = {name(r) for r in project["dependencies"]}
    for extra in ("llm", "pymc", "parquet"):
        assert not core & {name(r) for r in extras[extra]}, extra
    # every package of these extras is known by its module (langgraph-checkpoint-sqlite: langgraph.checkpoint.sqlite)
    for extra in ("llm", "pymc", "parquet"):
        for req in extras[extra]:
            assert extra_of(name(req).removesuffix("_checkpoint_sqlite")) == extra, req


def test_require_extra_names_the_first_missing_module(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None if m == "nutpie" else object())
    with pytest.raises(MissingExtra) as err:
        require_extra("pymc", "--sampler nutpie")
    assert str(err.value) == ("--sampler nutpie: needs the PyMC extra (nutpie is not installed): "
                              "pip install 'benchfill[pymc]'")
    assert err.value.extra == "pymc"


def test_require_sampler_names_the_option_as_the_user_set_it(monkeypatch):
    """One check for the commands (``--sampler``) and the designers' config (``run.irt``), each message naming
    where the sampler was chosen; the fast sampler needs no extra."""
    import importlib.util

    from benchfill.errors import require_sampler

    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None if m == "pymc" else object())
    require_sampler("fast")
    with pytest.raises(MissingExtra, match=r"^--sampler pymc: needs the PyMC extra"):
        require_sampler("pymc")
    with pytest.raises(MissingExtra, match=r"^designers\.toml: run\.irt = 'map': needs the PyMC extra"):
        require_sampler("map", what="designers.toml: run.irt = 'map'")
    with pytest.raises(MissingExtra, match=r"^--robustness: needs the PyMC extra"):
        require_sampler("fast", robustness=True)
