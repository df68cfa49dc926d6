"""The Python API (`import benchfill as bf`): the commands as typed functions with the CLI's defaults, usable from a
notebook (inside a running event loop) and writing the same artifacts as the CLI."""

from __future__ import annotations

import asyncio
import json

import pytest

import benchfill as bf
from benchfill.data import ResponseMatrix
from benchfill.errors import InputError
from benchfill.irt.model import SamplerSettings
from benchfill.models.failures import CallFailure, FailureKind


def test_one_default_sampler_for_library_and_cli():
    from benchfill import api

    assert SamplerSettings().method == api.DEFAULT_SAMPLER == "fast"


@pytest.mark.slow  # a whole command end to end (> 10 s): the full suite runs it
def test_load_diagnose_save_place_from_python(examples, tmp_path):
    resp = bf.load_responses(examples / "math500.responses.csv.gz", models=12)
    assert isinstance(resp, ResponseMatrix) and resp.shape == (12, 500)
    again = bf.load_responses(resp.to_long())  # a long DataFrame reads like the file
    assert again.models == resp.models and (again.n_correct == resp.n_correct).all()
    events: list = []
    dx = bf.diagnose(resp, draws=300, tune=300, on_event=events.append)
    stages = [e.message for e in events if e.kind == "stage"]
    assert [e.kind for e in events].count("picture") == 1  # the picture, as soon as the verdicts are known
    assert isinstance(dx, bf.Diagnosis) and dx.sampler.method == "fast" and dx.posterior is not None
    # a notebook's echo is one line, not the whole record (issue 28: it was 49,000 characters)
    assert len(repr(dx)) < 300 and "12 models x 500 items" in repr(dx) and "DDM 0." in str(dx), repr(dx)
    # a progress display is told each stage as it starts, in order, each of them once
    firsts = [s.split(" ")[0] for s in stages]
    assert firsts == ["fitting", "exact", "posterior", "the", "checks"], stages
    assert set(dx.timings) >= {"fit", "exact_b", "checks", "metrics", "null"}
    assert json.loads(dx.to_json())["schema_version"] == 6
    assert dx.plot().axes  # a matplotlib Figure for a notebook
    path = dx.save(tmp_path / "m500")
    assert {p.name for p in (tmp_path / "m500").iterdir()} == {"diagnosis.json", "diagnosis.png",
                                                              "diagnosis.scale.npz"}
    assert bf.Diagnosis.model_validate_json(path.read_text()).ddm == pytest.approx(dx.ddm)
    placed = bf.place(tmp_path / "m500" / "diagnosis.scale.npz", resp.subset(items=resp.item_ids[:4]))
    assert [p.item_id for p in placed.items] == resp.item_ids[:4]
    # an item of the benchmark placed on its own scale lands where the diagnosis put it
    assert placed.items[0].d == pytest.approx(dx.items[0].d, abs=0.05)


def test_bad_dataframe_is_one_input_error_naming_the_row(examples):
    frame = bf.load_responses(examples / "math500.responses.csv.gz").to_long()
    frame.loc[3, "n_correct"] = -1
    with pytest.raises(InputError, match="row 4.*negative"):
        bf.load_responses(frame)


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_evaluate_and_fill_work_inside_a_running_event_loop(examples, tmp_path):
    """Jupyter runs cells inside an event loop, where asyncio.run fails: the sync wrappers still work, and the
    async forms can be awaited."""

    async def notebook_cell():
        result = bf.evaluate(examples / "math500.items.jsonl", examples / "sim.toml", tmp_path / "eval", limit=5)
        again = await bf.evaluate_async(examples / "math500.items.jsonl", examples / "sim.toml", tmp_path / "eval",
                                        limit=5)
        return result, again

    result, again = asyncio.run(notebook_cell())
    assert result.complete and result.n_items == 5 and again.calls_made == 0  # the rerun is served by the cache
    summary = asyncio.run(_fill_in_loop(examples, tmp_path))
    assert isinstance(summary, bf.FillSummary) and summary.simulated and summary.methods["benchfill"].gaps
    # the typed summary is summary.json, field for field
    on_disk = json.loads((tmp_path / "fill" / "summary.json").read_text())
    assert summary.model_dump(exclude_none=True) == _without_none(on_disk)
    # the run's other faces from Python: a gap's trace and the report page
    tr = bf.trace(tmp_path / "fill", gap=1)
    assert tr.gap == 1 and tr.rounds
    with pytest.raises(InputError, match="choose benchfill or baseline"):
        bf.trace(tmp_path / "fill", method="basline")
    assert bf.write_report(tmp_path / "fill").name == "report.html"


