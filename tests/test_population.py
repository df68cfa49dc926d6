"""The difficulty population (benchfill.irt.prior, benchfill.irt.population): a proper density, saved and loaded
with the scale, learned from response data where the truth is known (a wide normal, a planted hole, heavy tails),
kept nearly normal where the data are few, and chosen from the CLI and the API with one clear error for a bad
name."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from benchfill.irt import fast, population
from benchfill.irt.prior import Population
from benchfill.irt.simulate import simulate_responses

THETA12 = np.linspace(-2.5, 2.5, 12)


def _learn(b: np.ndarray, rollouts: int, kind: str = "spline", seed: int = 1) -> tuple[Population, np.ndarray]:
    """The population learned from 12 models' answers on difficulties ``b``, and the abilities' mode under it."""
    resp = simulate_responses(THETA12, b, rollouts, seed=seed)
    prior, mode = population.learn_population(fast.reduce_items(resp.n_correct, resp.n_trials), kind)
    return prior, mode.theta


def test_a_population_is_a_normalised_density_and_round_trips():
    pop = Population("spline", 0.3, 2.1, -3.0, 0.5, np.array([0.4, -1.2, -2.0, -0.5, 0.8, 0.2, 0.1]), 4.0)
    x = np.linspace(*pop.support(cut=60.0), 200_001)
    assert np.trapezoid(np.exp(pop.log_density(x)), x) == pytest.approx(1.0, abs=1e-6)
    assert Population.from_arrays(pop.to_arrays()) == pop
    assert Population.from_arrays({}) == Population.paper()  # files saved before populations: the paper's prior
    # outside the knots the spline vanishes: the tails are the normal envelope's
    far = np.array([pop.knot_lo - 1.0, pop.knot_hi + 1.0])
    np.testing.assert_allclose(pop.log_density(far) - Population.normal(0.3, 2.1).log_density(far),
                               -pop._log_norm + Population.normal(0.3, 2.1)._log_norm, atol=1e-12)
    mean, sd = Population.normal(1.0, 2.0).moments()
    assert mean == pytest.approx(1.0, abs=1e-6) and sd == pytest.approx(2.0, abs=1e-4)


def test_the_spline_table_is_read_as_np_interp_reads_it_bit_for_bit():
    """The spline's table is read by cell arithmetic instead of np.interp's search: the same values to the last
    bit (seeded runs depend on them), at random points, on every node, one ulp either side, outside, nan and inf."""
    rng = np.random.default_rng(7)
    for knot_lo, step, m in [(-3.0, 0.5, 7), (-7.3, 0.61, 25), (1e-3, 0.173, 40)]:
        pop = Population("spline", 0.3, 2.1, knot_lo, step, rng.normal(size=m), 4.0)
        xs, table = pop.spline_table()
        x = np.concatenate([rng.uniform(xs[0] - 2, xs[-1] + 2, 200_000), xs, np.nextafter(xs, -np.inf),
                            np.nextafter(xs, np.inf), xs + 1e-13, [np.nan, np.inf, -np.inf]])
        expected = np.interp(x, xs, table, left=0.0, right=0.0)
        np.testing.assert_array_equal(pop.spline(x), expected)  # nan where nan, else bitwise equal


@pytest.mark.parametrize("tails", [(0.5, 0.5), (np.inf, 1.0), (2.8, np.inf), (0.7, 2.0)])
def test_a_population_with_exponential_tails_is_a_normalised_density_and_round_trips(tails):
    lo_tail, hi_tail = tails
    pop = Population("spline", 0.3, 2.1, -3.0, 0.5, np.array([0.4, -1.2, -2.0, -0.5, 0.8, 0.2, 0.1]), 4.0, *tails)
    lo, hi = pop.support(cut=60.0)
    x = np.linspace(lo, hi, 400_001)
    assert np.trapezoid(np.exp(pop.log_density(x)), x) == pytest.approx(1.0, abs=1e-6)
    # the support is where log g falls 60 nats below its top (no further: lattices are sized by it)
    top = pop.log_density(x).max()
    assert pop.log_density(np.array([lo, hi])) == pytest.approx([top - 60.0] * 2, abs=0.5)
    back = Population.from_arrays(pop.to_arrays())
    assert back == pop and back.tails == tails
    assert pop != Population("spline", 0.3, 2.1, -3.0, 0.5, pop.coef, 4.0)  # normal tails: another population
    # beyond the knots log g falls linearly on a side with a finite delta, at delta / sigma nats per logit (an
    # exponential tail of scale sigma / delta), and quadratically (the normal's) on the other
    for side, tail, far in (("lo", lo_tail, pop.knot_lo - np.array([30.0, 20.0])),
                            ("hi", hi_tail, pop.knot_hi + np.array([20.0, 30.0]))):
        slope = float(np.diff(pop.log_density(far))[0]) / 10.0 * (1 if side == "lo" else -1)
        if np.isfinite(tail):
            assert slope == pytest.approx(tail / 2.1, rel=0.05), side
            assert pop.tail_scale(side) == pytest.approx(2.1 / tail)
        else:
            assert slope > 4.0 and pop.tail_scale(side) is None, side
    assert "exponential, scale" in pop.label()
    with pytest.raises(ValueError, match="tail"):
        Population("spline", 0.0, 1.0, tail_hi=0.0)


def test_an_old_scale_file_has_normal_tails():
    arrays = {k: v for k, v in Population("spline", 0.0, 2.0, tail_lo=1.0, tail_hi=1.0).to_arrays().items()
              if not k.startswith("population_tail")}
    assert not Population.from_arrays(arrays).has_tails


def test_the_envelopes_derivatives_are_those_of_its_log_density():
    """The marginal likelihood's Newton steps (population._features) use e's analytic derivatives in (mu, log
    sigma): they match finite differences, with normal and with hyperbolic tails, the same or different per side."""
    grid = np.linspace(-9.0, 11.0, 41)
    for tails in ((np.inf, np.inf), (1.4, 1.4), (np.inf, 0.5), (0.7, 2.8)):
        phi = np.array([0.7, np.log(1.8)])
        f, D, D2 = population._features(grid, phi, np.zeros((grid.size, 0)), tails)
        eps = 1e-5
        for a in range(2):
            e = np.eye(2)[a] * eps
            fp, Dp, _ = population._features(grid, phi + e, np.zeros((grid.size, 0)), tails)
            fm, Dm, _ = population._features(grid, phi - e, np.zeros((grid.size, 0)), tails)
            np.testing.assert_allclose(D[:, a], (fp - fm) / (2 * eps), rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(D2[:, :, a], (Dp[:, :2] - Dm[:, :2]) / (2 * eps), rtol=1e-5, atol=1e-6)


def _hyperbolic_draws(rng: np.random.Generator, n: int, tails: tuple[float, float]) -> np.ndarray:
    """Draws from the envelope with ``tails`` (sigma 1, centre 0) by inverting its CDF on a fine grid."""
    from benchfill.irt.prior import envelope

    z = np.linspace(-60.0, 60.0, 240_001)
    cdf = np.cumsum(np.exp(envelope(z, tails)))
    return np.interp(rng.uniform(size=n), cdf / cdf[-1], z)


def test_tails_are_learned_where_the_measured_items_show_them():
    """12 models x 8 rollouts. Difficulties with a normal spread keep the normal's tails or nearly (delta >= 2:
    measured over 12 seeds, 8 normal, 4 at delta 2-2.8, by likelihood alone); difficulties from a population with
    exponential tails (scale 1.25 logits, far heavier than a normal of the same SD) get exponential tails of about
    that scale: the items the panel measures near its reach show how the tails go on (one delta for both sides,
    population.fit_envelope says why)."""
    rng = np.random.default_rng(5)
    for _ in range(3):
        normal, _ = _learn(rng.normal(0.3, 2.2, 600), 8)
        assert min(normal.tails) >= 2.0, normal.label()
    heavy, _ = _learn(0.3 + _hyperbolic_draws(rng, 600, (0.8, 0.8)), 8, seed=6)
    assert heavy.has_tails and heavy.tail_lo == heavy.tail_hi, heavy.label()
    assert heavy.tail_scale("hi") == pytest.approx(1.25, rel=0.4), heavy.label()


def test_a_wide_normal_population_is_recovered():
    """True b ~ N(0.5, 2.5^2), far from the paper's N(0, 1): the learned normal finds its spread."""
    b = np.random.default_rng(0).normal(0.5, 2.5, 800)
    pop, theta = _learn(b, 8, "normal")
    assert pop.kind == "normal"
    shift = theta.mean() - THETA12.mean()  # the common location is the abilities' prior's convention
    assert pop.mu - shift == pytest.approx(0.5, abs=0.3)
    assert pop.sigma == pytest.approx(2.5, rel=0.12)


