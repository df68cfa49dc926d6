"""The paper's two guarantees as small functions, for the diagnosis report.

Theorem 2.1 (measure mismatch). Let Delta(x) = f_A(x) - f_B(x) be the gap between two models' expected scores at
difficulty x, L-Lipschitz in x. The benchmark sees Delta_B = E_{nu_B}[Delta], the target wants Delta_T = E_{nu_T}
[Delta]; by Kantorovich-Rubinstein duality |Delta_B - Delta_T| <= L * W1(nu_B, nu_T). Hence if |Delta_T| > L * W1 the
benchmark ranks the two models as the target does: no ranking flip.

Theorem 2.3 (coverage gaps). An improvement confined to an open interval of difficulty containing no item changes no
item's success probability, so the data have the same law with or without it and every level-alpha test has power
alpha against it, however many rollouts. An interval of width w fits inside an empty gap iff w < max gap (gaps
taken with the endpoints 0 and 1 added). When w > max gap every interval of width w holds an item, and power tends
to 1 as rollouts grow; :func:`worst_case_power` gives an explicit Hoeffding lower bound.

All widths, gaps and W1 values are on the normalised difficulty axis [0, 1]; gaps and effects are in accuracy units
(fractions, not points); L is in accuracy per unit of normalised difficulty.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict

from benchfill.diagnostics.metrics import Gap, gaps
from benchfill.errors import InputError


def _nonneg(name: str, x: float) -> float:
    x = float(x)
    if not math.isfinite(x) or x < 0:
        raise InputError("theory", f"{name}={x} must be a finite number >= 0")
    return x


def _prob(name: str, x: float) -> float:
    x = float(x)
    if not (0.0 < x < 1.0):
        raise InputError("theory", f"{name}={x} must be in (0, 1)")
    return x


def _count(name: str, x: int) -> int:
    if int(x) != x or int(x) < 1:
        raise InputError("theory", f"{name}={x} must be a whole number >= 1")
    return int(x)


# ------------------------------------------------------------------------------------------- Theorem 2.1 / B.2


def gap_error_bound(lipschitz: float, w1: float) -> float:
    """Theorem 2.1: the most the benchmark's gap can differ from the target's, L * W1 (accuracy units)."""
    return _nonneg("lipschitz", lipschitz) * _nonneg("w1", w1)


def hoeffding_term(n_items: int, n_rollouts: int, delta: float = 0.05) -> float:
    """Sampling error of an observed score gap: sqrt(log(2/delta) / (n_items * n_rollouts)).

    Assumptions: the items are fixed; each model answers each item ``n_rollouts`` times, all rollouts independent
    with outcomes in [0, 1]; the observed gap is the mean over items of the per-item mean-score difference. It is
    then an average of 2 I n independent terms, each with range 1/(I n), so Hoeffding gives
    P(|observed gap - expected gap| >= t) <= 2 exp(-t^2 I n); solving for probability delta gives this t. (The usual
    single-score form sqrt(log(2/delta) / (2 N)) for N samples is the same bound with N = I n per model, widened by
    sqrt(2) because two independent scores are differenced.)
    """
    n_items, n_rollouts = _count("n_items", n_items), _count("n_rollouts", n_rollouts)
    return math.sqrt(math.log(2.0 / _prob("delta", delta)) / (n_items * n_rollouts))


def finite_sample_gap_bound(lipschitz: float, w1: float, n_items: int, n_rollouts: int, delta: float = 0.05) -> float:
    """Theorem B.2 style: with probability >= 1 - delta, |observed gap - target gap| <= L * W1 + Hoeffding term
    (see :func:`hoeffding_term` for the assumptions)."""
    return gap_error_bound(lipschitz, w1) + hoeffding_term(n_items, n_rollouts, delta)


class RankingCheck(BaseModel):
    """Whether the benchmark provably ranks two models as the target distribution would.

    Attributes:
        target_gap: |Delta_T| assumed (accuracy units).
        lipschitz, w1: L and W1(nu_B, nu_T).
        measure_term: L * W1.
        sampling_term: Hoeffding term (0 for the population version).
        bound: measure_term + sampling_term.
        stable: target_gap > bound (with probability >= 1 - delta in the finite-sample version).
        n_items, n_rollouts, delta: the finite-sample inputs, None for the population version.
    """

    model_config = ConfigDict(frozen=True)

    target_gap: float
    lipschitz: float
    w1: float
    measure_term: float
    sampling_term: float
    bound: float
    stable: bool
    n_items: int | None = None
    n_rollouts: int | None = None
    delta: float | None = None


def ranking_check(
    target_gap: float,
    lipschitz: float,
    w1: float,
    *,
    n_items: int | None = None,
    n_rollouts: int | None = None,
    delta: float = 0.05,
) -> RankingCheck:
    """Theorem 2.1 (population) or, when ``n_items`` and ``n_rollouts`` are given, its finite-sample version.

    The ranking cannot flip when |target_gap| > L * W1 (+ the Hoeffding term). The strict inequality matters:
    at equality the benchmark's gap may be exactly 0.
    """
    measure = gap_error_bound(lipschitz, w1)
    finite = n_items is not None or n_rollouts is not None
    if finite and (n_items is None or n_rollouts is None):
        raise InputError("theory", "the finite-sample bound needs both n_items and n_rollouts")
    sampling = hoeffding_term(n_items, n_rollouts, delta) if finite else 0.0  # type: ignore[arg-type]
    gap = abs(float(target_gap))
    return RankingCheck(
        target_gap=gap,
        lipschitz=float(lipschitz),
        w1=float(w1),
        measure_term=measure,
        sampling_term=sampling,
        bound=measure + sampling,
        stable=bool(gap > measure + sampling),
        n_items=int(n_items) if finite else None,  # type: ignore[arg-type]
        n_rollouts=int(n_rollouts) if finite else None,  # type: ignore[arg-type]
        delta=float(delta) if finite else None,
    )


def ranking_stable(
    target_gap: float,
    lipschitz: float,
    w1: float,
    *,
    n_items: int | None = None,
    n_rollouts: int | None = None,
    delta: float = 0.05,
) -> bool:
    """True when the benchmark cannot flip the target ranking: |target_gap| > L * W1 (+ Hoeffding term if
    ``n_items``/``n_rollouts`` are given; then "cannot" holds with probability >= 1 - delta)."""
    return ranking_check(target_gap, lipschitz, w1, n_items=n_items, n_rollouts=n_rollouts, delta=delta).stable


# ------------------------------------------------------------------------------------------------ Theorem 2.3


class PowerBound(BaseModel):
    """Worst-case power of detecting an improvement of at least ``effect`` on some interval of ``interval_width``.

    Attributes:
        interval_width, max_gap, alpha: inputs (normalised difficulty units; level).
        detectable: interval_width > max_gap (every such interval holds at least one item).
        power: alpha exactly when not detectable; otherwise a lower bound on the best achievable worst-case power
            (never below alpha, which the trivial randomised test attains), or None when effect/rollouts are not
            given.
        exact: True when ``power`` is exact (the undetectable case), False for a lower bound.
        effect: improvement delta in accuracy units (fraction) assumed on the whole interval.
        n_rollouts: rollouts per model on each item.
        n_tests: items the test scans (Bonferroni); 1 when the interval, hence an item inside it, is fixed in advance.
        rollouts_for_80: rollouts per model that make the bound reach 0.8 (None when not applicable).
    """

    model_config = ConfigDict(frozen=True)

    interval_width: float
    max_gap: float
    alpha: float
    detectable: bool
    power: float | None
    exact: bool
    effect: float | None = None
    n_rollouts: int | None = None
    n_tests: int = 1
    rollouts_for_80: int | None = None


def power_lower_bound(effect: float, n_rollouts: int, alpha: float = 0.05, n_tests: int = 1) -> float:
    """Power of the Hoeffding scan test on an item whose success rate rises by >= ``effect`` (accuracy units).

    Test: reject "no item improved" when max over ``n_tests`` items of (B's mean - A's mean over ``n_rollouts``
    rollouts each) >= t, t = sqrt(log(n_tests/alpha) / n). Hoeffding (2n independent terms of range 1/n) bounds each
    null exceedance by exp(-n t^2), so the union is <= alpha; under the alternative the miss probability is
    <= exp(-n (effect - t)^2). Power >= 1 - exp(-(sqrt(n) * effect - sqrt(log(n_tests/alpha)))^2) when
    sqrt(n) * effect > sqrt(log(n_tests/alpha)), else the bound is vacuous and alpha is returned. Rate:
    1 - power <= exp(-n effect^2 (1 + o(1))), i.e. n ~ log(1/(1 - power)) / effect^2 rollouts suffice.
    """
    effect = float(effect)
    if not (0.0 < effect <= 1.0):
        raise InputError("theory", f"effect={effect} must be in (0, 1] (accuracy units)")
    n, m, alpha = _count("n_rollouts", n_rollouts), _count("n_tests", n_tests), _prob("alpha", alpha)
    margin = math.sqrt(n) * effect - math.sqrt(math.log(m / alpha))
    if margin <= 0:
        return alpha
    return max(alpha, 1.0 - math.exp(-margin * margin))


def rollouts_for_power(effect: float, power: float = 0.8, alpha: float = 0.05, n_tests: int = 1) -> int:
    """Fewest rollouts per model for :func:`power_lower_bound` to reach ``power``:
    n = ceil(((sqrt(log(n_tests/alpha)) + sqrt(log(1/(1 - power)))) / effect)^2)."""
    effect = float(effect)
    if not (0.0 < effect <= 1.0):
        raise InputError("theory", f"effect={effect} must be in (0, 1] (accuracy units)")
    m, power, alpha = _count("n_tests", n_tests), _prob("power", power), _prob("alpha", alpha)
    root = (math.sqrt(math.log(m / alpha)) + math.sqrt(math.log(1.0 / (1.0 - power)))) / effect
    n = math.ceil(root * root - 1e-9)
    while power_lower_bound(effect, n, alpha, m) < power:  # guard the ceil against rounding
        n += 1
    return n


def worst_case_power(
    interval_width: float,
    max_gap: float,
    alpha: float = 0.05,
    *,
    effect: float | None = None,
    n_rollouts: int | None = None,
    n_tests: int = 1,
) -> PowerBound:
    """Theorem 2.3: worst-case power (over where the interval sits) of any level-alpha test for an improvement of
    at least ``effect`` throughout an interval of width ``interval_width``.

    ``interval_width < max_gap``: the interval can sit inside the largest empty gap, so the power is exactly alpha,
    whatever the rollouts. ``interval_width > max_gap``: the interval always holds an item; the returned power is
    :func:`power_lower_bound` (needs ``effect`` and ``n_rollouts``; None otherwise), which tends to 1 as rollouts
    grow. At exact equality an improvement confined to the open gap is still invisible, so it counts as
    undetectable too.
    """
    width, gap, alpha = _nonneg("interval_width", interval_width), _nonneg("max_gap", max_gap), _prob("alpha", alpha)
    n_tests = _count("n_tests", n_tests)
    if width <= gap:
        return PowerBound(interval_width=width, max_gap=gap, alpha=alpha, detectable=False, power=alpha, exact=True,
                          effect=None if effect is None else float(effect),
                          n_rollouts=None if n_rollouts is None else int(n_rollouts), n_tests=n_tests)
    if effect is None:
        return PowerBound(interval_width=width, max_gap=gap, alpha=alpha, detectable=True, power=None, exact=False,
                          n_tests=n_tests)
    need = rollouts_for_power(effect, 0.8, alpha, n_tests)
    power = power_lower_bound(effect, n_rollouts, alpha, n_tests) if n_rollouts is not None else None
    return PowerBound(interval_width=width, max_gap=gap, alpha=alpha, detectable=True, power=power, exact=False,
                      effect=float(effect),
                      n_rollouts=int(n_rollouts) if n_rollouts is not None else None, n_tests=n_tests,
                      rollouts_for_80=need)


def undetectable_intervals(d: np.ndarray, interval_width: float) -> list[Gap]:
    """The empty gaps (sorted d with 0 and 1 added) at least ``interval_width`` wide, largest first: an improvement
    confined to an interval of that width inside any of them is invisible to every test (Theorem 2.3).

    d: (n,) normalised difficulties in [0, 1], any order.
    """
    d = np.asarray(d, dtype=float)
    if d.ndim != 1 or d.size == 0 or not np.all(np.isfinite(d)):
        raise InputError("theory", "d must be a non-empty 1-D array of finite difficulties")
    if d.min() < 0 or d.max() > 1:
        raise InputError("theory", "d must be normalised to [0, 1]")
    width = _nonneg("interval_width", interval_width)
    return gaps(d, at_least=width)
