"""Truths from real benchmark shapes (tests/real_shapes.py): an independent 1PL MAP of the full-rollout real
matrices gives each shape's true difficulties; the diagnosis of benchmarks drawn from them must cover the true DDM,
max gap and Top-5 sum with its 90 % intervals and raise the flags they call for, and real data thinned to 4
rollouts must agree with the full data. Needs ../shared/data (skipped with a reason where absent)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import real_shapes as R
from scipy.stats import beta

from benchfill.diagnostics import metrics as M
from benchfill.irt.simulate import simulate_responses

POPULATION: str | None = None  # the diagnose option under test; None = diagnose's default
# replicates per shape: the slow part took 159 s on 2 busy cores with the engine of 20a718d (diagnose 1.7 s on
# MATH-500, 0.6 s on HumanEval+, 4.2 s on AIME, whose design null alone is ~4 s), 300 s with a slower engine
COVERAGE_REPLICATES = {"math500": 10, "humaneval": 10, "aime24": 10}
# The learned population meets the band on every shape (measured on seeds 0-5, 6/6 for every metric of each).
# HumanEval+ needs its tails: its true top gap (0.23) is set by 2 items solved 4 times in ~13,200 rollouts (b = 9.4),
# 3 logits past the next; at 4 rollouts they are solved by no model, beyond the panel's reach, and only the
# population's tail places them. With the normal's tails it covered none of its three metrics (0/6); the items the
# panel measures near its top show heavier tails (exponential, scale ~1.3 logits), which now place them.
COVERED_SHAPES = ("math500", "humaneval", "aime24")
# flags the truth calls for that are raised: MATH-500's and HumanEval+'s DDM. AIME's max gap and Top-5 are not
# (27 items: the design's null 95th percentile is above the plug-in: a hole-free 27-item benchmark shows as much)
FLAGGED = {"math500": ("ddm",), "humaneval": ("ddm",)}
# HumanEval+'s max gap and Top-5, which the truth calls for, lie beyond the panel's reach: the verdict is 'at floor'
# (a hole-free benchmark answered by this panel shows as much, since its own items beyond reach are placed by the same
# tail), never 'ok', and the report names the gap beyond reach (test below)
NOT_OK = {"humaneval": ("max_gap", "top5_sum")}
COVERAGE_BAND = (0.85, 0.95)  # the nominal 90 % interval's acceptable long-run coverage
COVERAGE_ALPHA = 0.05  # reject only when the Clopper-Pearson 95 % interval of the hit rate misses the band
THIN_SEEDS = (0, 1, 2)

# the truths of the independent MAP (theta ~ N(0, 3^2), b ~ N(0, 10^2), degenerate items dropped), measured:
TRUE_METRICS = {
    "math500": {"ddm": 0.138, "max_gap": 0.053, "top5_sum": 0.169},
    "humaneval": {"ddm": 0.178, "max_gap": 0.230, "top5_sum": 0.435},
    "aime24": {"ddm": 0.054, "max_gap": 0.210, "top5_sum": 0.517},
}
DROPPED = {"math500": 2, "humaneval": 10, "aime24": 3}  # items no model ever solved (none solved by all)
# the issue's figures (HumanEval+ 0.137 / 0.167 / 0.378, MATH-500 DDM 0.134) are those of a MAP with b ~ N(0, 1)
# that keeps the never-solved items (their b then sits where the prior puts it)
ISSUE_METRICS = {"humaneval": {"ddm": 0.137, "max_gap": 0.167, "top5_sum": 0.378}, "math500": {"ddm": 0.134}}


@pytest.fixture(scope="module")
def data_dir(real_shapes_data):
    return real_shapes_data


def diagnose_kwargs() -> dict[str, Any]:
    return {} if POPULATION is None else {"prior": POPULATION}


def consistent_with_band(hits: int, n: int, band: tuple[float, float] = COVERAGE_BAND,
                         alpha: float = COVERAGE_ALPHA) -> bool:
    """Whether ``hits`` of ``n`` is consistent with a coverage inside ``band``: the two-sided Clopper-Pearson
    (1 - alpha) interval of the hit rate meets it (a rate measured on ~30 replicates has an SD of ~0.055)."""
    lo = 0.0 if hits == 0 else float(beta.ppf(alpha / 2, hits, n - hits + 1))
    hi = 1.0 if hits == n else float(beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return hi >= band[0] and lo <= band[1]


# ---------------------------------------------------------------------------------------------- the truth builder


def test_independent_map_recovers_a_known_truth():
    """12 models x 300 items x 200 rollouts drawn from a known 1PL: the MAP is the truth up to sampling error
    (measured over 8 seeds: corr >= 0.9993, max |b error| <= 0.21, max |theta error| <= 0.034)."""
    rng = np.random.default_rng(11)
    theta = np.linspace(-2.5, 2.5, 12)
    b = rng.uniform(-3.0, 3.0, 300)
    resp = simulate_responses(theta, b, 200, seed=12)
    fit = R.fit_map_1pl(resp.n_correct, resp.n_trials)
    assert fit.converged and fit.grad_norm < 1e-2
    assert abs(fit.theta.mean()) < 1e-12
    assert np.corrcoef(fit.b, b)[0, 1] > 0.995
    assert np.abs(fit.b - b).max() < 0.3
    assert np.abs(fit.theta - theta).max() < 0.06
    # the metrics of the recovered b are those of the truth (the weak prior pulls nothing in)
    got, want = R.true_metrics(fit.b), R.true_metrics(b)
    for k, tol in {"ddm": 0.015, "max_gap": 0.015, "top5_sum": 0.04}.items():
        assert got[k] == pytest.approx(want[k], abs=tol), k


def test_the_gradient_is_the_derivative():
    rng = np.random.default_rng(0)
    k = rng.integers(0, 6, (4, 7))
    n = k + rng.integers(0, 6, (4, 7))
    x = rng.normal(size=11)
    _, grad = R._neg_log_posterior(x, k, n, 4, 3.0, 10.0)
    eps = 1e-6
    numeric = [(R._neg_log_posterior(x + eps * e, k, n, 4, 3.0, 10.0)[0]
                - R._neg_log_posterior(x - eps * e, k, n, 4, 3.0, 10.0)[0]) / (2 * eps) for e in np.eye(11)]
    assert np.allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_thinning_draws_without_replacement():
    resp = simulate_responses(np.linspace(-1, 1, 5), np.linspace(-2, 2, 40), 1000, seed=1)
    thinned = R.thin(resp, 4, seed=2)
    assert (thinned.n_trials == 4).all() and (thinned.n_correct <= 4).all() and (thinned.n_correct >= 0).all()
    assert np.array_equal(thinned.n_correct, R.thin(resp, 4, seed=2).n_correct)
    # all-correct and all-wrong cells stay so; the thinned share estimates the full share
    full = resp.n_correct / resp.n_trials
    assert (thinned.n_correct[full == 1] == 4).all() and (thinned.n_correct[full == 0] == 0).all()
    assert abs(thinned.n_correct.sum() / thinned.n_trials.sum() - full.mean()) < 0.03


@pytest.mark.shared
@pytest.mark.parametrize("shape", list(R.SHAPES))
def test_real_shape_truth_is_wide_and_has_the_measured_metrics(data_dir, shape):
    """The truth of a real shape: 12 models, the degenerate items dropped, wide (SD of b > 1.5), its metrics as
    measured and flagged by the paper's thresholds; draws from it have the paper's rollouts."""
    t = R.truth(shape, data_dir)
    resp = R.load_shape(shape, data_dir)
    assert len(t.theta) == 12 and t.fit.converged
    assert t.dropped == DROPPED[shape] and len(t.b) == resp.shape[1] - t.dropped
    assert t.b.std() > 1.5, f"{shape}: SD of b {t.b.std():.2f}"
    got = R.true_metrics(t.b)
    for k, want in TRUE_METRICS[shape].items():
        assert got[k] == pytest.approx(want, abs=0.005), (shape, k, got[k])
    thresholds = {"ddm": M.FLAG_DDM, "max_gap": M.FLAG_MAX_GAP, "top5_sum": M.FLAG_TOP5}
    assert got["flags"] == {k: got[k] >= thresholds[k] for k in R.METRICS}
    drawn, b_true, theta_true = R.draw_benchmark(shape, seed=3, data_dir=data_dir)
    assert drawn.shape == (12, len(t.b)) and (drawn.n_trials == R.SHAPES[shape].rollouts).all()
    assert np.array_equal(b_true, t.b) and np.array_equal(theta_true, t.theta)


@pytest.mark.shared
@pytest.mark.parametrize("shape", list(ISSUE_METRICS))
def test_the_issues_figures_are_a_unit_prior_map_on_all_items(data_dir, shape):
    """Documents where the issue's true metrics come from: the same MAP with b ~ N(0, 1), never-solved items kept."""
    resp = R.load_shape(shape, data_dir)
    got = R.true_metrics(R.fit_map_1pl(resp.n_correct, resp.n_trials, b_sd=1.0).b)
    for k, want in ISSUE_METRICS[shape].items():
        assert got[k] == pytest.approx(want, abs=0.002), (shape, k, got[k])


