"""Leaderboard scale on sparse designs (issue 26), where every item has its own trial pattern and so its own
likelihood key: the population's mode search without the exact Hessian's 2 J gradients, the Gibbs conditionals'
interpolated per-key softplus sums, and the exact per-key moments integrated on each chunk's own stretch of the
grid. Each must give what the direct computation gives."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

import benchfill.irt.fast as fast
from benchfill.irt import placement, population
from benchfill.irt.prior import Population


def _sparse(J: int, I: int, seed: int, observed: float = 0.6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, n, theta): binary answers of J models to I items, each cell asked with probability ``observed``."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0.0, 1.0, J)
    b = rng.normal(0.3, 1.7, I)
    n = (rng.random((J, I)) < observed).astype(np.int64)
    n[rng.integers(J, size=I), np.arange(I)] = 1
    y = rng.binomial(n, expit(theta[:, None] - b[None, :]))
    return y, n, theta


def test_the_start_curvature_is_close_to_the_exact_hessian_on_a_sparse_design():
    y, n, theta = _sparse(40, 300, seed=2)
    keys = fast.reduce_items(y, n)
    model = fast.pilot_model(keys, theta, 14.0, Population.normal(0.3, 1.7))
    assert any(blk.n_shared is None for blk in model.blocks)  # keys with their own trials: the costly case
    exact = fast._neg_hessian(model, theta)
    approx = population.start_curvature(model, theta)
    assert np.linalg.norm(approx - exact) < 0.02 * np.linalg.norm(exact)
    assert np.linalg.eigvalsh(approx).min() > 0.0


@pytest.mark.slow
def test_the_population_learned_from_the_start_curvature_is_the_exact_hessians(monkeypatch):
    """The mode search stops on the gradient, so where it starts changes the steps, not the population."""
    y, n, _ = _sparse(40, 300, seed=5)
    keys = fast.reduce_items(y, n)
    quick, mode_quick = population.learn_population(keys, "normal")
    monkeypatch.setattr(population, "START_CURVATURE_MODELS", 10_000)  # the exact Hessian's path
    slow, mode_slow = population.learn_population(keys, "normal")
    assert quick.mu == pytest.approx(slow.mu, abs=1e-6) and quick.sigma == pytest.approx(slow.sigma, abs=1e-6)
    np.testing.assert_allclose(mode_quick.theta, mode_slow.theta, atol=1e-5)


def test_softplus_sums_with_a_weight_per_key_match_the_direct_sums():
    rng = np.random.default_rng(4)
    for _ in range(4):
        J, L, K = int(rng.integers(400, 3000)), int(rng.integers(120, 400)), int(rng.integers(2, 60))
        v = rng.normal(0.0, 2.0, J)
        W = (rng.random((K, J)) < 0.6).astype(float)
        x = rng.uniform(-6, -2) + np.sort(rng.uniform(0, rng.uniform(2, 12), L))
        direct = W @ fast.softplus(v[:, None] - x[None, :])
        got = fast.softplus_sums(v, W, x)
        assert got.shape == (K, L)
        assert np.max(np.abs(got - direct)) < 1e-8
        # one row: the vector form
        np.testing.assert_allclose(fast.softplus_sums(v, W[0], x), got[0], rtol=0, atol=1e-10)


def test_a_gibbs_lattice_of_keys_with_their_own_trials_is_the_direct_one():
    """The transposed problem (models as keys over thousands of items): lattice_terms interpolates the per-key
    sums for one ability vector; with two vectors it sums directly. The two must agree."""
    y, n, _ = _sparse(30, 4000, seed=7)
    models = fast.reduce_items(y.T, n.T)  # 30 keys, each a model with its own row of trials over the items
    b_as_abilities = np.random.default_rng(1).normal(0.0, 1.5, 4000)
    blk = fast.make_block(models, np.arange(models.n_keys), -3.0, 0.03, 200, Population.paper())
    assert blk.n_shared is None
    one = np.stack([b_as_abilities, b_as_abilities])
    base1, per1, _ = fast.lattice_terms(one[:1], blk)
    base2, per2, _ = fast.lattice_terms(one, blk)
    np.testing.assert_allclose(base1[0], base2[0], rtol=0, atol=1e-12)
    assert np.max(np.abs(per1[:, 0] - per2[:, 0])) < 1e-8


def test_exact_key_moments_on_chunk_windows_equal_the_whole_grids(monkeypatch):
    y, n, theta = _sparse(60, 1500, seed=3)
    rng = np.random.default_rng(0)
    draws = theta + 0.08 * rng.standard_normal((40, 1)) + 0.03 * rng.standard_normal((40, 60))
    prior = Population.normal(0.3, 1.7)
    monkeypatch.setattr(placement, "KEY_CHUNK_ELEMENTS", 20_000)  # several chunks, each on its own window
    windowed = placement._grid_key_moments(draws, y.T, n.T, None, prior, 1.2, 400)
    widths = []
    real = placement._chunk_window

    def whole(*args):
        window, peak, reach = real(*args)
        widths.append(window)
        return slice(None), peak, reach

    monkeypatch.setattr(placement, "_chunk_window", whole)
    full = placement._grid_key_moments(draws, y.T, n.T, None, prior, 1.2, 400)
    np.testing.assert_allclose(windowed.mean, full.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(windowed.sd, full.sd, rtol=0, atol=1e-12)
    assert any(w.stop - w.start < 0.8 * 400 for w in widths)  # some chunk did skip part of the grid


def test_exact_key_moments_with_each_draws_terms_made_per_chunk_are_the_same(monkeypatch):
    """Where every draw's (theta - b, softplus) terms on the whole grid would not fit DRAW_TERMS_BUDGET, each
    chunk makes them on its own window: the same moments."""
    y, n, theta = _sparse(60, 1500, seed=4)
    rng = np.random.default_rng(1)
    draws = theta + 0.08 * rng.standard_normal((30, 1)) + 0.03 * rng.standard_normal((30, 60))
    prior = Population.normal(0.3, 1.7)
    monkeypatch.setattr(placement, "KEY_CHUNK_ELEMENTS", 20_000)
    kept = placement._grid_key_moments(draws, y.T, n.T, None, prior, 1.2, 400)
    made = []
    real = placement._draw_terms
    monkeypatch.setattr(placement, "_draw_terms", lambda th, g: made.append(g.size) or real(th, g))
    monkeypatch.setattr(placement, "DRAW_TERMS_BUDGET", 0)
    per_chunk = placement._grid_key_moments(draws, y.T, n.T, None, prior, 1.2, 400)
    assert made and len(made) > 30  # made per chunk and draw
    np.testing.assert_allclose(per_chunk.mean, kept.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(per_chunk.sd, kept.sd, rtol=0, atol=1e-12)


@pytest.mark.parametrize("c_kind", ["plain", "guessing", "mixed"])
def test_grid_log_likelihood_summed_once_per_distinct_trial_row_is_the_same(c_kind):
    """Keys of a nearly complete design (3 distinct trial rows): the per-row sums picked by each key equal the
    keys' own products, with and without guessing, and with two rates and plain keys mixed."""
    rng = np.random.default_rng(7)
    K, J = 300, 9
    patterns = np.array([np.ones(J), np.r_[np.zeros(2), np.ones(J - 2)], np.r_[np.ones(J - 1), 2.0]])
    n = patterns[rng.integers(0, 3, K)]
    y = rng.binomial(n.astype(int), 0.5).astype(float)
    c = {"plain": np.zeros(K), "guessing": np.full(K, 0.25),
         "mixed": rng.choice([0.0, 0.1, 0.25], K)}[c_kind]
    grid = np.linspace(-8, 8, 120)
    theta = rng.normal(0, 1.5, J)
    X = theta[:, None] - grid[None, :]
    sp = fast.softplus(X)
    rows = fast.few_trial_rows(n, 0.25 * K)
    assert rows is not None and len(rows[0]) == 3
    want = fast.grid_log_likelihood(n, y, y.sum(1), c, X, sp, grid)
    got = fast.grid_log_likelihood(n, y, y.sum(1), c, X, sp, grid, rows)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert fast.few_trial_rows(rng.integers(0, 3, (K, J)).astype(float), 0.25 * K) is None  # sparse: too many rows