def _without_none(obj):
    if isinstance(obj, dict):
        return {k: _without_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_without_none(v) for v in obj]
    return obj


async def _fill_in_loop(examples, tmp_path):
    return bf.fill(examples / "math500.items.jsonl", examples / "math500_k4.responses.csv.gz",
                   examples / "fill_sim.toml", tmp_path / "fill", gaps=1)


# ---- one serialisation: every API result is a pydantic model; the CLI's --json is its model_dump_json ----------


def _cli(*args):
    from typer.testing import CliRunner

    from benchfill.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res


def _assert_cli_json_is_the_models(path, result):
    from pydantic import BaseModel

    assert isinstance(result, BaseModel)
    assert path.read_text() == result.model_dump_json(indent=2) + "\n"


@pytest.mark.slow  # a whole command end to end (> 10 s): the full suite runs it
def test_detect_calibrate_place_from_python_equal_the_cli_json(examples, tmp_path):
    from benchfill import api

    rows_a = ["model,item_id,n_correct,n_trials"] + [f"ck1,q{i},2,32" for i in range(10)]
    rows_b = ["model,item_id,n_correct,n_trials"] + [f"ck2,q{i},30,32" for i in range(10)]
    (tmp_path / "a.csv").write_text("\n".join(rows_a) + "\n")
    (tmp_path / "b.csv").write_text("\n".join(rows_b) + "\n")
    det = api.detect(tmp_path / "a.csv", tmp_path / "b.csv", permutations=2000)
    assert det.significant and det.model_b == "ck2"
    _cli("detect", tmp_path / "a.csv", tmp_path / "b.csv", "--permutations", 2000, "--json", tmp_path / "d.json")
    _assert_cli_json_is_the_models(tmp_path / "d.json", det)

    resp = bf.load_responses(examples / "math500.responses.csv.gz", models=12)
    dx = bf.diagnose(resp.subset(items=resp.item_ids[:60]))
    dx.save(tmp_path / "dx")
    cal = api.calibrate(tmp_path / "dx" / "diagnosis.json", 10, target="beta:2,2")
    assert cal.k == 10 and len(cal.item_ids) == 10
    shown = _cli("calibrate", tmp_path / "dx" / "diagnosis.json", "--k", 10, "--target", "beta:2,2", "--json",
                 tmp_path / "c.json")
    _assert_cli_json_is_the_models(tmp_path / "c.json", cal)
    assert _shown(cal) in shown.stdout and "target beta:2,2" in _shown(cal)  # rich.print(cal): the CLI's view

    new = resp.subset(items=resp.item_ids[60:63]).to_long()
    new.to_csv(tmp_path / "new.csv", index=False)
    placed = api.place(tmp_path / "dx" / "diagnosis.scale.npz", tmp_path / "new.csv")
    assert [p.item_id for p in placed.items] == list(resp.item_ids[60:63])
    shown = _cli("place", tmp_path / "new.csv", "--scale", tmp_path / "dx" / "diagnosis.scale.npz", "--json",
                 tmp_path / "p.json")
    _assert_cli_json_is_the_models(tmp_path / "p.json", placed)
    assert _shown(placed) in shown.stdout and "3 item(s) placed on diagnosis.scale.npz" in _shown(placed)
    data = json.loads((tmp_path / "p.json").read_text())  # the field names users rely on
    assert {"scale", "responses", "models", "b_min", "b_max", "n_draws", "guessing", "ignored_models",
            "items"} <= set(data) and set(data["items"][0]) == {"item_id", "b", "b_sd", "d", "d_sd"}


