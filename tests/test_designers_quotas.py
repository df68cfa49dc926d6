"""Quota allocation (largest-remainder apportionment per axis), the slot plan, and the quota file."""

from __future__ import annotations

from collections import Counter

import pytest

from benchfill.designers.quotas import (
    AXES,
    QuotaSpec,
    axis_targets,
    batches,
    deficits,
    largest_remainder,
    load_quotas,
    make_plan,
)
from benchfill.errors import InputError


@pytest.mark.parametrize("total, shares, expected", [
    # exact quotas 5, 3, 2 (0.3 * 10 is 3.0000000000000004 in floating point: still 3)
    (10, {"a": 0.5, "b": 0.3, "c": 0.2}, {"a": 5, "b": 3, "c": 2}),
    # 2.33 each: floors 2, 2, 2; the one left goes to the first listed (equal remainders, equal shares)
    (7, {"a": 1, "b": 1, "c": 1}, {"a": 3, "b": 2, "c": 2}),
    # 4.5, 3.5, 2.0: floors 4, 3, 2; remainders .5 / .5 tie -> the larger share
    (10, {"a": 0.45, "b": 0.35, "c": 0.2}, {"a": 5, "b": 3, "c": 2}),
    # 2.1, 1.9, 1.0: floors 2, 1, 1; the largest remainder (.9) gets the last seat
    (5, {"x": 0.42, "y": 0.38, "z": 0.20}, {"x": 2, "y": 2, "z": 1}),
    # 6.4 / 1.6 -> 6 / 1, the seat left goes to the .6 remainder
    (8, {"standard": 0.8, "adversarial": 0.2}, {"standard": 6, "adversarial": 2}),
    # unnormalised shares are normalised; a zero share gets nothing
    (60, {"L1": 1, "L2": 1, "L3": 1, "L4": 1, "L5": 1, "L6": 0}, {"L1": 12, "L2": 12, "L3": 12, "L4": 12, "L5": 12,
                                                               "L6": 0}),
    # MATH-500 subjects into 20 items: 4.96, 3.88, 3.28, 2.48, 2.24, 1.64, 1.52 -> floors 4,3,3,2,2,1,1 = 16;
    # the 4 left go to remainders .96, .88, .64, .52
    (20, {"Alg": 124, "IntAlg": 97, "Pre": 82, "NT": 62, "Prec": 56, "Geo": 41, "CP": 38},
     {"Alg": 5, "IntAlg": 4, "Pre": 3, "NT": 2, "Prec": 2, "Geo": 2, "CP": 2}),
])
def test_largest_remainder_hand_cases(total, shares, expected):
    got = largest_remainder(total, shares)
    assert got == expected
    assert sum(got.values()) == total


def test_largest_remainder_is_within_one_of_the_exact_quota():
    shares = {"a": 0.137, "b": 0.291, "c": 0.05, "d": 0.522}
    for total in range(0, 200, 7):
        got = largest_remainder(total, shares)
        assert sum(got.values()) == total
        for k, s in shares.items():
            assert abs(got[k] - total * s) < 1


def _card():
    from benchfill.designers.card import Category, DomainCard, SubDomain

    return DomainCard(
        name="toy", source="toy.jsonl", n_items=10, modality="text", language="en", formats={"numeric": 6, "math": 4},
        difficulty_levels={"L1": 5, "L5": 5},
        ontology=[Category(name="Algebra", count=6, share=0.6,
                           subdomains=[SubDomain(name="linear", count=4), SubDomain(name="general", count=2)]),
                  Category(name="Geometry", count=4, share=0.4)],
    )


