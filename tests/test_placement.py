"""Placement of new items on a fixed scale: exact against brute-force integration and against PyMC, normalised
with the benchmark's own min / max (out-of-range d allowed), fast, and the saved scale file."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from scipy.special import expit

import benchfill.irt.fast  # noqa: F401  (registers the "fast" sampler)
from benchfill.data import ResponseMatrix
from benchfill.errors import InputError
from benchfill.irt.fit import fit_irt
from benchfill.irt.model import IRTSpec, SamplerSettings
from benchfill.irt.placement import place_items, place_responses
from benchfill.irt.scale import Scale

J = 12
MODELS = [f"m{j:02d}" for j in range(J)]


def _scale(n_draws: int = 1000, seed: int = 0) -> Scale:
    """A synthetic scale: abilities with individual and common (shift) posterior uncertainty."""
    rng = np.random.default_rng(seed)
    theta = np.sort(rng.normal(size=J))
    draws = theta + 0.15 * rng.normal(size=(n_draws, J)) + 0.1 * rng.normal(size=(n_draws, 1))
    b = np.linspace(-1.8, 2.2, 40)
    return Scale(models=MODELS, theta_draws=draws, b_min=float(b.min()), b_max=float(b.max()),
                 item_ids=[f"q{i}" for i in range(40)], b_mean=b)


def _brute(scale: Scale, y: np.ndarray, n: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and SD of the draw-averaged normalised conditional posterior on one very fine global grid."""
    grid = np.linspace(-12, 14, 2601)
    means, sds = [], []
    for k in range(y.shape[0]):
        p = c[k] + (1 - c[k]) * expit(scale.theta_draws[:, :, None] - grid[None, None, :])  # (S, J, G)
        ll = (y[k][None, :, None] * np.log(p) + (n[k] - y[k])[None, :, None] * np.log1p(-p)).sum(1) - 0.5 * grid**2
        w = np.exp(ll - ll.max(1, keepdims=True))
        f = (w / w.sum(1, keepdims=True)).mean(0)
        m = (f * grid).sum()
        means.append(m)
        sds.append(np.sqrt((f * (grid - m) ** 2).sum()))
    return np.array(means), np.array(sds)


def _new_items(rng: np.random.Generator, scale: Scale):
    theta = scale.theta_draws.mean(0)
    K = 14
    n = np.full((K, J), 4)
    n[0:2] = 1100  # high-rollout items: narrow posteriors
    n[2, :5] = 0  # some models did not answer
    c = np.where(np.arange(K) % 4 == 1, 0.25, 0.0)
    b = rng.normal(size=K) * 1.5
    y = rng.binomial(n, c[:, None] + (1 - c[:, None]) * expit(theta[None, :] - b[:, None]))
    y[5], y[6] = n[5], 0  # solved by everyone / by no one
    return y, n, c


def test_placement_matches_brute_force_integration():
    scale = _scale(n_draws=100)
    y, n, c = _new_items(np.random.default_rng(1), scale)
    placed = place_items(scale, y, n, c)
    m, s = _brute(scale, y, n, c)
    np.testing.assert_allclose(placed.b_mean, m, atol=1e-6)
    np.testing.assert_allclose(placed.b_sd, s, atol=1e-6)
    np.testing.assert_allclose(placed.d, (m - scale.b_min) / (scale.b_max - scale.b_min), atol=1e-6)
    np.testing.assert_allclose(placed.d_sd, s / (scale.b_max - scale.b_min), atol=1e-6)


def test_identical_rows_get_identical_placements_and_no_data_gives_the_prior():
    scale = _scale()
    row = np.array([4, 4, 3, 3, 2, 2, 1, 1, 1, 0, 0, 0])
    y = np.stack([row, row, row[::-1], np.zeros(J, dtype=int)])
    n = np.stack([np.full(J, 4)] * 3 + [np.zeros(J, dtype=int)])
    placed = place_items(scale, y, n)
    assert placed.b_mean[0] == placed.b_mean[1] and placed.b_sd[0] == placed.b_sd[1]
    # without guessing only the total matters (Rasch): a permuted row has the same posterior
    assert placed.b_mean[2] == pytest.approx(placed.b_mean[0], abs=1e-12)
    assert placed.b_mean[3] == pytest.approx(0.0, abs=1e-9) and placed.b_sd[3] == pytest.approx(1.0, abs=1e-9)


