"""Objective-first grading (SPEC section 6): a table of tricky cases per format, the judge route, and skips."""

from __future__ import annotations

import asyncio

import pytest

from benchfill.data import Item
from benchfill.models.grading import Grader, extract_choice, grade, is_form_failure, last_boxed, parse_number

ABCD = ["red", "green", "blue", "yellow"]


def mcq(answer: str, choices: list[str] | None = None) -> Item:
    return Item(id="q", question="Pick one.", answer=answer, choices=choices or ABCD, format="mcq")


def num(answer: str) -> Item:
    return Item(id="q", question="How many?", answer=answer, format="numeric")


def mth(answer: str) -> Item:
    return Item(id="q", question="Compute.", answer=answer, format="math")


def short(answer: str, **meta) -> Item:
    return Item(id="q", question="Who?", answer=answer, format="short", metadata=meta)


# (item, response, expected label, expected extracted or None to not check)
CASES = [
    # ---- multiple choice
    (mcq("C"), "Answer: C", "correct", "C"),
    (mcq("C"), "Answer: A", "incorrect", "A"),
    (mcq("B"), "(B)", "correct", "B"),
    (mcq("B,D"), "B and D", "correct", "B,D"),
    (mcq("B, D"), "The answer is B and D.", "correct", "B,D"),
    (mcq("B"), "B and D", "incorrect", "B,D"),
    (mcq("C"), "the answer is c", "correct", "C"),
    (mcq("C"), "After checking each option, the answer is c.", "correct", "C"),
    (mcq("A"), "The answer is a prime number, so I cannot decide.", "incorrect", None),  # no option: wrong
    (mcq("B"), "The correct answer is **B**.", "correct", "B"),
    (mcq("D"), "Thus $\\boxed{D}$", "correct", "D"),
    (mcq("D"), "Thus $\\boxed{\\text{(D)}}$", "correct", "D"),
    (mcq("C"), "Option A is wrong. Option B is wrong. So the answer is C; option D is also wrong.", "correct", "C"),
    (mcq("C"), "Answer: C because blue light scatters more.", "correct", "C"),
    (mcq("B"), "**Answer:** (B)", "correct", "B"),
    (mcq("B"), "green", "correct", "B"),  # the option's text
    (mcq("green"), "Answer: B", "correct", "B"),  # gold given as option text
    (mcq("2"), "Answer: C", "correct", "C"),  # gold as a 0-based index
    (mcq("A"), "I think the answer is (A).", "correct", "A"),
    (mcq("A"), "<think>maybe B? no.</think>\nFinal answer: A", "correct", "A"),
    (mcq("A"), "<think>it could be B", "incorrect", None),  # unfinished reasoning: the model's fault
    (mcq("A"), "", "incorrect", None),
    (mcq("A"), "I do not know.", "incorrect", None),
    (mcq("E", ["a", "b", "c", "d", "e"]), "Answer: E", "correct", "E"),
    (mcq("A"), "Answer: E", "incorrect", None),  # E is not an option of a 4-choice item: wrong form
    (mcq("A", ["a", "b"]), "Answer: A", "correct", "A"),
    (Item(id="q", question="Pick.", answer="Z", choices=ABCD, format="mcq"), "Answer: A", "skip", None),  # bad gold
    (mcq("C"), "Final answer: C. (Earlier I said the answer is B.)", "correct", "C"),
    # ---- numeric
    (num("1000"), "So the total is \\boxed{1,000}.", "correct", "1,000"),
    (num("1,000"), "The answer is 1000.", "correct", "1000"),
    (num("0.5"), "\\boxed{1/2}", "correct", "1/2"),
    (num("0.5"), "\\boxed{\\frac{1}{2}}", "correct", "\\frac{1}{2}"),
    (num("-0.75"), "we get $\\boxed{-\\dfrac{3}{4}}$", "correct", None),
    (num("50"), "The answer is 50%.", "correct", "50%"),
    (num("0.5"), "The answer is 50%.", "correct", "50%"),
    (num("3.14159"), "\\boxed{3.141592}", "correct", None),  # within 1e-6 relative
    (num("3.14159"), "\\boxed{3.1416}", "incorrect", None),  # 3e-6 relative: outside 1e-6
    (num("3.14159"), "\\boxed{3.15}", "incorrect", None),
    (num("0"), "\\boxed{0.0000001}", "incorrect", None),  # an integer gold matches only itself
    (num("13535"), "\\boxed{13536}", "incorrect", "13536"),  # the classic wrong answer (1e-4 tolerance took it)
    (num("13535"), "\\boxed{13,535}", "correct", None),
    (num("13535"), "\\boxed{13535.0}", "correct", None),
    (num("0.001"), "\\boxed{0.0010000000001}", "correct", None),
    (num("0"), "\\boxed{0.001}", "incorrect", None),
    (num("12"), "Each side is 12 cm long, so the perimeter... wait. The answer is 12 cm.", "correct", "12 cm"),
    (num("2500"), "\\boxed{2.5 \\times 10^{3}}", "correct", None),
    (num("7"), "First 3, then 5, finally 7", "correct", "7"),  # last number when nothing else
    (num("7"), "I cannot solve this.", "incorrect", None),  # no extractable answer: wrong, reason logged
    (num("1.414214"), "\\boxed{\\sqrt{2}}", "correct", None),  # symbolic fallback
    # ---- math
    (mth("\\frac{1}{2}"), "\\boxed{0.5}", "correct", "0.5"),
    (mth("\\frac{1}{2}"), "\\boxed{\\dfrac{1}{2}}", "correct", None),
    (mth("\\left( 3, \\frac{\\pi}{2} \\right)"), "so $\\boxed{(3, \\frac{\\pi}{2})}$", "correct", None),
    (mth("[1,2)"), "\\boxed{[1, 2)}", "correct", None),
    (mth("[1,2)"), "\\boxed{(1, 2)}", "incorrect", None),
    (mth("x^2+2x+1"), "\\boxed{(x+1)^2}", "correct", None),
    (mth("2\\sqrt{2}"), "\\boxed{\\sqrt{8}}", "correct", None),
    (mth("6"), "First \\boxed{5} was wrong; correct is \\boxed{6}", "correct", "6"),
    (mth("\\text{Evelyn}"), "\\boxed{\\text{Evelyn}}", "correct", None),
    (mth("90^\\circ"), "\\boxed{90}", "correct", None),
    (mth("\\frac{14}{3}"), "The final answer is $\\frac{14}{3}$.", "correct", None),
    (mth("5"), "<think>\\boxed{4}</think> The answer is \\boxed{5}", "correct", "5"),
    (mth("x=3"), "\\boxed{3}", "correct", None),
    (mth("\\frac{1}{2}"), "no idea, sorry; I tried several approaches but none of them worked out here", "incorrect",
     None),
    # ---- short
    (short("Paris"), "Answer: paris.", "correct", "paris"),
    (short("The Beatles"), "Answer: beatles", "correct", None),
    (short("George Washington"), "Answer: George  Washington!", "correct", None),
    (short("Paris"), "Answer: Lyon", "incorrect", "Lyon"),
    (short("NYC", aliases=["New York City"]), "Answer: New York City", "correct", None),
    (short("Paris"), "Paris", "correct", "Paris"),
    (short("Paris"), "This is a long answer that rambles on and never commits to anything at all, sorry.", "incorrect",
     None),
    (short("Paris"), None, "skip", None),
]


