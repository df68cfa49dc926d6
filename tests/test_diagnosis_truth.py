"""Difficulty metrics that mean what they say (SPEC section 3), checked against simulated benchmarks with known truth:
exact per-key means (tied items tied), posterior intervals that cover, a resolution floor and a design-aware null
that keep coarse designs from being flagged, and a planted hole that is found where the design can resolve it."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.diagnostics import metrics as M
from benchfill.diagnostics.null import key_floor
from benchfill.diagnostics.report import diagnose, posterior_metric_draws
from benchfill.irt.fit import fit_irt
from benchfill.irt.model import IRTSpec, SamplerSettings
from benchfill.irt.simulate import simulate_responses

FAST = SamplerSettings(method="fast", chains=4, tune=500, draws=500, seed=0)
THETA12 = np.linspace(-2.0, 2.0, 12)  # a panel spread evenly in ability, as the paper's 12 models


def holey(n: int, lo: float, hi: float, hole: tuple[float, float]) -> np.ndarray:
    """n difficulties evenly spread over [lo, hi] minus the share ``hole`` (fractions of the range) of it."""
    a, b = lo + hole[0] * (hi - lo), lo + hole[1] * (hi - lo)
    left = np.linspace(lo, a, int(round(n * (a - lo) / ((hi - lo) - (b - a)))), endpoint=False)
    return np.concatenate([left, np.linspace(b, hi, n - len(left))])


def test_tied_items_get_identical_difficulties_and_gaps_do_not_shrink():
    resp = simulate_responses(THETA12, np.random.default_rng(3).normal(0, 1.2, 400), 1, seed=4)
    dg, fit = diagnose(resp, IRTSpec(), FAST)
    score = resp.n_correct.sum(0)
    b = np.array([it.b for it in dg.items])
    for s in np.unique(score):
        tied = b[score == s]
        assert np.ptp(tied) == 0.0, f"items with total score {s} differ: {tied.min()} .. {tied.max()}"
    assert dg.resolution.distinct_keys == len(np.unique(score))
    # per-item Monte Carlo means spread tied items apart and eat into the gaps
    noisy = M.top_k_gap_sum(M.normalise(fit.b.mean(axis=(0, 1))), 5)
    assert dg.top5_sum > noisy + 0.01


def test_uniform_benchmark_on_a_binary_12_model_design_is_not_flagged_and_is_at_the_floor():
    resp = simulate_responses(THETA12, np.linspace(-2.5, 2.5, 600), 1, seed=5)
    dg, _ = diagnose(resp, IRTSpec(), FAST)
    assert not any(dg.flags.values()), dg.flags
    assert dg.resolution.at_floor
    gap_floor, top5_floor = key_floor(dg.resolution.distinct_keys)
    assert dg.resolution.max_gap_floor == gap_floor and dg.top5_sum >= top5_floor - 1e-12
    # the paper's threshold is reached by the plug-in Top-5, and the report says why it is not a flag
    assert dg.top5_sum >= M.FLAG_TOP5 and dg.verdicts["top5_sum"] == "at floor"
    assert dg.top5_sum <= dg.null.top5_sum.q95 + 1e-9
    assert any("the design sets the gaps" in w and "more rollouts" in w for w in dg.warnings)
    # the posterior summary and the plug-in are reported apart, each with its own label
    assert dg.posterior["top5_sum"].q05 <= dg.posterior["top5_sum"].mean <= dg.posterior["top5_sum"].q95
    assert dg.ddm_sd == pytest.approx(dg.posterior["ddm"].sd)


def test_uniform_benchmark_on_a_fine_design_is_not_flagged():
    resp = simulate_responses(THETA12, np.linspace(-2.5, 2.5, 300), 8, seed=6)
    dg, _ = diagnose(resp, IRTSpec(), FAST)
    assert not any(dg.flags.values()), (dg.flags, dg.posterior, dg.null)
    assert not dg.resolution.at_floor


def test_a_planted_hole_is_flagged_and_named_where_the_design_resolves_it():
    hole = (0.45, 0.83)  # 0.38 of the range
    b_true = holey(300, -2.5, 2.5, hole)
    resp = simulate_responses(THETA12, b_true, 8, seed=7)
    dg, _ = diagnose(resp, IRTSpec(), FAST)
    assert dg.flags["max_gap"] and dg.verdicts["max_gap"] == "flag"
    assert dg.max_gap > dg.null.max_gap.q95
    largest = dg.gaps[0]
    assert not largest.at_floor
    # the true hole's middle, on the fitted axis, lies in the largest reported gap
    assert largest.lo < (hole[0] + hole[1]) / 2 < largest.hi


def test_the_same_hole_on_a_binary_12_model_design_is_reported_as_unresolvable():
    resp = simulate_responses(THETA12, holey(300, -2.5, 2.5, (0.45, 0.83)), 1, seed=7)
    dg, _ = diagnose(resp, IRTSpec(), FAST)
    # all 13 score levels stay occupied: the plug-in gaps are the design's, and the report says so
    assert dg.resolution.distinct_keys == 13
    assert dg.resolution.at_floor and any("the design sets the gaps" in w for w in dg.warnings)
    assert not dg.flags["top5_sum"]


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_guessing_designs_get_a_null_too():
    resp = simulate_responses(THETA12, np.linspace(-2, 2, 300), 1, guessing=0.25, seed=8)
    dg, _ = diagnose(resp, IRTSpec(guessing=np.full(300, 0.25)), FAST)
    assert dg.null is not None and dg.null.replicates >= 100
    assert not any(dg.flags.values()), dg.flags


@pytest.mark.slow
def test_posterior_intervals_of_the_metrics_cover_the_truth():
    """90 % posterior intervals of DDM, max gap and Top-5 cover the true benchmark's metrics 85-95 % of the time
    (true abilities and difficulties drawn from the model's prior, 12 models x 4 rollouts, 100 benchmarks)."""
    rng = np.random.default_rng(2026)
    reps = 100
    hits = {k: 0 for k in ("ddm", "max_gap", "top5_sum")}
    settings = SamplerSettings(method="fast", chains=4, tune=300, draws=300, seed=0)
    for _ in range(reps):
        theta, b = rng.normal(size=12), rng.normal(size=120)
        resp = simulate_responses(theta, b, 4, seed=rng)
        fit = fit_irt(resp, IRTSpec(), settings)
        per_draw = posterior_metric_draws(fit.flat("b"))
        truth = M.headline_metrics(M.normalise(b))
        for k in hits:
            lo, hi = np.quantile(per_draw[k], [0.05, 0.95])
            hits[k] += lo <= truth[k] <= hi
    cover = {k: v / reps for k, v in hits.items()}
    assert all(0.85 <= c <= 0.95 for c in cover.values()), cover


@pytest.mark.slow
def test_placed_items_d_intervals_cover_the_true_axis():
    """A placed item's d interval includes the uncertainty of the axis' ends: 90 % intervals cover the item's
    true position on the TRUE axis (true min and max of the benchmark) about 90 % of the time."""
    from benchfill.irt.placement import exact_item_moments, place_items
    from benchfill.irt.scale import Scale

    rng = np.random.default_rng(5)
    hits = []
    for _ in range(6):
        theta, b = rng.normal(size=12), rng.uniform(-2, 2, 200)
        resp = simulate_responses(theta, b, 4, seed=rng)
        fit = fit_irt(resp, IRTSpec(), FAST)
        exact_item_moments(fit, resp)
        scale = Scale.from_fit(fit)
        b_new = rng.uniform(-2, 2, 60)
        new = simulate_responses(theta, b_new, 4, seed=rng)
        placed = place_items(scale, new.n_correct.T, new.n_trials.T)
        d_true = (b_new - b.min()) / (b.max() - b.min())
        hits.append(np.abs(placed.d - d_true) <= 1.645 * placed.d_sd)
    assert 0.84 <= np.mean(hits) <= 0.96, np.mean(hits)


def test_the_exact_multinomial_null_agrees_with_simulating_answers(monkeypatch):
    """Without guessing the null draws each replicate's key counts from their exact multinomial; simulating every
    answer (the general path, used with guessing) gives the same distribution."""
    from benchfill.diagnostics import null as N

    resp = simulate_responses(THETA12, np.linspace(-2, 2, 300), 4, seed=9)
    fit = fit_irt(resp, IRTSpec(), FAST)
    args = (fit.flat("theta"), resp.n_trials, None, (-2.0, 2.0))
    exact = N.design_null(*args, replicates=1000, seed=1)
    monkeypatch.setattr(N, "MULTINOMIAL_MAX_PATTERNS", 0)
    simulated = N.design_null(*args, replicates=1000, seed=2)
    from scipy import stats

    for k in N.METRICS:  # the max gap is lumpy (whether an extreme key is occupied): compare whole distributions
        # (rounded: the two paths sum the same keys' means in different orders, and a last-bit difference would
        # break the many ties of a lumpy distribution, which the KS statistic counts as differences)
        assert stats.ks_2samp(np.round(exact[k], 9), np.round(simulated[k], 9)).pvalue > 0.01, k
        assert np.mean(exact[k]) == pytest.approx(np.mean(simulated[k]), rel=0.04), k
