"""The pure decisions of the BenchFill search against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.graphs.policy import (
    CallBudget,
    SearchParams,
    confirmation_cap,
    gap_call_budget,
    oracle_insertions,
    propose_gaps,
    select_parents,
    select_references,
    should_stop,
    to_display,
    top_k_reduction,
)
from benchfill.memory.bank import MemoryItem


def item(i: str, d: float) -> MemoryItem:
    return MemoryItem(i, f"q{i}", "1", d, d * 4 - 2, 0.1, "seed")


def test_parents_are_the_four_nearest_and_ties_break_by_id():
    memory = [item("a", 0.10), item("b", 0.42), item("c", 0.38), item("d", 0.50), item("e", 0.29), item("f", 0.90)]
    assert [p.id for p in select_parents(memory, 0.40)] == ["b", "c", "d", "e"]
    tie = [item("z", 0.3), item("y", 0.5)]
    assert [p.id for p in select_parents(tie, 0.4, k=1)] == ["y"]


def test_references_exclude_the_parent_and_cap_at_k():
    memory = [item(str(i), i / 40) for i in range(40)]
    refs = select_references(memory, 0.5, parent_id="20", k=16)
    assert len(refs) == 16 and "20" not in {r.id for r in refs}
    assert max(abs(r.d - 0.5) for r in refs) <= 8 / 40 + 1e-12
    assert to_display(0.4567) == 4.57


def test_stop_rule_probability_patience_and_round_cap():
    p = SearchParams()  # fill_level 0.9, patience 2, max_rounds 8
    assert "reached the level" in should_stop(0.9, 1, p) and should_stop(0.95, 1, p)
    assert should_stop(0.89, 1, p) is None and should_stop(None, 1, p) is None
    # two rounds in a row that raised the best child's probability by less than min_gain: another is not expected to
    assert "2 round(s) in a row raised" in should_stop(0.25, 3, p, stale_rounds=2)
    assert should_stop(0.25, 3, p, stale_rounds=1) is None
    assert "round cap" in should_stop(0.5, 8, p) and "round cap" in should_stop(None, 8, p)


def test_gaps_recomputed_after_insertion():
    d = np.array([0.0, 0.1, 0.2, 0.7, 1.0])
    first = propose_gaps(d, [], 2)
    assert (first[0].lo, first[0].hi) == (0.2, 0.7) and first[0].mid == pytest.approx(0.45)
    assert (first[1].lo, first[1].hi) == (0.7, 1.0)
    after = propose_gaps(d, [0.45], 1)[0]
    assert (after.lo, after.hi) == (0.7, 1.0)  # sequential: the filled gap is gone


def test_oracle_and_top3_reduction_hand_case():
    d = np.array([0.0, 0.1, 0.3, 0.9, 1.0])  # gaps 0.1, 0.2, 0.6, 0.1 -> Top-3 = 0.9
    ins = oracle_insertions(d, 3)
    # 1st: mid of [0.3, 0.9] = 0.6; 2nd and 3rd: the two halves' midpoints 0.45 and 0.75 (either order)
    assert ins[0] == pytest.approx(0.6) and sorted(ins[1:]) == pytest.approx([0.45, 0.75])
    # after: gaps 0.1, 0.2, 0.15, 0.15, 0.15, 0.15, 0.1 -> Top-3 = 0.5
    assert top_k_reduction(d, ins, 3) == pytest.approx((0.9 - 0.5) / 0.9)
    # an item placed outside [0, 1] fills nothing
    assert top_k_reduction(d, [1.3], 3) == pytest.approx(0.0)


def test_the_confirmation_cap_follows_successive_halving():
    # one child, 12 models from 4 to 32 answers each: 12 x 28
    assert confirmation_cap([4] * 12, 4, 32, 1) == 336
    # 4 finalists: 4 then 2 then 1 raced, 4 answers per model and step, from 4 to 16 answers
    assert confirmation_cap([4] * 12, 4, 16, 4) == (4 + 2 + 1) * 12 * 4
    # a model that answered more in the search is asked only up to the level
    assert confirmation_cap([4, 8], 4, 12, 1) == 8 + 4
    assert confirmation_cap([4] * 12, 4, 0, 4) == 0  # no confirmation


def test_each_labelling_has_its_confirmation_and_an_explicit_setting_wins():
    assert SearchParams().confirmation == (1, 32, 0)  # the paper's setting
    assert SearchParams(labelling="adaptive").confirmation == (4, 128, "equal")
    explicit = SearchParams(labelling="adaptive", confirm_finalists=2, gap_call_budget=900)
    assert explicit.confirmation == (2, 128, 900)


def test_an_equal_budget_is_full_labellings_search_on_the_same_rounds_and_its_confirmation():
    rollouts = [4] * 12
    adaptive = SearchParams(labelling="adaptive")
    # 30 valid children answered by 12 models x 4, and full labelling's confirmation (one child, to 32 answers)
    assert gap_call_budget(adaptive, rollouts, 30) == CallBudget(30 * 48 + 336, "equal", 30 * 48, 336)
    # the full arm it is measured against is this config's: its explicit confirmation settings count
    wider = SearchParams(labelling="adaptive", confirm_max_rollouts=64)
    assert gap_call_budget(wider, rollouts, 30).full_confirmation == 12 * 60
    assert gap_call_budget(SearchParams(), rollouts, 30) == CallBudget(0, "none")
    assert gap_call_budget(SearchParams(labelling="adaptive", gap_call_budget=500), rollouts, 30).calls == 500
