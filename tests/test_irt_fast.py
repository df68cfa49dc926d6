"""The "fast" exact 1PL sampler: quadrature identities, exact conditional draws, and agreement with the PyMC
reference on simulated and real data (posterior means, SDs, ESS, R-hat)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import expit, log_expit

import benchfill.irt.fast as fast
from benchfill.data import ResponseMatrix, select_models
from benchfill.importers import load_responses
from benchfill.irt.fit import fit_irt
from benchfill.irt.model import IRTFit, IRTSpec, SamplerSettings
from benchfill.irt.prior import Population

J = 12
PAPER = Population.paper()
# a learned-looking population: wide, skewed, with a dip (a hole) near 1 logit
BUMPY = Population("spline", 0.4, 2.4, -4.0, 0.5, np.array([0.8, -0.3, 0.5, 1.1, -0.4, -2.5, -2.8, 0.6, 1.2,
                                                            0.3, -0.9]), 1.0)
# the same with exponential tails (scale 2.4 / 0.7 = 3.4 logits each side): items beyond reach go far
TAILED = Population("spline", 0.4, 2.4, -4.0, 0.5, BUMPY.coef, 1.0, 0.7, 0.7)
PRIORS = pytest.mark.parametrize("prior", [PAPER, BUMPY, TAILED], ids=["paper", "spline", "tails"])
# the same, its exponential-tailed case in the slow lane (~15-20 s on a 2-core AMD EPYC: guessing items' windows run
# far into the tails)
PRIORS_TAILS_SLOW = pytest.mark.parametrize(
    "prior", [PAPER, BUMPY, pytest.param(TAILED, marks=pytest.mark.slow)], ids=["paper", "spline", "tails"])


def _simulate(n_items: int, rollouts: int, c: float, seed: int) -> tuple[ResponseMatrix, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    theta = np.sort(rng.normal(size=J))
    b = rng.normal(size=n_items)
    n = np.full((J, n_items), rollouts)
    y = rng.binomial(n, c + (1 - c) * expit(theta[:, None] - b[None, :]))
    resp = ResponseMatrix([f"m{j:02d}" for j in range(J)], [f"q{i}" for i in range(n_items)], y, n, "<sim>")
    return resp, theta, b


def _diagnostics(fit: IRTFit) -> dict[str, float]:
    """min bulk / tail ESS and max R-hat over every theta and b (arviz on an xarray dataset of the draws)."""
    import arviz as az
    import xarray as xr

    ds = xr.Dataset({"theta": (("chain", "draw", "model"), fit.theta),
                     "b": (("chain", "draw", "item"), np.asarray(fit.b, dtype=float))})
    bulk, tail, rhat = az.ess(ds, method="bulk"), az.ess(ds, method="tail"), az.rhat(ds)
    return {
        "ess_bulk": min(float(bulk[v].min()) for v in ("theta", "b")),
        "ess_tail": min(float(tail[v].min()) for v in ("theta", "b")),
        "rhat": max(float(rhat[v].max()) for v in ("theta", "b")),
    }


def _compare(fast_fit: IRTFit, ref: IRTFit) -> dict[str, float]:
    fm, rm = fast_fit.b_mean, ref.b_mean
    ratio = fast_fit.b_sd / ref.b_sd
    return {"pearson": float(np.corrcoef(fm, rm)[0, 1]), "max_diff": float(np.abs(fm - rm).max()),
            "max_diff_in_sds": float((np.abs(fm - rm) / ref.b_sd).max()),
            "sd_ratio_min": float(ratio.min()), "sd_ratio_max": float(ratio.max())}


def _assert_close_to_reference(fit: IRTFit, ref: IRTFit, sd_tol: float = 0.10) -> None:
    cmp = _compare(fit, ref)
    diag = _diagnostics(fit)
    print(f"\nfast vs reference: {cmp}; fast diagnostics: {diag}; fast {fit.wall_time_s:.1f} s, "
          f"reference {ref.wall_time_s:.1f} s")
    assert cmp["pearson"] >= 0.999, cmp
    # 0.05 logits, or a fifth of the posterior SD where that is wide (items no model solved: the population's tail,
    # SD ~1.5 logits, whose Monte Carlo means differ by more than 0.05 between two samplers of ~2,000 ESS)
    assert cmp["max_diff"] <= 0.05 or cmp["max_diff_in_sds"] <= 0.2, cmp
    assert 1 - sd_tol <= cmp["sd_ratio_min"] and cmp["sd_ratio_max"] <= 1 + sd_tol, cmp
    assert diag["ess_bulk"] >= 400 and diag["ess_tail"] >= 400, diag
    assert diag["rhat"] <= 1.01, diag
    assert fit.divergences == 0


# ------------------------------------------------------------------------------------------------ unit level


def test_reduce_items_uses_sufficient_statistics():
    y = np.array([[1, 0, 1, 2], [0, 1, 0, 1]])
    n = np.array([[1, 1, 1, 2], [1, 1, 1, 2]])
    keys = fast.reduce_items(y, n, None)
    # items 0 and 1 have the same trials and the same total correct: one key; item 2 equals item 0
    assert keys.n_keys == 2
    assert keys.item_key[0] == keys.item_key[1] == keys.item_key[2] != keys.item_key[3]
    assert keys.mult.sum() == 4
    np.testing.assert_array_equal(keys.theta_lin, y.sum(1))
    # with guessing the whole count column is the key
    g = fast.reduce_items(y, n, np.array([0.25, 0.25, 0.25, 0.0]))
    assert g.n_keys == 3 and g.item_key[0] == g.item_key[2] != g.item_key[1]


def _brute_logp(theta, y, n, c, prior=PAPER):
    """log p(theta | y) + const by adaptive scipy quadrature, item by item (an independent implementation)."""
    total = -0.5 * theta @ theta
    scan = np.linspace(-24, 24, 48001)
    for i in range(y.shape[1]):
        def loglik(b, i=i):
            p = c[i] + (1 - c[i]) * expit(theta[:, None] - np.atleast_1d(b)[None, :])
            ll = np.where(n[:, i, None] > 0, y[:, i, None] * np.log(p) + (n[:, i] - y[:, i])[:, None] * np.log1p(-p), 0.0)
            return ll.sum(0) + prior.log_density(np.atleast_1d(b))

        ls = loglik(scan)
        top = ls.max()
        near = scan[ls > top - 60]
        val = quad(lambda b: np.exp(loglik(b)[0] - top), near[0] - 0.01, near[-1] + 0.01,
                   points=[float(scan[ls.argmax()])], limit=200, epsabs=0, epsrel=1e-13)[0]
        total += top + np.log(val)
    return total


@PRIORS_TAILS_SLOW
def test_marginal_logp_and_gradient_are_exact(prior):
    rng = np.random.default_rng(1)
    n_items = 40
    theta = rng.normal(size=J)
    b = rng.normal(size=n_items) * 1.5
    n = rng.integers(0, 6, size=(J, n_items))  # ragged trials, some cells missing
    n[:, :3] = 300  # a few high-rollout items: narrow conditionals
    c = np.where(rng.random(n_items) < 0.4, 0.25, 0.0)
    y = rng.binomial(n, c + (1 - c) * expit(theta[:, None] - b[None, :]))
    keys = fast.reduce_items(y, n, c)
    mg = fast.build_marginal(keys, prior)
    model, mode, cov = mg.model, mg.mode, mg.cov
    t1, t2 = mode, mode + 0.2 * rng.normal(size=J)
    exact = _brute_logp(t2, y, n, c, prior) - _brute_logp(t1, y, n, c, prior)
    ours = model.logp_grad(t2)[0] - model.logp_grad(t1)[0]
    # a spline population's log density is piecewise cubic (C2), so the trapezoid sums converge as h^4 there
    # instead of spectrally: ~3e-5 nats per item at the engine's spacing (on MMLU-Pro's 12,032 items up to 1.4e-4
    # per key, moving the abilities' posterior means by <= 0.025 SD: README, Performance 2026-12-07)
    assert abs(ours - exact) < (1e-8 if prior is PAPER else 1e-4 * n_items)
    g = model.logp_grad(t2)[1]
    eps = 1e-5
    num = np.array([(model.logp_grad(t2 + eps * e)[0] - model.logp_grad(t2 - eps * e)[0]) / (2 * eps)
                    for e in np.eye(J)])
    # the analytic gradient leaves out the lattice's motion, zero up to the quadrature error: tiny for the smooth
    # paper prior, ~1e-4 relative for a piecewise-cubic spline (it steers mode searches and NUTS, not the density)
    np.testing.assert_allclose(g, num, atol=(1e-6 if prior is PAPER else 1e-3) * max(1.0, np.abs(g).max()))
    # the Laplace covariance is a proper covariance
    assert np.all(np.linalg.eigvalsh(cov) > 0)


@PRIORS
def test_guessing_hessian_is_exact_and_mode_searches_stop_at_the_gradient_floor(prior):
    """The analytic Hessian of a guessing block (any trials) against central differences of the analytic gradient,
    on the pilot's full lattices and on the fast model's windows; a mode search with guessing stops at the
    gradient's round-off floor (no line search at round-off) and lands on the same mode as a tight search."""
    rng = np.random.default_rng(3)
    n_items = 120
    theta = rng.normal(size=J)
    b = rng.normal(size=n_items) * 1.5
    n = rng.integers(0, 3, size=(J, n_items))  # ragged trials, some cells missing
    c = np.where(rng.random(n_items) < 0.6, 0.2, 0.25)
    y = rng.binomial(n, c + (1 - c) * expit(theta[:, None] - b[None, :]))
    keys = fast.reduce_items(y, n, c)
    mg = fast.build_marginal(keys, prior)
    for model in (fast.pilot_model(keys, mg.mode, 14.0, prior), mg.model):
        assert all(blk.log_c is not None for blk in model.blocks)
        t = mg.mode + 0.1 * rng.normal(size=J)
        eps = 1e-4
        D = np.array([(model.logp_grad(t + eps * e)[1] - model.logp_grad(t - eps * e)[1]) / (2 * eps)
                      for e in np.eye(J)])
        # as for the gradient, the lattice's motion is left out: zero up to the quadrature error, tiny for the paper
        # prior, ~1e-5 relative for a piecewise-cubic spline (it only shapes the proposal and the windows' room)
        tol = 1e-7 if prior is PAPER else 1e-4
        np.testing.assert_allclose(fast._neg_hessian(model, t), -(D + D.T) / 2, atol=tol * np.abs(D).max())
    floor = fast.gradient_floor(mg.model)
    assert floor == pytest.approx(fast.GRADIENT_ROUNDOFF * float(n.sum()))
    tight = fast._mode_and_cov(mg.model, np.zeros(J), gtol=0.0, max_iter=60)[0]
    # as high a log density (to 1e-4 nats: with a spline the analytic gradient omits the lattice motion, above)
    assert mg.model.logp_grad(mg.mode)[0] >= mg.model.logp_grad(tight)[0] - 1e-4


