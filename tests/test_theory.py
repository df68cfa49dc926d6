"""Theorem 2.1 / B.2 and Theorem 2.3 helpers: hand cases and small simulations of the guarantees."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchfill.diagnostics.metrics import gaps, w1_to_continuous_uniform
from benchfill.diagnostics.theory import (
    finite_sample_gap_bound,
    gap_error_bound,
    hoeffding_term,
    power_lower_bound,
    ranking_check,
    ranking_stable,
    rollouts_for_power,
    undetectable_intervals,
    worst_case_power,
)
from benchfill.errors import InputError


def test_gap_bound_and_ranking_hand_cases() -> None:
    assert gap_error_bound(2.0, 0.1) == pytest.approx(0.2)
    assert ranking_stable(0.25, 2.0, 0.1)
    assert not ranking_stable(0.2, 2.0, 0.1)  # strict: at equality the benchmark gap may be 0
    assert ranking_stable(-0.25, 2.0, 0.1)  # the sign of the gap does not matter
    assert ranking_stable(0.01, 5.0, 0.0)  # a benchmark equal to the target never flips a real gap
    assert hoeffding_term(30, 32, 0.05) == pytest.approx(math.sqrt(math.log(40) / 960))
    assert finite_sample_gap_bound(2.0, 0.1, 30, 32) == pytest.approx(0.2 + math.sqrt(math.log(40) / 960))
    chk = ranking_check(0.25, 2.0, 0.1, n_items=30, n_rollouts=32)
    assert not chk.stable and chk.bound == pytest.approx(0.2 + chk.sampling_term)
    assert json.loads(chk.model_dump_json())["n_items"] == 30 and chk.model_dump()["stable"] is False
    assert ranking_check(0.25, 2.0, 0.1).model_dump()["n_items"] is None  # the population version
    with pytest.raises(InputError):
        ranking_check(0.1, 1.0, 0.1, n_items=30)
    with pytest.raises(InputError):
        gap_error_bound(-1.0, 0.1)


def test_theorem_2_1_holds_for_lipschitz_gaps() -> None:
    # |E_B[Delta] - E_U[Delta]| <= L * W1(nu_B, U[0,1]) for random L-Lipschitz Delta(x) = (L / w) sin(w x + phi).
    rng = np.random.default_rng(0)
    grid = (np.arange(200_000) + 0.5) / 200_000
    for _ in range(50):
        d = rng.beta(rng.uniform(0.3, 3), rng.uniform(0.3, 3), rng.integers(5, 200))
        lip, w, phi = rng.uniform(0.1, 2), rng.uniform(0.5, 30), rng.uniform(0, 2 * np.pi)
        delta = lambda x: lip / w * np.sin(w * x + phi)  # noqa: E731
        gap = abs(delta(d).mean() - delta(grid).mean())
        assert gap <= gap_error_bound(lip, float(w1_to_continuous_uniform(d))) + 1e-6


def test_hoeffding_term_covers() -> None:
    # Observed gap of two models over 20 items x 4 rollouts stays within the term with prob >= 1 - delta.
    rng = np.random.default_rng(1)
    items, n, delta = 20, 4, 0.1
    pa, pb = rng.uniform(0, 1, items), rng.uniform(0, 1, items)
    obs = (rng.binomial(n, pa, (4000, items)) - rng.binomial(n, pb, (4000, items))).mean(1) / n
    miss = np.mean(np.abs(obs - (pa - pb).mean()) > hoeffding_term(items, n, delta))
    assert miss <= delta


def test_worst_case_power_undetectable_is_alpha() -> None:
    for n in (1, 32, 10**6):
        res = worst_case_power(0.08, 0.1, 0.05, effect=0.5, n_rollouts=n)
        assert res.power == 0.05 and res.exact and not res.detectable
    assert worst_case_power(0.1, 0.1, 0.01).power == 0.01  # an open interval as wide as the gap still fits
    assert json.loads(worst_case_power(0.08, 0.1).model_dump_json())["power"] == 0.05


def test_worst_case_power_detectable_rate() -> None:
    # Hand case: effect 0.3, n = 100, alpha 0.05: 1 - exp(-(3 - sqrt(log 20))^2) = 0.8003.
    assert power_lower_bound(0.3, 100, 0.05) == pytest.approx(1 - math.exp(-((3 - math.sqrt(math.log(20))) ** 2)))
    assert rollouts_for_power(0.3, 0.8, 0.05) == 100
    powers = [worst_case_power(0.2, 0.1, effect=0.3, n_rollouts=n).power for n in (4, 32, 100, 400, 2000)]
    assert powers[0] == 0.05  # too few rollouts: the bound is vacuous
    assert all(a <= b for a, b in zip(powers, powers[1:])) and powers[-1] > 1 - 1e-12
    res = worst_case_power(0.2, 0.1, effect=0.3)
    assert res.detectable and res.power is None and res.rollouts_for_80 == 100
    assert worst_case_power(0.2, 0.1).power is None
    # Scanning more items (location unknown) needs more rollouts.
    assert rollouts_for_power(0.3, 0.8, 0.05, n_tests=30) > 100


def test_power_bound_is_conservative_by_simulation() -> None:
    # The scan test behind the bound: level <= alpha under the null, power >= the bound under the alternative.
    rng = np.random.default_rng(2)
    n, m, alpha, effect, sims = 60, 10, 0.05, 0.35, 4000
    t = math.sqrt(math.log(m / alpha) / n)
    p = rng.uniform(0.1, 0.6, m)
    pb = p.copy()
    pb[0] += effect
    null = ((rng.binomial(n, p, (sims, m)) - rng.binomial(n, p, (sims, m))) / n).max(1) >= t
    alt = ((rng.binomial(n, pb, (sims, m)) - rng.binomial(n, p, (sims, m))) / n).max(1) >= t
    assert null.mean() <= alpha
    assert alt.mean() >= power_lower_bound(effect, n, alpha, m)


def test_undetectable_intervals() -> None:
    d = np.array([1.0, 0.3, 0.35])
    out = undetectable_intervals(d, 0.2)
    assert [(g.lo, g.hi) for g in out] == [(0.35, 1.0), (0.0, 0.3)]
    assert out[0].model_dump() == pytest.approx({"lo": 0.35, "hi": 1.0, "mid": 0.675, "width": 0.65})
    assert [g.width for g in undetectable_intervals(d, 0.65)] == pytest.approx([0.65])  # >=: the gap itself fits
    assert undetectable_intervals(d, 0.7) == []
    # the same intervals as filtering every gap (largest first, ties leftmost), only those wide enough are built
    rng = np.random.default_rng(5)
    d = np.round(rng.random(200), 2)  # ties in widths and zero-width gaps
    every = [g for g in gaps(d) if g.width >= 0.02 and g.width > 0]
    assert undetectable_intervals(d, 0.02) == every and len(every) > 5
    with pytest.raises(InputError):
        undetectable_intervals(np.array([0.2, 1.4]), 0.1)
