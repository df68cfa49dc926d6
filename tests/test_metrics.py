"""Metrics of SPEC section 3 against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.diagnostics import metrics as M


def test_normalise_per_row_and_fixed_scale():
    b = np.array([[1.0, 3.0, 2.0], [0.0, 10.0, 5.0]])
    np.testing.assert_allclose(M.normalise(b), [[0, 1, 0.5], [0, 1, 0.5]])
    np.testing.assert_allclose(M.normalise(np.array([4.0]), lo=1.0, hi=3.0), [1.5])  # outside [0, 1] allowed


def test_ddm_hand_case():
    # sorted d = 0, 0.1, 0.2, 1 against grid 0, 1/3, 2/3, 1: |0|+|0.1-1/3|+|0.2-2/3|+|0| over 4
    d = np.array([0.2, 0.0, 1.0, 0.1])
    expected = (0 + abs(0.1 - 1 / 3) + abs(0.2 - 2 / 3) + 0) / 4
    assert M.ddm(d) == pytest.approx(expected)
    assert M.ddm(np.linspace(0, 1, 11)) == pytest.approx(0.0)
    assert M.uniform_grid(5).tolist() == [0, 0.25, 0.5, 0.75, 1]


def test_w1_to_continuous_uniform_hand_cases():
    # one point at 0.5: integral |F - x| = int_0^.5 x dx + int_.5^1 (1 - x) dx = 0.25
    assert M.w1_to_continuous_uniform(np.array([0.5])) == pytest.approx(0.25)
    # all mass at 0: int_0^1 (1 - x) dx = 0.5
    assert M.w1_to_continuous_uniform(np.array([0.0, 0.0])) == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    d = rng.random(7)
    xs = np.linspace(0, 1, 200001)
    ecdf = np.searchsorted(np.sort(d), xs, side="right") / 7
    assert M.w1_to_continuous_uniform(d) == pytest.approx(np.trapezoid(np.abs(ecdf - xs), xs), abs=1e-4)


def test_gaps_with_endpoints_and_top5():
    d = np.array([0.0, 0.1, 0.45, 0.5, 1.0])
    # edges 0,0,0.1,0.45,0.5,1,1 -> widths 0, 0.1, 0.35, 0.05, 0.5, 0
    np.testing.assert_allclose(M.gap_widths(d), [0, 0.1, 0.35, 0.05, 0.5, 0])
    gs = M.gaps(d)
    assert (gs[0].lo, gs[0].hi) == (0.5, 1.0) and gs[0].mid == pytest.approx(0.75) and gs[0].width == pytest.approx(0.5)
    assert (gs[1].lo, gs[1].hi) == (0.1, 0.45)
    assert M.max_gap(d) == pytest.approx(0.5)
    assert M.top_k_gap_sum(d, 5) == pytest.approx(1.0)
    assert M.top_k_gap_sum(d, 2) == pytest.approx(0.85)
    # an interior-only benchmark: gaps at both ends count
    assert M.max_gap(np.array([0.3, 0.4])) == pytest.approx(0.6)


def test_vectorised_over_draws_matches_loop():
    rng = np.random.default_rng(1)
    d = rng.random((6, 20))
    for fn in (M.ddm, M.max_gap, lambda x: M.top_k_gap_sum(x, 5), M.w1_to_continuous_uniform):
        np.testing.assert_allclose(fn(d), [fn(row) for row in d])


def test_planted_gap_is_found_at_the_right_place(rng):
    # true difficulties everywhere except (0.55, 0.80): the largest gap is that interval
    d = np.concatenate([rng.uniform(0, 0.55, 60), rng.uniform(0.80, 1.0, 25), [0.0, 1.0]])
    g = M.gaps(M.normalise(d), top=1)[0]
    assert 0.5 < g.lo <= 0.56 and 0.79 <= g.hi < 0.85


def test_flags_thresholds():
    f = M.flags(0.10, 0.099, 0.30)
    assert f.model_dump() == {"ddm": True, "max_gap": False, "top5_sum": True}
    assert M.flags(0.5, 0.5, 0.5).model_dump() == {"ddm": True, "max_gap": True, "top5_sum": True}


def test_results_serialise_one_way():
    """Gap and Flags are pydantic: model_dump / model_dump_json, with a gap's mid and width included."""
    import json

    g = M.gaps(np.array([0.1, 0.6]), top=1)[0]
    assert json.loads(g.model_dump_json()) == pytest.approx({"lo": 0.1, "hi": 0.6, "mid": 0.35, "width": 0.5})
    assert M.Gap.model_validate({"lo": 0.1, "hi": 0.3}).mid == pytest.approx(0.2)
    assert json.loads(M.flags(0.0, 0.2, 0.0).model_dump_json()) == {"ddm": False, "max_gap": True, "top5_sum": False}


def test_uniform_baseline_ratio_is_seeded_and_sane():
    n = 30
    med = M.uniform_max_gap_median(n, 4000, seed=3)
    assert med == M.uniform_max_gap_median(n, 4000, seed=3)
    # expected max spacing of n-2 interior uniform points on [0,1] ~ H_{n-1}/(n-1)
    harmonic = sum(1 / k for k in range(1, n))
    assert med == pytest.approx(harmonic / (n - 1), rel=0.15)
    assert M.uniform_baseline_ratio(np.linspace(0, 1, n)) == pytest.approx((1 / (n - 1)) / M.uniform_max_gap_median(n))