def test_the_guessing_hessian_skips_only_weights_below_round_off(monkeypatch):
    """Each run of lattice nodes sums only the keys with weight there: the same Hessian as summing every key at
    every node (HESSIAN_WEIGHT_FLOOR below any weight), to round-off, on the pilot's wide lattices where most
    keys' weights vanish over most nodes."""
    rng = np.random.default_rng(8)
    theta = rng.normal(size=J)
    b = rng.normal(size=300) * 2.5
    n = rng.integers(1, 3, size=(J, 300))
    y = rng.binomial(n, 0.2 + 0.8 * expit(theta[:, None] - b[None, :]))
    keys = fast.reduce_items(y, n, np.full(300, 0.2))
    pilot = fast.pilot_model(keys, theta, 14.0, TAILED)
    assert all(blk.log_c is not None for blk in pilot.blocks)
    for blk in pilot.blocks:  # what the floor leaves out: most (key, node) weights of the wide lattice
        ell = fast.block_log_density(theta[None, :], blk)[0][0]
        P = np.exp(ell - ell.max(1, keepdims=True))
        assert np.mean(P / P.sum(1, keepdims=True) <= fast.HESSIAN_WEIGHT_FLOOR) > 0.3
    skipped = fast._neg_hessian(pilot, theta)
    monkeypatch.setattr(fast, "HESSIAN_WEIGHT_FLOOR", -1.0)
    every = fast._neg_hessian(pilot, theta)
    np.testing.assert_allclose(skipped, every, rtol=0, atol=1e-12 * np.abs(every).max())


