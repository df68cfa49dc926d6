"""Adaptive labelling (issue 17), SIMULATED world: the rule on a known scale with planted child difficulties (calls,
true |d - t| and posterior SD of the chosen child against full labelling; interval coverage; no (child, model,
rollout) asked twice; deterministic schedule), and the fill end to end (fewer panel calls per gap, a crash inside
the adaptive label node resumed to the unbroken run's items with no call paid twice, the setting's range)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from test_fill import SIM_CONFIG, _chosen, _cli, _double_calls, app, config_error, fill, make_benchmark, runner

from benchfill.graphs.adaptive import adaptive_label, expected_information, pick_models
from benchfill.graphs.run import true_gap_figures
from benchfill.irt.placement import place_items
from benchfill.irt.scale import Scale
from benchfill.memory.bank import MemoryBank
from benchfill.models.config import FillParams

J, ROLLOUTS = 12, 4


def make_scale(seed: int = 0, draws: int = 200) -> tuple[Scale, np.ndarray]:
    """12 models spread over -3..3 logits with a little posterior spread, on an axis b in [-4, 4]."""
    rng = np.random.default_rng(seed)
    theta = np.linspace(-3, 3, J)
    sc = Scale(models=[f"m{j:02d}" for j in range(J)], theta_draws=theta + 0.15 * rng.standard_normal((draws, J)),
               b_min=-4.0, b_max=4.0, item_ids=[], b_mean=np.zeros(0))
    return sc, np.asarray(sc.theta_draws).mean(0)


def answer(rep: int, child: int, model: int, rollout: int, theta: np.ndarray, b: np.ndarray) -> int:
    """The SIMULATED panel's answer: a pure function of (replicate, child, model, rollout), like the call cache, so
    full and adaptive labelling see the same answer to the same call."""
    digest = hashlib.sha256(f"{rep}|{child}|{model}|{rollout}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return int(u < 1 / (1 + np.exp(-(theta[model] - b[child]))))


def full_counts(rep, theta, b):
    K = len(b)
    k = np.array([[sum(answer(rep, i, j, r, theta, b) for r in range(ROLLOUTS)) for j in range(J)] for i in range(K)])
    return k, np.full((K, J), ROLLOUTS)


def run_adaptive(sc, theta, b, rep, target, params, asked_log=None):
    def ask(plan):
        if asked_log is not None:
            asked_log.extend(plan)
        return [answer(rep, i, j, r, theta, b) for i, j, r in plan]

    return adaptive_label(sc, target, [ROLLOUTS] * J, len(b), ask, params)


def chosen(placed, target):
    """The search's choice: the child whose estimate is nearest the target (ties: first)."""
    return int(np.argmin(np.abs(placed.d - target)))