def test_items_outside_the_benchmark_range_get_d_outside_unit_interval():
    scale = _scale()
    n = np.full((2, J), 4)
    y = np.stack([n[0], np.zeros(J, dtype=int)])  # solved by every model every time / never
    placed = place_items(scale, y, n)
    assert placed.b_mean[0] < scale.b_min and placed.d[0] < 0
    assert placed.b_mean[1] > scale.b_max and placed.d[1] > 1
    np.testing.assert_allclose(placed.d, scale.normalise(placed.b_mean))


@pytest.mark.slow
def test_placement_matches_pymc_with_abilities_fixed_at_the_draws():
    """PyMC: one independent b per (item, ability draw), each with the item's likelihood under that draw's
    abilities; pooling all copies samples the draw-averaged conditional posterior, which must match ours."""
    import logging

    import pymc as pm

    logging.getLogger("pymc").setLevel(logging.ERROR)
    scale = _scale(n_draws=50, seed=4)
    theta = scale.theta_draws.mean(0)
    rng = np.random.default_rng(5)
    n = np.full((4, J), 4)
    n[3] = 200
    c = np.array([0.0, 0.25, 0.0, 0.0])
    y = rng.binomial(n, c[:, None] + (1 - c[:, None]) * expit(theta[None, :] - np.array([0.3, -0.5, 1.0, 0.6])[:, None]))
    y[2] = n[2]  # an item everyone solved: a one-sided posterior
    placed = place_items(scale, y, n, c)
    S = scale.n_draws
    with pm.Model():
        b = pm.Normal("b", 0.0, 1.0, shape=(4, S))
        z = scale.theta_draws[None, :, :] - b[:, :, None]  # (K, S, J)
        p = c[:, None, None] + (1 - c[:, None, None]) * pm.math.sigmoid(z)
        pm.Binomial("y", n=np.broadcast_to(n[:, None, :], (4, S, J)), p=pm.math.clip(p, 1e-9, 1 - 1e-9),
                    observed=np.broadcast_to(y[:, None, :], (4, S, J)))
        idata = pm.sample(draws=1000, tune=500, chains=2, cores=1, random_seed=1, progressbar=False,
                          compute_convergence_checks=False)
    pooled = np.asarray(idata.posterior["b"].values).transpose(2, 0, 1, 3).reshape(4, -1)
    np.testing.assert_allclose(placed.b_mean, pooled.mean(1), atol=0.01)
    np.testing.assert_allclose(placed.b_sd, pooled.std(1), atol=0.01)


def test_placement_throughput():
    """>= 10,000 placements per second for a panel of 12 models x 4 rollouts against 1,000 ability draws."""
    scale = _scale()
    rng = np.random.default_rng(7)
    K = 10_000
    n = np.full((K, J), 4)
    y = rng.binomial(n, expit(scale.theta_draws.mean(0)[None, :] - rng.normal(size=(K, 1)) * 1.5))
    best = np.inf
    for _ in range(3):
        t = time.perf_counter()
        placed = place_items(scale, y, n)
        best = min(best, time.perf_counter() - t)
    assert np.isfinite(placed.b_mean).all()
    assert K / best >= 10_000, f"{K / best:.0f} placements/s"