@pytest.mark.parametrize("item,response,label,extracted", CASES, ids=[f"{i:02d}-{c[0].format}" for i, c in enumerate(CASES)])
def test_grade_table(item: Item, response: str | None, label: str, extracted: str | None) -> None:
    result = grade(item, response)
    assert result.label == label, (response, result)
    if extracted is not None:
        assert result.extracted == extracted, (response, result)
    if label == "skip":
        assert result.reason
    if label == "incorrect" and result.extracted is None:
        assert is_form_failure(result) and result.reason  # counted wrong, with the reason logged


def test_cut_by_the_token_limit_is_wrong_even_with_a_right_answer() -> None:
    r = grade(num("7"), "\\boxed{7} and then", finish_reason="length")
    assert r.label == "incorrect" and "finish_reason length" in r.reason and is_form_failure(r)
    assert grade(num("7"), "\\boxed{7}", finish_reason="stop").label == "correct"


def test_no_response_is_not_a_trial() -> None:
    assert grade(num("7"), None).label == "skip"


def test_table_is_large() -> None:
    assert len(CASES) >= 40


def test_answer_colon_is_not_letter_a() -> None:
    assert extract_choice("Answer: C", 4) == {"C"}
    assert extract_choice("ANSWER: C", 4) == {"C"}


def test_last_boxed_balanced_braces() -> None:
    assert last_boxed("\\boxed{\\frac{1}{2}} and \\boxed{\\frac{a}{b^{2}}}") == "\\frac{a}{b^{2}}"
    assert last_boxed("no box") is None


@pytest.mark.parametrize(
    "text,value",
    [("1,000", 1000.0), ("1/2", 0.5), ("\\frac{1}{2}", 0.5), ("-\\frac{3}{4}", -0.75), ("$5$", 5.0), ("1{,}234", 1234.0),
     ("2.5e3", 2500.0), (".5", 0.5)],
)
def test_parse_number(text: str, value: float) -> None:
    parsed = parse_number(text)
    assert parsed is not None and abs(parsed[0] - value) < 1e-12


def test_parse_number_rejects_tuples_and_words() -> None:
    assert parse_number("1, 2") is None
    assert parse_number("x+1") is None


def test_open_without_judge_is_skip() -> None:
    item = Item(id="o", question="Explain why the sky is blue.", answer="Rayleigh scattering", format="open")
    assert grade(item, "Because of Rayleigh scattering.").label == "skip"