# ---------------------------------------------------------------------------------------------- the diagnosis


@functools.lru_cache(maxsize=None)
def _coverage(shape: str, data_dir: Path) -> R.CoverageResult:
    """One run of the replicates per shape, shared by the coverage and the flag tests."""
    return R.coverage(shape, replicates=COVERAGE_REPLICATES[shape], seeds=1000, diagnose_kwargs=diagnose_kwargs(),
                      data_dir=data_dir)


def _summary(res: R.CoverageResult) -> str:
    return "; ".join(f"{k}: truth {res.truth[k]:.3f}, posterior mean {res.mean_posterior(k):.3f}, plug-in "
                     f"{res.mean_plug_in(k):.3f}, coverage {res.coverage(k):.0%}, raised {res.flag_rate(k):.0%}"
                     for k in R.METRICS)


@pytest.mark.shared
@pytest.mark.slow
@pytest.mark.parametrize("shape", COVERED_SHAPES)
def test_90_percent_intervals_cover_the_true_metrics(data_dir, shape):
    res = _coverage(shape, data_dir)
    n = len(res.replicates)
    bad = [k for k in R.METRICS if not consistent_with_band(res.hits(k), n)]
    assert not bad, f"{shape}: coverage of {bad} outside {COVERAGE_BAND} over {n} replicates ({_summary(res)})"


