"""Which model the counts support, the 1PL with a fixed guessing rate or without: the lattice integral of an item's
predictive density, the leave-one-item-out identity, the advice line, and the comparison on counts simulated from
each model (it must pick the one that made them, and its c = 0 verdicts must be those `--guessing 0` gives)."""

from __future__ import annotations

import numpy as np
import pytest

import benchfill as bf
from benchfill.diagnostics import guessing as G
from benchfill.diagnostics.guidance import guessing_advice
from benchfill.irt.prior import Population
from benchfill.irt.simulate import simulate_responses

THETA12 = np.linspace(-2.0, 2.0, 12)
QUICK = {"chains": 2, "tune": 100, "draws": 300, "seed": 0}


@pytest.mark.parametrize("c", [0.0, 0.25])
def test_item_log_marginals_match_adaptive_quadrature(c):
    from scipy import integrate, stats

    rng = np.random.default_rng(0)
    prior = Population.normal(0.3, 1.7)
    theta = rng.normal(0, 1, (3, 6))
    n = rng.integers(0, 9, (4, 6))
    y = rng.binomial(n, 0.4)
    got = G.item_log_marginals(theta, y, n, np.full(4, c), prior)
    assert got.shape == (4, 3)
    for k in range(4):
        for s in range(3):
            def integrand(b):
                p = c + (1 - c) / (1 + np.exp(-(theta[s] - b)))
                return np.exp(stats.binom.logpmf(y[k], n[k], p).sum() + prior.log_density(np.array(b)))

            want, _ = integrate.quad(integrand, -30, 30, limit=400, points=[0])
            assert got[k, s] == pytest.approx(np.log(want), abs=1e-7)


def test_item_log_marginals_on_chunk_windows_over_two_processes_equal_the_whole_lattice():
    """Many keys (guessing and plain, spread from never to always right) and enough draws that the keys are split
    over forked processes and each chunk is integrated on its own window: the same log densities as one trapezoid
    sum over the whole lattice."""
    from benchfill.irt import fast
    from benchfill.irt.model import log_binomial_coefficients

    rng = np.random.default_rng(3)
    prior = Population.normal(0.5, 2.0)
    J, K, S = 12, 1500, 40
    theta = rng.normal(0, 1, J) + 0.05 * rng.normal(size=(S, J))
    n = rng.integers(1, 5, (K, J))
    y = rng.binomial(n, rng.uniform(0, 1, (K, 1)))
    c = np.where(np.arange(K) % 3 == 0, 0.0, 0.25)
    got = G.item_log_marginals(theta, y, n, c, prior)
    # the reference: the same lattice, every node, every key at once
    lo, hi = prior.support(cut=G.SUPPORT_CUT)
    h = 1.0 / (2.0 * np.sqrt(prior.curvature + 0.5 * n.sum(1).max()))
    b = np.linspace(lo, hi, int(np.ceil((hi - lo) / h)) + 1)
    assert K * b.size * S >= 20_000_000  # the forked path (placement.FORK_MIN_NODES)
    log_w = prior.log_density(b) + np.log(np.full(b.size, b[1] - b[0]) * np.r_[0.5, np.ones(b.size - 2), 0.5])
    want = np.empty((K, S))
    for s in range(S):
        X = theta[s][:, None] - b[None, :]
        ell = fast.grid_log_likelihood(n.astype(float), y.astype(float), y.sum(1).astype(float), c, X,
                                       fast.softplus(X), b) + log_w
        ell += np.where(c <= 0, y @ theta[s], 0.0)[:, None]
        peak = ell.max(1)
        want[:, s] = peak + np.log(np.exp(ell - peak[:, None]).sum(1))
    want += log_binomial_coefficients(y, n)[:, None]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


def test_count_keys_share_items_with_the_same_counts_and_rate():
    n = np.array([[2, 2, 2, 2], [1, 1, 1, 0]])
    y = np.array([[1, 1, 1, 2], [0, 0, 0, 1]])  # the last cell has no trials: its count is ignored
    yk, nk, ck, key = G.count_keys(y, n, np.array([0.25, 0.25, 0.0, 0.0]))
    assert key[0] == key[1] != key[2] and len(ck) == 3
    assert ck[key[0]] == 0.25 and ck[key[2]] == 0.0
    assert nk[key[3]].tolist() == [2, 0] and yk[key[3]].tolist() == [2, 0]


def test_leave_one_out_is_the_harmonic_mean_of_the_draws():
    ll = np.log(np.array([[0.2, 0.2, 0.2], [0.1, 0.2, 0.4]]))
    loo = G.loo_from_draws(ll)
    assert loo[0] == pytest.approx(np.log(0.2))  # draws that agree: the density itself
    assert loo[1] == pytest.approx(-np.log(np.mean([10.0, 5.0, 2.5])))  # below the plain mean's log
    assert loo[1] < np.log(np.mean([0.1, 0.2, 0.4]))
    delta, se = G.elpd_difference(np.array([1.0, 3.0]), np.array([0.0, 0.0]), np.array([0, 0, 1]))
    assert delta == 5.0 and se == pytest.approx(np.sqrt(3 * np.var([1, 1, 3], ddof=1)))
    assert G.is_clear(5.0, 2.0) and not G.is_clear(5.0, 3.0) and not G.is_clear(3.0, 0.1)