@pytest.mark.slow
def test_adaptive_uses_fewer_calls_per_round_than_full_and_more_rollouts_place_it_tighter():
    """Same rounds for all: 14 valid children planted around the target (SD 0.5 logits, the SIMULATED rewriter's
    spread), 12 models x 4 rollouts. Full labelling asks 14 x 48 answers; adaptive stops when decided. The default
    (adaptive_rollout_factor = 1) asks a subset of full labelling's calls; with 2 the nearest child's answers come
    from the most informative models only, and it is placed more tightly. The chosen child's TRUE |d - t| is
    checked only against a significant loss (two paired standard errors): measured 0.0330 default, 0.0303 factor 2,
    0.0252 full; over whole searches the cheaper rounds buy more rounds (README, adaptive labelling)."""
    sc, theta = make_scale()
    arms = {"default": FillParams(labelling="adaptive"),
            "rollouts x2": FillParams(labelling="adaptive", adaptive_rollout_factor=2)}
    rng = np.random.default_rng(7)
    calls = {"full": [], **{a: [] for a in arms}}
    dev = {"full": [], **{a: [] for a in arms}}
    sd = {"full": [], **{a: [] for a in arms}}
    for rep in range(24):
        target = float(rng.uniform(0.3, 0.7))
        b = sc.b_min + target * sc.span + 0.5 * rng.standard_normal(14)
        true_d = sc.normalise(b)
        k, n = full_counts(rep, theta, b)
        runs = [("full", place_items(sc, k, n), n.sum())]
        for name, params in arms.items():
            log: list[tuple[int, int, int]] = []
            res = run_adaptive(sc, theta, b, rep, target, params, log)
            if name == "default":
                assert all(r < ROLLOUTS for _, _, r in log)  # every call is one full labelling makes
            runs.append((name, place_items(sc, res.n_correct, res.n_trials), res.asked.sum()))
        for name, placed, spent in runs:
            c = chosen(placed, target)
            calls[name].append(int(spent))
            dev[name].append(abs(true_d[c] - target))
            sd[name].append(placed.d_sd[c])
    m = {key: {name: float(np.mean(v[name])) for name in v} for key, v in
         (("calls", calls), ("dev", dev), ("sd", sd))}
    print(json.dumps(m))
    for name in arms:
        assert m["calls"][name] <= 0.6 * m["calls"]["full"]  # at least 40 % fewer panel calls per round
        diff = np.subtract(dev[name], dev["full"])  # paired: the same children, the same answers
        assert diff.mean() <= 2 * diff.std(ddof=1) / np.sqrt(len(diff))  # TRUE |d - t|: no significant loss
    assert m["sd"]["rollouts x2"] < m["sd"]["full"]  # placed more precisely


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_the_adaptive_posterior_covers_planted_difficulties_and_never_repeats_a_call():
    """b drawn from the prior: 90 % intervals of the exact posterior after the adaptive schedule cover the planted b
    at the nominal rate; no (child, model, rollout) is asked twice; no child gets more than the full panel's answers;
    a second run on the same answers takes the same steps."""
    sc, theta = make_scale(1)
    params = FillParams(labelling="adaptive")
    rng = np.random.default_rng(3)
    inside = []
    for rep in range(30):
        b = rng.standard_normal(3)
        target = float(sc.normalise(np.array([rng.standard_normal()]))[0])
        log: list[tuple[int, int, int]] = []
        res = run_adaptive(sc, theta, b, 1000 + rep, target, params, log)
        assert len(set(log)) == len(log)
        assert all(0 <= r < params.adaptive_rollout_factor * ROLLOUTS for _, _, r in log)
        assert (res.asked.sum(1) <= J * ROLLOUTS).all()
        assert set(res.status) <= {"dropped", "precise", "cap", "budget"}
        placed = place_items(sc, res.n_correct, res.n_trials)
        inside += list(np.abs(b - placed.b_mean) <= 1.645 * placed.b_sd)
        if rep < 3:
            again = run_adaptive(sc, theta, b, 1000 + rep, target, params)
            assert again.steps == res.steps and (again.n_correct == res.n_correct).all()
    assert np.mean(inside) >= 0.85, np.mean(inside)


def test_the_most_informative_models_are_asked():
    theta = np.linspace(-3, 3, J)
    info = expected_information(theta, 1.0, 0.1)
    assert int(np.argmax(info)) == int(np.argmin(np.abs(theta - 1.0)))
    left = np.full(J, 1)
    picks = pick_models(info, left, 4)
    assert len(set(picks)) == 4 and set(picks) == set(np.argsort(-info)[:4].tolist())
    assert pick_models(info, np.array([2] + [0] * (J - 1)), 4) == [0, 0]  # only what is left


# ---- end to end ---------------------------------------------------------------------------------------------

def write(folder: Path, labelling: str, name: str, max_rounds: int = 2) -> Path:
    cfg = folder / name
    cfg.write_text(SIM_CONFIG.format(invalid_rate=0.1, max_rounds=max_rounds, tolerance=0.01)
                   + f'labelling = "{labelling}"\nsequential = false\n')
    return cfg


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark(tmp_path_factory.mktemp("bench"))