def test_place_responses_by_model_name_and_missing_models():
    scale = _scale()
    order = MODELS[::-1] + ["extra-model"]
    k = np.tile(np.arange(J + 1)[:, None] % 5, (1, 3)).clip(0, 4)
    resp = ResponseMatrix(order, ["a", "b", "c"], k, np.full((J + 1, 3), 4), "new.csv")
    placed = place_responses(scale, resp)
    rows = [order.index(m) for m in MODELS]
    direct = place_items(scale, k[rows].T, np.full((3, J), 4))
    np.testing.assert_allclose(placed.b_mean, direct.b_mean)
    assert placed.item_ids == ["a", "b", "c"] and placed.ignored_models == ["extra-model"]
    short = resp.subset(models=order[2:])
    with pytest.raises(InputError, match=f"{MODELS[-2]}, {MODELS[-1]}"):
        place_responses(scale, short)
    with pytest.raises(ValueError):
        place_items(scale, np.zeros((2, J - 1)), np.ones((2, J - 1)))
    with pytest.raises(ValueError):
        place_items(scale, np.full((1, J), 3), np.full((1, J), 2))


# ------------------------------------------------------------------------------------------------ the scale


def test_scale_from_fit_save_load_roundtrip(tmp_path):
    rng = np.random.default_rng(8)
    theta = np.sort(rng.normal(size=J))
    n = np.full((J, 50), 4)
    y = rng.binomial(n, expit(theta[:, None] - rng.normal(size=(1, 50))))
    resp = ResponseMatrix(MODELS, [f"q{i}" for i in range(50)], y, n, "bench.csv")
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast", chains=2, tune=300, draws=700))
    scale = Scale.from_fit(fit, max_draws=1000)
    assert scale.theta_draws.shape == (1000, J)  # 1,400 draws thinned evenly
    assert scale.b_min == pytest.approx(fit.b_mean.min()) and scale.b_max == pytest.approx(fit.b_mean.max())
    assert scale.kind == "1pl" and scale.method == "fast" and scale.guessing == 0.0
    path = scale.save(tmp_path / "bench.scale.npz")
    loaded = Scale.load(path)
    np.testing.assert_array_equal(loaded.theta_draws, scale.theta_draws)
    np.testing.assert_array_equal(loaded.b_mean, scale.b_mean)
    assert loaded.models == MODELS and loaded.item_ids == scale.item_ids
    assert (loaded.b_min, loaded.b_max, loaded.guessing) == (scale.b_min, scale.b_max, scale.guessing)
    # the benchmark's own items placed back land near their fitted difficulties
    placed = place_responses(loaded, resp)
    assert np.corrcoef(placed.b_mean, fit.b_mean)[0, 1] > 0.99


def test_scale_load_rejects_bad_files(tmp_path):
    with pytest.raises(InputError, match="not found"):
        Scale.load(tmp_path / "missing.scale.npz")
    junk = tmp_path / "junk.scale.npz"
    junk.write_text("not a zip")
    with pytest.raises(InputError, match="junk.scale.npz"):
        Scale.load(junk)
    partial = tmp_path / "partial.scale.npz"
    np.savez(partial, models=np.array(["a"]))
    with pytest.raises(InputError, match="missing"):
        Scale.load(partial)


