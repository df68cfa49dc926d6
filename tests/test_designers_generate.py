"""Generation: malformed designer output is recorded as broken (never a crash), slots are matched, duplicates are
dropped, and top-up rounds re-request exactly the unfilled slots."""

from __future__ import annotations

import asyncio
import json

import pytest

from benchfill.designers.generate import (
    StemIndex,
    generate_suite,
    normalise_stem,
    parse_element,
    parse_reply,
    reply_items,
)
from benchfill.designers.quotas import Slot, make_plan
from benchfill.designers.requests import DesignRequest
from benchfill.models.client import CallResult
from benchfill.models.grading import grade

SLOT = Slot("s0001", "Algebra", None, "mcq", "L3", "standard")
NUM = Slot("s0002", "Algebra", None, "numeric", "L2", "standard")


def ok(parsed) -> CallResult:
    return CallResult(json.dumps(parsed), parsed=reply_items(parsed))


def mcq(**kw):
    return {"slot": "s0001", "category": "algebra", "format": "mcq", "difficulty": "L3", "intent": "standard",
            "question": "Which number is prime, among these four?", "choices": ["4", "6", "7", "9"], "answer": "C",
            **kw}


def test_a_good_item_and_its_declared_labels():
    rec = parse_element(mcq(), SLOT, designer="d", round_no=0, n_options=4, card=_card())
    assert rec.status == "ok" and rec.problems == []
    assert rec.declared == {"category": "Algebra", "subdomain": "unknown", "format": "mcq", "difficulty": "L3",
                            "intent": "standard"}  # category matched to the card's spelling
    item = rec.to_item()
    assert item.resolved_format == "mcq"
    # the option parser reads "Answer: C" as C (not the A of "Answer")
    assert grade(item, "Let me think.\nAnswer: C").label == "correct"
    assert grade(item, "Answer: A").label == "incorrect"


@pytest.mark.parametrize("element, problem", [
    (mcq(answer=None), "missing answer"),
    (mcq(question=""), "missing question"),
    (mcq(choices=["4", "6", "7"]), "wrong option count (3, expected 4)"),
    (mcq(choices=["4", "6", "7", "9", "11"]), "wrong option count (5, expected 4)"),
    (mcq(answer="E"), "gold answer not among the options"),
    (mcq(answer="13"), "gold answer not among the options"),
    (mcq(choices=["4", "6", "7", "7"]), "duplicate options"),
    (mcq(choices=["4", "", "7", "9"]), "empty option"),
    (mcq(choices=None, format="mcq"), "multiple choice without options"),
    (mcq(choices="4 6 7 9"), "options are not a list"),
    ({"slot": "s0002", "format": "numeric", "question": "How many apples are left over?", "answer": "many"},
     "numeric answer is not a number"),
])
def test_malformed_items_are_broken_with_a_reason(element, problem):
    rec = parse_element(element, SLOT, designer="d", round_no=0, n_options=4)
    assert rec.status == "broken"
    assert problem in rec.problems


def test_thousands_separators_and_option_text_are_fine():
    rec = parse_element({"format": "numeric", "question": "How many metres are in a kilometre?", "answer": "1,000"},
                        NUM, designer="d", round_no=0, n_options=4)
    assert rec.status == "ok"
    assert grade(rec.to_item(), "The answer is $\\boxed{1000}$.").label == "correct"
    # a gold given as the option's text, and options given as a mapping
    rec = parse_element(mcq(answer="7", choices={"A": "4", "B": "6", "C": "7", "D": "9"}), SLOT, designer="d",
                        round_no=0, n_options=4)
    assert rec.status == "ok" and rec.choices == ["4", "6", "7", "9"]


def test_reply_that_is_not_json_or_fails_breaks_every_slot_of_the_batch():
    bad = CallResult("Sure! here are questions", error="malformed output after 2 re-asks: reply is not JSON")
    recs, extra = parse_reply(bad, [SLOT, NUM], designer="d", round_no=0, n_options=4)
    assert [r.status for r in recs] == ["broken", "broken"]
    assert "designer reply unusable" in recs[0].problems[0]
    # an infrastructure failure (rate limit after retries) is not the designer's fault
    down = CallResult(None, error="RateLimitError: slow down")
    recs, _ = parse_reply(down, [SLOT], designer="d", round_no=0, n_options=4)
    assert recs[0].status == "failed"
    with pytest.raises(ValueError):
        reply_items({"something": 1})
    assert reply_items([1, 2]) == [1, 2]


def test_slots_matched_by_id_then_order_missing_and_extra_items():
    a = {**mcq(), "slot": "s0002", "format": "numeric", "choices": None, "answer": "5",
         "question": "What is two plus three, please?"}
    b = {**mcq(), "slot": "nonsense"}
    c = {**mcq(), "slot": None, "question": "An extra item nobody asked for, really?"}
    recs, extra = parse_reply(ok({"items": [a, b, c]}), [SLOT, NUM], designer="d", round_no=0, n_options=4)
    assert [r.slot for r in recs] == ["s0001", "s0002"]
    assert recs[1].question.startswith("What is two")  # matched by its slot id
    assert recs[0].question.startswith("Which number")  # the first unmatched element, in order
    assert extra == 1
    recs, extra = parse_reply(ok({"items": ["not an object"]}), [SLOT, NUM], designer="d", round_no=0, n_options=4)
    assert [r.problems[0] for r in recs] == ["item is not a JSON object", "designer returned no item for this slot"]


