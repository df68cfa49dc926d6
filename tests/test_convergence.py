"""Vectorised rank-normalised R-hat and bulk / tail ESS agree with ArviZ on the same draws."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.irt.convergence import rank_diagnostics


def _arviz(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import arviz as az

    ds = az.convert_to_dataset({"x": draws})
    return (np.asarray(az.rhat(ds)["x"].values), np.asarray(az.ess(ds, method="bulk")["x"].values),
            np.asarray(az.ess(ds, method="tail")["x"].values))


def _chains(C: int, S: int, K: int, phi: np.ndarray, seed: int) -> np.ndarray:
    """AR(1) chains with per-parameter autocorrelation phi (K,), chain offsets for some parameters."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((C, S, K))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for s in range(1, S):
        x[:, s] = phi * x[:, s - 1] + np.sqrt(1 - phi**2) * e[:, s]
    x[:, :, : K // 5] += 0.3 * rng.standard_normal((C, 1, K // 5))  # some parameters not mixed across chains
    return x


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("C,S", [(4, 1000), (3, 301), (1, 200), (2, 7)])
def test_rank_diagnostics_match_arviz(dtype, C, S):
    K = 60
    phi = np.linspace(-0.3, 0.97, K)
    x = _chains(C, S, K, phi, seed=C * S).astype(dtype)
    # ties, as an independence MH chain repeats states and float32 draws collide
    x[:, 1::3, ::4] = x[:, 0:-1:3, ::4][:, : x[:, 1::3].shape[1]]
    x[:, :, 7] = np.round(x[:, :, 7], 1)
    x[:, :, 9] = 0.5  # constant
    x[0, 0, 11] = np.nan
    mine = rank_diagnostics(x, block=17)
    ref = _arviz(x)
    for a, b, name in zip(mine, ref, ("rhat", "ess_bulk", "ess_tail")):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
        ok = ~np.isnan(b)
        np.testing.assert_allclose(a[ok], b[ok], rtol=1e-6, atol=1e-9, err_msg=name)


def test_rank_diagnostics_on_fast_fit_draws_match_arviz():
    from benchfill.data import ResponseMatrix
    from benchfill.irt.fit import fit_irt
    from benchfill.irt.model import IRTSpec, SamplerSettings

    rng = np.random.default_rng(3)
    theta, b = rng.normal(size=12), rng.normal(size=150)
    n = np.full((12, 150), 4)
    y = rng.binomial(n, 1 / (1 + np.exp(-(theta[:, None] - b[None, :]))))
    resp = ResponseMatrix([f"m{j}" for j in range(12)], [f"q{i}" for i in range(150)], y, n, "<sim>")
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast", chains=4, tune=100, draws=500, seed=1))
    for draws in (fit.theta, fit.b):
        mine, ref = rank_diagnostics(draws), _arviz(draws)
        for a, r in zip(mine, ref):
            np.testing.assert_allclose(a, r, rtol=1e-6)
