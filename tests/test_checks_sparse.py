"""R1 and R3 on sparse, binary and small designs: data drawn from the 1PL itself passes at the nominal rate, a
sparse matrix is reported (its observed share, the items and models with too few answers) instead of failing by
construction, and planted misfitting items are still found."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.data import ResponseMatrix
from benchfill.irt import checks as C
from benchfill.irt.fit import fit_irt
from benchfill.irt.model import IRTSpec, SamplerSettings
from benchfill.irt.simulate import simulate_responses

SETTINGS = dict(method="fast", chains=2, tune=100, draws=200)


def hide(r: ResponseMatrix, share: float, rng: np.random.Generator) -> ResponseMatrix:
    """The same matrix with a random ``share`` of its cells unanswered."""
    keep = rng.random(r.n_trials.shape) >= share
    return ResponseMatrix(r.models, r.item_ids, np.where(keep, r.n_correct, 0), np.where(keep, r.n_trials, 0))


def design(name: str, seed: int) -> ResponseMatrix:
    """Model-true benchmarks: 12 binary models x 300; 20 models x 300 with 40 % of cells unanswered; 12 x 500 x 4."""
    rng = np.random.default_rng(seed)
    if name == "binary":
        return simulate_responses(np.linspace(-2, 2, 12), rng.uniform(-3, 3, 300), 1, seed=rng)
    if name == "sparse":
        return hide(simulate_responses(rng.normal(0, 1, 20), rng.normal(0, 1.5, 300), 1, seed=rng), 0.4, rng)
    return simulate_responses(np.linspace(-2, 2, 12), rng.normal(0, 2, 500), 4, seed=rng)


def r3(r: ResponseMatrix, seed: int = 0) -> C.Check:
    return C.check_r3_misfit(r, fit_irt(r, IRTSpec(), SamplerSettings(**SETTINGS, seed=seed)), seed=seed)


def test_r1_reports_a_sparse_matrix_and_names_what_has_too_few_answers():
    rng = np.random.default_rng(1)
    r = hide(simulate_responses(rng.normal(0, 1, 20), rng.normal(0, 1, 300), 1, seed=rng), 0.4, rng)
    check = C.check_r1_complete(r)
    assert check.passed is True and check.value == 0
    assert check.details["observed_share"] == pytest.approx(0.6, abs=0.02)
    assert f"{check.details['observed_share']:.0%} of cells observed" in check.description
    n = r.n_trials.copy()
    n[1:, 5] = 0  # item 5 answered by one model only
    n[3, 10:] = 0  # model 3 answers 10 items
    n[3, :10] = 1
    thin = ResponseMatrix(r.models, r.item_ids, np.minimum(r.n_correct, n), n)
    check = C.check_r1_complete(thin)
    assert check.passed is False
    assert check.details["items_below_minimum"] == [r.item_ids[5]]
    assert check.details["models_below_minimum"] == []  # 10 items is the minimum
    n[3, :10] = 0
    n[3, :9] = 1
    check = C.check_r1_complete(ResponseMatrix(r.models, r.item_ids, np.minimum(r.n_correct, n), n))
    assert check.details["models_below_minimum"] == [r.models[3]]


def test_r3_finds_planted_misfitting_items():
    """30 of 300 items reversed (the stronger a model, the less often right), 12 models x 4 rollouts."""
    rng = np.random.default_rng(3)
    theta, b = np.linspace(-2, 2, 12), rng.uniform(-2, 2, 300)
    r = simulate_responses(theta, b, 4, seed=rng)
    k = r.n_correct.copy()
    k[:, :30] = rng.binomial(4, 1 / (1 + np.exp(theta[:, None] + b[None, :30])))
    check = r3(ResponseMatrix(r.models, r.item_ids, k, r.n_trials))
    assert check.passed is False
    found = set(check.details["misfitting_items"]) & set(r.item_ids[:30])
    assert len(found) >= 25 and check.details["n_misfitting"] - len(found) <= 1


def test_the_bare_rule_failed_model_true_sparse_data():
    """Why R3 compares with the model: on a sparse binary design "r <= 0" alone marks many fitting items."""
    r = design("sparse", 0)
    rho = C.item_rest_correlations(r.n_correct, r.n_trials)
    assert np.mean(rho[np.isfinite(rho)] <= 0) > C.R3_MAX_MISFIT_SHARE
    assert r3(r).passed is True


@pytest.mark.slow
@pytest.mark.parametrize("name", ["binary", "sparse", "rollouts4"])
def test_r3_passes_model_true_data_at_the_nominal_rate(name):
    """12 benchmarks per design drawn from the 1PL: at a 5 % false-fail rate, 3 or more fails has probability 0.02."""
    fails = sum(not r3(design(name, seed), seed).passed for seed in range(12))
    assert fails <= 2


def test_a_sparse_matrix_places_new_items_as_its_typical_item_was_answered():
    """The attainable placements use a typical item's panel: in a sparse matrix (every item its own panel) the
    column of an item answered by the median number of models, not the lexicographically first column."""
    from benchfill.diagnostics.report import modal_pattern

    rng = np.random.default_rng(0)
    r = design("sparse", 0)
    answered = (r.n_trials > 0).sum(0)
    pattern = modal_pattern(r.n_trials)
    assert (pattern > 0).sum() == np.sort(answered)[(answered.size - 1) // 2]
    patterns, counts = np.unique(r.n_trials.T, axis=0, return_counts=True)
    assert counts.max() <= 2  # no column is typical: the most common one, used before, was an accident
    full = simulate_responses(np.linspace(-1, 1, 12), rng.normal(0, 1, 50), 4, seed=rng)
    np.testing.assert_array_equal(modal_pattern(full.n_trials), np.full(12, 4))


def test_the_binomial_quantile_is_scipys():
    from scipy import stats

    for q in (0.5, 0.95, 0.995):
        for n in (1, 15, 300, 80_000, 10**6):
            for p in (0.001, 0.05, 0.3):
                assert C.binomial_quantile(q, n, p) == int(stats.binom.ppf(q, n, p)), (q, n, p)


# ------------------------------------------------------------- R3 / R4 replicates in the compiled kernels


def test_kernel_item_rest_correlations_equal_numpy():
    from benchfill.irt import kernels

    rng = np.random.default_rng(5)
    n = rng.integers(0, 5, (40, 300))  # rollouts and unanswered cells; some items answered by < 3 models
    n[2:, :4] = 0
    k = rng.binomial(n, 0.6)
    out = np.empty(300)
    kernels.item_rest_correlations_one(k, n, out)
    ref = C.item_rest_correlations(k, n)
    assert np.array_equal(np.isnan(out), np.isnan(ref)) and np.isnan(ref[:4]).all()
    assert np.allclose(out[np.isfinite(out)], ref[np.isfinite(ref)], rtol=0, atol=1e-12)


def test_kernel_replicates_are_binomial_with_the_model_probability():
    """Mean replicated counts per cell (2,000 replicates) within a few SEs of n p, with guessing; zero trials stay 0;
    the row and column totals the kernel adds equal the counts' sums; extreme logits give p = c or 1."""
    rng = np.random.default_rng(6)
    J, I, R = 30, 200, 2000
    n = rng.integers(0, 4, (J, I))
    theta, b, c = rng.normal(0, 1, J), rng.normal(0, 2, I), rng.uniform(0, 0.3, I)
    p = c + (1 - c) / (1 + np.exp(-(theta[:, None] - b[None, :])))
    rep = C.Replicator(n, rng)
    total = np.zeros((J, I))
    row, col = np.zeros(J, dtype=np.int64), np.zeros(I, dtype=np.int64)
    for _ in range(R):
        total += rep.counts(theta, b, c, row, col)
    asked = n > 0
    z = (total / R - n * p)[asked] / np.sqrt(n * p * (1 - p) / R)[asked]
    assert abs(z.mean()) < 0.1 and 0.9 < z.std() < 1.1 and np.abs(z).max() < 5.5
    assert total[~asked].sum() == 0
    assert np.array_equal(row, total.sum(1)) and np.array_equal(col, total.sum(0))
    far = C.Replicator(np.full((2, 3), 4), rng).counts(np.array([-300.0, 300.0]),
                                                        np.array([0.0, 1000.0, -1000.0]), None)
    assert far[0].tolist() == [0, 0, 4] and far[1].tolist() == [4, 0, 4]