def test_the_mode_search_from_where_learning_ended_finds_the_same_model_sooner(monkeypatch):
    """build_marginal started from the learned population's mode and curvature (fit_irt passes them) gives the
    same mode, covariance and windows as a search from 0 with fewer log-density evaluations; fit_irt does pass them."""
    from benchfill.irt import population

    resp, _, _ = _simulate(400, 2, 0.25, seed=11)
    keys = fast.reduce_items(resp.n_correct, resp.n_trials, np.full(400, 0.25))
    prior, start = population.learn_population(keys, "spline")
    calls = {"n": 0}
    logp_grad = fast.MarginalModel.logp_grad

    def counted(self, theta):
        calls["n"] += 1
        return logp_grad(self, theta)

    monkeypatch.setattr(fast.MarginalModel, "logp_grad", counted)
    cold = fast.build_marginal(keys, prior)
    n_cold, calls["n"] = calls["n"], 0
    warm = fast.build_marginal(keys, prior, start)
    assert calls["n"] < n_cold
    np.testing.assert_allclose(warm.mode, cold.mode, atol=1e-5)
    np.testing.assert_allclose(warm.cov, cold.cov, rtol=1e-3, atol=1e-6 * np.abs(cold.cov).max())
    assert warm.model.n_nodes == pytest.approx(cold.model.n_nodes, rel=0.02)
    seen = []
    build = fast.build_marginal
    monkeypatch.setattr(fast, "build_marginal", lambda k, p, s=None: seen.append(s) or build(k, p, s))
    fit_irt(resp, IRTSpec(guessing=np.full(400, 0.25)), SamplerSettings(chains=2, draws=50, tune=20))
    assert len(seen) == 1 and isinstance(seen[0], fast.ModeStart)
    np.testing.assert_allclose(seen[0].theta, start.theta, atol=1e-12)