def test_duplicate_stems_exact_and_near():
    idx = StemIndex(0.9)
    q = ("A train leaves the station at 3 pm travelling at 60 km/h towards a city 180 km away; a second train "
         "leaves the city at 4 pm at 90 km/h. At what time do they meet?")
    idx.add("x", q)
    assert idx.find(q.upper().replace(";", ",")) == ("x", "exact")
    assert normalise_stem("What is 2+3?") == "what is 2 3"
    near = q.replace("4 pm", "4:30 pm")
    assert idx.find(near) == ("x", "near")
    assert idx.find("A completely different question about prime numbers and their gaps.") is None
    assert idx.find(q.replace("60", "75").replace("180", "240").replace("90", "45").replace("3 pm", "9 am")
                    .replace("meet", "pass each other")) is None


class ScriptedClient:
    """Replies to designer calls from a script, in call order (gather starts coroutines in order)."""

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[list[str]] = []

    async def complete_json(self, cfg, messages, validator=None, **kw):
        self.requests.append([s["slot"] for s in kw["request"].specs])  # what was asked, not how it was worded
        reply = self.script.pop(0)
        if reply == "MALFORMED":
            return CallResult("not json", error="malformed output after 2 re-asks: reply is not JSON")
        return ok({"items": reply})


def _card():
    from benchfill.designers.card import Category, DomainCard

    return DomainCard(name="toy", source="toy.jsonl", n_items=1, modality="text", language="en",
                      formats={"numeric": 1}, ontology=[Category(name="Algebra", count=1, share=1.0)])


def _q(n: int) -> str:
    words = ["apple", "river", "orbit", "prism", "ledger", "canyon", "quasar", "meadow", "tensor", "harbor"]
    return f"Item {n}: how many {words[n % 10]}s fit into a {words[(3 * n + 1) % 10]} of size {n * 7 + 3}?"


def _item(slot: str, n: int, **kw):
    return {"slot": slot, "format": "numeric", "difficulty": "L3", "intent": "standard", "category": "Algebra",
            "question": _q(n), "answer": str(n), **kw}


def test_top_up_rounds_hand_case():
    plan = make_plan({"category": {"Algebra": 1}, "format": {"numeric": 1}, "difficulty": {"L3": 1},
                      "intent": {"standard": 1}}, 5)
    s = [x.slot for x in plan.slots]
    script = [
        # round 0: batches [s1, s2], [s3, s4], [s5]
        [_item(s[0], 1), _item(s[1], 2, choices=["1", "2"])],  # s2: wrong option count -> broken
        "MALFORMED",                                          # s3, s4: reply not JSON -> broken
        [_item(s[4], 1)],                                     # s5: the same stem as s1 -> duplicate
        # round 1: deficits s2, s3, s4, s5 -> batches [s2, s3], [s4, s5]
        [_item(s[1], 12), _item(s[2], 13)],
        [_item(s[3], 14)],                                    # s5 missing from the reply -> broken
        # round 2: deficit s5
        [_item(s[4], 15)],
    ]
    client = ScriptedClient(script)
    records, stats = asyncio.run(generate_suite(_designer(), plan, _card(), client, batch_size=2,
                                                max_topup_rounds=2))
    assert client.requests == [[s[0], s[1]], [s[2], s[3]], [s[4]], [s[1], s[2]], [s[3], s[4]], [s[4]]]
    assert [(r.slot, r.round, r.status) for r in records] == [
        (s[0], 0, "ok"), (s[1], 0, "broken"), (s[2], 0, "broken"), (s[3], 0, "broken"), (s[4], 0, "duplicate"),
        (s[1], 1, "ok"), (s[2], 1, "ok"), (s[3], 1, "ok"), (s[4], 1, "broken"),
        (s[4], 2, "ok"),
    ]
    assert records[4].duplicate_of == records[0].id
    assert {k: stats[k] for k in ("rounds", "requests", "extra_items", "unfilled")} == \
        {"rounds": 3, "requests": 6, "extra_items": 0, "unfilled": 0}


def test_top_up_stops_after_the_last_round_and_reports_unfilled():
    plan = make_plan({"category": {"Algebra": 1}, "format": {"numeric": 1}, "difficulty": {"L3": 1},
                      "intent": {"standard": 1}}, 2)
    client = ScriptedClient(["MALFORMED", "MALFORMED"])
    records, stats = asyncio.run(generate_suite(_designer(), plan, _card(), client, batch_size=2,
                                                max_topup_rounds=1))
    assert len(records) == 4 and all(r.status == "broken" for r in records)
    assert stats["unfilled"] == 2 and stats["rounds"] == 2


def test_card_examples_count_as_duplicates():
    plan = make_plan({"category": {"Algebra": 1}, "format": {"numeric": 1}, "difficulty": {"L3": 1},
                      "intent": {"standard": 1}}, 1)
    client = ScriptedClient([[_item(plan.slots[0].slot, 4)], [_item(plan.slots[0].slot, 5)]])
    records, _ = asyncio.run(generate_suite(_designer(), plan, _card(), client, max_topup_rounds=1,
                                            references=[("ex1", _q(4))]))
    assert [r.status for r in records] == ["duplicate", "ok"]
    assert records[0].duplicate_of == "card:ex1"


def test_design_prompt_carries_the_card_and_the_specs():
    msgs = DesignRequest("Benchmark: toy", (SLOT, NUM), n_options=4, language="en", round_no=1).messages()
    text = msgs[-1]["content"]
    assert "Benchmark: toy" in text and '"slot": "s0002"' in text and "top-up round 1" in text
    assert "exactly 4 options" in text and "A, B, C, D" in text


def _designer():
    from benchfill.designers.config import Designer

    return Designer(model="sim/x", name="x", family="X")