def test_result_types_are_pydantic_with_their_json_field_names():
    from pydantic import BaseModel

    from benchfill.irt.checks import Check
    from benchfill.irt.robustness import BICComparison, LeaveOneOut
    from benchfill.models.evaluate import EvaluationResult

    loo = LeaveOneOut(dropped=["a", "b"], pearson=[0.9, 0.7], spearman=[0.8, 0.6])
    assert isinstance(loo, BaseModel)
    assert loo.model_dump()["worst_pearson"] == 0.7 and loo.model_dump()["mean_spearman"] == pytest.approx(0.7)
    bic = BICComparison(n_observations=10, loglik_1pl=-5, loglik_2pl=-4, k_1pl=3, k_2pl=5, bic_1pl=1, bic_2pl=2)
    assert json.loads(bic.model_dump_json())["preferred"] == "1pl"
    chk = Check("M1", "max R-hat", None, float("nan"), 1.01, "<=", {"reason": "MAP"})
    assert json.loads(chk.model_dump_json()) == {"name": "M1", "description": "max R-hat", "passed": None,
                                                 "value": None, "threshold": 1.01, "comparison": "<=",
                                                 "details": {"reason": "MAP"}}
    ev = EvaluationResult(out_dir="o", responses_path="r", calls_path="c", simulated=True, n_items=1, models=["m"],
                          rollouts={"m": 1}, answers=1, counted=1, correct=1, skipped={}, call_errors=0,
                          calls_made=1, cached=0, retries=0, tokens_in=1, tokens_out=1, cost=0.0,
                          accuracy={"m": 1.0},
                          failures=[CallFailure(FailureKind.SERVER_ERROR, "x")])
    dumped = json.loads(ev.model_dump_json())
    assert list(dumped)[0] == "label" and "SIMULATED" in dumped["label"] and "failures" not in dumped
    fs = bf.FillSummary.model_validate({"simulated": False, "n_items": 3, "top3_before": 0.5, "oracle": {
        "inserted": [0.5], "top3_reduction": 0.2}, "methods": {"benchfill": {
            "gaps": [{"gap": 1, "status": "filled", "prescreen": 2}], "filled": 1, "top3_reduction": 0.1,
            "mean_deviation": 0.01, "candidates": 4, "cost": 0.0}}, "added_later": True})
    assert fs.methods["benchfill"].gaps[0].status == "filled"
    assert fs.model_dump()["added_later"] and fs.model_dump()["methods"]["benchfill"]["gaps"][0]["prescreen"] == 2


def test_import_logs_from_python_equals_the_cli_json(tmp_path):
    """`bf.import_logs` is `benchfill import`: the same files, and the CLI's --json is the result's model_dump_json;
    its responses go straight into a suite by task."""
    from pathlib import Path

    fixtures = Path(__file__).parent / "fixtures" / "importers"
    res = bf.import_logs("inspect", fixtures / "inspect", out=tmp_path / "py.csv", items_out=tmp_path / "py.jsonl")
    assert isinstance(res, bf.ImportResult)
    assert res.format == "inspect" and res.models == ["mockllm/alpha", "mockllm/beta", "mockllm/gamma"]
    assert res.tasks == {"add_numbers": 6} and res.skipped == {"mockllm/gamma": 1} and res.n_item_texts == 6
    assert res.rows == len((tmp_path / "py.csv").read_text().splitlines()) - 1
    assert res.responses.shape == (3, 6) and int(res.responses.n_trials.sum()) == res.n_trials
    dumped = json.loads(res.model_dump_json())
    assert "responses" not in dumped and "items" not in dumped  # the data stay Python objects
    _cli("import", "inspect", fixtures / "inspect", "--out", tmp_path / "cli.csv", "--items-out",
         tmp_path / "cli.jsonl", "--json", tmp_path / "i.json")
    assert (tmp_path / "cli.csv").read_text() == (tmp_path / "py.csv").read_text()
    assert (tmp_path / "cli.jsonl").read_text() == (tmp_path / "py.jsonl").read_text()
    cli_json = json.loads((tmp_path / "i.json").read_text())
    assert cli_json == {**dumped, "out": str(tmp_path / "cli.csv"), "items_out": str(tmp_path / "cli.jsonl")}
    with pytest.raises(InputError, match="unknown import format.*did you mean 'inspect'"):
        bf.import_logs("inspekt", fixtures / "inspect")


def test_designers_card_json_to_stdout(examples, tmp_path):
    res = _cli("designers", "card", examples / "math500.items.jsonl", "--out", tmp_path / "card.yaml", "--json", "-")
    card = json.loads(res.stdout)
    assert card["n_items"] == 500 and card["ontology"]


# ---- every command is one documented API function with the same defaults, and has --json PATH|- ------------------

