"""Calibration by greedy quantile matching (paper App. D), against hand-computed cases."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from benchfill.diagnostics.calibrate import calibrate, greedy_quantile_match, target_quantiles, w1_to_target
from benchfill.errors import InputError


def _ddm_ref(d: np.ndarray) -> float:
    d = np.sort(d)
    return float(np.mean(np.abs(d - np.arange(d.size) / (d.size - 1))))


D10 = np.array([0.0, 0.05, 0.1, 0.2, 0.33, 0.45, 0.6, 0.62, 0.9, 1.0])


def test_hand_case_ten_items_k4() -> None:
    # Bin midpoints 0.125, 0.375, 0.625, 0.875 -> nearest free items 0.1, 0.33, 0.62, 0.9.
    res = calibrate(D10, 4, item_ids=[f"q{i}" for i in range(10)])
    assert res.bin_quantiles == pytest.approx((0.125, 0.375, 0.625, 0.875))
    assert res.bin_picks == (2, 4, 7, 8)
    assert res.indices == (2, 4, 7, 8) and res.item_ids == ("q2", "q4", "q7", "q8")
    assert res.max_pick_error == pytest.approx(0.045)
    # Before: mean |d_(i) - (i-1)/9|, by hand 0.77222... / 10.
    assert res.ddm_before == pytest.approx(0.0772222222, abs=1e-9)
    # After: kept d re-normalised among themselves: 0, 0.23/0.8, 0.52/0.8, 1 vs grid 0, 1/3, 2/3, 1.
    assert res.ddm_after == pytest.approx((abs(0.2875 - 1 / 3) + abs(0.65 - 2 / 3)) / 4)
    assert res.ddm_after == pytest.approx(_ddm_ref((D10[[2, 4, 7, 8]] - 0.1) / 0.8))
    # W1 to U[0,1] of {0.1, 0.33, 0.62, 0.9} on the full axis: sum over quarters of integral |x_i - t| dt.
    w1 = sum(_seg(x, m / 4, (m + 1) / 4) for m, x in enumerate([0.1, 0.33, 0.62, 0.9]))
    assert res.w1_target_after == pytest.approx(w1)
    assert res.w1_target_after < res.w1_target_before
    assert json.loads(res.model_dump_json())["k"] == 4


def _seg(x: float, a: float, b: float) -> float:
    """integral over [a, b] of |x - t| dt."""
    if x <= a:
        return (b - a) * ((a + b) / 2 - x)
    if x >= b:
        return (b - a) * (x - (a + b) / 2)
    return ((x - a) ** 2 + (b - x) ** 2) / 2


def test_greedy_does_not_reuse_an_item() -> None:
    # q = 1/6, 1/2, 5/6. Bin 1 takes 0.3 (0.133 away); bin 2 ties 0.3/0.7 but 0.3 is taken -> 0.7; bin 3 -> 1.0.
    picks, q = greedy_quantile_match(np.array([0.0, 0.3, 0.7, 1.0]), 3)
    assert list(picks) == [1, 2, 3]
    assert q == pytest.approx([1 / 6, 0.5, 5 / 6])


def test_ties_go_to_first_listed() -> None:
    picks, _ = greedy_quantile_match(np.array([0.0, 0.25, 0.5, 0.75, 1.0]), 2)  # q = .25, .75 exact hits
    assert list(picks) == [1, 3]
    picks, _ = greedy_quantile_match(np.array([1.0, 0.5, 0.0]), 2)  # 0.25 is 0.25 from both 0.5 and 0.0
    assert list(picks) == [1, 0]


def test_raw_difficulties_are_normalised_and_k_equals_n() -> None:
    b = np.array([-3.0, -1.0, 0.5, 2.0, 5.0])
    res = calibrate(b, 5)
    assert res.indices == (0, 1, 2, 3, 4)
    assert res.ddm_after == pytest.approx(res.ddm_before)
    assert res.ddm_before == pytest.approx(_ddm_ref((b + 3) / 8))


def test_skewed_benchmark_gets_closer_to_uniform() -> None:
    rng = np.random.default_rng(0)
    d = rng.beta(1.0, 4.0, 400)  # mostly easy items: DDM well above 0.1
    res = calibrate(d, 60)
    assert res.ddm_before > 0.1
    assert res.ddm_after < res.ddm_before / 2
    assert res.w1_target_after < res.w1_target_before
    assert len(set(res.indices)) == 60


def test_non_uniform_targets() -> None:
    rng = np.random.default_rng(1)
    d = rng.uniform(0, 1, 300)
    beta = stats.beta(2, 5)
    res = calibrate(d, 20, target=beta)
    assert res.bin_quantiles == pytest.approx(tuple(beta.ppf((np.arange(1, 21) - 0.5) / 20)))
    same = calibrate(d, 20, target=lambda p: stats.beta.ppf(p, 2, 5))
    assert same.indices == res.indices
    # Numerical W1 (quantile function) agrees with the exact uniform formula.
    x = rng.uniform(0, 1, 37)
    assert w1_to_target(x, lambda p: p) == pytest.approx(w1_to_target(x), abs=1e-6)
    assert w1_to_target(x, stats.uniform()) == pytest.approx(w1_to_target(x), abs=1e-6)
    # W1 between a point mass at 0.5 and U[0,1] is 1/4.
    assert w1_to_target(np.array([0.5])) == pytest.approx(0.25)


def test_bad_input() -> None:
    with pytest.raises(InputError):
        calibrate(D10, 1)
    with pytest.raises(InputError):
        calibrate(D10, 11)
    with pytest.raises(InputError):
        calibrate(np.array([0.1, np.nan, 0.3]), 2)
    with pytest.raises(InputError):
        calibrate(D10, 4, item_ids=["a"])
    with pytest.raises(InputError):
        calibrate(D10, 4, target="uniform")
    with pytest.raises(InputError):
        target_quantiles(stats.norm(), np.array([0.0, 0.5]))  # -inf quantile