@pytest.mark.shared
@pytest.mark.slow
@pytest.mark.parametrize("shape", list(FLAGGED))
def test_flags_the_truth_calls_for_are_raised(data_dir, shape):
    res = _coverage(shape, data_dir)
    missed = [k for k in FLAGGED[shape] if res.called[k] and res.flag_rate(k) <= 0.5]
    assert all(res.called[k] for k in FLAGGED[shape])
    assert not missed, f"{shape}: flags {missed} raised in half the replicates or fewer ({_summary(res)})"


@pytest.mark.shared
@pytest.mark.slow
@pytest.mark.parametrize("shape", list(NOT_OK))
def test_gaps_the_truth_flags_beyond_reach_are_never_called_ok(data_dir, shape):
    res = _coverage(shape, data_dir)
    for k in NOT_OK[shape]:
        assert res.called[k]
        assert res.verdict_rate(k, "ok") == 0.0, f"{shape}: {k} called ok ({_summary(res)})"


@pytest.mark.shared
@pytest.mark.slow
def test_a_gap_beyond_the_panels_reach_is_reported_as_such(data_dir):
    """HumanEval+ at 4 rollouts: its hardest items are solved by no model, so the diagnosis counts them beyond the
    panel's reach and says how much of the axis they set, instead of claiming the top of the axis; the population
    it learned has exponential tails, which place them."""
    import benchfill as bf

    resp, _, _ = R.draw_benchmark("humaneval", seed=1000)
    dg = bf.diagnose(resp, tune=300, draws=300, **diagnose_kwargs())
    assert dg.reach is not None and dg.reach.solved_by_none >= 2
    assert dg.reach.span_within_reach is not None and dg.reach.span_within_reach < 1.0
    assert any("beyond the panel's reach" in w for w in dg.warnings), dg.warnings
    assert dg.gaps[0].beyond_reach
    if POPULATION is None:
        assert dg.population is not None and dg.population.tail_scale_hard is not None, dg.population