def _api_map():
    from benchfill import api
    from benchfill.diagnostics.report import Diagnosis

    # command -> (the API functions it is, {CLI parameter: API parameter}, CLI-only parameters: presentation/output)
    return {
        "diagnose": ((api.load_responses, api.diagnose, api.diagnosis_files, Diagnosis.save), {"top_gaps": "n_gaps"},
                     set()),
        "suite": ((api.load_responses, api.suite, api.Suite.save), {"out": "folder"}, {"json_out"}),
        "calibrate": ((api.calibrate,), {}, {"out", "json_out"}),
        "fill": ((api.fill, api.fill_async, api.fill_run), {}, {"json_out"}),
        "trace": ((api.trace,), {}, {"json_out", "full"}),
        "review": ((api.review_queue, api.review_item, api.vote),
                   {"show": "item_id", "approve": "item_id", "reject": "item_id"}, {"json_out"}),
        "view": ((api.view, api.write_report), {}, {"serve"}),
        "export": ((api.export,), {}, {"json_out"}),
        "detect": ((api.detect,), {}, {"json_out"}),
        "evaluate": ((api.evaluate, api.evaluate_async), {}, {"json_out", "progress"}),
        "place": ((api.place,), {}, {"json_out"}),
        "import": ((api.import_logs,), {"filter_": "filter"}, {"json_out"}),
        "local-server": ((api.local_server,), {}, set()),
        "designers card": ((api.designers_card,), {}, {"json_out"}),
        "designers run": ((api.designers_run, api.designers_run_async), {}, {"json_out"}),
        "designers rewriters": ((api.designers_rewriters,), {}, {"json_out"}),
    }


def _cli_commands():
    import typer

    from benchfill.cli import app

    group = typer.main.get_command(app)
    out = {}
    for name, cmd in group.commands.items():
        for sub, c in getattr(cmd, "commands", {name: cmd}).items():  # designers: a group of its own
            out[name if c is cmd else f"{name} {sub}"] = c
    return out


def _same(a, b) -> bool:
    from pathlib import Path

    return str(a) == str(b) if isinstance(a, Path) or isinstance(b, Path) else a == b and type(a) is type(b)


def _drift(commands: dict) -> list[str]:
    """Each CLI option that is not a parameter of the command's API function(s), or whose default differs."""
    import inspect

    mapping = _api_map()
    drift = []
    for name, cmd in commands.items():
        fns, renames, cli_only = mapping[name]
        for fn in fns:
            assert inspect.getdoc(fn), f"{fn.__qualname__} is not documented"
        sigs = [inspect.signature(fn).parameters for fn in fns]
        for param in cmd.params:
            if param.name in cli_only:
                continue
            api_name = renames.get(param.name, param.name)
            found = [p[api_name] for p in sigs if api_name in p]
            if not found:
                drift.append(f"{name} {param.name}: no such parameter in {[f.__qualname__ for f in fns]}")
                continue
            if param.required:
                continue
            for p in found:
                if p.default is not inspect.Parameter.empty and not _same(param.default, p.default):
                    drift.append(f"{name} {param.name}: CLI default {param.default!r}, API {p.default!r}")
    return drift


def test_every_cli_command_has_its_api_function_with_the_same_defaults():
    """Each CLI option is a parameter of the command's API function(s), with the same default wherever the API
    has one (the API may require what the CLI offers as a mode switch, e.g. review's --approve ID); the only
    CLI-only options are presentation and output paths. A new command, option or changed default fails here
    until the API says the same."""
    mapping, commands = _api_map(), _cli_commands()
    missing = sorted(set(commands) - set(mapping))
    assert not missing, (f"command(s) {missing}: give each one documented function in benchfill/api.py with the "
                         "command's defaults, and an entry in _api_map here")
    assert not set(mapping) - set(commands), sorted(set(mapping) - set(commands))
    drift = _drift(commands)
    assert not drift, drift


def test_every_command_that_prints_a_result_has_json_path_or_dash():
    no_result = {"view", "local-server"}  # servers: they print where they serve, no result
    for name, cmd in _cli_commands().items():
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert ("--json" in opts) == (name not in no_result), name


def test_the_defaults_test_catches_drift(monkeypatch):
    """The comparison above is not vacuous: a changed API default is reported."""
    import inspect

    from benchfill import api

    sig = inspect.signature(api.detect)
    changed = sig.replace(parameters=[p.replace(default=500) if p.name == "permutations" else p
                                      for p in sig.parameters.values()])
    commands = {"detect": _cli_commands()["detect"]}
    assert _drift(commands) == []
    monkeypatch.setattr(api.detect, "__signature__", changed, raising=False)
    assert _drift(commands) == ["detect permutations: CLI default 100000, API 500"]