def test_the_spline_population_finds_a_planted_hole():
    """b uniform on [-2.5, -0.6] and [1.3, 2.5] (12 models x 8 rollouts): the learned density inside the hole is a
    small fraction of its density on either side; a normal cannot show that."""
    b = np.concatenate([np.linspace(-2.5, -0.6, 180), np.linspace(1.3, 2.5, 120)])
    pop, theta = _learn(b, 8)
    shift = theta.mean() - THETA12.mean()
    dens = lambda x: float(np.exp(pop.log_density(np.array([x + shift])))[0])  # noqa: E731
    inside, left, right = dens(0.35), dens(-1.5), dens(1.9)
    assert pop.kind == "spline" and pop.has_spline
    assert inside < 0.25 * min(left, right), (inside, left, right)


def test_few_items_keep_the_population_nearly_normal():
    """30 items (an AIME-sized benchmark): BIC keeps the spline's correction small, no spurious holes, and the
    tails are the normal's (too few items near the reach to show one; 6 items once chose a 109-logit tail)."""
    b = np.random.default_rng(3).normal(1.0, 2.0, 30)
    pop, _ = _learn(b, 32)
    assert not pop.has_tails
    x = np.linspace(pop.knot_lo, pop.knot_hi, 400)
    assert np.ptp(pop.spline(x)) < 1.5, np.ptp(pop.spline(x))


