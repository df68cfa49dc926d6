"""Dynamic checks on ALL of an item's answers, agreement of answers, strong models, the judge's verdict parser."""

from __future__ import annotations

import pytest

from benchfill.designers.validate import (
    Answer,
    answer_key,
    choose_strong,
    dynamic_flags,
    judge_validator,
    panel_summary,
)


def A(answerer: str, label: str, extracted: str | None = None, k: int = 0) -> Answer:
    return Answer("i1", answerer, k, label, extracted, "numeric")


STRONG = ["s1", "s2"]


def test_clean_item_raises_no_flag():
    answers = [A("s1", "correct", "5"), A("s2", "correct", "5"), A("w1", "incorrect", "6"), A("w2", "correct", "5")]
    flags, n, share = dynamic_flags(answers, STRONG)
    assert flags == [] and n == 4 and share == 0.75


def test_status_reflects_all_answers_not_the_first():
    # the first answer is right, but every later strong answer (other rollouts included) is wrong
    answers = [A("w1", "correct", "5"), A("s1", "incorrect", "7"), A("s1", "incorrect", "7", k=1),
               A("s2", "incorrect", "7"), A("w2", "incorrect", "8")]
    flags, n, share = dynamic_flags(answers, STRONG)
    assert "all_strong_fail" in flags and n == 5 and share == pytest.approx(0.2)
    # one strong rollout right out of three: not "all strong fail", but the strong models disagree
    answers[2] = A("s1", "correct", "5", k=1)
    flags, _, _ = dynamic_flags(answers, STRONG)
    assert "all_strong_fail" not in flags and "strong_disagree" in flags


def test_ceiling_floor_and_too_few_answers():
    assert "ceiling" in dynamic_flags([A(f"m{j}", "correct", "1") for j in range(25)], STRONG)[0]
    assert dynamic_flags([A(f"m{j}", "correct", "1") for j in range(19)] + [A("x", "incorrect", "2")],
                         STRONG)[0] == []  # 95 % exactly is not "more than 95 %"
    floor = dynamic_flags([A(f"m{j}", "incorrect", str(j)) for j in range(25)], STRONG)[0]
    assert "floor" in floor
    assert dynamic_flags([A("s1", "correct", "1"), A("s2", "correct", "1")], STRONG, min_answers=3)[0] == \
        ["too_few_answers"]
    # skipped (ungradable) answers do not count
    flags, n, _ = dynamic_flags([A("s1", "skip"), A("s2", "skip"), A("w", "skip"), A("v", "correct", "1")], STRONG)
    assert flags == ["too_few_answers"] and n == 1


def test_answers_agree_by_value_and_correct_answers_always_agree():
    assert answer_key(A("a", "incorrect", "1,000")) == answer_key(A("b", "incorrect", "1000"))
    assert answer_key(A("a", "incorrect", "1/2")) == answer_key(A("b", "incorrect", "0.5"))
    assert answer_key(A("a", "correct", "x+1")) == answer_key(A("b", "correct", "1+x"))
    assert answer_key(A("a", "incorrect", "Paris")) != answer_key(A("b", "incorrect", "Rome"))
    answers = [A("s1", "incorrect", "1,000"), A("s2", "incorrect", "1000"), A("w", "correct", "7")]
    assert "strong_disagree" not in dynamic_flags(answers, STRONG)[0]


def test_strong_models_explicit_or_top_third():
    acc = {"a": 0.9, "b": 0.5, "c": 0.7, "d": 0.2, "e": 0.1, "f": 0.6, "g": 0.65}
    assert choose_strong(acc, {k: None for k in acc}) == ["a", "c", "g"]  # ceil(7 / 3) = 3
    assert choose_strong({"a": 0.1, "b": 0.2, "c": 0.3}, {}) == ["c", "b"]  # at least two
    assert choose_strong(acc, {"d": True, "e": True}) == ["d", "e"]


@pytest.mark.parametrize("raw, verdict", [
    ("clean", "clean"), ("Not well posed", "not_well_posed"), ("not_well_posed", "not_well_posed"),
    ("gold-incorrect", "gold_incorrect"), ("GOLD_INCORRECT", "gold_incorrect"), ("ambiguous", "ambiguous"),
])
def test_judge_verdicts(raw, verdict):
    assert judge_validator({"verdict": raw, "reason": "r"})["verdict"] == verdict


def test_judge_rejects_unknown_verdicts():
    with pytest.raises(ValueError):
        judge_validator({"verdict": "great item"})
    with pytest.raises(ValueError):
        judge_validator(["clean"])


def test_panel_summary():
    s = panel_summary([A("a", "correct", "5"), A("b", "correct", "5"), A("c", "skip", None)])
    assert s == "5: 2, (no answer): 1"
