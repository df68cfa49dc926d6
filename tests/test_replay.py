"""The replay world (issue 23): real models' answers replayed from the bundled ~1,100-rollout MATH-500 matrix, and a
rewriter that proposes held-out real items."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchfill.cli import app
from benchfill.data import load_items
from benchfill.importers import load_responses
from benchfill.models.replay import ReplayWorld, split_for_replay
from benchfill.models.sim import text_key

REPO = Path(__file__).resolve().parents[1]
ITEMS = REPO / "examples" / "math500.items.jsonl"
RESPONSES = REPO / "examples" / "math500.responses.csv.gz"


def test_split_holds_out_a_pool_across_difficulties_and_thins_real_answers():
    full = load_responses(RESPONSES)
    split = split_for_replay(full, holdout=0.2, rollouts=8, seed=0)
    bench = split.benchmark
    assert len(split.pool_ids) == 100 and not set(split.pool_ids) & set(bench.item_ids)
    assert len(bench.item_ids) == 400 and bench.n_trials.max() == 8
    assert np.all(bench.n_correct <= bench.n_trials) and np.all(bench.n_correct >= 0)
    # the pool spans the difficulties (every 5th item by accuracy)
    acc = dict(zip(full.item_ids, full.accuracy_by_item()))
    pool_acc = np.array([acc[i] for i in split.pool_ids])
    every = np.array(list(acc.values()))
    assert pool_acc.min() <= np.quantile(every, 0.02) and pool_acc.max() >= np.quantile(every, 0.98)
    # thinned counts are draws of the real answers: their pooled accuracy matches the full matrix's
    sub = full.subset(items=bench.item_ids)
    assert abs((bench.n_correct / bench.n_trials).mean() - (sub.n_correct / sub.n_trials).mean()) < 0.01
    assert split_for_replay(full, 0.2, 8, seed=1).pool_ids != split.pool_ids  # the seed moves the pool


def test_replay_panel_answers_at_the_real_pass_rate_and_the_rewriter_proposes_pool_items():
    items = load_items(ITEMS)[:60]
    full = load_responses(RESPONSES).subset(items=[it.id for it in items])
    models = full.models[:3]
    rates = full.subset(models=models).n_correct / full.subset(models=models).n_trials
    true_b = np.linspace(-3, 3, len(items))
    pool = [it.id for it in items[::3]]
    world = ReplayWorld(rates, models, items, true_b, pool, seed=0, b_range=(-3.0, 3.0), noise=0.1)
    assert world.p_correct(f"sim/{models[1]}", items[5]) == pytest.approx(rates[1, 5])
    from benchfill.models.requests import RewriteRequest

    parent = items[30]  # true b ~ 0
    for target, sign in ((9.5, 1), (0.5, -1)):
        request = RewriteRequest.build(parent, target=target, parent_difficulty=5.0, n_children=4)
        reply = json.loads(world.respond("sim/rewriter", request, key=f"k{target}", role="rewriter"))
        kids = reply["children"]
        assert len(kids) == 4 and len({k["question"] for k in kids}) == 4
        by_text = {text_key(it.question): i for i, it in enumerate(items)}
        picked = [by_text[text_key(k["question"])] for k in kids]
        assert all(items[i].id in pool and kids[n]["answer"] == items[i].answer for n, i in enumerate(picked))
        assert sign * (np.mean(true_b[picked]) - true_b[30]) > 0.5  # moved toward the target


def small_matrix(folder: Path, n_items: int = 150) -> tuple[Path, Path]:
    """The bundled MATH-500 pair cut to its first items (same texts, same real answers)."""
    lines = ITEMS.read_text().splitlines()[:n_items]
    items = folder / "items.jsonl"
    items.write_text("\n".join(lines) + "\n")
    keep = {str(json.loads(x).get("id", i)) for i, x in enumerate(lines)}
    with gzip.open(RESPONSES, "rt") as fh:
        rows = fh.read().splitlines()
    resp = folder / "responses.csv"
    resp.write_text("\n".join([rows[0]] + [r for r in rows[1:] if r.split(",")[1] in keep]) + "\n")
    return items, resp


@pytest.mark.slow
def test_a_replay_fill_runs_end_to_end_and_knows_each_childs_truth(tmp_path):
    from benchfill.graphs.run import true_gap_figures

    items, resp = small_matrix(tmp_path)
    cfg = tmp_path / "replay.toml"
    cfg.write_text((REPO / "examples" / "fill_replay.toml").read_text().replace("max_rounds = 8", "max_rounds = 2"))
    res = CliRunner().invoke(app, ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--out",
                                   str(tmp_path / "out"), "--gaps", "1", "--models", "12"])
    assert res.exit_code == 0, res.output
    assert "REPLAY: the panel replays real models' answers" in res.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["world"] == "replay" and summary["label"].startswith("REPLAY")
    assert summary["n_items"] == 120  # 150 minus the held-out fifth
    truth = json.loads((tmp_path / "out" / "replay_truth.json").read_text())
    pool = {r["text_key"] for r in truth["items"] if r["pool"]}
    assert len(pool) == 30
    rows = true_gap_figures(tmp_path / "out")
    assert rows and all(0.0 <= r["p_inside"] <= 1.0 for r in rows)
    from benchfill.memory.bank import MemoryBank

    bank = MemoryBank(tmp_path / "out" / "memory.sqlite")
    questions = [c.question for c in bank.candidates() if c.question is not None and c.question != ""]
    bank.close()
    assert questions and all(text_key(q) in pool for q in questions)  # every child is a real held-out item


def test_the_truth_is_the_limit_of_equal_labelling_and_replayed_children_are_placed_honestly_about_it():
    """MATH-500's 12 scale models have 8 to 1,100 rollouts per cell; the panel labels every model equally. A child's
    truth is where unlimited equal labelling places it, and the children's 90 % intervals from 128 replayed
    rollouts per model cover it (against the matrix's own unequal counts they covered 70-77 %, z-scores of SD 3.9:
    a real item that is not quite 1PL has another place under another weighting of the models)."""
    from benchfill.data import keep_models
    from benchfill.irt.fit import fit_irt
    from benchfill.irt.model import IRTSpec, SamplerSettings
    from benchfill.irt.placement import place_children, place_items
    from benchfill.irt.scale import Scale
    from benchfill.models.replay import equal_labelling_counts, pass_rates

    full = keep_models(load_responses(RESPONSES), 12)
    split = split_for_replay(full, 0.2, 8, seed=0)
    scale = Scale.from_fit(fit_irt(split.benchmark, IRTSpec(), SamplerSettings(method="fast", draws=500)))
    models, pool = list(scale.models), split.pool_ids
    k, n = equal_labelling_counts(full, models, pool)
    own = full.subset(models=models, items=pool).n_trials
    assert own.min() < 100 < own.max() and set(np.unique(n)) == {int(own.max())}  # unequal in, equal out
    rates = pass_rates(full, models, pool)
    assert np.array_equal(k, np.rint(rates * n))
    truth = place_items(scale, k.T, n.T).b_mean
    rng = np.random.default_rng(1)
    z = []
    for _ in range(3):
        y = rng.binomial(128, rates.T)
        order = rng.permutation(len(pool))
        for g in range(0, len(pool) - 15, 16):  # a search's children are placed together
            sel = order[g : g + 16]
            placed = place_children(scale, y[sel], np.full(y[sel].shape, 128), np.array([[0.0, 1.0]]))
            z.append((truth[sel] - placed.b_mean) / placed.b_sd)
    z = np.concatenate(z)
    assert len(z) == 288
    assert np.mean(np.abs(z) <= 1.645) >= 0.85, np.round(np.quantile(np.abs(z), [0.5, 0.9, 0.99]), 2)
