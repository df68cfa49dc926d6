"""Benchmark calibration by pruning (paper App. D): greedy quantile matching to a target difficulty distribution.

For the k equal-probability bins of the target, bin m (m = 1..k) has midpoint quantile q_m = Q((m - 0.5) / k);
bins are visited in order and each takes the not-yet-selected item whose normalised difficulty is nearest to q_m
(ties: the item listed first). The k picked items are the calibrated subset.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from benchfill.errors import InputError

QuantileFn = Callable[[np.ndarray], np.ndarray]
# A target is None = U[0, 1] (the neutral default, Theorem 2.2), a scipy.stats frozen distribution (anything with
# .ppf), or a QuantileFn mapping probabilities in (0, 1) to the normalised difficulty axis. Frozen distributions have
# no common public type, hence Any.
Target = Any

_W1_GRID = 50_000  # midpoint-rule points for W1 to a non-uniform target (error well under 1e-4 for smooth Q)


class CalibrationResult(BaseModel):
    """The pruned subset and how close it is to the target.

    All difficulties are on the normalised axis of the full benchmark (min-max over all n items), except
    ``ddm_after`` and ``w1_target_after_renormalised``, which re-normalise the kept items' d min-max among
    themselves (the pruned subset is a benchmark of its own, diagnosed on its own axis).

    Attributes:
        k: bins = items kept.
        n_items: items before pruning.
        indices: kept items' 0-based positions in the input, ascending (length k).
        item_ids: their ids when ids were given, else None.
        bin_quantiles: (k,) target midpoint quantiles q_m = Q((m - 0.5)/k).
        bin_picks: (k,) input position chosen for bin m, in bin order.
        max_pick_error: max over bins of |d_pick - q_m| (normalised difficulty units).
        ddm_before: DDM of all n items (mean |d_(i) - (i-1)/(n-1)|).
        ddm_after: DDM of the kept items, their d re-normalised min-max among themselves.
        w1_target_before: W1(empirical measure of all d, target).
        w1_target_after: W1(empirical measure of the kept d, target), kept d on the full benchmark's axis (the axis
            the matching used).
        w1_target_after_renormalised: the same with the kept d re-normalised among themselves.

    Serialised with ``model_dump`` / ``model_dump_json`` (the ``--json`` of ``benchfill calibrate``).
    """

    model_config = ConfigDict(frozen=True)

    k: int
    n_items: int
    indices: tuple[int, ...]
    item_ids: tuple[str, ...] | None
    bin_quantiles: tuple[float, ...]
    bin_picks: tuple[int, ...]
    max_pick_error: float
    ddm_before: float
    ddm_after: float
    w1_target_before: float
    w1_target_after: float
    w1_target_after_renormalised: float


def target_quantiles(target: Target, probs: np.ndarray) -> np.ndarray:
    """Q(probs) for a target: None -> U[0, 1]; an object with ``.ppf`` (scipy frozen distribution); or a callable."""
    probs = np.asarray(probs, dtype=float)
    if target is None:
        q = probs.copy()
    elif hasattr(target, "ppf"):
        q = np.asarray(target.ppf(probs), dtype=float)
    elif callable(target):
        q = np.asarray(target(probs), dtype=float)
    else:
        raise InputError("calibrate", f"target must be None, a scipy.stats frozen distribution or a quantile "
                         f"function, got {type(target).__name__}")
    if q.shape != probs.shape or not np.all(np.isfinite(q)):
        raise InputError("calibrate", "the target's quantile function must return finite values, one per probability")
    return q


def w1_to_target(d: np.ndarray, target: Target = None) -> float:
    """W1 between the empirical measure of d (n,) and the target, = integral over t in (0, 1) of |F_n^-1(t) - Q(t)|.

    Exact for the uniform default (:func:`benchfill.diagnostics.metrics.w1_to_continuous_uniform`); otherwise a
    midpoint rule with an equal number of points inside each of the n ECDF steps (about 50,000 points in all).
    """
    d = np.sort(np.asarray(d, dtype=float))
    if target is None:
        from benchfill.diagnostics.metrics import w1_to_continuous_uniform

        return float(w1_to_continuous_uniform(d))
    n = d.size
    per_step = max(4, -(-_W1_GRID // n))
    t = (np.arange(n * per_step) + 0.5) / (n * per_step)
    return float(np.mean(np.abs(np.repeat(d, per_step) - target_quantiles(target, t))))


def _minmax(x: np.ndarray) -> np.ndarray:
    span = x.max() - x.min()
    return (x - x.min()) / span if span > 0 else np.full_like(x, 0.5)


def greedy_quantile_match(d: np.ndarray, k: int, target: Target = None) -> tuple[np.ndarray, np.ndarray]:
    """The matching itself: d (n,) normalised difficulties -> (picks (k,) input positions in bin order, q (k,)).

    O(n k) in vectorised steps of n: well under a second for n = 12,000 (MMLU-Pro scale).
    """
    q = target_quantiles(target, (np.arange(1, k + 1) - 0.5) / k)
    free = np.ones(d.size, dtype=bool)
    picks = np.empty(k, dtype=np.int64)
    for m in range(k):
        dist = np.where(free, np.abs(d - q[m]), np.inf)
        j = int(np.argmin(dist))  # first minimum: ties go to the item listed first
        picks[m] = j
        free[j] = False
    return picks, q


def calibrate(
    difficulties: np.ndarray | Sequence[float],
    k: int,
    *,
    target: Target = None,
    item_ids: Sequence[str] | None = None,
) -> CalibrationResult:
    """Prune a benchmark to k items whose difficulties match the target distribution (paper App. D).

    Args:
        difficulties: (n,) item difficulties, raw IRT b or already normalised d; they are min-max normalised first
            (a no-op on d), so the target lives on the normalised axis [0, 1].
        k: items to keep, 2 <= k <= n.
        target: None (uniform on [0, 1]), a scipy.stats frozen distribution, or a quantile function.
        item_ids: (n,) ids, echoed for the kept items.

    Returns:
        :class:`CalibrationResult` with the kept positions/ids, DDM before/after (after = on the kept items' own
        min-max axis) and W1 to the target.
    """
    b = np.asarray(difficulties, dtype=float)
    if b.ndim != 1 or b.size < 2:
        raise InputError("calibrate", f"need a 1-D array of at least 2 difficulties, got shape {b.shape}")
    if not np.all(np.isfinite(b)):
        raise InputError("calibrate", "difficulties must be finite (no NaN or inf)")
    if item_ids is not None and len(item_ids) != b.size:
        raise InputError("calibrate", f"{len(item_ids)} item ids for {b.size} difficulties")
    n = b.size
    if not (2 <= int(k) <= n):
        raise InputError("calibrate", f"k={k} must be between 2 and the number of items ({n})")
    k = int(k)
    from benchfill.diagnostics.metrics import ddm

    d = _minmax(b)
    picks, q = greedy_quantile_match(d, k, target)
    kept = np.sort(picks)
    d_kept = d[kept]
    d_kept_own = _minmax(d_kept)  # the subset as a benchmark of its own
    return CalibrationResult(
        k=k,
        n_items=n,
        indices=tuple(int(i) for i in kept),
        item_ids=tuple(str(item_ids[i]) for i in kept) if item_ids is not None else None,
        bin_quantiles=tuple(float(x) for x in q),
        bin_picks=tuple(int(i) for i in picks),
        max_pick_error=float(np.max(np.abs(d[picks] - q))),
        ddm_before=float(ddm(d)),
        ddm_after=float(ddm(d_kept_own)),
        w1_target_before=w1_to_target(d, target),
        w1_target_after=w1_to_target(d_kept, target),
        w1_target_after_renormalised=w1_to_target(d_kept_own, target),
    )
