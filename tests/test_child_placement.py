"""The search's decisions by posterior probability (issue 23): the children of a gap placed together, P(d inside the
gap) checked for calibration against children whose true difficulty is planted, not drawn from the model."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.irt.placement import interval_probabilities, place_children, place_items
from benchfill.irt.prior import Population
from benchfill.irt.scale import Scale


def make_scale(population: Population | None = None, seed: int = 0) -> Scale:
    """12 models spread over [-4, 4] logits, their posterior a little uncertain; the axis [-5, 5]."""
    rng = np.random.default_rng(seed)
    theta = np.linspace(-4.0, 4.0, 12)
    draws = theta[None, :] + 0.08 * rng.standard_normal((400, 12))
    return Scale(models=[f"m{j:02d}" for j in range(12)], theta_draws=draws, b_min=-5.0, b_max=5.0,
                 item_ids=["easy", "hard"], b_mean=np.array([-5.0, 5.0]),
                 population=population or Population.normal(0.0, 2.0))


def answers(rng: np.random.Generator, scale: Scale, b: np.ndarray, rollouts: int) -> tuple[np.ndarray, np.ndarray]:
    theta = scale.theta_draws[rng.integers(len(scale.theta_draws))]  # the truth: one posterior draw
    n = np.full((len(b), len(theta)), rollouts)
    return rng.binomial(n, 1.0 / (1.0 + np.exp(-(theta[None, :] - b[:, None])))), n


def test_children_probabilities_are_a_posterior():
    sc = make_scale()
    rng = np.random.default_rng(1)
    y, n = answers(rng, sc, rng.normal(0.5, 0.6, 16), 4)
    pl = place_children(sc, y, n, np.array([[-10.0, 10.0], [0.5, 0.6], [0.5, 0.55], [0.55, 0.6]]))
    assert np.allclose(pl.probabilities[:, 0], 1.0, atol=1e-6)  # the whole axis
    assert np.allclose(pl.probabilities[:, 2] + pl.probabilities[:, 3], pl.probabilities[:, 1], atol=1e-6)
    assert np.all((pl.probabilities >= 0) & (pl.probabilities <= 1))
    # the children's population is found where they are (true mu 0.5, sigma 0.6 logits)
    assert abs(pl.population_mu - 0.5) < 0.6 and 0.2 < pl.population_sigma < 1.5
    # one child alone: its own answers decide, as a single placement under a wide population would
    one = place_children(sc, y[:1], n[:1], np.array([[0.4, 0.6]]))
    assert one.b_sd[0] > pl.b_sd[0]


def test_single_item_probabilities_match_the_placement():
    """interval_probabilities (one item under the benchmark's population) agrees with place_items' moments: the
    probability of mean +- 1.645 SD is ~0.90 for a near-normal posterior."""
    sc = make_scale()
    rng = np.random.default_rng(2)
    y, n = answers(rng, sc, np.array([-1.0, 0.0, 1.5]), 16)
    pl = place_items(sc, y, n)
    bounds = np.stack([pl.d - 1.645 * (pl.b_sd / sc.span), pl.d + 1.645 * (pl.b_sd / sc.span)], 1)
    probs = np.array([interval_probabilities(sc, y[i : i + 1], n[i : i + 1], bounds[i : i + 1])[0, 0]
                      for i in range(3)])
    assert np.all(np.abs(probs - 0.90) < 0.02), probs


CASES = [  # (gap on d, where the children truly are: offset from the gap's middle and spread, logits; rollouts)
    ((0.55, 0.60), 0.0, 0.3, 16),  # children clustered in a narrow gap, a well-measured panel
    ((0.55, 0.60), 0.0, 0.5, 4),  # the paper's panel: 12 models x 4 rollouts
    ((0.30, 0.36), 0.5, 1.0, 4),  # a rewriter that misses: children spread wide, off the target
]


@pytest.mark.slow
@pytest.mark.parametrize("gap,offset,spread,rollouts", CASES)
def test_p_inside_is_calibrated_for_planted_children(gap, offset, spread, rollouts):
    """Over 40 seeded searches of 16 children each, with the children's true b planted around the gap (normal, and a
    skewed mixture below), the reported P(inside) matches the share truly inside: overall and among children
    reported at P >= 0.8. The benchmark's own population (N(0, 2) here) would report too little where the children
    cluster in a gap: it pulls them toward its mass."""
    sc = make_scale()
    rng = np.random.default_rng(7)
    lo, hi = gap
    b_mid = sc.b_min + (lo + hi) / 2 * sc.span
    reported, inside, reported_benchmark_prior = [], [], []
    for search in range(40):
        if search % 2:  # a skewed mixture: 70 % near the aim, 30 % one logit harder
            b = np.where(rng.random(16) < 0.7, rng.normal(b_mid + offset, spread, 16),
                         rng.normal(b_mid + offset + 1.0, spread, 16))
        else:
            b = rng.normal(b_mid + offset, spread, 16)
        y, n = answers(rng, sc, b, rollouts)
        reported += list(place_children(sc, y, n, np.array([gap])).probabilities[:, 0])
        if search < 10:  # what the benchmark's population would report, for the printout
            reported_benchmark_prior += list(interval_probabilities(sc, y, n, np.array([gap]))[:, 0])
        d = sc.normalise(b)
        inside += list((d > lo) & (d < hi))
    p, truth = np.array(reported), np.array(inside, dtype=float)
    se = np.sqrt(truth.mean() * (1 - truth.mean()) / len(truth))
    print(f"mean P {p.mean():.3f} (benchmark prior, first 10 searches: {np.mean(reported_benchmark_prior):.3f}), "
          f"truly inside {truth.mean():.3f}")
    assert abs(p.mean() - truth.mean()) < 0.04 + 2 * se
    high = p >= 0.8
    if high.sum() >= 40:
        se_high = np.sqrt(p[high].mean() * (1 - p[high].mean()) / high.sum())
        print(f"P >= 0.8: {high.sum()} children, mean P {p[high].mean():.3f}, truly inside {truth[high].mean():.3f}")
        assert abs(p[high].mean() - truth[high].mean()) < 0.05 + 2 * se_high


def test_a_guessing_items_probabilities_are_its_guessing_likelihoods():
    """With a guessing rate, P(d in an interval) (interval_probabilities) and the children's placement
    (place_children, one child under a wide population) integrate y log(c + (1 - c) s) + (n - y) log((1 - c)(1 - s))
    per draw: checked against that formula summed on a fine grid, draw by draw."""
    from scipy.special import expit

    sc = make_scale()
    sc = Scale(models=sc.models, theta_draws=sc.theta_draws[:40], b_min=sc.b_min, b_max=sc.b_max,
               item_ids=sc.item_ids, b_mean=sc.b_mean, population=sc.population)
    rng = np.random.default_rng(5)
    n = rng.integers(2, 6, (1, 12))
    y = rng.binomial(n, 0.25 + 0.75 * expit(np.linspace(-4, 4, 12) - 0.7))
    c = 0.25
    bounds = np.array([[0.45, 0.55], [0.5, 0.7], [0.0, 0.5]])
    got = interval_probabilities(sc, y, n, bounds, guessing=c)[0]
    grid = np.linspace(-25.0, 25.0, 200_001)
    want = np.zeros(len(bounds))
    for theta in sc.theta_draws:
        s = expit(theta[:, None] - grid[None, :])
        ell = (y[0] @ np.log(c + (1 - c) * s) + (n[0] - y[0]) @ np.log((1 - c) * (1 - s))
               + sc.population.log_density(grid))
        p = np.exp(ell - ell.max())
        p /= p.sum()
        lo_b, hi_b = sc.b_min + bounds[:, 0] * sc.span, sc.b_min + bounds[:, 1] * sc.span
        want += [p[(grid >= a) & (grid <= b)].sum() for a, b in zip(lo_b, hi_b)]
    want /= len(sc.theta_draws)
    np.testing.assert_allclose(got, want, atol=2e-4)
    # the children's likelihoods averaged over the draws (place_children), rows with and without guessing
    from benchfill.irt.placement import _draw_averaged_log_likelihood

    yy, nn, cc = np.vstack([y, y]), np.vstack([n, n]), np.array([c, 0.0])
    g = np.linspace(-6.0, 6.0, 50)
    lik = _draw_averaged_log_likelihood(yy, nn, cc, sc.theta_draws, g)
    for k in range(2):
        s = expit(sc.theta_draws[:, :, None] - g[None, None, :])  # (S, J, G)
        right, wrong = np.log(cc[k] + (1 - cc[k]) * s), np.log((1 - cc[k]) * (1 - s))
        per_draw = np.einsum("j,sjg->sg", yy[k], right) + np.einsum("j,sjg->sg", nn[k] - yy[k], wrong)
        np.testing.assert_allclose(lik[k], np.log(np.exp(per_draw).mean(0)), rtol=0, atol=1e-9)