def test_cli_place(tmp_path):
    from typer.testing import CliRunner

    from benchfill.cli import app

    scale = _scale(n_draws=200)
    spath = scale.save(tmp_path / "b.scale.npz")
    rows = ["model,item_id,n_correct,n_trials"]
    for j, m in enumerate(MODELS):
        rows += [f"{m},easy,4,4", f"{m},mid,{j % 5},4", f"{m},hard,0,4"]
    (tmp_path / "new.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "placed.json"
    runner = CliRunner()
    res = runner.invoke(app, ["place", str(tmp_path / "new.csv"), "--scale", str(spath), "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "mid" in res.output and "outside" in res.output
    data = json.loads(out.read_text())
    assert [r["item_id"] for r in data["items"]] == ["easy", "mid", "hard"]
    assert data["items"][0]["d"] < 0 < data["items"][1]["d"] < 1 < data["items"][2]["d"]
    bad = runner.invoke(app, ["place", str(tmp_path / "new.csv"), "--scale", str(tmp_path / "new.csv")])
    assert bad.exit_code == 2 and "not a benchfill scale file" in bad.output


def test_new_items_are_placed_under_the_benchmarks_own_population(tmp_path):
    """A scale carries the population its benchmark was fitted with (saved and loaded with it), and placing the
    benchmark's own count rows reproduces the fit's exact difficulties: a new item lands on the axis its gap was
    measured on. Under the paper's N(0, 1) instead, a wide benchmark's hard items are pulled toward 0."""
    from benchfill.irt.fit import fit_irt
    from benchfill.irt.model import IRTSpec, SamplerSettings
    from benchfill.irt.placement import exact_item_moments, place_items
    from benchfill.irt.prior import Population
    from benchfill.irt.scale import Scale
    from benchfill.irt.simulate import simulate_responses

    rng = np.random.default_rng(11)
    theta = np.linspace(-2.5, 2.5, 12)
    resp = simulate_responses(theta, rng.normal(0.5, 2.5, 300), 4, seed=1)
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast", draws=300, tune=200))
    exact_item_moments(fit, resp)
    assert fit.spec.prior is not None and fit.spec.prior.kind == "spline" and fit.spec.prior.sigma > 1.5
    scale = Scale.load(Scale.from_fit(fit).save(tmp_path / "s.scale.npz"))
    assert scale.population == fit.spec.prior
    placed = place_items(scale, resp.n_correct.T, resp.n_trials.T)
    np.testing.assert_allclose(placed.b_mean, fit.b_mean, atol=1e-6)
    np.testing.assert_allclose(placed.b_sd, fit.b_sd, atol=1e-6)
    hard = fit.b_mean > np.quantile(fit.b_mean, 0.9)
    paper = place_items(scale, resp.n_correct.T[hard], resp.n_trials.T[hard], prior=Population.paper())
    assert np.all(paper.b_mean < placed.b_mean[hard] - 0.1)


@pytest.mark.parametrize("design", ["guessing, few trial rows", "plain, sparse", "two rates"])
def test_a_chunks_log_densities_as_one_product_are_its_terms_summed(monkeypatch, design):
    """grid_chunks yields, where a chunk has one guessing rate (or none), its keys' log densities as one product of
    stacked terms; they are the terms of fast.grid_log_likelihood plus the prior less the shift, summed one by one
    (the path for chunks of several rates), to round-off: with guessing and a few distinct trial rows, without
    guessing on a sparse design, and a chunk of two rates (which takes the general path either way)."""
    from benchfill.irt import placement as P

    rng = np.random.default_rng(8)
    J, K, S = 9, 300, 4
    n = np.ones((K, J)) if design != "plain, sparse" else (rng.random((K, J)) < 0.6).astype(float)
    n[:40, 0] = 0 if design == "guessing, few trial rows" else n[:40, 0]
    y = (rng.random((K, J)) < 0.5) * n
    c = {"guessing, few trial rows": np.full(K, 0.2), "plain, sparse": np.zeros(K),
         "two rates": np.where(np.arange(K) % 2, 0.25, 0.0)}[design]
    draws = rng.normal(0.0, 1.0, (S, J))
    grid = np.linspace(-12.0, 12.0, 161)
    log_prior = -0.5 * (grid / 2.5) ** 2
    args = (n, y, y.sum(1), c, draws, grid, log_prior, 100, (0, K))
    stacked = [(rows, s, ell.copy(), shift.copy()) for rows, s, _, ell, shift in P.grid_chunks(*args)]
    monkeypatch.setattr(P, "_stacked_keys", lambda *a: None)  # every chunk the general way
    summed = [(rows, s, ell.copy(), shift.copy()) for rows, s, _, ell, shift in P.grid_chunks(*args)]
    assert len(stacked) == len(summed) == 3 * S
    for (rows, s, ell, shift), (rows2, s2, ell2, shift2) in zip(stacked, summed):
        assert (rows, s) == (rows2, s2)
        np.testing.assert_allclose(shift, shift2, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ell, ell2, rtol=0, atol=1e-9)