def _options_map():
    from benchfill import api, options

    # options model -> the API functions that take its options as keywords
    return {
        options.DiagnoseOptions: (api.diagnose,),
        options.DiagnosisOutput: (api.diagnosis_files,),
        options.SuiteOptions: (api.suite,),
        options.PlaceOptions: (api.place,),
        options.CalibrateOptions: (api.calibrate,),
        options.DetectOptions: (api.detect,),
        options.EvaluateOptions: (api.evaluate, api.evaluate_async),
        options.FillOptions: (api.fill, api.fill_async, api.fill_run),
        options.DesignersRunOptions: (api.designers_run_async,),
    }


def test_the_options_models_hold_the_defaults():
    """Each options model's field is a keyword of its API function(s) with the model's default (so the CLI's, which
    the test above compares with the API's, are the model's too), and the defaults kept elsewhere agree."""
    import inspect

    from benchfill.diagnostics.detect import DEFAULT_PERMUTATIONS
    from benchfill.irt.prior import DEFAULT_POPULATION
    from benchfill.options import DEFAULT_PRIOR, DetectOptions, DiagnosisOutput

    for model, fns in _options_map().items():
        for fn in fns:
            params = inspect.signature(fn).parameters
            for name, field in model.model_fields.items():
                assert name in params, f"{fn.__qualname__} has no keyword {name} of {model.__name__}"
                default = inspect.Parameter.empty if field.is_required() else field.default
                assert params[name].default == default, (fn.__qualname__, name, params[name].default, default)
    assert DEFAULT_PRIOR == DEFAULT_POPULATION and DetectOptions().permutations == DEFAULT_PERMUTATIONS
    assert inspect.signature(bf.Diagnosis.save).parameters["n_gaps"].default == DiagnosisOutput().n_gaps


def test_options_models_check_their_values_as_the_cli_names_them():
    from pydantic import ValidationError

    from benchfill.options import CalibrateOptions, DesignersRunOptions, DiagnoseOptions, FillOptions, SuiteOptions

    for build, line in ((lambda: DiagnoseOptions(chains=0), "--chains: 0: must be at least 1"),
                        (lambda: DiagnoseOptions(prior="flat"), "--prior: 'flat': choose from spline, normal, paper"),
                        (lambda: SuiteOptions(sampler="fsat"), "--sampler: 'fsat': choose from"),
                        (lambda: FillOptions(sampler="nuts"), "--sampler: 'nuts': choose from fast"),
                        (lambda: CalibrateOptions(k=10, target="beta:2"),
                         "--target: 'beta:2': expected beta:A,B with positive numbers"),
                        (lambda: CalibrateOptions(target="uniform"), "--k: required"),
                        (lambda: DiagnoseOptions(seed="x"), "--seed: 'x': input should be a valid integer"),
                        (lambda: DesignersRunOptions(irt="nuts"), "--irt: 'nuts': choose map, fast, pymc or nutpie"),
                        (lambda: DesignersRunOptions(seed_limit=0), "--seed-limit: 0: must be at least 1")):
        with pytest.raises(InputError) as err:
            build()
        assert str(err.value).startswith(line) and "\n" not in str(err.value), str(err.value)
    suite = SuiteOptions(chains=2, choices=4)
    assert suite.diagnosis() == DiagnoseOptions(chains=2, choices=4)  # each benchmark: the suite's fit, else defaults
    with pytest.raises(ValidationError, match="frozen"):  # an options object stays what was checked
        suite.chains = 0  # type: ignore[misc]


def test_diagnosis_files_decide_where_a_diagnosis_goes_before_the_fit(tmp_path, monkeypatch):
    """The output-path policy of `benchfill diagnose`, in the library: the default folder (named by the model
    selection) is not overwritten without force; "-" sends the JSON to standard output; a folder gets the files."""
    monkeypatch.chdir(tmp_path)
    files = bf.diagnosis_files("data/math.responses.csv.gz", models=12)
    assert str(files.json_path) == "runs/math.responses-m12/diagnosis.json"
    assert (files.png.name, files.scale.name, files.n_gaps, files.json_to_stdout) == (
        "diagnosis.png", "diagnosis.scale.npz", 5, False)
    files.json_path.parent.mkdir(parents=True)
    files.json_path.write_text("{}")
    with pytest.raises(InputError, match=r"^runs/math.responses-m12/diagnosis.json: exists .*pass --force"):
        bf.diagnosis_files("data/math.responses.csv.gz", models=12)
    assert bf.diagnosis_files("data/math.responses.csv.gz", models=12, force=True).json_path == files.json_path
    assert bf.diagnosis_files("data/math.responses.csv.gz", models_file="data/top.txt").json_path.parent.name == (
        "math.responses-top")
    to_stdout = bf.diagnosis_files("data/math.responses.csv.gz", models=12, json_out="-")  # nothing refused
    assert to_stdout.json_to_stdout and to_stdout.scale == files.scale
    (tmp_path / "out").mkdir()
    inside = bf.diagnosis_files("x.csv", json_out=tmp_path / "out", png="p.png", n_gaps=3)
    assert inside.json_path == tmp_path / "out" / "diagnosis.json" and str(inside.png) == "p.png"
    assert str(bf.diagnosis_files("x.csv", json_out="new/").json_path) == "new/diagnosis.json"
    with pytest.raises(InputError, match="^--top-gaps: 0: must be at least 1$"):
        bf.diagnosis_files("x.csv", n_gaps=0)