def test_an_adaptive_fill_labels_with_fewer_calls_and_records_its_decisions(tmp_path, bench):
    items, resp = bench
    figures = {}
    for mode in ("full", "adaptive"):
        res = fill(items, resp, write(tmp_path, mode, f"{mode}.toml"), tmp_path / mode, "--gaps", "1",
                   "--allow-floor-gaps")
        assert res.exit_code == 0, res.output
        figures[mode] = true_gap_figures(tmp_path / mode)
    print(json.dumps(figures))
    assert figures["adaptive"][0]["calls"] < figures["full"][0]["calls"]
    bank = MemoryBank(tmp_path / "adaptive" / "memory.sqlite")
    rows = [(c.labelling, c.answers, c.label_note) for c in bank.candidates() if c.status in ("placed", "chosen")]
    bank.close()
    assert rows and all(r[0] in ("dropped", "precise", "cap", "budget") and r[1] >= 1 and r[2] for r in rows)
    assert any(r[1] < 24 for r in rows)  # somebody was stopped before the full panel
    schedule = json.loads(next((tmp_path / "adaptive" / "labels").glob("*/adaptive.json")).read_text())
    assert schedule["steps"] and len(schedule["status"]) == len(schedule["children"])
    from typer.testing import CliRunner

    from benchfill.cli import app

    trace = CliRunner().invoke(app, ["trace", str(tmp_path / "adaptive"), "--gap", "1", "--json"])
    child = json.loads(trace.output)["rounds"][0]["children"]
    assert any(c["labelling"] for c in child)


@pytest.mark.slow
def test_full_vs_adaptive_on_the_same_gaps_over_seeds(tmp_path, bench):
    """The whole search, fixed gaps, seeds 0-5 (12 gaps of a 6-model x 4-rollout panel): adaptive pays fewer panel
    calls per gap. The chosen item's TRUE |d - t| is printed, not asserted: at this size the two searches take
    different paths and 12 gaps do not separate them (measured: 0.049 adaptive vs 0.031 full, at 215 vs 388 calls);
    the controlled comparison on the same children is the first test of this file."""
    items, resp = bench
    figures = {"full": [], "adaptive": []}
    for seed in range(6):
        for mode in figures:
            out = tmp_path / f"{mode}{seed}"
            res = fill(items, resp, write(tmp_path, mode, f"{mode}.toml", max_rounds=3), out, "--gaps", "2",
                       "--allow-floor-gaps", "--seed", str(seed))
            assert res.exit_code == 0, res.output
            figures[mode] += true_gap_figures(out)
    mean = {mode: {k: float(np.mean([g[k] for g in rows])) for k in ("calls", "true_dev", "dev", "sd")}
            for mode, rows in figures.items()}
    print(json.dumps(mean))
    assert mean["adaptive"]["calls"] <= 0.7 * mean["full"]["calls"]


def write_defaults(folder: Path, labelling: str) -> Path:
    """The simulated config (8 children a round, 2 rounds, fixed gaps) with the confirmation's settings left to
    the labelling's defaults."""
    cfg = folder / f"{labelling}-defaults.toml"
    cfg.write_text(SIM_CONFIG.format(invalid_rate=0.1, max_rounds=2, tolerance=0.01)
                   .replace("confirm_max_rollouts = 12\n", "").replace("children_per_parent = 3", "children_per_parent = 4")
                   + f'labelling = "{labelling}"\nsequential = false\n')
    return cfg


