"""The BenchFill search end to end: graph structure, the stop rules, sequential gaps, unfillable gaps, malformed
rewriter output, the real client path against a local OpenAI-protocol server, and resume after a crash in every node."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchfill.cli import app
from benchfill.graphs.fill import GAP, GAP_NODES, NODES, graph_structure
from benchfill.irt.simulate import simulate_responses

runner = CliRunner()

SIM_CONFIG = """
seed = 0
[sim]
seed = 0
step = 0.6
noise = 0.2
invalid_rate = {invalid_rate}
[rewriter]
model = "sim/rewriter"
[judge]
model = "sim/judge"
[fill]
parents = 2
children_per_parent = 3
max_rounds = {max_rounds}
tolerance = {tolerance}
sim_panel_rollouts = 4
confirm_max_rollouts = 12
"""


def make_benchmark(folder: Path, n_items: int = 40, n_models: int = 6, seed: int = 0, hole: bool = True
                   ) -> tuple[Path, Path]:
    """A small simulated benchmark with a planted hole in difficulty (items + responses files); ``hole=False``: b
    uniform over the models' range, so its largest gaps are narrow."""
    rng = np.random.default_rng(seed)
    b = (np.concatenate([rng.uniform(-2.5, -0.3, n_items // 2), rng.uniform(1.2, 2.5, n_items - n_items // 2)])
         if hole else rng.uniform(-2.5, 2.5, n_items))
    r = simulate_responses(np.linspace(-2, 2, n_models), b, 8, seed=seed)
    resp = folder / "responses.csv"
    r.to_long().to_csv(resp, index=False)
    items = folder / "items.jsonl"
    items.write_text("".join(json.dumps({"id": i, "question": f"Compute the value of problem {i}.",
                                         "answer": str(k + 7)}) + "\n" for k, i in enumerate(r.item_ids)))
    return items, resp


def config_error(folder: Path, fill_lines: str) -> str:
    """The one-line error that loading the simulated config with ``fill_lines`` added to its [fill] gives."""
    from benchfill.errors import InputError
    from benchfill.models.config import load_config

    cfg = folder / "c.toml"
    cfg.write_text(SIM_CONFIG.format(invalid_rate=0.1, max_rounds=2, tolerance=0.01) + fill_lines + "\n")
    with pytest.raises(InputError) as err:
        load_config(cfg)
    return str(err.value)


def write_config(folder: Path, *, invalid_rate: float = 0.1, max_rounds: int = 3, tolerance: float = 0.01,
                 name: str = "fill.toml") -> Path:
    cfg = folder / name
    cfg.write_text(SIM_CONFIG.format(invalid_rate=invalid_rate, max_rounds=max_rounds, tolerance=tolerance))
    return cfg


def flat(text: str) -> str:
    """Terminal output with rich's line wrapping undone."""
    return " ".join(text.split())


def fill(items, resp, cfg, out, *extra):
    return runner.invoke(app, ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--out", str(out),
                               "--models", "6", *extra], catch_exceptions=False)


def test_graph_loops_over_the_gaps_around_a_subgraph_with_one_node_per_step():
    g = graph_structure()
    assert g["nodes"] == sorted(["propose_gaps", *(f"{GAP}:{n}" for n in GAP_NODES)])
    edges = {(a, b) for a, b, _ in g["edges"]}
    inner = {(f"{GAP}:{a}", f"{GAP}:{b}") for a, b in [("stop", "select_parents"), ("stop", "confirm"),
                                                       ("confirm", "finalize")]}
    assert inner <= edges
    assert ("propose_gaps", f"{GAP}:seed_memory") in edges and (f"{GAP}:finalize", "propose_gaps") in edges
    assert ("propose_gaps", "__end__") in edges
    chain = [f"{GAP}:{n}" for n in ("seed_memory", "select_parents", "rewrite", "validate", "label", "place", "stop")]
    assert all((a, b) in edges for a, b in zip(chain, chain[1:]))


def test_langgraph_json_names_a_graph_that_langgraph_tools_can_load():
    """langgraph.json -> a module-level compiled graph without a checkpointer (LangGraph's dev server refuses a
    custom one), whose nodes are coroutine functions of the state and the typed runtime context; no crash hook in
    production code."""
    import importlib.util
    import inspect

    import benchfill.graphs.fill as fill_graph

    root = Path(__file__).resolve().parents[1]
    spec = json.loads((root / "langgraph.json").read_text())
    file, _, attr = spec["graphs"]["benchfill"].partition(":")
    loader = importlib.util.spec_from_file_location("studio_entry", root / file)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    graph = getattr(module, attr)
    assert graph.checkpointer is None and graph.context_schema is fill_graph.FillContext
    assert fill_graph.FillContext.__dataclass_params__.frozen  # no node changes the run's context
    assert sorted(n for n in graph.get_graph(xray=True).nodes if not n.startswith("__")) == graph_structure()["nodes"]
    assert sorted(fill_graph.NODE_FUNCTIONS) == sorted(NODES)
    for name, fn in fill_graph.NODE_FUNCTIONS.items():
        assert fn.__module__ == fill_graph.__name__ and fn.__qualname__ == fn.__name__, name  # not a closure
        assert list(inspect.signature(fn).parameters) == ["state", "runtime"], name
        assert inspect.iscoroutinefunction(fn), name
    for src in (fill_graph.__file__, fill_graph.__file__.replace("fill.py", "run.py")):
        text = Path(src).read_text()
        assert "BENCHFILL_CRASH_AT" not in text and "_exit" not in text, src


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    return make_benchmark(folder)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, bench):
    folder = tmp_path_factory.mktemp("run")
    items, resp = bench
    cfg = write_config(folder)
    res = fill(items, resp, cfg, folder / "out", "--compare")
    assert res.exit_code == 0, res.output
    return folder / "out", res.output


def test_fill_fills_gaps_sequentially_and_reports_table2(finished_run):
    out, output = finished_run
    assert "SIMULATED" in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulated"] is True
    bf = summary["methods"]["benchfill"]
    assert [g["gap"] for g in bf["gaps"]] == [1, 2, 3]
    targets = [g["target"] for g in bf["gaps"]]
    assert len(set(round(t, 9) for t in targets)) == 3  # sequential: a filled gap is not proposed again
    for g in bf["gaps"]:
        assert g["status"] in ("filled", "near") and g["lo"] < g["target"] < g["hi"]
        # "filled" means the chosen child is inside at P >= fill_level (0.9), else it is "near" with its P said
        assert (g["status"] == "filled") == (g["p_inside"] >= 0.9)
        assert (g["status"] == "near") == ("placed near, P(inside) = " in g["note"])
        assert 0 <= g["p_within"] <= 1 and g["search_calls"] > 0
        assert g["children_sigma"] > 0 and g["resolution"] is not None
        # 6 models x 4 rollouts place no child within 0.01 of a target: the gap is judged at the panel's resolution
        assert g["tolerance"] > 0.01 and "finer than this panel can place" in g["note"]
        assert g["chosen_d_sd"] > 0.01  # 6 models x 4 rollouts: the placement is far less precise than 0.01
        assert 1 <= g["rounds"] <= 3 and g["stop_reason"]
        if g["p_inside"] < 0.9:  # confirmation ran to its cap (12 here): every model answered the child 12 times
            conf = json.loads((out / "labels" / f"benchfill-g{g['gap']}-confirm" / "confirm.json").read_text())
            assert all(n == 12 for _, n in conf["counts"].values()) and g["confirm_calls"] > 0
            assert [s["rollouts"] for s in conf["steps"]] == [8, 12]  # two steps of 4 more answers per model
    assert bf["filled"] == sum(g["status"] == "filled" for g in bf["gaps"]) and bf["chosen"] == 3
    assert bf["top3_reduction"] > 0
    assert "baseline" in summary["methods"]
    # budget-matched: the baseline ran exactly the rounds BenchFill used, gap by gap
    assert [g["rounds"] for g in summary["methods"]["baseline"]["gaps"]] == [g["rounds"] for g in bf["gaps"]]
    assert summary["oracle"]["top3_reduction"] >= bf["top3_reduction"] - 1e-9
    assert (out / "diagnosis.json").exists() and (out / "checkpoints.sqlite").exists()


def test_trace_review_export(finished_run, tmp_path):
    out, _ = finished_run
    res = runner.invoke(app, ["trace", str(out), "--gap", "1", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["rounds"] and data["rounds"][0]["parents"]
    child = data["rounds"][0]["children"][0]
    assert {"verdict", "counts", "d", "d_sd", "status"} <= set(child)
    assert data["chosen"] in {c["id"] for r in data["rounds"] for c in r["children"]}
    tree = runner.invoke(app, ["trace", str(out), "--gap", "2"])
    assert tree.exit_code == 0 and "round 1" in flat(tree.output) and "chosen" in flat(tree.output)
    assert runner.invoke(app, ["trace", str(out), "--gap", "9"]).exit_code == 2

    chosen = data["chosen"]
    for who in ("ann", "bob"):
        assert runner.invoke(app, ["review", str(out), "--approve", chosen, "--reviewer", who]).exit_code == 0
    jsonl = tmp_path / "filled.jsonl"
    res = runner.invoke(app, ["export", str(out), "--out", str(jsonl)])
    assert res.exit_code == 0 and "+ 0 new" in flat(res.output)  # two approvals are not enough
    assert "chosen item(s) not exported (" in flat(res.output) and "--include-pending" in flat(res.output)
    runner.invoke(app, ["review", str(out), "--approve", chosen, "--reviewer", "ann"])  # same reviewer twice
    assert "+ 0 new" in flat(runner.invoke(app, ["export", str(out), "--out", str(jsonl)]).output)
    assert runner.invoke(app, ["review", str(out), "--approve", chosen, "--reviewer", "cy"]).exit_code == 0
    hf = tmp_path / "hf"
    res = runner.invoke(app, ["export", str(out), "--out", str(jsonl), "--hf", str(hf)])
    assert res.exit_code == 0 and "40 original + 1 new" in flat(res.output), res.output
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    new = rows[-1]
    assert new["id"] == f"benchfill-{chosen}" and new["metadata"]["benchfill"]["approvals"] == 3
    assert new["metadata"]["benchfill"]["simulated"] is True
    import datasets

    assert len(datasets.load_from_disk(str(hf))) == 41
    bad = runner.invoke(app, ["review", str(out), "--approve", "nope", "--reviewer", "x"])
    assert bad.exit_code == 2


def test_progress_events_come_through_langgraphs_custom_stream(tmp_path, bench):
    from benchfill import api
    from benchfill.graphs.fill import FillContext
    from benchfill.progress import Event

    assert "on_event" not in FillContext.__dataclass_fields__  # no private callback in the nodes' context
    items, resp = bench
    events: list[Event] = []
    api.fill(items, resp, write_config(tmp_path, max_rounds=1), tmp_path / "out", models=6, gaps=1,
             on_event=events.append)
    assert {e.kind for e in events} == {"node"}  # the one event type of every long-running call
    nodes = [e.message for e in events]
    assert nodes == [e.payload["node"] for e in events]
    assert nodes[:2] == ["propose_gaps", "seed_memory"] and nodes[-1] == "finalize", nodes
    assert {"rewrite", "validate", "label", "place"} <= set(nodes)
    assert all({"method", "gap", "calls", "cost"} <= set(e.payload) for e in events) and events[-1].payload["calls"] > 0


@pytest.mark.slow  # > 3 s: the full suite (CI) runs it, the fast lane does not
def test_stop_rules_know_the_design(tmp_path, bench):
    """Stop when the best child is within tolerance at the level; where the panel cannot place a child that close,
    judge at its resolution, and stop once rounds stop raising the best child's probability."""
    items, resp = bench
    loose = fill(items, resp, write_config(tmp_path, tolerance=1.0, name="a.toml"), tmp_path / "a", "--gaps", "1")
    assert loose.exit_code == 0, loose.output
    g = json.loads((tmp_path / "a" / "summary.json").read_text())["methods"]["benchfill"]["gaps"][0]
    assert g["rounds"] == 1 and "reached the level" in g["stop_reason"]  # any child is within tolerance 1.0
    strict_cfg = write_config(tmp_path, tolerance=0.0, max_rounds=8, name="b.toml")
    # more children tighten their shared population, which raises each one's P by ~0.02-0.06 a round here: a
    # round counts as progress only at a gain of 0.05
    strict_cfg.write_text(strict_cfg.read_text() + "min_gain = 0.05\n")
    strict = fill(items, resp, strict_cfg, tmp_path / "b", "--gaps", "1")
    g = json.loads((tmp_path / "b" / "summary.json").read_text())["methods"]["benchfill"]["gaps"][0]
    assert strict.exit_code == 0, strict.output
    assert g["tolerance"] > 0 and "finer than this panel can place" in g["note"]
    assert g["rounds"] < 8 and "round(s) in a row raised P(|d - t| <= tolerance) by less than" in g["stop_reason"]


def test_a_judge_that_rejects_everything_leaves_gaps_unfilled(tmp_path, bench):
    items, resp = bench
    res = fill(items, resp, write_config(tmp_path, invalid_rate=1.0, max_rounds=2), tmp_path / "out", "--gaps", "2")
    assert res.exit_code == 0, res.output
    assert "left unfilled" in flat(res.output)
    gaps = json.loads((tmp_path / "out" / "summary.json").read_text())["methods"]["benchfill"]["gaps"]
    assert [g["status"] for g in gaps] == ["unfilled", "unfilled"]
    assert "no valid" in gaps[0]["note"] and gaps[0]["target"] != gaps[1]["target"]


def test_existing_run_needs_resume_and_matching_inputs(finished_run, bench, tmp_path):
    out, _ = finished_run
    items, resp = bench
    cfg = write_config(tmp_path)
    assert "--resume" in flat(fill(items, resp, cfg, out).output)
    other = write_config(tmp_path, max_rounds=5, name="other.toml")
    res = fill(items, resp, other, out, "--resume")
    assert res.exit_code == 2 and "differ" in flat(res.output)


def test_an_edited_prompt_override_is_a_different_run(tmp_path, bench):
    """The resume fingerprint holds the override templates' text: an edited template is refused on --resume
    (the run's children came from the old one), the unedited one resumes."""
    items, resp = bench
    template = tmp_path / "rewrite.txt"
    builtin = Path(__file__).resolve().parents[1] / "benchfill" / "prompts" / "rewrite.txt"
    template.write_text(builtin.read_text() + "\nWrite clearly.\n")
    cfg = write_config(tmp_path, max_rounds=1)
    cfg.write_text(cfg.read_text() + '\n[prompts]\nrewrite = "rewrite.txt"\n')
    first = fill(items, resp, cfg, tmp_path / "out", "--gaps", "1")
    assert first.exit_code == 0, first.output
    assert fill(items, resp, cfg, tmp_path / "out", "--gaps", "1", "--resume").exit_code == 0
    template.write_text(template.read_text() + "Be brief.\n")
    res = fill(items, resp, cfg, tmp_path / "out", "--gaps", "1", "--resume")
    assert res.exit_code == 2 and "prompt templates" in flat(res.output)


# ---- the real client path: rewriter, judge and panel are a local OpenAI-protocol server ----------------------


def stub_responder(body):
    """Plays rewriter (JSON children), judge (JSON verdict) and panel (boxed answers) by reading the prompt."""
    text = body["messages"][-1]["content"]
    if "Reply with JSON only" in text and "children" in text:
        if "malformed" in body["model"]:
            return "Sure! Here are some items: 1) ... 2) ..."  # never JSON: re-asked, then dropped
        n = 3
        return json.dumps({"children": [{"question": f"Variant {k} of: {text[-60:]}", "answer": "7",
                                         "rationale": "stub"} for k in range(n)]})
    if "well_posed" in text:
        return json.dumps({"well_posed": True, "answer_correct": True, "reason": "stub"})
    h = sum(map(ord, json.dumps(body["messages"]) + str(body.get("seed")))) % 3
    return f"The answer is \\boxed{{{7 if h else 8}}}."


def stub_config(folder: Path, port: int, rewriter: str = "openai/stub-rewriter") -> Path:
    panel = "".join(f'[[panel]]\nname = "m{j:02d}"\nmodel = "openai/stub-panel-{j}"\napi_base = "http://127.0.0.1:{port}/v1"\n'
                    f"rollouts = 2\nmax_retries = 1\ntimeout = 10\n" for j in range(6))
    cfg = folder / f"real-{rewriter.split('/')[-1]}.toml"
    cfg.write_text(f"""
[rewriter]
model = "{rewriter}"
api_base = "http://127.0.0.1:{port}/v1"
max_retries = 1
timeout = 10
[judge]
model = "openai/stub-judge"
api_base = "http://127.0.0.1:{port}/v1"
[fill]
parents = 2
children_per_parent = 3
max_rounds = 2
{panel}""")
    return cfg


@pytest.fixture
def stub():
    from tests.openai_stub import start_stub

    server = start_stub(responder=stub_responder)
    yield server
    server.stop()


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_real_client_path_against_a_local_server(tmp_path, bench, stub):
    items, resp = bench
    cfg = stub_config(tmp_path, stub.port)
    res = fill(items, resp, cfg, tmp_path / "out", "--gaps", "1")
    assert res.exit_code == 0, res.output
    assert "SIMULATED" not in res.output
    made = stub.calls
    assert made > 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["simulated"] is False and summary["methods"]["benchfill"]["gaps"][0]["n_candidates"] > 0


@pytest.mark.slow  # > 3 s: the full suite (CI) runs it, the fast lane does not
def test_malformed_rewriter_output_is_reasked_then_dropped(tmp_path, bench, stub):
    items, resp = bench
    cfg = stub_config(tmp_path, stub.port, rewriter="openai/malformed-rewriter")
    res = fill(items, resp, cfg, tmp_path / "out", "--gaps", "1")
    assert res.exit_code == 0, res.output
    from benchfill.memory.bank import MemoryBank

    bank = MemoryBank(tmp_path / "out" / "memory.sqlite")
    rows = [(c.status, c.error) for c in bank.candidates()]
    bank.close()
    assert rows and all(s == "rewrite_failed" and "malformed" in e for s, e in rows)
    con = sqlite3.connect(tmp_path / "out" / "memory.sqlite")  # the models layer's call log
    asks = con.execute("select count(*) from call_log where role = 'rewriter' and outcome = 'ok'").fetchone()[0]
    assert asks == 2 * 2 * 3  # 2 rounds x 2 parents x (1 ask + 2 re-asks)
    gap = json.loads((tmp_path / "out" / "summary.json").read_text())["methods"]["benchfill"]["gaps"][0]
    assert gap["status"] == "unfilled"


# ---- resume after a crash inside every node -----------------------------------------------------------------


CRASH_AT = "BENCHFILL_CRASH_AT"  # read by the tests' crash hook only, never by benchfill itself


def install_crash_hook(spec: str) -> None:
    """A kill -9 at a chosen point, for the resume tests (installed in the CLI's process by :func:`_cli`).

    ``node[:n]`` wraps that node's function (``NODE_FUNCTIONS``, before the graph is built) so that inside its n-th
    run the process exits at once (code 137) when the node first writes to the memory bank, i.e. after its model
    calls and before its writes, or, for a node that writes nothing, when it returns, before its checkpoint.
    ``start`` exits after the bank was created, before the diagnosis; ``diagnosis`` after the IRT fit, before the
    diagnosis is written."""
    import functools

    import benchfill.graphs.fill as fill_graph
    import benchfill.graphs.run as fill_run
    from benchfill.memory.bank import MemoryBank

    name, _, nth = spec.partition(":")
    if name == "start":
        fill_run.FillRun._diagnosis = lambda self, *a, **k: os._exit(137)
        return
    if name == "diagnosis":
        fit = fill_run.diagnose
        fill_run.diagnose = lambda *a, **k: (fit(*a, **k), os._exit(137))
        return
    armed, runs = [False], [0]
    for method in ("set_seeds", "record_usage", "upsert_gap", "upsert_candidates", "update_candidate"):
        def write(self, *a, _real=getattr(MemoryBank, method), **k):
            if armed[0]:
                os._exit(137)
            return _real(self, *a, **k)

        setattr(MemoryBank, method, write)
    node = fill_graph.NODE_FUNCTIONS[name]

    @functools.wraps(node)
    async def crashing(state, runtime):
        runs[0] += 1
        armed[0] = runs[0] == int(nth or 1)
        out = await node(state, runtime)
        if armed[0]:
            os._exit(137)
        return out

    fill_graph.NODE_FUNCTIONS[name] = crashing


_CRASH_MAIN = (f"import os, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
               f"from test_fill import install_crash_hook; install_crash_hook(os.environ[{CRASH_AT!r}]); "
               "from benchfill.cli import main; sys.exit(main())")


def _cli(args: list[str], env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The CLI in a fresh process; with ``BENCHFILL_CRASH_AT`` in ``env_extra``, under the crash hook."""
    env = {**os.environ, **(env_extra or {})}
    entry = ["-c", _CRASH_MAIN] if env.get(CRASH_AT) else ["-m", "benchfill.cli"]
    return subprocess.run([sys.executable, *entry, *args], capture_output=True, text=True, env=env, timeout=600)


def _chosen(out: Path) -> list[tuple]:
    summary = json.loads((out / "summary.json").read_text())
    return [(m, g["gap"], g["chosen"], g["chosen_d"], g["rounds"]) for m, v in summary["methods"].items()
            for g in v["gaps"]]


def _double_calls(out: Path) -> int:
    con = sqlite3.connect(out / "memory.sqlite")
    return con.execute("select count(*) from (select key from call_log where outcome = 'ok' group by key "
                       "having count(*) > 1)").fetchone()[0]


@pytest.mark.slow
def test_resume_after_a_crash_in_each_node_matches_an_unbroken_run(tmp_path, bench):
    """A kill -9 inside every node in turn, in one run folder: each run resumes what the previous kill left and is
    itself killed at the next node's first entry (the first run at its second), so every node is killed once and every kill is resumed (resumes of resumes
    included, in half the processes of one fresh folder per node); the last resume ends with the unbroken run's
    choices, and no model call was paid twice."""
    items, resp = bench
    cfg = write_config(tmp_path, max_rounds=2)
    base = ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--models", "6",
            "--gaps", "2", "--compare"]
    ref = _cli(base + ["--out", str(tmp_path / "ref")])
    assert ref.returncode == 0, ref.stderr
    out = tmp_path / "killed"
    for k, node in enumerate(NODES):
        crashed = _cli(base + ["--out", str(out)] + (["--resume"] if k else []), {CRASH_AT: f"{node}:{1 if k else 2}"})
        assert crashed.returncode == 137, (node, crashed.stderr[-500:])
        assert _double_calls(out) == 0, node
    resumed = _cli(base + ["--out", str(out), "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert _chosen(out) == _chosen(tmp_path / "ref")
    assert _double_calls(out) == 0


# ---- provider faults and outages: never an outcome ----------------------------------------------------------


def fast_stub_config(folder: Path, port: int, name: str = "fast.toml") -> Path:
    """The stub playing every role, with quick retries (backoff in ms) so faults cost little time."""
    panel = "".join(f'[[panel]]\nname = "m{j:02d}"\nmodel = "openai/stub-panel-{j}"\nrollouts = 2\n' for j in range(6))
    cfg = folder / name
    cfg.write_text(f"""
[defaults]
api_base = "http://127.0.0.1:{port}/v1"
timeout = 5
max_retries = 8
backoff_initial = 0.01
backoff_max = 0.05
max_concurrency = 4
[rewriter]
model = "openai/stub-rewriter"
[judge]
model = "openai/stub-judge"
[fill]
parents = 2
children_per_parent = 3
max_rounds = 2
{panel}""")
    return cfg


def test_a_panel_of_other_models_is_told_which_command_makes_their_answers(tmp_path, bench):
    """A panel whose models did not answer the benchmark cannot place children on its scale: one line naming
    `benchfill evaluate` with this items file and config, before any call."""
    items, resp = bench
    cfg = fast_stub_config(tmp_path, 9)
    cfg.write_text(cfg.read_text().replace('name = "m0', 'name = "other-'))
    res = fill(items, resp, cfg, tmp_path / "out")
    assert res.exit_code == 2
    assert f"run benchfill evaluate {items} --config {cfg}" in flat(res.output), res.output
    assert not (tmp_path / "out").exists()


def role_responder(body):
    """Plays each role by the model name: varied children, a judge that rejects about 1 in 5, and panel models of
    rising ability whose (deterministic) answers depend on the child, so children land at different places."""
    import hashlib
    import math

    text = body["messages"][-1]["content"]
    h = int(hashlib.sha256((body["model"] + json.dumps(body["messages"]) + str(body.get("seed"))).encode())
            .hexdigest()[:12], 16)
    if body["model"].endswith("rewriter"):
        return json.dumps({"children": [{"question": f"Child {k} ({(h >> (4 * k)) % 997}) of a parent.",
                                         "answer": "7", "rationale": "stub"} for k in range(3)]})
    if body["model"].endswith("judge"):
        return json.dumps({"well_posed": h % 5 != 0, "answer_correct": True, "reason": "stub"})
    j = int(body["model"].rsplit("-", 1)[1])
    q = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 1000 / 250 - 2  # the child's difficulty
    p = 1 / (1 + math.exp(-(j - 2.5 - q)))
    return f"The answer is \\boxed{{{7 if (h % 1000) / 1000 < p else 8}}}."


MIXED_FAULTS = ("429", "500", "no_choices", "no_message", "null_content", "garbage", "cut", "bad_body")


@pytest.mark.slow  # a whole command end to end (> 10 s): the full suite runs it
def test_a_fill_under_mixed_faults_chooses_what_a_fault_free_run_chooses(tmp_path, bench, stub):
    stub.responder = role_responder
    items, resp = bench
    cfg = fast_stub_config(tmp_path, stub.port)
    clean = fill(items, resp, cfg, tmp_path / "clean", "--gaps", "2")
    assert clean.exit_code == 0, clean.output
    stub.reset()
    stub.fault_rate, stub.fault_seed, stub.fault_modes = 0.2, 3, MIXED_FAULTS
    faulty = fill(items, resp, cfg, tmp_path / "faulty", "--gaps", "2")
    assert faulty.exit_code == 0, faulty.output
    assert sum(stub.modes[m] for m in MIXED_FAULTS) > 20, (stub.calls, stub.modes)  # many faults of each kind
    assert {m for m in MIXED_FAULTS if stub.modes[m]} == set(MIXED_FAULTS)
    print(f"\nfaults={sum(stub.modes[m] for m in MIXED_FAULTS)} of {stub.calls} requests: "
          f"{dict((m, stub.modes[m]) for m in MIXED_FAULTS)}")
    assert _chosen(tmp_path / "faulty") == _chosen(tmp_path / "clean")
    assert all(c[2] for c in _chosen(tmp_path / "clean"))  # the gaps were filled: the comparison means something


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_an_outage_stops_the_fill_and_the_resume_retries_the_calls(tmp_path, bench, stub):
    stub.responder = role_responder
    items, resp = bench
    cfg = fast_stub_config(tmp_path, stub.port)
    ref = fill(items, resp, cfg, tmp_path / "ref", "--gaps", "1")
    assert ref.exit_code == 0, ref.output
    stub.reset()
    stub.down = True  # the server is down for the whole run
    cfg_down = fast_stub_config(tmp_path, stub.port, name="down.toml")
    cfg_down.write_text(cfg_down.read_text().replace("max_retries = 8", "max_retries = 1"))
    out = tmp_path / "out"
    res = runner.invoke(app, ["fill", str(items), "--responses", str(resp), "--config", str(cfg_down), "--out",
                              str(out), "--models", "6", "--gaps", "1"])
    assert res.exit_code == 3, res.output
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert lines[-1] == "benchfill: 2 calls failed (server unreachable); rerun with --resume", lines
    from benchfill.memory.bank import MemoryBank

    bank = MemoryBank(out / "memory.sqlite")
    assert bank.candidates() == []  # nothing recorded as an outcome
    assert [g for g in bank.gaps() if g.status is not None and g.status != "searching"] == []
    bank.close()
    stub.down = False
    again = runner.invoke(app, ["fill", str(items), "--responses", str(resp), "--config", str(cfg_down), "--out",
                                str(out), "--models", "6", "--gaps", "1", "--resume"])
    assert again.exit_code == 0, again.output
    assert stub.calls > 0 and _chosen(out) == _chosen(tmp_path / "ref")


@pytest.mark.parametrize("bad,line", [
    ("parents = 0", "[fill].parents: must be >= 1"),
    ("tolerance = -0.1", "[fill].tolerance: must be >= 0"),
    ('children_per_parent = "four"', "[fill].children_per_parent: must be an integer (got 'four')"),
])
def test_a_bad_fill_setting_stops_before_any_call_with_one_line(tmp_path, bench, stub, bad, line):
    items, resp = bench
    cfg = fast_stub_config(tmp_path, stub.port)
    key = bad.split(" =")[0]
    cfg.write_text("\n".join(ln for ln in cfg.read_text().splitlines() if not ln.startswith(key + " "))
                   .replace("[fill]\n", f"[fill]\n{bad}\n"))
    out = tmp_path / "out"
    res = runner.invoke(app, ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--out", str(out),
                              "--models", "6"])
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].endswith(f"{cfg}: {line}"), lines
    assert stub.calls == 0 and not out.exists()


@pytest.mark.slow
def test_a_kill_during_start_up_leaves_a_folder_that_resume_continues(tmp_path, bench):
    items, resp = bench
    cfg = write_config(tmp_path, max_rounds=2)
    base = ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--models", "6",
            "--gaps", "1"]
    ref = _cli(base + ["--out", str(tmp_path / "ref")])
    assert ref.returncode == 0, ref.stderr
    for point in ("diagnosis",):  # inside the IRT diagnosis, the bank already there (the reproduction)
        out = tmp_path / point
        crashed = _cli(base + ["--out", str(out)], {"BENCHFILL_CRASH_AT": point})
        assert crashed.returncode == 137, crashed.stderr[-500:]
        assert (out / "memory.sqlite").exists()
        again = _cli(base + ["--out", str(out)])  # without --resume: one clear line
        assert again.returncode == 2 and "a run already exists in this folder: add --resume" in again.stderr
        resumed = _cli(base + ["--out", str(out), "--resume"])
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert _chosen(out) == _chosen(tmp_path / "ref"), point


@pytest.mark.slow
def test_kills_at_random_moments_repay_at_most_the_calls_in_flight(tmp_path, bench):
    """Seeded kill -9 at random instants (the first during start-up, while the IRT diagnosis runs), each followed
    by --resume: the chosen items equal an unbroken run's, and the calls the server answered twice stay within
    max_concurrency per model per kill (every raw reply is committed the moment it arrives)."""
    import random
    import signal
    import time

    from tests.openai_stub import start_stub

    server = start_stub(responder=role_responder, latency=0.02)
    try:
        items, resp = bench
        cfg = fast_stub_config(tmp_path, server.port)
        n_models = 2 + 6  # rewriter, judge, 6 panel models; max_concurrency = 4 each
        bound_per_kill = 4 * n_models
        base = [sys.executable, "-m", "benchfill.cli", "fill", str(items), "--responses", str(resp), "--config",
                str(cfg), "--models", "6", "--gaps", "2"]
        ref = subprocess.run(base + ["--out", str(tmp_path / "ref")], capture_output=True, text=True, timeout=600)
        assert ref.returncode == 0, ref.stderr[-2000:]
        # an unbroken run pays each call once, and the panel calls it records (search + confirmation, per gap) are
        # the ones the server answered; the total is the run's own (a pinned 440 held on one install, 332 on another)
        assert len(server.ok_keys) == len(set(server.ok_keys))
        gaps = json.loads((tmp_path / "ref" / "summary.json").read_text())["methods"]["benchfill"]["gaps"]
        panel_calls = sum(1 for key in server.ok_keys if json.loads(key)[0].startswith("stub-panel-"))
        assert panel_calls == sum(g["search_calls"] + g["confirm_calls"] for g in gaps) > 0
        total = len(server.ok_keys)  # the unbroken run's calls
        server.reset()
        rng = random.Random(20261130)
        out = tmp_path / "killed"
        kills, served_at_kill = 0, []
        for k in range(4):
            # the first kill lands in the start-up (imports, IRT diagnosis); the others after a random number of
            # calls, plus a random fraction of a call's latency, so they fall anywhere in the search
            proc = subprocess.Popen(base + ["--out", str(out), "--resume"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            if k == 0:
                time.sleep(rng.uniform(0.5, 2.0))
            else:
                target = len(server.ok_keys) + rng.randint(1, total // 4)
                while len(server.ok_keys) < target and proc.poll() is None:
                    time.sleep(0.002)
                time.sleep(rng.uniform(0, 0.03))
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
                served_at_kill.append(len(server.ok_keys))
            proc.communicate(timeout=60)
        final = subprocess.run(base + ["--out", str(out), "--resume"], capture_output=True, text=True, timeout=600)
        assert final.returncode == 0, final.stderr[-2000:]
        assert _chosen(out) == _chosen(tmp_path / "ref")
        repaid = len(server.ok_keys) - len(set(server.ok_keys))
        print(f"\nkills={kills} served_at_kill={served_at_kill} calls={len(server.ok_keys)} "
              f"distinct={len(set(server.ok_keys))} repaid={repaid} bound={kills * bound_per_kill}")
        assert kills == 4 and served_at_kill[0] == 0  # the first kill hit the start-up, before any call
        assert all(b > a for a, b in zip(served_at_kill, served_at_kill[1:]))  # the others hit the search
        assert repaid <= kills * bound_per_kill
        from collections import Counter

        per_model = Counter(json.loads(key)[0] for key in server.ok_keys)
        distinct = Counter(json.loads(key)[0] for key in set(server.ok_keys))
        assert all(per_model[m] - distinct[m] <= 4 * kills for m in per_model), per_model - distinct
    finally:
        server.stop()


@pytest.mark.slow  # ~10 s: two whole fills
def test_racing_confirmation_halves_its_finalists_and_keeps_to_the_gap_budget(tmp_path, bench):
    """confirm_finalists = 3: the three children most likely within tolerance are confirmed together, the weaker
    half dropped after each step (3 -> 2 -> 1), and the gap's choice is one of them; gap_call_budget stops the
    confirmation before a step that would pass it."""
    items, resp = bench
    cfg = tmp_path / "race.toml"
    cfg.write_text(SIM_CONFIG.format(invalid_rate=0.1, max_rounds=2, tolerance=0.01).replace(
        "confirm_max_rollouts = 12", "confirm_max_rollouts = 16\nconfirm_finalists = 3\nfill_level = 0.999"))
    res = fill(items, resp, cfg, tmp_path / "out")
    assert res.exit_code == 0, res.output
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    for g in summary["methods"]["benchfill"]["gaps"]:
        folder = out / "labels" / f"benchfill-g{g['gap']}-confirm"
        finalists = json.loads((folder / "finalists.json").read_text())["finalists"]
        conf = json.loads((folder / "confirm.json").read_text())
        assert len(finalists) == 3 and g["chosen"] in finalists and conf["child"] == g["chosen"]
        assert [len(s["racing"]) for s in conf["steps"]] == [3, 2, 1][: len(conf["steps"])]
        assert [s["rollouts"] for s in conf["steps"]] == [8, 12, 16][: len(conf["steps"])]
        # the survivors of each step are the best of those that raced it
        for prev, nxt in zip(conf["steps"], conf["steps"][1:]):
            assert set(nxt["racing"]) <= set(prev["racing"])
        # each model answered the finalists exactly as far as they raced (4 search + 4 per step raced)
        for cid, per_model in conf["counts_finalists"].items():
            raced = sum(cid in s["racing"] for s in conf["steps"])
            assert all(n == 4 + 4 * raced for _, n in per_model.values()), (cid, raced)
    # a budget that the search alone nearly spends: confirmation asks nothing that would pass it
    first = summary["methods"]["benchfill"]["gaps"][0]
    budget = first["search_calls"] + 6 * 4 * 3 + 5  # room for one step of 3 finalists (6 models x 4), not two
    cfg.write_text(cfg.read_text().replace("confirm_finalists = 3", f"confirm_finalists = 3\ngap_call_budget = {budget}"))
    res = fill(items, resp, cfg, tmp_path / "out_budget", "--gaps", "1")
    assert res.exit_code == 0, res.output
    g = json.loads((tmp_path / "out_budget" / "summary.json").read_text())["methods"]["benchfill"]["gaps"][0]
    assert g["search_calls"] + g["confirm_calls"] <= budget and g["confirm_calls"] == 6 * 4 * 3