class _FakeClient:
    """Returns canned judge verdicts through complete_json's contract."""

    def __init__(self, parsed, error=None):
        self.parsed, self.error, self.calls = parsed, error, 0

    async def complete_json(self, cfg, messages, validator, **kw):
        from benchfill.models.client import CallResult

        self.calls += 1
        assert "<response>" in messages[-1]["content"]
        if self.error:
            return CallResult(text=None, error=self.error)
        return CallResult(text="{}", parsed=validator(self.parsed))


def test_open_goes_to_judge() -> None:
    from benchfill.models.config import ModelConfig

    item = Item(id="o", question="Explain why the sky is blue.", answer="Rayleigh scattering", format="open")
    judge = ModelConfig(model="sim/grader")
    ok = asyncio.run(Grader(_FakeClient({"label": "correct", "score": 0.9}), judge).grade(item, "Rayleigh."))
    assert (ok.label, ok.score, ok.method) == ("correct", 0.9, "judge")
    bad = asyncio.run(Grader(_FakeClient(None, error="Timeout"), judge).grade(item, "Rayleigh."))
    assert bad.label == "skip" and "judge failed" in bad.reason


# ---- multi-answer multiple choice (set equality) and structured answers (field-wise), issue 15 ----------------


@pytest.mark.parametrize("response,label", [
    ("Answer: A, C", "correct"),
    ("Answer: C and A", "correct"),          # order does not matter: a set
    ("The answer is \\boxed{A, C}", "correct"),
    ("Answer: A", "incorrect"),              # a strict subset is wrong (no partial credit)
    ("Answer: A, B, C", "incorrect"),        # so is a superset
    ("Answer: B, D", "incorrect"),
    ("Answer: A, F", "incorrect"),           # F is not an option: wrong form, counted wrong
])
def test_multi_answer_mcq_is_set_equality(response: str, label: str) -> None:
    item = Item(id="m", question="Select all that apply: which are prime?", answer="A, C",
                choices=["2", "4", "5", "9"], format="mcq")
    assert grade(item, response).label == label


def test_multi_answer_gold_as_option_texts_is_not_a_set() -> None:
    # a gold that is neither letters nor one option's text is ungradable, not silently single-answer
    item = Item(id="m", question="Select all that apply.", answer="2 and 5", choices=["2", "4", "5", "9"],
                format="mcq")
    assert grade(item, "Answer: A, C").label == "skip"


def _structured(answer: str) -> Item:
    return Item(id="s", question="Give the mean and the median.", answer=answer, format="structured")


@pytest.mark.parametrize("gold,response,label,reason", [
    ('{"mean": 4, "median": 3.5}', 'Answer: {"median": 3.5, "mean": 4}', "correct", "2/2"),   # field order free
    ('{"mean": 4, "median": 3.5}', 'Answer: {"Mean": "4.0", "median": 3.5}', "correct", "2/2"),  # names, numbers
    ('{"mean": 4, "median": 3.5}', 'Answer: {"mean": 4, "median": 3.6}', "incorrect", "1/2"),
    ('{"mean": 4, "median": 3.5}', 'Answer: {"mean": 4}', "incorrect", "1/2"),               # a field missing
    ('{"mean": 4, "median": 3.5}', 'Answer: {"mean": 4, "median": 3.5, "mode": 2}', "incorrect", "1/2"),  # extra
    ('["boil", "steep", "pour"]', 'Answer: ["boil", "steep", "pour"]', "correct", "3/3"),
    ('["boil", "steep", "pour"]', 'Answer: boil -> steep -> pour', "correct", "3/3"),        # a written list
    ('["boil", "steep", "pour"]', 'Answer: ["steep", "boil", "pour"]', "incorrect", "1/3"),  # order matters
    ('["boil", "steep", "pour"]', 'Answer: ["boil", "steep"]', "incorrect", "2/3"),
    ('{"rows": [{"x": 1}, {"x": 2}]}', 'Answer: {"rows": [{"x": 1}, {"x": 2}]}', "correct", "2/2"),  # nested
    ('{"a": 13535}', 'Answer: {"a": 13536}', "incorrect", "0/1"),                            # integers exact
])
def test_structured_answers_are_graded_field_by_field(gold: str, response: str, label: str, reason: str) -> None:
    res = grade(_structured(gold), "Some reasoning first: [1, 2] is not it.\n" + response)
    assert (res.label, res.method) == (label, "structured") and res.reason.startswith(reason), res


def test_structured_answer_in_a_json_fence_and_failures_by_fault() -> None:
    from benchfill.models.grading import parse_structured

    assert grade(_structured('{"a": 1}'), 'Here:\n```json\n{"a": 1.0}\n```').label == "correct"
    no_answer = grade(_structured('{"a": 1}'), "I think it is one.")
    assert no_answer.label == "incorrect" and is_form_failure(no_answer)   # the model's fault: a counted trial
    assert grade(_structured("one"), 'Answer: {"a": 1}').label == "skip"   # an ungradable gold: not a trial
    assert parse_structured("Answer: {}") is None and parse_structured('x {"k": [1, 2]} y') == {"k": [1, 2]}