def test_the_advice_line_says_which_fits_and_what_to_do():
    ok = {"ddm": "ok", "max_gap": "ok", "top5_sum": "ok"}
    flag = {**ok, "ddm": "flag"}
    better = guessing_advice(0.25, 31.0, 8.0, 500, True, flag, ok)
    assert better.startswith("the counts favour guessing c = 0.25 over c = 0 (Δelpd = +31.0 ± 8.0 nats over 500")
    assert "under c = 0.25 (above): DDM flag" in better and "under c = 0: DDM ok" in better
    worse = guessing_advice(0.25, -12.0, 3.0, 500, True, flag, flag)
    assert "favour c = 0 (no guessing)" in worse and "rerun with --guessing 0" in worse
    assert "the verdicts are the same under both" in worse
    close = guessing_advice(0.1, 1.5, 2.0, 300, False, flag, ok)
    assert "about equally well" in close and "cannot settle" in close


@pytest.fixture(scope="module")
def guessing_world():
    """Counts from a 1PL with guessing c = 0.25 (12 models x 300 items x 4 rollouts), diagnosed with c = 0.25."""
    b = np.random.default_rng(11).normal(0.0, 1.5, 300)
    resp = simulate_responses(THETA12, b, 4, guessing=0.25, seed=12)
    return resp, bf.diagnose(resp, guessing=0.25, **QUICK)


@pytest.fixture(scope="module")
def plain_world():
    """Counts from a plain 1PL (same design), diagnosed with c = 0.25 and with --guessing 0."""
    b = np.random.default_rng(13).normal(0.0, 1.5, 300)
    resp = simulate_responses(THETA12, b, 4, seed=14)
    return resp, bf.diagnose(resp, guessing=0.25, **QUICK), bf.diagnose(resp, guessing=0.0, **QUICK)


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_counts_from_a_guessing_1pl_favour_guessing(guessing_world):
    resp, dg = guessing_world
    cmp = dg.guessing_comparison
    assert cmp is not None and cmp.guessing == 0.25 and cmp.n_items == 300
    assert cmp.preferred == "guessing" and cmp.clear, cmp
    assert cmp.delta_elpd == pytest.approx(cmp.elpd_guessing - cmp.elpd_no_guessing)
    assert cmp.delta_elpd > 2 * cmp.se_delta > 0
    assert cmp.pareto_k_max is not None and cmp.pareto_k_max < 0.7  # the importance ratios are reliable
    assert cmp.loglik_at_mean_guessing > cmp.loglik_at_mean_no_guessing  # the plug-in statement agrees
    assert dg.advice[0].startswith("the counts favour guessing c = 0.25 over c = 0"), dg.advice
    assert "compare_guessing" in dg.timings
    assert dg.schema_version == 6
    assert bf.Diagnosis.model_validate_json(dg.to_json()).guessing_comparison == cmp  # in the JSON contract


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_counts_from_a_plain_1pl_favour_no_guessing(plain_world):
    resp, dg, dg0 = plain_world
    cmp = dg.guessing_comparison
    assert cmp is not None and cmp.preferred == "no guessing" and cmp.clear, cmp
    assert cmp.delta_elpd < -2 * cmp.se_delta < 0
    assert dg.advice[0].startswith("the counts favour c = 0 (no guessing) over c = 0.25"), dg.advice
    assert "rerun with --guessing 0" in dg.advice[0]
    # the c = 0 side is what `--guessing 0` reports: same verdicts, same posterior
    assert dg0.guessing_comparison is None and dg0.guessing is None
    assert cmp.verdicts_no_guessing == dg0.verdicts
    assert cmp.posterior_no_guessing == {k: p.mean for k, p in dg0.posterior.items()}


def test_the_no_guessing_side_computed_beside_the_fit_gives_the_same_comparison(monkeypatch):
    """From OVERLAP_MIN_CELLS cells the c = 0 fit runs in a forked child while the fit with guessing runs: the
    same comparison, to the bit, as computing it after (only the time differs)."""
    from benchfill.diagnostics import report
    from benchfill.forking import start_method

    resp = simulate_responses(THETA12[:6], np.linspace(-2, 2, 60), 2, guessing=0.25, seed=3)
    monkeypatch.setattr(report, "OVERLAP_MIN_CELLS", 10**12)
    after = bf.diagnose(resp, guessing=0.25, **QUICK)
    calls = []

    class Spy(report.ForkedCall):
        def __init__(self, fn):
            super().__init__(fn)
            calls.append(self.forked)

    monkeypatch.setattr(report, "OVERLAP_MIN_CELLS", 0)
    monkeypatch.setattr(report, "ForkedCall", Spy)
    beside = bf.diagnose(resp, guessing=0.25, **QUICK)
    assert calls == [start_method() == "fork"]  # forked wherever fork is safe here
    a, b = (dg.guessing_comparison.model_dump(exclude={"wall_time_s"}) for dg in (after, beside))
    assert a == b
    assert beside.advice == after.advice and beside.verdicts == after.verdicts


def test_the_comparison_runs_beside_only_an_independence_fit_of_moderate_size():
    """Beside the main fit where it gains and two fits' memory is small: MMLU-Pro's and OpenCompass's shapes; after
    it for a small design, a leaderboard (the Gibbs engine holds both cores and gigabytes) and a huge one."""
    from benchfill.diagnostics.report import overlaps_comparison

    assert overlaps_comparison(29, 12_032) and overlaps_comparison(12, 41_871)
    assert not overlaps_comparison(12, 500)  # too small to gain
    assert not overlaps_comparison(2_211, 12_032) and not overlaps_comparison(183, 5_000)  # Gibbs
    assert not overlaps_comparison(12, 1_000_000)  # two such fits' memory at once


def test_no_comparison_when_asked_not_to():
    resp = simulate_responses(THETA12[:6], np.linspace(-2, 2, 60), 2, guessing=0.25, seed=3)
    dg = bf.diagnose(resp, guessing=0.25, compare_guessing=False, **QUICK)
    assert dg.guessing_comparison is None and "compare_guessing" not in dg.timings
