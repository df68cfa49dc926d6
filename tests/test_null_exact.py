"""The design null's exact path at leaderboard sizes, and the key memo the diagnosis shares between its stages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchfill.diagnostics import null as N
from benchfill.diagnostics.guessing import item_log_marginals
from benchfill.irt import placement as P


def direct_total_pmf(theta: np.ndarray, pattern: np.ndarray, b_range: tuple[float, float], nodes: int) -> np.ndarray:
    """P(total) under b ~ U(b_range) by the plain midpoint rule and full convolutions (no windows, no trimming)."""
    lo, hi = b_range
    b = lo + (hi - lo) * (np.arange(nodes) + 0.5) / nodes
    p = 1.0 / (1.0 + np.exp(-(theta[:, None] - b[None, :])))
    dist = np.ones((nodes, 1))
    for j in np.flatnonzero(pattern):
        n_j = int(pattern[j])
        new = np.zeros((nodes, dist.shape[1] + n_j))
        for t in range(n_j + 1):
            new[:, t:t + dist.shape[1]] += dist * (math.comb(n_j, t) * p[j][:, None] ** t
                                                   * (1.0 - p[j][:, None]) ** (n_j - t))
        dist = new
    return dist.mean(0)


@pytest.mark.parametrize("pattern", [np.ones(150, int), np.full(12, 4), np.array([1, 0, 8, 3, 50, 2])])
def test_the_windowed_convolution_is_the_full_one(pattern):
    """Dropping edge totals below PMF_TOL changes nothing measurable; the nodes resolve the mixture (a 16x finer
    rule agrees to 1e-5 in L1), and the probabilities sum to 1."""
    rng = np.random.default_rng(len(pattern))
    theta = rng.normal(0.0, 1.5, len(pattern))
    b_range = (-5.0, 3.0)
    nodes = N.null_nodes(pattern, b_range)
    pmf = N.mixture_total_pmf(theta, pattern, b_range)
    assert pmf.shape == (pattern.sum() + 1,)
    assert np.abs(pmf - direct_total_pmf(theta, pattern, b_range, nodes)).sum() < 1e-12
    assert np.abs(pmf - direct_total_pmf(theta, pattern, b_range, 16 * nodes)).sum() < 1e-5
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)


def test_the_exact_null_covers_many_trials_and_agrees_with_simulating_answers(monkeypatch):
    """450 binary models (more trials per item than the old 400-trial limit of the exact path): the exact null is
    chosen, and simulating every answer gives the same distribution of each metric."""
    rng = np.random.default_rng(3)
    J, I = 450, 300
    theta = rng.normal(0.0, 1.0, J)
    draws = theta + rng.normal(0.0, 0.05, (200, J))
    n = np.ones((J, I), dtype=np.int64)
    calls = []
    monkeypatch.setattr(N, "_multinomial_null", _spy(N._multinomial_null, calls))
    exact = N.design_null(draws, n, None, (-2.5, 2.5), replicates=400, seed=1)
    assert calls, "the exact multinomial null was not used"
    monkeypatch.setattr(N, "MULTINOMIAL_MAX_PATTERNS", 0)
    simulated = N.design_null(draws, n, None, (-2.5, 2.5), replicates=400, seed=2)
    from scipy import stats

    for k in N.METRICS:
        assert stats.ks_2samp(exact[k], simulated[k]).pvalue > 0.01, k
        assert np.mean(exact[k]) == pytest.approx(np.mean(simulated[k]), rel=0.05), k


def _spy(fn, calls):
    def wrapped(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)
    return wrapped


def test_the_key_memo_returns_what_a_fresh_integration_does():
    """Keys asked for again under the same draws and population come from the memo, equal to integrating them
    afresh; a subset asked after its superset, and new draws, give the fresh values too."""
    rng = np.random.default_rng(5)
    J = 40
    theta = rng.normal(0.0, 1.0, J)
    draws = theta + rng.normal(0.0, 0.2, (100, J))
    y, n = N.attainable_keys(np.full(J, 2))
    every = P.grid_key_moments(draws, y, n)
    P._KEY_MEMO.moments.clear()
    part = P.grid_key_moments(draws, y[::7], n[::7])
    assert len(P._KEY_MEMO.moments) == len(y[::7])
    again = P.grid_key_moments(draws, y, n)  # the rest integrated, the subset from the memo
    assert len(P._KEY_MEMO.moments) == len(y)
    assert np.allclose(again.mean, every.mean, atol=1e-9, rtol=0) and np.allclose(again.sd, every.sd, atol=1e-9)
    assert np.array_equal(part.item_mean, again.item_mean[::7])
    other = P.grid_key_moments(draws + 0.5, y, n)  # other draws: not the memo's values
    assert np.mean(np.abs(other.mean - every.mean)) > 0.2


def test_distinct_rows_are_integrated_as_grid_key_moments_integrates_them():
    """:func:`placement.distinct_key_moments` (the null's rows: distinct already, no reduction, no memo) gives
    each row the moments :func:`placement.grid_key_moments` gives it, with guessing (each row its own answer
    pattern) and without (only the total counts: a plain row is any count row with its total), and leaves the
    memo untouched."""
    rng = np.random.default_rng(8)
    J, K = 29, 400
    draws = rng.normal(0.0, 1.2, J) + rng.normal(0.0, 0.1, (25, J))
    n = np.ones((K, J), dtype=np.int64)
    n[: K // 4, : J // 3] = 0  # some rows with unasked cells
    y = (rng.random((K, J)) < 0.6).astype(np.int64) * n
    y[: K // 4, 0] = 1  # a count where nothing was asked: carries no information
    y, keep = np.unique(y, axis=0, return_index=True)
    n = n[keep]
    prior = P.Population.normal(0.4, 2.0)
    P._KEY_MEMO.moments.clear()
    for c in (np.full(len(y), 0.1), None):
        got = P.distinct_key_moments(draws, y, n, c, prior=prior)
        assert not P._KEY_MEMO.moments
        want = P.grid_key_moments(draws, y, n, c, prior=prior)
        assert got.item_key.tolist() == list(range(len(y)))
        assert np.allclose(got.mean, want.mean[want.item_key], rtol=0, atol=1e-11)
        assert np.allclose(got.sd, want.sd[want.item_key], rtol=0, atol=1e-11)
        P._KEY_MEMO.moments.clear()
    plain = P.distinct_key_moments(draws, y, n, None, prior=prior).mean
    same_total = P.distinct_key_moments(draws, N.spread_totals(np.where(n > 0, y, 0).sum(1), n), n, None,
                                        prior=prior).mean
    assert np.array_equal(plain, same_total)


@pytest.mark.parametrize("guessing", [0.0, 0.2])
def test_chunks_shifted_by_the_centres_peak_give_the_moments_of_each_draws_peak(monkeypatch, guessing):
    """:func:`placement.grid_chunks` shifts each key's density by its peak at the draws' centre (no maximum per
    draw) where the draws lie close enough; the moments equal those shifted by each draw's own peak (forced by
    a zero reach), with guessing and without."""
    rng = np.random.default_rng(9)
    J, K = 12, 300
    draws = rng.normal(0.0, 1.0, J) + rng.normal(0.0, 0.3, (40, J))
    n = np.full((K, J), 4, dtype=np.int64)
    y = rng.binomial(4, 0.5, (K, J))
    c = np.full(K, guessing) if guessing else None
    prior = P.Population.normal(0.0, 1.5)
    cs = np.full(K, guessing)
    shifted = P.distinct_key_moments(draws, y, n, c, prior=prior)
    shifted_marginals = item_log_marginals(draws, y, n, cs, prior)  # the shift goes back into each log marginal
    monkeypatch.setattr(P, "MAX_SHIFT_REACH", -1.0)
    per_draw = P.distinct_key_moments(draws, y, n, c, prior=prior)
    assert np.allclose(shifted.mean, per_draw.mean, rtol=0, atol=1e-12)
    assert np.allclose(shifted.sd, per_draw.sd, rtol=0, atol=1e-12)
    assert np.allclose(shifted_marginals, item_log_marginals(draws, y, n, cs, prior), rtol=0, atol=1e-10)


@pytest.mark.parametrize("kernels", ["0", "1"])
@pytest.mark.parametrize("J, spread", [(40, 0.05), (300, 3.0)])
def test_the_per_pattern_moments_are_the_per_key_ones(J, spread, kernels, monkeypatch):
    """:func:`placement.total_moments` (each pattern's softplus sums shared by all its totals; densities shifted by
    the centre's peak, or by each draw's when the draws spread too far for that) gives every key the moments of
    :func:`placement.grid_key_moments` on the spread-out key: sparse patterns, rollouts, an empty pattern, every
    total from 0 to all correct; in numpy and, where the shift by the centre's peak holds, in the compiled kernels
    (each key's own window, the weights along it by a running product)."""
    monkeypatch.setenv("BENCHFILL_KERNELS", kernels)
    rng = np.random.default_rng(3)
    draws = rng.normal(0.0, 1.5, J) + rng.normal(0.0, spread, (30, J))
    patterns = (rng.random((30, J)) < 0.6).astype(np.int64)
    patterns[0], patterns[1] = 0, np.where(np.arange(J) < 40, 2, 0)  # nothing asked; 2 rollouts of 40 models
    pattern_of = rng.integers(0, len(patterns), 300)
    pattern_of[:2] = 1  # all wrong and all right on the rollout pattern
    totals = np.array([rng.integers(0, patterns[p].sum() + 1) for p in pattern_of])
    totals[1] = patterns[1].sum()
    prior = P.Population.normal(0.5, 2.5)
    assert P._shared_grid(draws, prior, patterns.sum(1).max(), 1.2, 400) is not None  # not the fallback
    if spread > 1:  # the bound on how far a key's density moves between draws is what switches the shift
        assert (patterns @ np.abs(draws - draws.mean(0)).T).max() > P.MAX_SHIFT_REACH
    got = P.total_moments(draws, patterns, pattern_of, totals, prior=prior)
    rows = patterns[pattern_of]
    want = P.grid_key_moments(draws, N.spread_totals(totals, rows), rows, prior=prior)
    assert np.allclose(got.mean, want.item_mean, rtol=0, atol=1e-11)
    assert np.allclose(got.sd, want.item_sd, rtol=0, atol=1e-11)


def test_the_per_pattern_moments_fall_back_to_key_windows_for_many_trials():
    """Past max_nodes on the shared grid (many trials: narrow posteriors) the keys go to the per-key windows,
    as grid_key_moments' own do, and come back one per key."""
    rng = np.random.default_rng(4)
    draws = rng.normal(0.0, 1.0, 6) + rng.normal(0.0, 0.05, (20, 6))
    patterns = np.full((2, 6), 300)
    pattern_of, totals = np.array([0, 1, 0]), np.array([0, 900, 1800])
    got = P.total_moments(draws, patterns, pattern_of, totals, max_nodes=50)
    rows = patterns[pattern_of]
    want = P.grid_key_moments(draws, N.spread_totals(totals, rows), rows, max_nodes=50)
    assert got.item_key.tolist() == [0, 1, 2]
    assert np.allclose(got.mean, want.item_mean, atol=1e-12) and got.mean[0] > got.mean[1] > got.mean[2]


def test_a_large_sparse_designs_null_simulates_in_the_kernel_with_the_same_distribution(monkeypatch):
    """Past PPC_KERNEL_MIN_WORK replicated cells the null's answers come from the compiled 1PL simulation in
    seeded blocks of replicates: the same figures on one core or two, and the same distribution as the numpy
    simulation (a sparse 30 x 400 design, 40 % of cells unasked)."""
    rng = np.random.default_rng(6)
    J, I = 30, 400
    draws = rng.normal(0.0, 1.2, J) + rng.normal(0.0, 0.05, (50, J))
    n = (rng.random((J, I)) < 0.6).astype(np.int64)
    args = (draws, n, None, (-3.0, 3.0))
    numpy_null = N.design_null(*args, replicates=300, seed=1)
    monkeypatch.setattr(N, "PPC_KERNEL_MIN_WORK", 0)
    kernel_null = N.design_null(*args, replicates=300, seed=1)
    monkeypatch.setattr("benchfill.forking.available_cores", lambda: 1)
    assert all(np.array_equal(kernel_null[k], N.design_null(*args, replicates=300, seed=1)[k]) for k in N.METRICS)
    from scipy import stats

    for k in N.METRICS:
        assert not np.array_equal(numpy_null[k], kernel_null[k])  # the two paths did run
        assert stats.ks_2samp(np.round(numpy_null[k], 9), np.round(kernel_null[k], 9)).pvalue > 0.01, k
        assert np.mean(kernel_null[k]) == pytest.approx(np.mean(numpy_null[k]), rel=0.05), k


@pytest.mark.parametrize("packed", [True, False])
def test_the_null_key_cache_integrates_each_distinct_row_once_and_returns_every_rows_mean(packed):
    """The guessing null's cache (sorted tags, merged by numpy) gives every row the mean its own integral gives,
    integrates a row only the first time any call sees it, and keeps its tags sorted and unique: rows packed into
    one int64, and rows tagged by their bytes (too wide to pack)."""
    rng = np.random.default_rng(3)
    radices = np.array([3, 2, 2, 2, 2, 2, 2])
    weights = np.cumprod([1] + list(radices[:0:-1]))[::-1].astype(np.int64) if packed else None

    def value(rows: np.ndarray) -> np.ndarray:  # any function of the row
        return np.sin(rows @ np.arange(1.0, rows.shape[1] + 1)) + rows[:, 0]

    cache, seen, asked = N.KeyCache(), set(), []

    def integrate(rows: np.ndarray) -> np.ndarray:
        keys = [tuple(r) for r in rows.tolist()]
        assert len(set(keys)) == len(keys)  # distinct rows only
        asked.extend(keys)
        return value(rows)

    for _ in range(4):
        rows = rng.integers(0, radices, size=(300, len(radices)))
        got = cache.means(rows, weights, integrate)
        np.testing.assert_allclose(got, value(rows), rtol=0, atol=1e-12)
        fresh = {tuple(r) for r in rows.tolist()}
        assert set(asked[len(asked) - len(fresh - seen):]) == fresh - seen  # only rows never seen before
        seen |= fresh
    assert len(asked) == len(set(asked)) == len(seen)
    assert cache.tags is not None and len(cache.tags) == len(seen) == len(np.unique(cache.tags))
    assert np.all(np.searchsorted(cache.tags, cache.tags) == np.arange(len(cache.tags)))  # sorted
