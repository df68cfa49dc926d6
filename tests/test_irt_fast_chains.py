"""The fast sampler's chains are independent enough for R-hat to mean something, and its importance-sampling
diagnostic (Pareto k-hat of the proposal's weights) is reported as check M4."""

from __future__ import annotations

import numpy as np

import benchfill.irt.fast as fast
from benchfill.data import ResponseMatrix
from benchfill.irt.checks import run_checks
from benchfill.irt.convergence import rank_diagnostics
from benchfill.irt.fit import fit_irt
from benchfill.irt.model import IRTSpec, SamplerSettings


class _Gaussian:
    def __init__(self, cov: np.ndarray):
        self.prec = np.linalg.inv(cov)

    def logp_batch(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(x)
        return -0.5 * np.einsum("nj,jk,nk->n", x, self.prec, x)


def test_pareto_k_matches_arviz_psis():
    import arviz as az

    rng = np.random.default_rng(0)
    for log_w in (rng.normal(0, 0.3, 1000), rng.normal(0, 2.0, 1000), np.log(rng.pareto(1.2, 1000) + 1)):
        _, k_ref = az.psislw(log_w.copy())
        assert abs(fast.pareto_k(log_w) - float(k_ref)) < 1e-9


def test_rhat_and_pareto_k_expose_a_proposal_too_narrow_for_the_posterior():
    """IMH with a proposal half as wide as the target: importance weights are unbounded in the tails. Chains that
    start overdispersed sit there (R-hat well above 1.01), and the proposal's k-hat is above 0.7. The proposal
    that fits passes both."""
    J = 6
    target = _Gaussian(np.eye(J))
    results = {}
    for name, scale in (("fits", 1.0), ("too narrow", 0.25)):
        rng = np.random.default_rng(11)
        prop = fast.laplace_proposal(target, np.zeros(J), np.eye(J) * scale, rng, n=1000)
        theta, _ = fast.sample_theta_imh(target, prop, chains=4, burn_in=100, draws=1000, rng=rng)
        rhat = rank_diagnostics(theta)[0].max()
        results[name] = (rhat, prop.pareto_k)
    assert results["fits"][0] <= 1.01 and results["fits"][1] < 0.7, results
    assert results["too narrow"][0] > 1.01 and results["too narrow"][1] > 0.7, results


def test_chains_start_apart():
    rng = np.random.default_rng(2)
    target = _Gaussian(np.eye(3))
    prop = fast.laplace_proposal(target, np.zeros(3), np.eye(3), rng, n=500)
    theta, _ = fast.sample_theta_imh(target, prop, chains=4, burn_in=0, draws=1, rng=rng)
    starts = theta[:, 0]
    assert len({tuple(s) for s in starts}) == 4  # no shared pool: four different states


def test_fast_fit_reports_m4_and_float32_difficulties():
    rng = np.random.default_rng(5)
    theta, b = rng.normal(size=12), rng.normal(size=200)
    n = np.full((12, 200), 4)
    y = rng.binomial(n, 1 / (1 + np.exp(-(theta[:, None] - b[None, :]))))
    resp = ResponseMatrix([f"m{j}" for j in range(12)], [f"q{i}" for i in range(200)], y, n, "<sim>")
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast", chains=4, tune=100, draws=500, seed=3))
    assert fit.b.dtype == np.float32 and fit.theta.dtype == np.float64
    timings: dict[str, float] = {}
    checks = {c.name: c for c in run_checks(resp, fit, timings=timings)}
    assert list(checks) == ["R1", "R2", "R3", "R4", "M1", "M2", "M3", "M4"]
    assert set(timings) == {"R1", "R2", "R3", "R4", "M"}
    m4 = checks["M4"]
    assert m4.passed is True and m4.value < 0.7 and m4.details["engine"] == "imh"
    assert m4.details["importance_efficiency"] > 0.5
    assert checks["M1"].details["method"] == "all parameters" and checks["M1"].details["checked"] == 212


def test_workers_start_safely_with_another_thread_alive(monkeypatch):
    """With a thread alive (a progress display, say) the workers come from a fork server, not a fork of this
    multi-threaded process; both ways give the same draws."""
    import threading

    monkeypatch.setattr(fast, "PARALLEL_MIN_DRAWS", 0)
    monkeypatch.setattr(fast, "FORK_MIN_DRAWS", 0)
    monkeypatch.setattr(fast, "available_cores", lambda: 2)
    rng = np.random.default_rng(8)
    theta, b = rng.normal(size=12), rng.normal(size=80)
    n = np.full((12, 80), 2)
    y = rng.binomial(n, 1 / (1 + np.exp(-(theta[:, None] - b[None, :]))))
    resp = ResponseMatrix([f"m{j}" for j in range(12)], [f"q{i}" for i in range(80)], y, n, "<sim>")
    settings = SamplerSettings(method="fast", chains=4, tune=100, draws=200, seed=4)
    detect = fast.start_method
    stop = threading.Event()
    spinner = threading.Thread(target=stop.wait, daemon=True)
    spinner.start()
    try:  # a live thread is seen, whatever else the test process runs
        assert detect() == "forkserver"
    finally:
        stop.set()
        spinner.join()
    # both start methods, forced (other tests may leave threads alive in this process), give the same draws
    monkeypatch.setattr(fast, "start_method", lambda: "fork")
    forked = fit_irt(resp, IRTSpec(), settings)
    monkeypatch.setattr(fast, "start_method", lambda: "forkserver")
    served = fit_irt(resp, IRTSpec(), settings)
    assert forked.extra["fast"]["processes"] == served.extra["fast"]["processes"] == 2
    np.testing.assert_array_equal(forked.b, served.b)
    np.testing.assert_array_equal(forked.theta, served.theta)


def test_convergence_checks_per_likelihood_key_on_large_benchmarks(monkeypatch):
    """Above the limit, M1 / M2 look at every ability and, per likelihood key, at the first items of the key
    (at least one each); the figures are ArviZ's rank-normalised ones on those chains."""
    import benchfill.irt.checks as C

    rng = np.random.default_rng(6)
    theta, b = rng.normal(size=12), rng.normal(size=300)
    n = np.ones((12, 300), dtype=int)
    y = rng.binomial(n, 1 / (1 + np.exp(-(theta[:, None] - b[None, :]))))
    resp = ResponseMatrix([f"m{j}" for j in range(12)], [f"q{i}" for i in range(300)], y, n, "<sim>")
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast", chains=4, tune=100, draws=300, seed=2))
    items = C._difficulties_to_check(resp, fit, 40)
    keys = y.sum(0)
    assert len(items) <= 40 and set(keys[items]) == set(keys)  # every key (total score) represented
    summary = C.convergence_summary(fit, responses=resp, max_difficulties=40)
    assert summary["checked"] == 12 + len(items) and summary["parameters"] == 312
    assert summary["method"] == "per likelihood key"
    full = C.convergence_summary(fit, method="arviz")
    assert summary["max_rhat"] <= full["max_rhat"] + 1e-12 and summary["min_ess_bulk"] >= full["min_ess_bulk"] - 1e-9
