"""Stretched b-lattices (benchfill.irt.lattice_map): as exact as the uniform lattice, on fewer nodes, for guessing
items whose likelihood flattens beyond the panel's abilities."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.special import expit

import benchfill.irt.fast as fast
from benchfill.irt.lattice_map import LatticeMap
from benchfill.irt.prior import Population

# a smooth population (the trapezoid rule is spectrally accurate on it, so lattices can be compared to ~1e-10) with
# exponential tails, like a learned one's: guessing items' windows run ~20 logits into them
SMOOTH = Population("normal", 0.4, 2.7, tail_lo=4.0, tail_hi=4.0)


def test_the_map_is_monotone_inverts_and_its_slope_is_its_derivative():
    m = LatticeMap(t_lo=-3.0, t_hi=2.0, k_lo=7.0, k_hi=15.0, w=0.5)
    u = np.linspace(-40.0, 40.0, 20001)
    b = m.b(u)
    assert np.all(np.diff(b) > 0)
    np.testing.assert_allclose(m.u(b), u, atol=1e-10)
    np.testing.assert_allclose(m.slope(u[1:-1]), (b[2:] - b[:-2]) / (u[2:] - u[:-2]), rtol=1e-5)
    assert m.slope(-40.0) == pytest.approx(8.0) and m.slope(40.0) == pytest.approx(16.0)
    x = np.array([-1.0, 3.0])
    assert LatticeMap().u(x) is x and LatticeMap().log_jacobian(x) is None


def _guessing_design(seed: int = 0, n_models: int = 29, n_items: int = 3000, c: float = 0.1):
    """An MMLU-Pro-like design: binary answers of 29 models to 4-option-ish items with guessing."""
    rng = np.random.default_rng(seed)
    theta = np.linspace(-3.5, 1.8, n_models)
    b = rng.normal(0.4, 2.7, n_items)
    n = np.ones((n_models, n_items), dtype=np.int64)
    y = rng.binomial(n, c + (1 - c) * expit(theta[:, None] - b[None, :]))
    return fast.reduce_items(y, n, np.full(n_items, c))


def _fine_marginal(keys: fast.ItemKeys):
    """The marginal with its windows' spacing set to MMLU-Pro's 0.15 logits (there the learned spline's sharpest
    bend sets it): finer spacing is always allowed, and it leaves the stretch room to act."""
    mg = fast.build_marginal(keys, SMOOTH)
    win = dataclasses.replace(mg.windows, h=np.minimum(mg.windows.h, 0.15))
    return mg, win, fast.SHIFT_SDS * float(np.sqrt(np.diag(mg.cov).max()))


def test_a_stretched_lattice_gives_the_uniform_lattices_log_density_on_far_fewer_nodes():
    keys = _guessing_design(n_items=1500)
    mg, win, reach = _fine_marginal(keys)
    uniform = fast.MarginalModel(keys, tuple(fast.build_blocks(keys, win, fast.cov_margins(mg.cov), SMOOTH)))
    stretched = fast.MarginalModel(keys, tuple(fast.build_blocks(keys, win, fast.cov_margins(mg.cov), SMOOTH,
                                                                 reach=reach)))
    finer = dataclasses.replace(win, h=win.h / 3)
    reference = fast.MarginalModel(keys, tuple(fast.build_blocks(keys, finer, fast.cov_margins(mg.cov), SMOOTH)))
    assert all(blk.log_jac is not None for blk in stretched.blocks)
    assert stretched.n_nodes < 0.6 * uniform.n_nodes  # measured 0.51
    rng = np.random.default_rng(1)
    thetas = mg.mode + 2.0 * rng.standard_normal((20, len(mg.mode))) @ np.linalg.cholesky(mg.cov).T
    ref = reference.logp_batch(thetas)
    for model in (uniform, stretched):
        err = model.logp_batch(thetas) - ref
        assert np.ptp(err) < 1e-8  # the same up to a constant (log h) and round-off, at every ability vector


def test_difficulty_draws_on_a_stretched_lattice_match_the_exact_conditionals_in_both_paths():
    keys = _guessing_design(seed=2, n_items=300)
    mg, win, _ = _fine_marginal(keys)
    S = 2000
    thetas = np.tile(mg.mode, (S, 1))
    shifts = thetas - win.theta
    blocks = fast.build_blocks(keys, win, fast.draw_margins(shifts), SMOOTH, for_draws=True,
                               reach=float(np.abs(shifts).max()))
    assert all(blk.log_jac is not None for blk in blocks)
    draws, edge = fast.draw_difficulties(keys, blocks, thetas, np.random.default_rng(3))
    compiled, _ = fast.draw_difficulties(keys, blocks, thetas, np.random.default_rng(3), large_fit=True)
    assert edge < -20
    np.testing.assert_allclose(compiled, draws, atol=1e-9)  # the same uniforms, the same cells, the same b
    # exact conditional moments of every key on a uniform lattice three times finer
    finer = dataclasses.replace(win, h=win.h / 3)
    for blk in fast.build_blocks(keys, finer, fast.cov_margins(mg.cov), SMOOTH):
        ell, shift = fast.block_log_density(mg.mode[None, :], blk)
        p = np.exp(ell[0] - ell[0].max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        b = np.broadcast_to(blk.nodes, p.shape) + shift[0]
        mean = (p * b).sum(1)
        sd = np.sqrt((p * (b - mean[:, None]) ** 2).sum(1))
        kurtosis = (p * (b - mean[:, None]) ** 4).sum(1) / sd**4  # guessing posteriors are skewed, long-tailed
        items = [np.flatnonzero(keys.item_key == k)[0] for k in blk.keys]
        got = draws[:, items]
        assert np.all(np.abs(got.mean(0) - mean) < 4.5 * sd / np.sqrt(S))
        # the sample SD's relative standard error is sqrt((kurtosis - 1) / 4 S)
        assert np.all(np.abs(got.std(0) / sd - 1) < 4.5 * np.sqrt((kurtosis - 1) / (4 * S)))


def test_exact_key_moments_on_a_stretched_shared_grid_equal_the_uniform_grids():
    """The null's and the exact b's per-key moments (placement's shared grid) on a stretched grid: the same to
    1e-9 on a smooth population, on fewer nodes."""
    from benchfill.irt import placement

    rng = np.random.default_rng(4)
    n_models, n_items, c = 29, 800, 0.1
    theta = np.linspace(-3.5, 1.8, n_models)
    draws = theta + 0.05 * rng.standard_normal((25, n_models))
    b = rng.normal(0.4, 2.7, n_items)
    n = np.ones((n_items, n_models), dtype=np.int64)
    y = rng.binomial(n, c + (1 - c) * expit(theta[None, :] - b[:, None]))
    keys = fast.reduce_items(y.T, n.T, np.full(n_items, c))
    prior = SMOOTH
    # the shared grid over the population's support, at MMLU-Pro's spacing (0.15 logits: h_factor 2.4 here)
    grid = placement._shared_grid(draws, prior, float(n_models), 2.4, 2000)
    stretched, log_prior = placement._stretched_grid(grid, keys, draws, prior, 2.4)
    assert stretched.size < 0.75 * grid.size and stretched[0] == pytest.approx(grid[0])
    moments = {}
    for name, (g, lp) in {"uniform": (grid, prior.log_density_unnormalised(grid)),
                          "stretched": (stretched, log_prior)}.items():
        m1, m2 = np.zeros(keys.n_keys), np.zeros(keys.n_keys)
        placement._accumulate_grid_moments(keys, draws, g, 200, m1, m2, lp)
        moments[name] = (m1 / len(draws), m2 / len(draws))
    np.testing.assert_allclose(moments["stretched"][0], moments["uniform"][0], atol=1e-9)
    np.testing.assert_allclose(moments["stretched"][1], moments["uniform"][1], rtol=1e-9, atol=1e-9)