@pytest.mark.slow  # ~100-150 s: 16 whole fills
def test_adaptive_at_equal_budget_is_at_least_as_close_in_truth_as_full(tmp_path):
    """Issue 23's bar in the SIMULATED world (each child carries a planted latent b), with the paper's panel (12
    models x 4 rollouts): on the same fixed gaps, seeds 0-7, adaptive labelling with its defaults (4 finalists
    raced, the gap's budget what full labelling would have spent on the rounds its search ran) spends no more panel
    calls in all than full labelling with the paper's defaults, and its chosen children are at least as close to
    the target in truth: paired by (seed, gap), the data do not show adaptive farther (one-sided paired t-test,
    5 %). A bare comparison of the two means was a coin flip where both are equally close: with 8 gaps, seeds 0-3
    gave 0.032 vs 0.028 on one CPU and the reverse on another (paired SD of the difference ~0.028). Each gap keeps to
    the budget written in its finalists.json."""
    items, resp = make_benchmark(tmp_path, n_items=60, n_models=12, hole=False)
    figures: dict[str, list[dict]] = {"full": [], "adaptive": []}
    for seed in range(8):
        for mode in figures:
            out = tmp_path / f"{mode}{seed}"
            res = runner.invoke(app, ["fill", str(items), "--responses", str(resp), "--config",
                                      str(write_defaults(tmp_path, mode)), "--out", str(out), "--models", "12",
                                      "--gaps", "2", "--allow-floor-gaps", "--seed", str(seed), "--sampler", "map"],
                                catch_exceptions=False)
            assert res.exit_code == 0, res.output
            rows = true_gap_figures(out)
            figures[mode] += rows
            if mode == "adaptive":
                for g in rows:
                    raced = json.loads((out / "labels" / f"benchfill-g{g['gap']}-confirm" / "finalists.json")
                                       .read_text())
                    assert raced["budget"]["rule"] == "equal" and len(raced["finalists"]) == 4
                    assert g["calls"] + g["confirm_calls"] <= raced["budget"]["calls"]
    assert len(figures["adaptive"]) == len(figures["full"])  # the same gaps, each with a chosen child
    calls = {mode: sum(g["calls"] + g["confirm_calls"] for g in rows) for mode, rows in figures.items()}
    true = {mode: float(np.mean([g["true_dev"] for g in rows])) for mode, rows in figures.items()}
    farther = stats.ttest_rel([g["true_dev"] for g in figures["adaptive"]], [g["true_dev"] for g in figures["full"]],
                              alternative="greater")
    print(json.dumps({"calls": calls, "true_dev": true, "p_adaptive_farther": float(farther.pvalue)}))
    assert calls["adaptive"] <= calls["full"]
    assert farther.pvalue > 0.05, (true, farther)


@pytest.mark.slow
def test_a_crash_inside_adaptive_labelling_resumes_to_the_unbroken_runs_items(tmp_path, bench):
    items, resp = bench
    cfg = write(tmp_path, "adaptive", "a.toml")
    base = ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--models", "6",
            "--gaps", "1", "--allow-floor-gaps"]
    ref = _cli(base + ["--out", str(tmp_path / "ref")])
    assert ref.returncode == 0, ref.stderr
    for node in ("label", "place"):
        out = tmp_path / node
        crashed = _cli(base + ["--out", str(out)], {"BENCHFILL_CRASH_AT": f"{node}:2"})
        assert crashed.returncode == 137, crashed.stderr[-500:]
        resumed = _cli(base + ["--out", str(out), "--resume"])
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert _chosen(out) == _chosen(tmp_path / "ref")
        assert _double_calls(out) == 0


@pytest.mark.parametrize("bad,line", [
    ('labelling = "bogus"', "[fill].labelling: Input should be 'full' or 'adaptive'"),
    ("adaptive_budget = 0", "[fill].adaptive_budget: must be > 0"),
    ("adaptive_batch = 0", "[fill].adaptive_batch: must be >= 1"),
    ("adaptive_z = -1.0", "[fill].adaptive_z: must be > 0"),
])
def test_the_adaptive_settings_are_typed_and_ranged(tmp_path, bad, line):
    message = config_error(tmp_path, bad)
    assert message.endswith(line), message
    assert FillParams().labelling == "full"  # the paper's setting stays the default
