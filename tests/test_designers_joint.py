"""The joint item-level fit (designer-level difficulty, calibration slope, 2PL slope, logit self / family
interactions) on synthetic 2PL data with planted values, a null world, calibration and bootstrap helpers."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.designers import metrics as M
from benchfill.designers.joint import fit_joint

THETA = np.array([1.6, 1.0, 0.5, 0.0, -0.5, -1.0, -1.6])
ANSWERERS = ["d0", "d1", "d2", "d1-mini", "x0", "x1", "x2"]
FAM_A = {"d0": "F0", "d1": "F1", "d2": "F2", "d1-mini": "F1", "x0": "X", "x1": "Y", "x2": "Z"}


def world(rng, *, shift=(0.0, 0.0, 0.0), slope=(0.6, 0.6, 0.6), self_bonus=(0.0, 0.0, 0.0), family_bonus=0.0,
          n=200, rollouts=2):
    """Three designers, n items each at levels 1-5; designer d's own answerer is answerer d; d1-mini is d1's kin."""
    inp = M.JointInputs(designers=["d0", "d1", "d2"], answerers=ANSWERERS, counts=[], levels=[], guessing=[],
                        designer_family={"d0": "F0", "d1": "F1", "d2": "F2"}, answerer_family=FAM_A,
                        self_answerer={"d0": "d0", "d1": "d1", "d2": "d2"})
    for d in range(3):
        lv = rng.integers(1, 6, n)
        b = shift[d] + slope[d] * (lv - 3) + 0.5 * rng.standard_normal(n)
        bonus = np.zeros(len(ANSWERERS))
        bonus[d] += self_bonus[d]
        if d == 1:
            bonus[[1, 3]] += family_bonus
        p = 1 / (1 + np.exp(-(THETA[:, None] + bonus[:, None] - b[None])))
        t = np.full(p.shape, rollouts)
        inp.counts.append((rng.binomial(t, p), t))
        inp.levels.append([float(x) for x in lv])
        inp.guessing.append(np.zeros(n))
    return inp


def test_null_world_detects_nothing_and_recovers_no_shift():
    for seed in range(3):
        inp = world(np.random.default_rng(seed))
        fit = M.joint_fit(inp)
        prefs = M.preference_tests_logit(inp, fit)
        assert {(p.kind, p.designer) for p in prefs} == {("self", "d0"), ("self", "d1"), ("self", "d2"),
                                                         ("family", "d1"), ("family_incl_self", "d1")}
        assert not any(p.detected for p in prefs), [(p.kind, p.designer, p.estimate, p.p_value) for p in prefs]
        assert all(abs(p.estimate) < 0.6 for p in prefs)
        mus = [fit.groups[d].mu for d in ("d0", "d1", "d2")]
        assert max(mus) - min(mus) < 0.3


def test_planted_preferences_shifts_and_slopes_are_recovered():
    inp = world(np.random.default_rng(7), shift=(0.0, 1.5, -1.0), slope=(0.6, -0.6, 0.0), self_bonus=(0.0, 1.5, 0.0),
                family_bonus=1.0)
    fit = M.joint_fit(inp)
    g = fit.groups
    assert g["d1"].mu - g["d0"].mu == pytest.approx(1.5, abs=0.25)
    assert g["d2"].mu - g["d0"].mu == pytest.approx(-1.0, abs=0.25)
    assert (g["d0"].beta, g["d1"].beta, g["d2"].beta) == pytest.approx((0.6, -0.6, 0.0), abs=0.12)
    prefs = {(p.kind, p.designer): p for p in M.preference_tests_logit(inp, fit)}
    # self is the own answerer against the out-of-family answerers: its self bonus plus its family's (1.5 + 1.0);
    # family is d1-mini alone (the own answerer excluded)
    assert prefs[("self", "d1")].detected and prefs[("self", "d1")].estimate == pytest.approx(2.5, abs=0.5)
    assert prefs[("family", "d1")].detected and prefs[("family", "d1")].estimate == pytest.approx(1.0, abs=0.35)
    assert prefs[("family", "d1")].answerers == ["d1-mini"]
    assert prefs[("self", "d1")].ci_low < 2.5 < prefs[("self", "d1")].ci_high
    assert not prefs[("self", "d0")].detected and not prefs[("self", "d2")].detected
    # the residual (observed - expected without interactions) is positive in the planted cells only
    c, t = inp.counts[1]
    resid = (c.sum(1) - (fit.p_main[:, 200:400] * t).sum(1)) / t.sum(1)
    assert resid[1] > 0.1 and resid[3] > 0.08 and abs(resid[0]) < 0.05


def test_two_pl_designer_slopes_are_recovered():
    rng = np.random.default_rng(3)
    n, a_true = 250, np.array([1.0, 2.0, 0.5])
    gi = np.repeat(np.arange(3), n)
    lv = rng.integers(1, 6, 3 * n)
    b = 0.6 * (lv - 3) + 0.5 * rng.standard_normal(3 * n)
    p = 1 / (1 + np.exp(-a_true[gi] * (THETA[:, None] - b[None])))
    t = np.full(p.shape, 2)
    fit = fit_joint(rng.binomial(t, p), t, [f"g{k}" for k in gi], levels=list(lv), slopes=True)
    a = np.array([fit.groups[f"g{k}"].slope for k in range(3)])
    assert a / a[0] == pytest.approx([1.0, 2.0, 0.5], rel=0.2)
    assert np.exp(np.log(a).mean()) == pytest.approx(1.0, abs=0.02)  # the scale: geometric mean 1


def test_guessing_is_modelled():
    rng = np.random.default_rng(4)
    b = rng.normal(0.5, 0.5, 300)
    p = 0.25 + 0.75 / (1 + np.exp(-(THETA[:, None] - b[None])))
    t = np.full(p.shape, 3)
    fit = fit_joint(rng.binomial(t, p), t, ["g"] * 300, guessing=np.full(300, 0.25))
    assert fit.groups["g"].mu == pytest.approx(0.5 - THETA.mean(), abs=0.2)


def test_calibration_hand_case_and_bootstrap_interval():
    b = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
    cal = M.calibration(b, ["L1", "L2", "L3", "L4", "L5", "L5"], {"L1": -1.0, "L3": 0.5, "L5": 1.0})
    assert cal.spearman > 0.98  # two L5 items tie on level
    assert cal.by_level["L5"] == {"n": 2, "mean_b": 1.5, "seed_mean_b": 1.0, "shift": 0.5}
    assert cal.by_level["L2"]["shift"] is None
    assert cal.mean_shift == pytest.approx((0.0 - 0.5 + 0.5) / 3) and cal.error == pytest.approx(1.0 / 3)
    assert M.calibration(b, ["L1"] * 6).error is None
    x = np.arange(50, dtype=float)
    lo, hi = M.bootstrap_interval(50, lambda i: x[i].mean(), B=400, seed=1)
    assert lo < 24.5 < hi and (lo, hi) == M.bootstrap_interval(50, lambda i: x[i].mean(), B=400, seed=1)
    assert M.bootstrap_interval(1, lambda i: 0.0) == (None, None)
