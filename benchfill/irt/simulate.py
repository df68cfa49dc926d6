"""Simulated response data with known parameters: for parameter-recovery tests, benchmarks and demos."""

from __future__ import annotations

import numpy as np

from benchfill.data import ResponseMatrix
from benchfill.irt.model import probability


def simulate_responses(
    theta: np.ndarray,
    b: np.ndarray,
    n_trials: int | np.ndarray = 4,
    *,
    a: np.ndarray | None = None,
    guessing: np.ndarray | float | None = None,
    seed: int | np.random.Generator = 0,
) -> ResponseMatrix:
    """Binomial counts from the IRT model with known abilities theta (J,) and difficulties b (I,).

    n_trials: rollouts per cell, a scalar or a (J, I) array. Model names are ``m00..``, item ids ``i0000..``.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    theta, b = np.asarray(theta, float), np.asarray(b, float)
    c = None if guessing is None else np.broadcast_to(np.asarray(guessing, float), b.shape)
    p = probability(theta[:, None], b[None, :], None if a is None else np.asarray(a)[None, :],
                    None if c is None else c[None, :])
    n = np.broadcast_to(np.asarray(n_trials, dtype=np.int64), p.shape).copy()
    k = rng.binomial(n, p)
    return ResponseMatrix(
        [f"m{j:02d}" for j in range(len(theta))], [f"i{i:04d}" for i in range(len(b))], k.astype(np.int64), n,
        source="<simulated>",
    )