@pytest.mark.parametrize("kind", ["fitting", "reversed"])
def test_r3_and_r4_in_the_kernels_decide_as_numpy(kind):
    """The same fit checked with the compiled replicates (min_work=0) and with numpy: the same verdicts, and on a
    fitting design the same figures up to Monte Carlo noise; planted reversed items are found by both."""
    rng = np.random.default_rng(3)
    theta, b = np.linspace(-2, 2, 12), rng.uniform(-2, 2, 300)
    r = simulate_responses(theta, b, 4, seed=rng)
    if kind == "reversed":
        k = r.n_correct.copy()
        k[:, :30] = rng.binomial(4, 1 / (1 + np.exp(theta[:, None] + b[None, :30])))
        r = ResponseMatrix(r.models, r.item_ids, k, r.n_trials)
    fit = fit_irt(r, IRTSpec(), SamplerSettings(**SETTINGS, seed=0))
    for fn in (C.check_r3_misfit, C.check_r4_ppc):
        ref, kern = fn(r, fit, min_work=10**18), fn(r, fit, min_work=0)
        assert kern.passed == ref.passed
        assert kern.value == pytest.approx(ref.value, abs=0.03 if kind == "fitting" else 0.05)
    if kind == "reversed":
        found = set(C.check_r3_misfit(r, fit, min_work=0).details["misfitting_items"]) & set(r.item_ids[:30])
        assert len(found) >= 25



def test_the_kernels_replicates_are_the_same_on_any_number_of_cores(monkeypatch):
    """R3 and R4 spread their compiled replicates over the cores in blocks with their own seeded streams: one core
    and two give the same replicates, bit for bit, and another seed other ones."""
    import benchfill.forking as forking

    def block(reps: range, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        return rng.random((len(reps), 3)), np.array([[reps.start, reps.stop]])

    runs = {}
    for cores in (1, 2, 3):
        monkeypatch.setattr(forking, "available_cores", lambda cores=cores: cores)
        runs[cores] = C.replicate_blocks(block, 45, seed=7, tag=4)
    values, ranges = runs[1]
    assert values.shape == (45, 3) and ranges.tolist() == [[0, 10], [10, 20], [20, 30], [30, 40], [40, 45]]
    assert all(np.array_equal(values, runs[k][0]) for k in (2, 3))
    assert not np.array_equal(values, C.replicate_blocks(block, 45, seed=8, tag=4)[0])