def test_plan_marginals_are_exact_and_every_designer_gets_the_same_slots():
    spec = QuotaSpec(total=23, formats={"mcq": 0.5, "numeric": 0.5},
                     difficulty={"L1": 1, "L2": 1, "L3": 1, "L4": 1, "L5": 1})
    card = _card()
    targets = axis_targets(spec, card)
    assert targets["category"] == pytest.approx({"Algebra": 0.6, "Geometry": 0.4})  # from the card
    plan = make_plan(targets, 23, seed=3, card=card)
    assert len(plan.slots) == 23 and len({s.slot for s in plan.slots}) == 23
    for axis in AXES:
        assert Counter(s.value(axis) for s in plan.slots) == Counter(
            {k: v for k, v in plan.counts[axis].items() if v}), axis
    assert plan.counts["category"] == {"Algebra": 14, "Geometry": 9}  # 13.8 / 9.2
    assert plan.counts["intent"] == {"standard": 17, "adversarial": 6}  # BenchBench's 75/25: 17.25 / 5.75
    # sub-domains spread by the card's counts (14 Algebra slots: 4/6 and 2/6 -> 9.33 / 4.67 -> 9 / 5)
    assert Counter(s.subdomain for s in plan.slots if s.category == "Algebra") == {"linear": 9, "general": 5}
    assert all(s.subdomain is None for s in plan.slots if s.category == "Geometry")
    # deterministic: the same inputs give the same plan
    assert make_plan(targets, 23, seed=3, card=card) == plan
    assert plan.from_json(plan.to_json()) == plan


def test_from_card_difficulty_and_unknown_labels():
    card = _card()
    t = axis_targets(QuotaSpec(total=10, difficulty="from_card"), card)
    assert t["difficulty"] == {"L1": 0.5, "L5": 0.5}
    assert t["format"] == {"numeric": 0.6, "math": 0.4}
    with pytest.raises(InputError, match="unknown level"):
        axis_targets(QuotaSpec(total=10, difficulty={"L9": 1}), card)
    with pytest.raises(InputError, match="unknown format"):
        axis_targets(QuotaSpec(total=10, formats={"essay": 1}), card)


def test_deficits_and_batches_hand_case():
    plan = make_plan({"category": {"a": 1}, "format": {"numeric": 1}, "difficulty": {"L3": 1},
                      "intent": {"standard": 1}}, 5)
    ids = [s.slot for s in plan.slots]
    assert ids == ["s0001", "s0002", "s0003", "s0004", "s0005"]
    assert [[s.slot for s in b] for b in batches(plan.slots, 2)] == [ids[:2], ids[2:4], ids[4:]]
    assert [s.slot for s in deficits(plan.slots, {"s0001", "s0004"})] == ["s0002", "s0003", "s0005"]
    assert deficits(plan.slots, set(ids)) == []


def test_load_quotas_file_and_errors(tmp_path, examples):
    q = load_quotas(examples / "quotas.yaml")
    assert q.total == 60 and q.super_categories == "from_card"
    bad = tmp_path / "q.yaml"
    bad.write_text("total: 10\nformats: {mcq: -1}\n")
    with pytest.raises(InputError, match="formats"):
        load_quotas(bad)
    bad.write_text("total: 10\nsurprise: 1\n")
    with pytest.raises(InputError, match="surprise: unknown field"):
        load_quotas(bad)
    bad.write_text("- 1\n")
    with pytest.raises(InputError, match="mapping"):
        load_quotas(bad)
    with pytest.raises(InputError, match="not found"):
        load_quotas(tmp_path / "missing.yaml")


def test_benchbench_defaults_and_shares_not_summing_to_one_warn():
    from benchfill.designers.quotas import quota_warnings

    spec = QuotaSpec(total=100)
    card = _card()
    t = axis_targets(spec, card)
    assert t["difficulty"] == pytest.approx({"L1": 0.15, "L2": 0.25, "L3": 0.30, "L4": 0.20, "L5": 0.10})
    assert t["intent"] == pytest.approx({"standard": 0.75, "adversarial": 0.25})
    plan = make_plan(t, 100, card=card)
    assert plan.counts["difficulty"] == {"L1": 15, "L2": 25, "L3": 30, "L4": 20, "L5": 10}
    assert plan.counts["intent"] == {"standard": 75, "adversarial": 25}
    assert quota_warnings(spec) == []
    odd = QuotaSpec(total=10, super_categories={"Algebra": 2, "Geometry": 2})
    (line,) = quota_warnings(odd, "q.yaml")
    assert line.startswith("q.yaml: super_categories: shares sum to 4, not 1") and "Algebra 0.500" in line
    assert axis_targets(odd, card)["category"] == {"Algebra": 0.5, "Geometry": 0.5}


def test_unknown_super_category_names_the_known_ones():
    with pytest.raises(InputError, match=r"unknown category 'Algebar'; did you mean 'Algebra'\? "
                                         r"\(the card's categories: Algebra, Geometry\)"):
        axis_targets(QuotaSpec(total=10, super_categories={"Algebar": 1}), _card())