class _BigQuadratic:
    """log p = C - (theta - m)' A (theta - m) / 2 with C = -1.8e6 (a 1,000 x 5,000 fit's size) and 1e-9 nats of
    summation noise on log p (its round-off at that size); the gradient is exact."""

    blocks = ()

    def __init__(self, J: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        Q = rng.normal(size=(J, J))
        self.A = Q @ Q.T / J + np.eye(J)
        self.m = rng.normal(size=J)
        self.evaluations = 0

    def logp_grad(self, theta):
        self.evaluations += 1
        d = theta - self.m
        noise = 1e-9 * np.sin(1e7 * float(np.abs(theta).sum()))
        return -1.8e6 - 0.5 * float(d @ self.A @ d) + noise, -(self.A @ d)


def test_a_mode_search_takes_a_point_whose_gradient_passes_when_the_gain_is_below_round_off():
    """Near the mode the gain in log p falls below its round-off before the gradient falls below gtol: the
    Armijo test then fails by chance (measured: 47 gradients instead of 9 on a 1,000 x 5,000 population search).
    A candidate whose gradient passes and whose log p is no worse within round-off ends the search; started from
    the exact curvature and its inverse (``cov0``), one step reaches the mode."""
    model = _BigQuadratic(30)
    start = model.m + 1e-6 * np.random.default_rng(1).normal(size=30)
    theta, cov = fast._mode_and_cov(model, start, gtol=1e-8, curvature=model.A, cov0=np.linalg.inv(model.A),
                                    with_cov=False)
    assert np.max(np.abs(model.A @ (theta - model.m))) <= 1e-8
    assert model.evaluations <= 3
    np.testing.assert_allclose(cov, np.linalg.inv(model.A), rtol=1e-6, atol=1e-9)


def test_the_inverse_curvature_kept_by_bfgs_is_the_inverse_of_the_kept_curvature():
    """The search keeps B and H = B^-1 by two rank-2 updates (no factorisation per step): from a poor start
    (the identity) it reaches the mode of a quadratic, and its returned H is the inverse of a positive definite
    curvature."""
    model = _BigQuadratic(20, seed=2)
    theta, H = fast._mode_and_cov(model, np.zeros(20), gtol=1e-6, curvature=np.eye(20), with_cov=False)
    assert np.max(np.abs(model.A @ (theta - model.m))) <= 1e-6
    assert np.linalg.eigvalsh(H).min() > 0
    np.testing.assert_allclose(H, H.T, atol=1e-12)


@PRIORS_TAILS_SLOW
def test_conditional_draws_match_the_exact_conditional_posterior(prior):
    """Given abilities, every b draw comes from p(b | theta, y): means and SDs of 20,000 draws per item agree
    with brute-force integration within Monte Carlo error, for plain, guessing, narrow and one-sided items."""
    rng = np.random.default_rng(3)
    n_items = 24
    theta = rng.normal(size=J)
    b = rng.normal(size=n_items) * 1.5
    n = np.full((J, n_items), 4)
    n[:, :4] = 1100
    c = np.where(np.arange(n_items) % 3 == 0, 0.2, 0.0)
    y = rng.binomial(n, c + (1 - c) * expit(theta[:, None] - b[None, :]))
    y[:, 5], y[:, 6], y[:, 1] = n[:, 5], 0, n[:, 1]  # everyone right / everyone wrong
    keys = fast.reduce_items(y, n, c)
    mg = fast.build_marginal(keys, prior)
    S = 10000
    thetas = np.tile(mg.mode, (S, 1))
    draws, edge = fast.draw_difficulties(keys, mg.draw_blocks(thetas), thetas, rng)
    assert edge < -20
    def log_posterior(i: int, grid: np.ndarray) -> np.ndarray:
        x = mg.mode[:, None] - grid[None, :]
        with np.errstate(divide="ignore"):  # log(c) = -inf for c = 0: logaddexp takes it
            log_p = np.logaddexp(np.log(c[i]), np.log1p(-c[i]) + log_expit(x))
        log_q = np.log1p(-c[i]) + log_expit(-x)  # log(1 - p), stable where p -> 1 far out in the tails
        return (y[:, i, None] * log_p + (n[:, i] - y[:, i])[:, None] * log_q).sum(0) + prior.log_density(grid)

    scan = np.linspace(-120, 130, 25001)  # a coarse scan finds where each posterior lives (tails reach far out)
    for i in range(n_items):
        ls = log_posterior(i, scan)
        alive = scan[ls > ls.max() - 50]
        grid = np.linspace(alive[0] - 0.1, alive[-1] + 0.1, 100001)  # brute force on the living range, finely
        ll = log_posterior(i, grid)
        w = np.exp(ll - ll.max())
        w /= w.sum()
        m = (w * grid).sum()
        sd = np.sqrt((w * (grid - m) ** 2).sum())
        assert abs(draws[:, i].mean() - m) < 4.5 * sd / np.sqrt(S), i
        assert abs(draws[:, i].std() / sd - 1) < 0.04, i


@pytest.mark.slow
def test_a_key_whose_window_runs_far_into_a_tail_gets_a_lattice_of_its_own():
    """Under exponential tails a key no model solves has a window of ~50 logits against ~1-5 for measured keys;
    pricing it alone spares its neighbours that width (the bundled MATH-500: 31,600 -> 18,600 window nodes)."""
    rng = np.random.default_rng(8)
    n = np.full((J, 300), 1100)
    y = rng.binomial(n, expit(np.linspace(-2, 2, J)[:, None] - rng.normal(0, 1.5, 300)[None, :]))
    y[:, 0] = 0  # solved by no model in 13,200 trials
    keys = fast.reduce_items(y, n)
    mg = fast.build_marginal(keys, TAILED)
    lone = int(keys.item_key[0])
    (home,) = [blk for blk in mg.model.blocks if lone in blk.keys]
    assert list(home.keys) == [lone]
    span = mg.windows.b - mg.windows.a
    assert span[lone] > 5 * np.median(span)


def test_cell_inversion_is_accurate_for_gaussians():
    """On the coarsest grid the draws use (spacing = the narrowest posterior scale / H_FACTOR), quantiles are within
    0.6 % of an SD and the mean and SD exact to 1e-4: far below the Monte Carlo error of a few thousand draws."""
    from scipy.stats import norm

    h = 1 / fast.H_FACTOR
    u = (np.arange(200_000) + 0.5) / 200_000
    for offset in (0.123, 0.5):
        grid = np.arange(-9, 9, h) + offset * h
        mass, e0, delta = fast.cell_masses(-0.5 * grid[None, :] ** 2, h)
        cell, t = fast.cell_draws(mass, e0, delta, h, np.zeros(u.size, dtype=np.int64), u)
        x = grid[cell] + h * t  # one row: the flat index is the cell
        assert np.abs(x - norm.ppf(u))[1000:-1000].max() < 6e-3
        assert abs(x.mean()) < 1e-4 and abs(x.std() - 1) < 1e-4
        assert np.all(np.diff(x) >= 0)  # monotone quantile function


def test_fast_refuses_what_it_does_not_fit():
    resp, _, _ = _simulate(20, 2, 0.0, 0)
    with pytest.raises(ValueError, match="pymc"):
        fit_irt(resp, IRTSpec(kind="2pl"), SamplerSettings(method="fast"))
    with pytest.raises(ValueError, match="nutpie"):
        fit_irt(resp, IRTSpec(guessing=np.full(20, 0.25), estimate_guessing=True), SamplerSettings(method="fast"))


def test_fast_fit_shapes_and_settings():
    resp, theta_true, _ = _simulate(60, 4, 0.0, 2)
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast", chains=2, tune=300, draws=200, seed=5))
    assert fit.theta.shape == (2, 200, J) and fit.b.shape == (2, 200, 60)
    assert fit.divergences == 0 and np.isfinite(fit.b).all()
    assert np.corrcoef(fit.theta_mean, theta_true)[0, 1] > 0.9
    again = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast", chains=2, tune=300, draws=200, seed=5))
    np.testing.assert_array_equal(fit.b, again.b)  # seeded: reproducible
    info = fit.extra["fast"]
    assert info["keys"] <= 49 and info["edge_log_ratio"] < -20
    assert info["engine"] == "imh" and all(a > 0.5 for a in info["acceptance"])


class _GaussianTarget:
    """A stand-in for MarginalModel: log N(x; mean, cov) up to a constant."""

    def __init__(self, mean: np.ndarray, cov: np.ndarray):
        self.mean, self.prec = mean, np.linalg.inv(cov)

    def logp_batch(self, x: np.ndarray) -> np.ndarray:
        d = np.atleast_2d(x) - self.mean
        return -0.5 * np.einsum("nj,jk,nk->n", d, self.prec, d)


def test_imh_chain_accepts_by_weight_ratio():
    log_w = np.log(np.array([1.0, 2.0, 0.5, 0.5, 4.0]))
    # step 1: w 2 > 1, always accepted; step 2: ratio 0.25 vs u = 0.3 -> rejected; step 3: ratio 0.25 vs u = 0.2
    # -> accepted; step 4: ratio 8 -> accepted
    states, accepted = fast.imh_chain(log_w, np.log(np.array([0.99, 0.3, 0.2, 0.99])))
    assert states.tolist() == [1, 1, 3, 4] and accepted == 3


def test_imh_is_exact_under_an_imperfect_proposal():
    """The proposal is a wrong Laplace guess (shifted by 0.4 SD, too wide, uncorrelated); the chains still
    reproduce the target's mean and covariance within Monte Carlo error (only efficiency suffers)."""
    rng = np.random.default_rng(4)
    mean = np.array([0.5, -1.0, 2.0])
    A = rng.normal(size=(3, 3))
    cov = A @ A.T / 3 + 0.2 * np.eye(3)
    sd = np.sqrt(np.diag(cov))
    target = _GaussianTarget(mean, cov)
    prop = fast.laplace_proposal(target, mean + 0.4 * sd, np.diag(np.diag(cov)) * 1.5, rng, n=2000)
    assert 0.3 < prop.accept_estimate < 0.9
    theta, accept = fast.sample_theta_imh(target, prop, chains=4, burn_in=100, draws=5000, rng=rng)
    assert theta.shape == (4, 5000, 3) and np.all(accept > 0.3)
    flat = theta.reshape(-1, 3)
    assert np.all(np.abs(flat.mean(0) - mean) < 5 * sd / np.sqrt(0.2 * len(flat)))
    np.testing.assert_allclose(np.cov(flat.T), cov, atol=0.06 * sd.max() ** 2)


def test_imh_chains_take_the_check_draws_as_their_first_proposals_and_stay_exact():
    """The check draws (already weighted) open each chain's proposals: the target's density is evaluated only for
    the proposals after them, and the chains still reproduce the target's mean and covariance."""
    rng = np.random.default_rng(5)
    mean = np.array([0.5, -1.0, 2.0])
    A = rng.normal(size=(3, 3))
    cov = A @ A.T / 3 + 0.2 * np.eye(3)
    sd = np.sqrt(np.diag(cov))

    class Counting(_GaussianTarget):
        evaluated = 0

        def logp_batch(self, x):
            Counting.evaluated += len(np.atleast_2d(x))
            return super().logp_batch(x)

    target = Counting(mean, cov)
    prop = fast.laplace_proposal(target, mean + 0.4 * sd, np.diag(np.diag(cov)) * 1.5, rng, n=1000)
    Counting.evaluated = 0
    thetas = []
    for chain in range(4):  # as _ChainJob.run: chain g takes the check draws g, g + 4, ...
        first = (prop.pool[chain::4], prop.pool_log_w[chain::4])
        theta, _ = fast.sample_theta_imh(target, prop, 1, 100, 5000, rng, first)
        assert np.isin(theta[0], first[0]).all(1).any()  # some of the check draws became states of the chain
        thetas.append(theta[0])
    # 4 x 5,100 proposals less the 1,000 check draws, plus one overdispersed start per chain
    assert Counting.evaluated == 4 * 5100 - 1000 + 4
    flat = np.concatenate(thetas)
    assert np.all(np.abs(flat.mean(0) - mean) < 5 * sd / np.sqrt(0.2 * len(flat)))
    # the covariance estimate of such chains is heavy-tailed (measured over 120 seeds at 3,000 draws a chain: SD
    # 0.05 on a variance of 1.02, with or without the check draws): a bias, not the noise, fails this
    np.testing.assert_allclose(np.cov(flat.T), cov, atol=0.1 * sd.max() ** 2)
    # a short chain runs on check draws alone: only its start is evaluated
    Counting.evaluated = 0
    theta, _ = fast.sample_theta_imh(target, prop, 1, 10, 40, rng, (prop.pool, prop.pool_log_w))
    from_pool = np.isin(theta[0], prop.pool[:50]).all(1)
    assert Counting.evaluated == 1 and len({tuple(t) for t in theta[0][~from_pool]}) <= 1  # else: the start


def test_check_draws_weighted_in_two_forked_processes_are_the_same():
    target = _GaussianTarget(np.zeros(3), np.eye(3))
    one = fast.laplace_proposal(target, np.full(3, 0.2), np.eye(3) * 1.3, np.random.default_rng(8), n=300)
    two = fast.laplace_proposal(target, np.full(3, 0.2), np.eye(3) * 1.3, np.random.default_rng(8), n=300,
                                processes=2)
    np.testing.assert_array_equal(one.pool, two.pool)
    np.testing.assert_array_equal(one.pool_log_w, two.pool_log_w)
    assert one.kish == two.kish and one.accept_estimate == two.accept_estimate


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_poor_proposal_fit_is_detected_and_nuts_takes_over(monkeypatch):
    """A banana-shaped target defeats a single t proposal, and its importance efficiency says so. In the sampler,
    an efficiency below MIN_KISH switches the abilities to NUTS (forced here on well-behaved data)."""

    class Banana:
        def logp_batch(self, x):
            x = np.atleast_2d(x)
            return -0.5 * x[:, 0] ** 2 - 0.5 * (x[:, 1] - 3 * x[:, 0] ** 2) ** 2 / 0.01

    for seed in range(4):
        prop = fast.laplace_proposal(Banana(), np.zeros(2), np.diag([1.0, 0.01]), np.random.default_rng(seed))
        assert prop.kish < fast.MIN_KISH
    monkeypatch.setattr(fast, "MIN_KISH", 1.01)
    resp, _, _ = _simulate(40, 4, 0.0, 6)
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast", chains=2, tune=200, draws=200, seed=1))
    assert fit.extra["fast"]["engine"] == "nuts" and fit.b.shape == (2, 200, 40)
    assert np.isnan(fit.extra["fast"]["acceptance"]).all()


@pytest.mark.slow  # a whole command end to end (> 10 s): the full suite runs it
def test_bundled_example_with_48_models_is_sampled_by_imh_and_converges(examples):
    """The bundled MATH-500 matrix: 48 models x 500 items x ~1,100 rollouts, a 48-dimensional ability posterior
    (the refitted-moments proposal this replaced fell to 0.13 importance efficiency here and handed over to NUTS)."""
    resp = load_responses(examples / "math500.responses.csv.gz")
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast"))
    info = fit.extra["fast"]
    assert len(resp.models) == 48
    assert info["engine"] == "imh" and info["proposal_kish"] > 0.6, info
    assert min(info["acceptance"]) > 0.5, info
    diag = _diagnostics(fit)
    assert diag["ess_bulk"] >= 400 and diag["ess_tail"] >= 400 and diag["rhat"] <= 1.01, diag


# ------------------------------------------------------------------------------------------------ vs PyMC


@pytest.mark.slow
def test_fast_matches_pymc_on_simulated_counts():
    resp, _, b_true = _simulate(300, 4, 0.0, 11)
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast"))
    ref = fit_irt(resp, IRTSpec(), SamplerSettings(method="pymc"))
    _assert_close_to_reference(fit, ref)
    assert np.corrcoef(fit.b_mean, b_true)[0, 1] > 0.9


@pytest.mark.slow
def test_fast_matches_pymc_with_guessing():
    c = 0.1
    resp, _, _ = _simulate(300, 4, c, 12)
    spec = IRTSpec(guessing=np.full(300, c))
    fit = fit_irt(resp, spec, SamplerSettings(method="fast"))
    ref = fit_irt(resp, spec, SamplerSettings(method="pymc"))
    _assert_close_to_reference(fit, ref)


def _nutpie_low_rank_reference(resp: ResponseMatrix, spec: IRTSpec) -> IRTFit:
    """The PyMC reference model sampled by nutpie with its low-rank mass-matrix adaptation: on high-rollout data
    abilities and difficulties share a strong common shift that a diagonal mass matrix does not capture (here
    PyMC's default NUTS reached a bulk ESS of ~7 and R-hat 1.3 on MATH-500; this one ~3,400 and 1.004)."""
    import nutpie

    from benchfill.irt.fit import build_pymc_model

    compiled = nutpie.compile_pymc_model(build_pymc_model(resp, spec))
    trace = nutpie.sample(compiled, chains=4, tune=1000, draws=1000, seed=3, progress_bar=False,
                          low_rank_modified_mass_matrix=True)
    post = trace.posterior
    return IRTFit(spec=spec, settings=SamplerSettings(method="nutpie"), models=list(resp.models),
                  item_ids=list(resp.item_ids), theta=np.asarray(post["theta"].values, dtype=float),
                  b=np.asarray(post["b"].values, dtype=float),
                  divergences=int(np.asarray(trace.sample_stats["diverging"]).sum()))


@pytest.mark.slow
@pytest.mark.shared
@pytest.mark.parametrize("name,n_items", [("aime2024", None), ("math500", 200)])
def test_fast_matches_pymc_model_on_real_data(shared_data, name, n_items):
    """Real counts, 12 models spread by accuracy, ~1,100 rollouts per cell: very narrow conditionals
    (MATH-500 cut to its first 200 items to keep the reference run short)."""
    resp = load_responses(shared_data / "real" / f"{name}.csv.gz")
    resp = resp.subset(models=select_models(resp, 12))
    if n_items is not None:
        resp = resp.subset(items=resp.item_ids[:n_items])
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast"))
    ref = _nutpie_low_rank_reference(resp, fit.spec)  # the same learned population
    _assert_close_to_reference(fit, ref)


def _marginal_and_draw_blocks(n: np.ndarray, c: np.ndarray, seed: int, n_thetas: int):
    """Counts drawn for trials ``n`` (J, I) and guessing ``c`` (I,) (b ~ N(0, 1.5^2)), their keys, the marginal
    under BUMPY, ``n_thetas`` ability vectors around its mode and the difficulty-draw blocks for them."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=J)
    b = rng.normal(size=n.shape[1]) * 1.5
    y = rng.binomial(n, c + (1 - c) * expit(theta[:, None] - b[None, :]))
    keys = fast.reduce_items(y, n, c)
    mg = fast.build_marginal(keys, BUMPY)
    thetas = mg.mode + 0.2 * rng.normal(size=(n_thetas, J))
    return keys, mg, thetas, mg.draw_blocks(thetas)


def test_compiled_kernels_agree_with_the_numpy_path(monkeypatch):
    """The numba kernels (used for large fits) compute the same log densities and, from the same uniforms, the
    same difficulty draws as the numpy reference, for plain, guessing, shared-trials and per-key-trials blocks,
    on whole lattices and on windows."""
    n = np.ones((J, 900), dtype=int)
    n[:2, :150] = 0  # some models did not answer some items: per-key trial rows
    n[:, 600:] = 4
    keys, mg, thetas, blocks = _marginal_and_draw_blocks(n, np.where(np.arange(900) % 3 == 0, 0.25, 0.0), 11, 60)
    kinds = {(blk.n_shared is not None, blk.log_c is not None, blk.idx is None) for blk in blocks + list(mg.model.blocks)}
    assert {True, False} <= {k[1] for k in kinds} and {True, False} <= {k[0] for k in kinds}
    results = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("BENCHFILL_KERNELS", flag)
        lp = mg.model.logp_batch(thetas)
        draws, edge = fast.draw_difficulties(keys, blocks, thetas, np.random.default_rng(5))
        results[flag] = (lp, draws, edge)
    np.testing.assert_allclose(results["1"][0], results["0"][0], rtol=0, atol=1e-8)
    np.testing.assert_allclose(results["1"][1], results["0"][1], rtol=0, atol=1e-9)
    assert results["1"][2] == pytest.approx(results["0"][2], abs=1e-9)


def test_one_pass_over_a_models_windows_gives_each_ability_vectors_log_density_and_its_draws(monkeypatch):
    """draw_difficulties with ``logp`` on a model's blocks adds each ability vector's log density from the pass
    that draws: with the prior and linear terms, it is the model's own (numpy and compiled paths, plain, guessing,
    shared and per-key trials), and the draws are those made without it."""
    n = np.ones((J, 900), dtype=int)
    n[:2, :150] = 0
    n[:, 600:] = 4
    keys, mg, thetas, _ = _marginal_and_draw_blocks(n, np.where(np.arange(900) % 3 == 0, 0.25, 0.0), 11, 60)
    for flag in ("0", "1"):
        monkeypatch.setenv("BENCHFILL_KERNELS", flag)
        logp = thetas @ keys.theta_lin - 0.5 * (thetas**2).sum(1)
        with_logp, edge = fast.draw_difficulties(keys, mg.model.blocks, thetas, np.random.default_rng(5), logp=logp)
        alone, _ = fast.draw_difficulties(keys, mg.model.blocks, thetas, np.random.default_rng(5))
        np.testing.assert_allclose(logp, mg.model.logp_batch(thetas), rtol=0, atol=1e-8)
        np.testing.assert_allclose(with_logp, alone, rtol=0, atol=1e-12)  # batches may differ: round-off
        assert edge < -20


@pytest.mark.parametrize("batch", [None, 7])
def test_an_independence_chain_draws_its_proposals_difficulties_as_it_weighs_them(monkeypatch, batch):
    """imh_chain_with_draws: the abilities of sample_theta_imh's chain (same proposals, start, uniforms), a state
    kept twice keeps its difficulties, and those difficulties have the law of fresh draws given the same abilities
    (per-key means and SDs of 3,000 draws within Monte Carlo error), whether the proposals are weighed all at once
    or 7 at a time (a state held across batches)."""
    if batch is not None:
        monkeypatch.setattr(fast, "CHAIN_B_BUDGET", batch * 80)
    n = np.full((J, 80), 4)
    keys, mg, _, _ = _marginal_and_draw_blocks(n, np.zeros(80), 7, 1)
    proposal = fast.laplace_proposal(mg.model, mg.mode, mg.cov, np.random.default_rng(1), n=400)
    first = (proposal.pool[:100], proposal.pool_log_w[:100])
    theta, _ = fast.sample_theta_imh(mg.model, proposal, 1, 50, 3000, np.random.default_rng(2), first)
    b = np.full((3000, 80), np.nan, dtype=np.float32)  # every row must be written
    ours, accept, edge = fast.imh_chain_with_draws(mg, proposal, 50, 3000, np.random.default_rng(2),
                                                   np.random.default_rng(3), first, b)
    np.testing.assert_array_equal(ours, theta[0])
    assert 0.5 < accept < 1 and edge < -20 and np.isfinite(b).all()
    stay = np.flatnonzero((np.diff(ours, axis=0) == 0).all(1))
    assert stay.size and np.array_equal(b[stay], b[stay + 1])
    assert np.isin(ours, first[0]).all(1).any()  # some states are check draws: drawn afterwards
    fresh, _ = fast.draw_difficulties(keys, mg.draw_blocks(ours), ours, np.random.default_rng(4))
    # both are draws given the same abilities: their difference's SD is that of the conditional draws alone,
    # inflated by the repeated states' autocorrelation (acceptance ~0.9: a factor ~1.1 on the SD of the mean)
    sd = fresh.std(0)
    z = (b.mean(0) - fresh.mean(0)) / (sd * np.sqrt(2 / 3000))
    assert np.abs(z).max() < 5 and 0.5 < z.std() < 1.5
    np.testing.assert_allclose(b.std(0), sd, rtol=0.1)
    # each draw goes with its own abilities: b moves with the abilities' common shift as fresh draws do
    level = ours.mean(1)
    corr = [np.corrcoef(level, x.mean(1))[0, 1] for x in (b, fresh)]
    assert corr[1] > 0.5 and abs(corr[0] - corr[1]) < 0.1


def test_blocks_with_few_distinct_trial_rows_sum_them_once(monkeypatch):
    """A block whose keys have a few distinct trial rows (a complete design with some cells unasked) sums
    -n . softplus once per distinct row and picks each key's by a one-hot weight; its log densities and, from the
    same uniforms, its difficulty draws are those of the general per-key product, with guessing and without, in
    numpy and in the compiled kernels."""
    from dataclasses import replace

    n = np.ones((J, 600), dtype=int)
    n[0, :100], n[3, 50:120], n[7, 300:330] = 0, 0, 0
    keys, mg, thetas, blocks = _marginal_and_draw_blocks(n, np.where(np.arange(600) % 2 == 0, 0.2, 0.0), 12, 40)
    with_basis = [blk for blk in blocks if blk.n_basis is not None]
    assert {blk.log_c is not None for blk in with_basis} == {True, False}
    assert all(1 < len(blk.n_basis) <= fast.N_BASIS_MAX_SHARE * J for blk in with_basis)
    general = [replace(blk, n_basis=None, n_code=None) for blk in blocks]
    for flag in ("0", "1"):
        monkeypatch.setenv("BENCHFILL_KERNELS", flag)
        for blk, plain in zip(blocks, general):
            np.testing.assert_allclose(fast.block_logp_batch(thetas, blk), fast.block_logp_batch(thetas, plain),
                                       rtol=1e-13, atol=1e-9)
        ours, _ = fast.draw_difficulties(keys, blocks, thetas, np.random.default_rng(5))
        theirs, _ = fast.draw_difficulties(keys, general, thetas, np.random.default_rng(5))
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)



@pytest.mark.parametrize("unasked", [0, 200])
def test_binary_answers_with_guessing_read_subset_sums_in_the_kernels(monkeypatch, unasked):
    """Blocks of binary answers with guessing (many answer patterns: MMLU-Pro's shape) give the compiled kernels
    each key's term as the sum of its rows of the subset-sum tables (and of its trial row, where the block has a
    few): the same log densities and, from the same uniforms, the same difficulty draws as the per-key product,
    whose numpy path is the reference."""
    from dataclasses import replace

    n = np.ones((J, 2400), dtype=int)
    n[0, :unasked] = 0  # a few distinct trial rows in a block, or the same trials for every key
    keys, mg, thetas, blocks = _marginal_and_draw_blocks(n, np.full(2400, 0.2), 13, 30)
    every = blocks + list(mg.model.blocks)
    coded = [blk for blk in every if blk.y_codes is not None]
    assert coded and all((blk.n_basis is not None) == (unasked > 0) for blk in coded)
    for blk in coded:
        assert len(blk.keys) > fast.subset_rows(J) and blk.y_codes.shape[1] in (2, 3)
        base, tables, codes, _ = fast.kernel_terms(thetas[:3], blk)
        _, per_key, _ = fast.lattice_terms(thetas[:3], blk)
        np.testing.assert_allclose(tables[codes].sum(1), per_key, rtol=1e-13, atol=1e-12)
    monkeypatch.setenv("BENCHFILL_KERNELS", "1")
    for blk in coded:
        np.testing.assert_allclose(fast.block_logp_batch(thetas, blk),
                                   fast.block_logp_batch(thetas, replace(blk, y_codes=None)), rtol=1e-13, atol=1e-9)
    ours, _ = fast.draw_difficulties(keys, blocks, thetas, np.random.default_rng(5))
    monkeypatch.setenv("BENCHFILL_KERNELS", "0")
    reference, _ = fast.draw_difficulties(keys, blocks, thetas, np.random.default_rng(5))
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-9)


@pytest.mark.parametrize("guessing", [0.0, 0.2])
def test_information_and_curvature_taken_a_slice_of_models_at_a_time_are_the_whole(monkeypatch, guessing):
    """The keys' expected information (Kb, J) and likelihood curvature on the lattice, computed ELEMENT_BUDGET / L
    models at a time (bounded memory for the Gibbs engine's transposed conditional: thousands of items as its
    models), equal the one-pass formulas (with the blocks' own trials, shared or per key)."""
    rng = np.random.default_rng(21)
    n = np.ones((J, 400), dtype=int)
    n[:3, :50] = 0
    c = np.full(400, guessing)
    keys, mg, _, blocks = _marginal_and_draw_blocks(n, c, 21, 5)
    theta = mg.mode
    for blk in blocks:
        grid = blk.grid
        P = rng.random((len(blk.keys), len(grid)))
        P /= P.sum(1, keepdims=True)
        s = expit(theta[:, None] - grid[None, :])
        info = blk.n * (P @ (s * (1 - s)).T)
        if blk.log_c is not None:
            q = expit(blk.log_c - (theta[:, None] - grid[None, :]))
            info = info - blk.y * (P @ (q * (1 - q)).T)
        curv = blk.n @ (s * (1 - s))
        monkeypatch.setattr(fast, "ELEMENT_BUDGET", 3 * len(grid))  # three models a slice
        got_info, got_curv = fast.information_and_curvature(theta, grid, P, blk)
        np.testing.assert_allclose(got_info, np.maximum(info, 0.0), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(np.broadcast_to(got_curv, curv.shape), curv, rtol=1e-12, atol=1e-14)