@pytest.mark.shared
@pytest.mark.slow
def test_real_data_thinned_to_4_rollouts_agrees_with_the_full_data(data_dir):
    """MATH-500's 12 models: for most thinning seeds the thinned 90 % interval contains the full-data posterior mean
    (the full data are ~275x the rollouts: their posterior mean stands for the truth), and for some the thinned
    posterior mean lands in the full-data 90 % interval (that interval is narrow: DDM's is ~0.02 wide, so even an
    exact engine's thinned mean misses it often; seeds thin the same data and are not independent)."""
    # the 2 items no model solves even in ~13,200 rollouts are left out of both: their full-data b is the population
    # tail's, not a measurement (kept, they stretch the full-data axis: DDM 0.174 against 0.137 without them)
    res = R.thin_check("math500", 4, THIN_SEEDS, diagnose_kwargs(), data_dir, drop_degenerate=True)
    lines = [f"{k}: full {res.full_mean[k]:.3f} [{res.full_q05[k]:.3f}, {res.full_q95[k]:.3f}], thinned means "
             + ", ".join(f"{r.mean[k]:.3f} [{r.q05[k]:.3f}, {r.q95[k]:.3f}]" for r in res.runs) for k in R.METRICS]
    assert all(res.covers_rate(k) > 0.5 for k in R.METRICS), "; ".join(lines)
    # measured (seeds 0-9): every thinned interval covers the full-data mean (10/10 on each metric); the thinned
    # means land inside the full-data interval for max gap 7/10, Top-5 6/10, DDM 2/10 (0.119-0.130 against [0.129,
    # 0.150]). Neither rate is one a right posterior reaches: where the truth is known
    # (test_thinning_a_known_truth_keeps_its_intervals_and_its_ddm) max gap and Top-5 land inside 3/12 each, DDM
    # 11/12; the real DDM's shortfall (-0.013) is the real answers', not reproduced by a 1PL or a 2PL truth
    assert all(res.inside_rate(k) > 0.0 for k in ("max_gap", "top5_sum")), "; ".join(lines)


@pytest.mark.shared
@pytest.mark.slow
def test_thinning_a_known_truth_keeps_its_intervals_and_its_ddm(data_dir):
    """The real-data thinning check where the truth is known: matrices drawn from MATH-500's 1PL truth at the real
    matrix's rollouts per cell (~1,100), each diagnosed in full and thinned to 4. The thinned 90 % intervals contain
    the full-data mean and the true metric, and the thinned DDM mean is not pulled off the full one. Measured on
    sims 1-12 (``bench/real_shapes.py --thin-sim 12 --seed 1``): intervals 12/12 on each metric for both; thinned
    minus full mean DDM +0.000, max gap +0.035, Top-5 +0.051 -- a max-type metric's posterior mean grows with the
    difficulties' uncertainty, so "the thinned mean inside the full-data interval" holds for DDM 11/12 but max gap
    3/12 and Top-5 3/12 even here. With the paper's N(0, 1) (measured, sims 1-4) the DDM shift is -0.030 and its
    intervals contain neither the full mean nor the truth (0/4): the test fails."""
    res = R.simulated_thin_check("math500", 4, sims=4, seed=1, diagnose_kwargs=diagnose_kwargs(), data_dir=data_dir)
    lines = [f"{k}: covers full {res.covers_rate(k):.0%}, truth {res.covers_truth_rate(k):.0%}, shift "
             f"{res.shift(k):+.3f}" for k in R.METRICS]
    for k in R.METRICS:
        assert res.covers_rate(k) >= 0.75 and (res.covers_truth_rate(k) or 0.0) >= 0.75, "; ".join(lines)
    assert abs(res.shift("ddm")) < 0.01, "; ".join(lines)
