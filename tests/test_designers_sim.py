"""The simulated designers, answerers and judge: they speak the real prompts' JSON and carry planted truths."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchfill.data import Item
from benchfill.designers.config import SimDesignerConfig
from benchfill.designers.generate import parse_reply, reply_items
from benchfill.designers.quotas import Slot
from benchfill.designers.requests import CardRequest, DesignRequest
from benchfill.designers.sim import DesignerSimWorld
from benchfill.designers.validate import judge_request
from benchfill.models.client import CallResult
from benchfill.models.grading import grade
from benchfill.models.requests import AnswerRequest

SLOTS = [Slot(f"s{k:04d}", "Algebra", "linear", fmt, "L3", "standard") for k, fmt in
         enumerate(["mcq", "numeric", "short", "math"] * 5, start=1)]


def world(**designers) -> DesignerSimWorld:
    return DesignerSimWorld(
        {"me": 0.0, "kin": 0.0, "other": 0.0}, seed=2,
        designers={name: SimDesignerConfig(**kw) for name, kw in designers.items()},
        designer_family={name: "F" for name in designers}, answerer_family={"me": "F", "kin": "F", "other": "G"},
        self_answerer={name: "me" for name in designers},
    )


def design(w: DesignerSimWorld, name: str, key: str = "k"):
    request = DesignRequest("Benchmark: toy", tuple(SLOTS), n_options=4, language="en", round_no=0)
    text = w.respond(f"sim/{name}", request, key=key, role="designer")
    parsed = reply_items(json.loads(text))
    return parse_reply(CallResult(text, parsed=parsed), SLOTS, designer=name, round_no=0, n_options=4)[0]


def test_simulated_designer_follows_the_spec_in_the_real_json():
    recs = design(world(d={"broken_rate": 0.0}), "d")
    assert [r.status for r in recs] == ["ok"] * len(SLOTS)
    for rec, slot in zip(recs, SLOTS):
        assert rec.declared["format"] == slot.format and rec.declared["difficulty"] == "L3"
        assert rec.metadata["sim"]["designer"] == "d" and "SIMULATED" in rec.question
        truth = rec.metadata["sim"]["truth"]
        item = rec.to_item()
        # the planted truth is the gold when nothing is broken, and the real grader accepts it
        right = "Answer: " + truth if slot.format in ("mcq", "short") else f"$\\boxed{{{truth}}}$"
        assert grade(item, right).label == "correct"


def test_broken_items_and_not_json_replies():
    recs = design(world(d={"broken_rate": 1.0, "flaw_mix": {"missing_answer": 1, "gold_not_in_options": 1}}), "d")
    assert all(r.status == "broken" for r in recs)
    assert {p for r in recs for p in r.problems} <= {"missing answer", "gold answer not among the options"}
    w = world(d={"malformed_rate": 1.0})
    text = w.respond("sim/d", DesignRequest("x", tuple(SLOTS[:2]), n_options=4, language="en", round_no=0), key="k",
                     role="designer")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_difficulty_skew_and_planted_bonuses():
    base = design(world(d={}), "d")
    hard = design(world(d={"difficulty_shift": 1.5}), "d")
    b0 = np.mean([r.metadata["sim"]["latent_b"] for r in base])
    b1 = np.mean([r.metadata["sim"]["latent_b"] for r in hard])
    assert b1 - b0 == pytest.approx(1.5, abs=0.01)
    w = world(d={"self_bonus": 1.0, "family_bonus": 0.5})
    assert (w.bonus("me", "d"), w.bonus("kin", "d"), w.bonus("other", "d")) == (1.5, 0.5, 0.0)

    def accuracy(answerer: str, item) -> float:
        return np.mean([grade(item, w.respond(f"sim/{answerer}", AnswerRequest(item), key=f"{answerer}{k}",
                                              role="panel")).label == "correct" for k in range(400)])

    item = next(r for r in design(w, "d") if r.format == "numeric").to_item()
    assert accuracy("me", item) > accuracy("kin", item) > accuracy("other", item)


def test_flawed_items_fool_the_panel_and_the_judge_knows():
    w = world(d={"broken_rate": 1.0, "flaw_mix": {"gold_incorrect": 1}})
    w.abilities["me"] = 6.0  # always right, i.e. always gives the TRUE answer
    item = next(r for r in design(w, "d") if r.format == "numeric").to_item()
    reply = w.respond("sim/me", AnswerRequest(item), key="a", role="panel")
    assert grade(item, reply).label == "incorrect"
    verdict = json.loads(w.respond("sim/judge", judge_request(item, ["all_strong_fail"], []), key="j",
                                   role="item_judge"))
    assert verdict["verdict"] == "gold_incorrect" and "SIMULATED" in verdict["reason"]


def test_the_card_model_labels_the_entries_of_its_request():
    items = [Item(id="a", question="Find the radius of the circle through three points.", answer="5"),
             Item(id="b", question="How many primes are below 20?", answer="8")]
    reply = json.loads(world().respond("sim/card", CardRequest.build(items, {"b": "Number theory"}), key="c",
                                       role="card"))
    labels = {row["id"]: row for row in reply["labels"]}
    assert set(labels) == {"a", "b"} and labels["b"]["category"] == "Number theory"  # the existing label
    assert labels["a"]["subdomain"] in items[0].question.lower() and "SIMULATED" in reply["note"]


def test_a_designer_call_without_its_request_is_told_so():
    text = world(d={}).respond("sim/d", None, key="k", role="designer")
    assert text.startswith("SIMULATED") and "no typed request" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