def test_the_paper_prior_is_kept_and_labelled():
    from benchfill.irt.fit import fit_irt
    from benchfill.irt.model import IRTSpec, SamplerSettings

    resp = simulate_responses(THETA12, np.linspace(-3, 3, 60), 4, seed=2)
    fit = fit_irt(resp, IRTSpec(population="paper"), SamplerSettings(draws=200, tune=100))
    assert fit.spec.population_prior == Population.paper()
    assert "paper" in fit.spec.population_prior.label()
    with pytest.raises(ValueError, match="unknown difficulty population"):
        IRTSpec(population="flat")  # type: ignore[arg-type]


def test_prior_option_from_the_cli_and_the_api(tmp_path, examples):
    import benchfill as bf
    from benchfill.cli import app
    from benchfill.errors import InputError

    with pytest.raises(InputError, match="--prior"):
        bf.diagnose(examples / "math500_k4.responses.csv.gz", prior="flat")
    res = CliRunner().invoke(app, ["diagnose", str(examples / "math500_k4.responses.csv.gz"), "--prior", "flat",
                                   "--json", str(tmp_path / "d.json")])
    assert res.exit_code == 2 and "--prior" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "d.json").exists()


@pytest.mark.parametrize("case", ["simulated", "far: keys where g is below e^-700 of its peak"])
def test_the_marginal_likelihood_its_gradient_and_hessian_are_exact(case):
    """The objective multiplies fixed scaled likelihoods by the population (no (K, G) exponentials per evaluation):
    its value equals a logsumexp of log-likelihood plus log g, its gradient and Hessian central differences of the
    value and of the gradient, also where some keys' sums underflow and are summed around their own maximum."""
    from scipy.special import logsumexp

    if case == "simulated":
        resp = simulate_responses(THETA12, np.random.default_rng(2).normal(0.0, 2.5, 300), 4, seed=3)
        fg = population.fit_grid(fast.reduce_items(resp.n_correct, resp.n_trials), THETA12)
        phi0, tails = [0.3, 0.9], (2.0, 1.4)
    else:  # sharp likelihoods at -6 .. 6 against a narrow normal population at 4: the keys at -6 underflow
        grid = np.linspace(-10.0, 10.0, 401)
        centres = np.linspace(-6.0, 6.0, 25)
        fg = population.FitGrid(grid, -0.5 * ((grid[None, :] - centres[:, None]) / 0.1) ** 2, np.full(25, 2.0))
        phi0, tails = [4.0, -3.0], population.NORMAL_TAILS
    knots = 8
    basis = population.cubic_bspline_basis(fg.grid, -3.0, 6.0 / knots, knots - 3)
    phi = np.concatenate([phi0, np.random.default_rng(4).normal(0.0, 0.3, knots - 3)])

    def value(p: np.ndarray) -> float:
        f = population._features(fg.grid, p, basis, tails)[0]
        return float(fg.mult @ logsumexp(fg.loglik + f[None, :], axis=1) - fg.mult.sum() * logsumexp(f))

    val, grad, _, H = population._objective(fg, phi, basis, 0.0, tails=tails)
    f = population._features(fg.grid, phi, basis, tails)[0]
    underflows = np.any(fg.scaled[1] @ np.exp(f - f.max()) < 1e-250)
    assert underflows == (case != "simulated")  # the far case reaches the fallback
    assert val == pytest.approx(value(phi), rel=1e-12, abs=1e-8)
    eps = 1e-5
    for i in range(phi.size):
        e = np.zeros(phi.size)
        e[i] = eps
        assert grad[i] == pytest.approx((value(phi + e) - value(phi - e)) / (2 * eps), rel=1e-5, abs=1e-4)
        g_plus = population._objective(fg, phi + e, basis, 0.0, tails=tails)[1]
        g_minus = population._objective(fg, phi - e, basis, 0.0, tails=tails)[1]
        np.testing.assert_allclose(H[i], (g_plus - g_minus) / (2 * eps), rtol=1e-4, atol=1e-3)