def test_diagnose_reports_progress_as_events_and_keeps_its_old_callbacks(monkeypatch):
    """One event type for progress (benchfill.progress.Event); on_stage / on_picture still work, deprecated."""
    import benchfill.diagnostics.report as report
    from benchfill.irt.simulate import simulate_responses
    from benchfill.progress import Event

    class Fitted:
        def attach_scale(self, fit) -> None:
            pass

    def fake_diagnose(resp, spec, settings, *, top_gaps, on_stage, on_picture, compare_guessing):
        on_stage("fitting")
        on_picture("the picture")
        on_stage("checks")
        return Fitted(), None

    monkeypatch.setattr(report, "diagnose", fake_diagnose)
    resp = simulate_responses([0.0, 1.0], [0.0, 0.5, 1.0], 2, seed=0)
    events: list[Event] = []
    bf.diagnose(resp, on_event=events.append)
    assert [(e.kind, e.message) for e in events] == [("stage", "fitting"), ("picture", "the diagnosis picture"),
                                                     ("stage", "checks")]
    assert events[1].payload == "the picture"
    stages, pictures = [], []
    with pytest.warns(DeprecationWarning, match="on_event"):
        bf.diagnose(resp, on_stage=stages.append, on_picture=pictures.append)
    assert stages == ["fitting", "checks"] and pictures == ["the picture"]


def _shown(result) -> str:
    """What rich prints for a result, 200 columns wide, no colours (as the CLI's output through a pipe)."""
    import io

    from rich.console import Console

    con = Console(file=io.StringIO(), width=200)
    con.print(result)
    return con.file.getvalue()


def test_a_result_printed_with_rich_is_what_the_cli_shows(tmp_path):
    from typer.testing import CliRunner

    from benchfill import api
    from benchfill.cli import app

    for name, model, k in (("a.csv", "ck1", 2), ("b.csv", "ck2", 30)):
        (tmp_path / name).write_text("model,item_id,n_correct,n_trials\n" +
                                     "".join(f"{model},q{i},{k},32\n" for i in range(8)))
    det = api.detect(tmp_path / "a.csv", tmp_path / "b.csv", permutations=500)
    res = CliRunner().invoke(app, ["detect", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--permutations",
                                   "500"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert _shown(det) == res.stdout and "local progress: ck2 (B) vs ck1 (A)" in res.stdout


@pytest.mark.slow  # a whole command end to end (> 10 s): the full suite runs it
def test_the_readme_python_example_runs_as_written(tmp_path, monkeypatch):
    """The README's notebook-style block, executed as written (relative paths from a folder that has the repo's
    examples/ and tests/fixtures/, as the repository root does)."""
    import contextlib
    import io
    import re
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    repo = Path(__file__).parents[1]
    readme = (repo / "README.md").read_text()
    section = readme[readme.index("### From Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "import benchfill as bf" in code and "bf.diagnose" in code and "bf.import_logs" in code
    (tmp_path / "examples").symlink_to(repo / "examples")
    (tmp_path / "tests").symlink_to(repo / "tests")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), scope)
    assert isinstance(scope["dx"], bf.Diagnosis) and scope["dx"].n_items == 480
    assert len(scope["placed"].items) == 20 and (tmp_path / "runs" / "math500" / "diagnosis.json").exists()
    assert [r.benchmark for r in scope["by_task"].benchmarks] == ["toy_gen", "toy_mc"]
    assert scope["result"].n_items == 20 and isinstance(scope["summary"], bf.FillSummary)
    assert "DDM" in printed.getvalue()
