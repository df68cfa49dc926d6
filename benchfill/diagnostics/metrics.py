"""The difficulty-distribution metrics of README: Reading the figures, as pure functions on normalised difficulties.

All difficulties here are on the normalised axis d in [0, 1]: d_i = (b_i - min b) / (max b - min b).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, computed_field

FLAG_DDM = 0.10
FLAG_MAX_GAP = 0.10
FLAG_TOP5 = 0.30


def normalise(b: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """Min-max normalise difficulties along the last axis: (..., I) -> (..., I) in [0, 1].

    ``lo``/``hi`` fix the scale (placing new items on an existing benchmark's axis); by default each row uses
    its own min and max (so every posterior draw is normalised by itself).
    """
    b = np.asarray(b, dtype=float)
    lo_ = b.min(axis=-1, keepdims=True) if lo is None else lo
    hi_ = b.max(axis=-1, keepdims=True) if hi is None else hi
    span = np.where(np.asarray(hi_ - lo_) > 0, hi_ - lo_, 1.0)
    return (b - lo_) / span


def uniform_grid(n: int) -> np.ndarray:
    """The same-size uniform grid u_i = (i - 1) / (n - 1), i = 1..n (a single point sits at 0.5)."""
    return np.linspace(0.0, 1.0, n) if n > 1 else np.array([0.5])


def ddm(d: np.ndarray) -> float | np.ndarray:
    """Difficulty-distribution mismatch: W1 between the empirical measure of d and the same-size uniform grid,
    i.e. mean |d_(i) - u_i| over sorted d. d: (..., n) -> (...) (vectorised over leading axes)."""
    d = np.sort(np.asarray(d, dtype=float), axis=-1)
    out = np.abs(d - uniform_grid(d.shape[-1])).mean(axis=-1)
    return float(out) if out.ndim == 0 else out


def w1_to_continuous_uniform(d: np.ndarray) -> float | np.ndarray:
    """W1 between the empirical measure of d and continuous U[0, 1]: integral of |F_n(x) - x| dx, exact.

    On [d_(k), d_(k+1)] the ECDF is k/n, so each piece integrates |k/n - x| in closed form.
    """
    out = _w1_sorted(np.sort(np.clip(np.asarray(d, dtype=float), 0.0, 1.0), axis=-1))
    return float(out) if out.ndim == 0 else out


def _w1_sorted(d: np.ndarray) -> np.ndarray:
    """:func:`w1_to_continuous_uniform` of d already sorted and inside [0, 1]."""
    n = d.shape[-1]
    edges = np.concatenate([np.zeros(d.shape[:-1] + (1,)), d, np.ones(d.shape[:-1] + (1,))], axis=-1)
    level = np.arange(n + 1) / n  # ECDF value on each piece
    lo, hi = edges[..., :-1], edges[..., 1:]
    # integral over [lo, hi] of |level - x| dx, with level inside or outside the piece
    inside = np.clip(level, lo, hi)
    return (((level - lo) ** 2 - (level - inside) ** 2) / 2 + ((hi - level) ** 2 - (inside - level) ** 2) / 2).sum(-1)


class Gap(BaseModel):
    """An empty interval on the normalised difficulty axis; ``mid`` is the fill target. ``model_dump()`` gives
    ``{lo, hi, mid, width}``."""

    model_config = ConfigDict(frozen=True)

    lo: float
    hi: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mid(self) -> float:
        return (self.lo + self.hi) / 2

    @computed_field  # type: ignore[prop-decorator]
    @property
    def width(self) -> float:
        return self.hi - self.lo


def gap_widths(d: np.ndarray) -> np.ndarray:
    """Successive differences of sorted d with 0 and 1 added: (..., n) -> (..., n + 1)."""
    d = np.sort(np.asarray(d, dtype=float), axis=-1)
    zeros = np.zeros(d.shape[:-1] + (1,))
    return np.diff(np.concatenate([zeros, d, zeros + 1.0], axis=-1), axis=-1)


def gaps(d: np.ndarray, top: int | None = None, at_least: float | None = None) -> list[Gap]:
    """The gaps of a 1-D d as intervals, largest first (ties: leftmost first); ``top``: only that many;
    ``at_least``: only those at least that wide and not empty (the others are never built)."""
    d = np.sort(np.asarray(d, dtype=float))
    edges = np.concatenate([[0.0], d, [1.0]])
    widths = np.diff(edges)
    keep = np.arange(widths.size)
    if at_least is not None:
        keep = np.flatnonzero((widths >= at_least) & (widths > 0))
    order = keep[np.lexsort((edges[:-1][keep], -widths[keep]))]
    if top is not None:
        order = order[:top]
    return [Gap(lo=float(edges[k]), hi=float(edges[k + 1])) for k in order]


def max_gap(d: np.ndarray) -> float | np.ndarray:
    out = gap_widths(d).max(axis=-1)
    return float(out) if out.ndim == 0 else out


def top_k_gap_sum(d: np.ndarray, k: int = 5) -> float | np.ndarray:
    """Sum of the k largest gaps (Top-5 sum by default)."""
    w = np.sort(gap_widths(d), axis=-1)[..., ::-1][..., :k]
    out = w.sum(axis=-1)
    return float(out) if out.ndim == 0 else out


def headline_metrics(d: np.ndarray, w1: bool = False) -> dict[str, float | np.ndarray]:
    """DDM, max gap and Top-5 sum of d (..., n) with one sort (and, with ``w1``, W1 to U[0, 1] from the same
    sort): the figures every diagnosis reports, vectorised over leading axes."""
    d = np.sort(np.asarray(d, dtype=float), axis=-1)
    zeros = np.zeros(d.shape[:-1] + (1,))
    widths = np.diff(np.concatenate([zeros, d, zeros + 1.0], axis=-1), axis=-1)
    top = np.partition(widths, -5, axis=-1)[..., -5:] if widths.shape[-1] >= 5 else widths
    out = {
        "ddm": np.abs(d - uniform_grid(d.shape[-1])).mean(axis=-1),
        "max_gap": top.max(axis=-1),
        "top5_sum": top.sum(axis=-1),
    }
    if w1:
        out["w1_uniform"] = _w1_sorted(np.clip(d, 0.0, 1.0))
    return {k: float(v) if np.ndim(v) == 0 else v for k, v in out.items()}


def uniform_max_gap_median(n: int, n_sim: int = 2000, seed: int = 0) -> float:
    """Median max gap of n i.i.d. U(0, 1) points, min-max normalised the same way as a benchmark (seeded MC).

    After min-max normalisation the n - 1 spacings between the points are distributed as E_k / sum(E) with E_k
    i.i.d. Exp(1) (uniform spacings), so no sort is needed; the number of replicates shrinks for very large n
    (at least 200) to keep the cost bounded, which moves the median by far less than its own spread."""
    if n < 2:
        return 1.0
    rng = np.random.default_rng(seed)
    reps = int(max(200, min(n_sim, 4_000_000 // n)))
    e = rng.standard_exponential((reps, n - 1))
    return float(np.median(e.max(axis=1) / e.sum(axis=1)))


def uniform_baseline_ratio(d: np.ndarray, n_sim: int = 2000, seed: int = 0) -> float:
    """Observed max gap / median max gap of the same number of uniform points (paper: median ratio 3.85x)."""
    d = np.asarray(d, dtype=float)
    return float(max_gap(d) / uniform_max_gap_median(d.shape[-1], n_sim, seed))


class Flags(BaseModel):
    """Which of the paper's thresholds a benchmark reaches; ``model_dump()`` gives ``{ddm, max_gap, top5_sum}``."""

    model_config = ConfigDict(frozen=True)

    ddm: bool
    max_gap: bool
    top5_sum: bool


def flags(ddm_value: float, max_gap_value: float, top5_value: float) -> Flags:
    """Thresholds of the paper: DDM >= 0.10, max gap >= 0.10, Top-5 sum >= 0.30."""
    return Flags(ddm=bool(ddm_value >= FLAG_DDM), max_gap=bool(max_gap_value >= FLAG_MAX_GAP),
                 top5_sum=bool(top5_value >= FLAG_TOP5))
