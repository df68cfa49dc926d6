"""IRT fitting and the seven checks: recovery of known parameters, and checks that fail when they should."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from benchfill.data import ResponseMatrix
from benchfill.irt import checks as C
from benchfill.irt.fit import fit_irt
from benchfill.irt.model import IRTSpec, SamplerSettings
from benchfill.irt.robustness import compare_1pl_2pl, leave_one_model_out
from benchfill.irt.simulate import simulate_responses


def small_world(n_items=40, seed=0, n_trials=4):
    rng = np.random.default_rng(seed)
    theta = np.linspace(-2, 2, 12)
    b = rng.normal(0, 1, n_items)
    return theta, b, simulate_responses(theta, b, n_trials, seed=rng)


@pytest.mark.slow
def test_parameter_recovery_pymc_nuts():
    """12 models x 500 items x 4 rollouts: Pearson(b_hat, b) >= 0.95 and 90 % intervals cover 85-95 % of items.

    b is spread over [-2.5, 2.5] (SD 1.44), like real benchmarks: with b drawn from the N(0, 1) prior itself,
    48 Bernoulli trials per item cap the attainable Pearson near 0.945 whatever the sampler (measured by MAP).
    """
    rng = np.random.default_rng(2024)
    theta = rng.normal(0, 1, 12)
    b = rng.uniform(-2.5, 2.5, 500)
    r = simulate_responses(theta, b, 4, seed=rng)
    fit = fit_irt(r, IRTSpec(), SamplerSettings(method="pymc", chains=4, tune=1000, draws=1000, seed=1))
    assert stats.pearsonr(fit.b_mean, b)[0] >= 0.95
    lo, hi = np.quantile(fit.flat("b"), [0.05, 0.95], axis=0)
    coverage = np.mean((b >= lo) & (b <= hi))
    assert 0.85 <= coverage <= 0.95, coverage
    assert fit.divergences == 0


def test_map_preview_recovers_order_and_guessing_model():
    theta, b, r = small_world(60)
    fit = fit_irt(r, IRTSpec(), SamplerSettings(method="map"))
    assert fit.is_map and stats.spearmanr(fit.b_mean, b)[0] > 0.85
    assert np.all(fit.b_sd > 0) and np.all(np.isfinite(fit.theta_sd))
    # guessing: 10-option items simulated with c = 0.1 are fitted better by the guessing model
    rg = simulate_responses(theta, b, 8, guessing=0.1, seed=5)
    plain = fit_irt(rg, IRTSpec(), SamplerSettings(method="map"))
    guess = fit_irt(rg, IRTSpec(guessing=np.full(len(b), 0.1)), SamplerSettings(method="map"))
    assert guess.log_likelihood_max > plain.log_likelihood_max
    assert stats.pearsonr(guess.b_mean, b)[0] > 0.9


def test_r1_fails_on_a_model_free_item():
    _, _, r = small_world(10)
    n = r.n_trials.copy()
    n[:, 3] = 0
    k = np.where(n > 0, r.n_correct, 0)
    broken = ResponseMatrix(r.models, r.item_ids, k, n)
    check = C.check_r1_complete(broken)
    assert check.passed is False and check.details["items_without_responses"] == [r.item_ids[3]]
    assert C.check_r1_complete(r).passed is True


def test_r3_flags_a_planted_misfitting_item():
    theta, b, r = small_world(15, n_trials=20)
    k = r.n_correct.copy()
    k[:, 7] = np.round(np.linspace(20, 0, 12)).astype(int)  # weakest model always right, strongest always wrong
    planted = ResponseMatrix(r.models, r.item_ids, k, r.n_trials)
    fit = fit_irt(planted, IRTSpec(), SamplerSettings(method="fast", chains=2, tune=100, draws=200))
    check = C.check_r3_misfit(planted, fit)
    assert check.details["misfitting_items"] == [r.item_ids[7]]
    clean = fit_irt(r, IRTSpec(), SamplerSettings(method="fast", chains=2, tune=100, draws=200))
    assert C.check_r3_misfit(r, clean).passed is True


def test_r2_counts_floor_and_ceiling():
    _, _, r = small_world(10)
    k = r.n_correct.copy()
    k[:, 0] = r.n_trials[:, 0]
    k[:, 1] = 0
    k[:, 2] = 0
    check = C.check_r2_floor_ceiling(ResponseMatrix(r.models, r.item_ids, k, r.n_trials))
    assert check.details["ceiling_items"] >= 1 and check.details["floor_items"] >= 2
    assert check.value >= 0.3 and check.passed is False


def test_mcmc_checks_fail_on_a_too_short_run_and_ppc_runs():
    _, _, r = small_world(20)
    fit = fit_irt(r, IRTSpec(), SamplerSettings(method="pymc", chains=2, tune=15, draws=25, seed=3))
    m1, m2, m3 = C.mcmc_checks(fit)
    assert m2.passed is False and m2.value < 400
    assert m1.name == "M1" and m1.value > 1.0
    r4 = C.check_r4_ppc(r, fit)
    assert 0.0 <= r4.value <= 1.0


def test_map_fit_skips_mcmc_checks_with_a_reason():
    _, _, r = small_world(10)
    fit = fit_irt(r, IRTSpec(), SamplerSettings(method="map"))
    for check in C.mcmc_checks(fit):
        assert check.passed is None and "MAP" in check.details["reason"]


def test_r4_detects_a_misspecified_fit():
    theta, b, r = small_world(30, n_trials=50)
    fit = fit_irt(r, IRTSpec(), SamplerSettings(method="map"))
    assert C.check_r4_ppc(r, fit).passed is True
    fit.b = fit.b[..., ::-1].copy()  # wrong difficulties: predicted pass rates no longer match
    assert C.check_r4_ppc(r, fit).passed is False


@pytest.mark.slow  # a whole command end to end (> 10 s): the full suite runs it
def test_robustness_loo_and_bic():
    theta, b, r = small_world(40, n_trials=8)
    full = fit_irt(r, IRTSpec(), SamplerSettings(method="map"))
    loo = leave_one_model_out(r, full)
    assert len(loo.pearson) == 12 and loo.worst_pearson > 0.8 and loo.mean_pearson >= loo.worst_pearson
    bic = compare_1pl_2pl(r)
    assert bic.k_2pl == bic.k_1pl + 40
    assert bic.preferred == "1pl"  # data are 1PL: the extra 40 discriminations are not worth their penalty
