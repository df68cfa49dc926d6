"""The pure metrics of designer evaluation against hand-computed cases and planted synthetic data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchfill.designers import metrics as M


def test_total_variation_hand_cases():
    assert M.total_variation({"a": 0.5, "b": 0.5}, {"a": 1.0}) == pytest.approx(0.5)
    assert M.total_variation({"a": 1}, {"b": 1}) == pytest.approx(1.0)
    assert M.total_variation({"a": 2, "b": 2}, {"a": 0.5, "b": 0.5}) == pytest.approx(0.0)  # normalised first
    assert M.total_variation({"L1": 0.2, "L2": 0.8}, {"L1": 0.5, "L2": 0.5}) == pytest.approx(0.3)


def test_spec_alignment_counts_unknown_labels_against_the_designer():
    al = M.spec_alignment({"intent": {"standard": 0.8, "adversarial": 0.2}},
                          {"intent": ["standard"] * 6 + ["adversarial"] * 2 + ["unknown"] * 2})
    # realised 0.6 / 0.2 / 0.2 against 0.8 / 0.2 / 0: TVD = (0.2 + 0 + 0.2) / 2
    assert al["intent"].tvd == pytest.approx(0.2)
    assert al["intent"].n == 10
    assert math.isnan(M.spec_alignment({"intent": {"standard": 1}}, {"intent": []})["intent"].tvd)


def test_broken_rate_excludes_duplicates_and_failed_calls():
    br = M.broken_rate(["clean"] * 9 + ["gold_incorrect"] + ["duplicate", "failed"])
    assert (br.n_suite, br.n_core) == (10, 9) and br.rate == pytest.approx(0.1)
    assert br.by_status == {"clean": 9, "duplicate": 1, "failed": 1, "gold_incorrect": 1}
    assert math.isnan(M.broken_rate(["duplicate"]).rate)


def test_did_hand_cases():
    A = np.array([[0.6, 0.5, 0.3],
                  [0.4, 0.5, 0.2]])
    # answerer 0 gains 0.2 on designer 0's items; the others gain (0 + 0.1) / 2 = 0.05
    assert M.did_self(A, 0, 0) == pytest.approx(0.15)
    # family {1} vs out {2}, control designer 1: gain 0 - 0.1
    assert M.did_family(A, 0, [1], [2], [1]) == pytest.approx(-0.1)
    # vectorised over leading axes (bootstrap replicates)
    assert M.did_self(np.stack([A, A]), 0, 0) == pytest.approx([0.15, 0.15])


def _counts(rng, theta, b, bonus=None, rollouts=1):
    """(J, I) counts from a 1PL with an optional (J,) logit bonus."""
    z = theta[:, None] - b[None, :] + (0 if bonus is None else bonus[:, None])
    p = 1 / (1 + np.exp(-z))
    t = np.full(p.shape, rollouts)
    return rng.binomial(t, p), t


def test_preference_tests_detect_planted_and_only_planted(rng):
    theta = np.array([1.5, 1.0, 0.4, -0.2, -0.8, -1.5])
    answerers = ["d0", "d1", "d2", "x0", "x1", "d2-mini"]
    fam_a = {"d0": "F0", "d1": "F1", "d2": "F2", "x0": "X", "x1": "X", "d2-mini": "F2"}
    counts = []
    for d in range(3):
        bonus = np.zeros(6)
        if d == 1:
            bonus[1] = 1.5  # designer d1 favours itself
        counts.append(_counts(rng, theta, rng.normal(0, 1, 300), bonus))
    inp = M.PreferenceInputs(designers=["d0", "d1", "d2"], answerers=answerers, counts=counts,
                             designer_family={"d0": "F0", "d1": "F1", "d2": "F2"}, answerer_family=fam_a,
                             self_answerer={"d0": "d0", "d1": "d1", "d2": "d2"})
    prefs = M.preference_tests(inp, B=600, seed=1)
    got = {(p.kind, p.designer): p for p in prefs}
    assert set(got) == {("self", "d0"), ("self", "d1"), ("self", "d2"), ("family", "d2")}
    assert got[("self", "d1")].detected and got[("self", "d1")].estimate > 0.15
    assert got[("self", "d1")].ci_low > 0
    for key in [("self", "d0"), ("self", "d2"), ("family", "d2")]:
        assert not got[key].detected, key
        assert abs(got[key].estimate) < 0.1
    assert all(p.n_tests == 4 for p in prefs)


def test_preference_needs_two_designers_and_panel_members():
    c = (np.ones((2, 5), int), np.ones((2, 5), int))
    assert M.preference_tests(M.PreferenceInputs(["d"], ["a", "b"], [c], {"d": "F"}, {"a": "F", "b": "G"})) == []
    # no family members on the panel and no self answerer: no test
    prefs = M.preference_tests(M.PreferenceInputs(["d", "e"], ["a", "b"], [c, c], {"d": "F", "e": "G"},
                                                  {"a": "X", "b": "Y"}))
    assert prefs == []


def test_discrimination_positive_for_irt_items_and_near_zero_for_noise(rng):
    theta = np.linspace(-2, 2, 12)
    c, t = _counts(rng, theta, rng.normal(0, 1, 400), rollouts=4)
    good = M.discrimination(c, t)
    assert good.mean > 0.4 and good.n_defined == 400 and good.share_negative < 0.1
    noise_c = rng.binomial(4, 0.5, size=(12, 400))
    noise = M.discrimination(noise_c, np.full((12, 400), 4))
    assert abs(noise.mean) < 0.05
    # constant items are undefined (excluded from the mean, counted as 0 in mean_all)
    c2 = np.concatenate([c[:, :10], np.zeros((12, 10), int)], axis=1)
    d2 = M.discrimination(c2, np.full(c2.shape, 4))
    assert d2.n_defined == 10 and d2.n_items == 20 and d2.mean_all == pytest.approx(d2.mean / 2)


def test_kendall_and_correlations():
    assert M.kendall_tau([0.9, 0.7, 0.5, 0.2], [0.8, 0.6, 0.55, 0.1]).r == pytest.approx(1.0)
    assert M.kendall_tau([0.9, 0.7, 0.5, 0.2], [0.1, 0.6, 0.65, 0.8]).r == pytest.approx(-1.0)
    assert M.kendall_tau([0.9, 0.7, 0.5, 0.2], [0.8, 0.6, 0.1, 0.55]).r == pytest.approx(2 / 3)
    assert math.isnan(M.correlation([1, 2], [3, 4]).r)  # fewer than 3 pairs
    assert math.isnan(M.correlation([1, 1, 1], [3, 4, 5]).r)  # constant
    c = M.correlation([1, 2, np.nan, 4, 5], [2, 4, 1, 8, 11], "spearman")
    assert c.n == 4 and c.r == pytest.approx(1.0)


def test_percentile_ranks_and_difficulty_summary():
    assert M.percentile_ranks([0.1, 0.3, 0.2]).tolist() == [0.0, 1.0, 0.5]
    assert M.percentile_ranks([0.1, 0.3, 0.2], higher_is_better=False).tolist() == [1.0, 0.0, 0.5]
    r = M.percentile_ranks([np.nan, 2.0])
    assert math.isnan(r[0]) and r[1] == 0.5
    c = np.array([[1, 0, 1], [1, 0, 0]])
    t = np.ones_like(c)
    d = M.difficulty_summary(np.array([-1.0, 1.0, 0.0]), c, t, ["L1", "L5", "L3"])
    assert d.mean_b == pytest.approx(0.0) and d.error_rate == pytest.approx(0.5)
    assert d.level_spearman == pytest.approx(1.0)
