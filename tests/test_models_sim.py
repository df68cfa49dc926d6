"""The simulated world: IRT panel answers through the real grader, a rewriter that moves toward the target, a judge
with a configurable invalid share; deterministic in (seed, key); everything labelled SIMULATED; it reads each call's
typed request, never the prompt."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest

from benchfill.data import Item
from benchfill.models.client import ModelClient
from benchfill.models.config import ModelConfig
from benchfill.models.grading import grade
from benchfill.models.requests import AnswerRequest, GradeRequest, RewriteRequest, ValidityRequest
from benchfill.models.sim import SimWorld, latent_from_text

ITEMS = [
    Item(id="m1", question="What is 2+3?", answer="5", format="numeric"),
    Item(id="m2", question="Simplify 2/4.", answer="\\frac{1}{2}", format="math"),
    Item(id="c1", question="Which is a colour?", answer="B", choices=["dog", "red", "car", "sky"], format="mcq"),
    Item(id="s1", question="Capital of France?", answer="Paris", format="short"),
]


def world(**kw) -> SimWorld:
    return SimWorld.from_abilities({"strong": 3.0, "weak": -3.0}, {"m1": 0.0, "m2": 0.5, "c1": -0.5, "s1": 0.0},
                                   seed=1, **kw)


def test_p_correct_is_the_irt_curve():
    w = world()
    assert w.p_correct("sim/strong", ITEMS[0]) == pytest.approx(1 / (1 + math.exp(-3.0)))
    # multiple choice with k options: c = 1/k
    c = 0.25
    assert w.p_correct("sim/weak", ITEMS[2]) == pytest.approx(c + (1 - c) / (1 + math.exp(2.5)))


@pytest.mark.parametrize("item", ITEMS, ids=lambda it: it.resolved_format)
def test_answers_go_through_the_real_grader(item):
    from benchfill.models.sim import render_answer

    right = render_answer(item, True, 0.3)
    wrong = render_answer(item, False, 0.3)
    assert "SIMULATED" in right and "SIMULATED" in wrong
    assert grade(item, right).label == "correct"
    assert grade(item, wrong).label == "incorrect"


def test_panel_accuracy_matches_probability_and_is_deterministic():
    w = world()
    item = Item(id="x", question="Hard one?", answer="7", format="numeric")
    w.difficulties["x"] = 0.0
    w.abilities["mid"] = 0.4
    request = AnswerRequest(item)
    hits = [grade(item, w.respond("sim/mid", request, key=f"k{i}", role="panel")).label == "correct"
            for i in range(3000)]
    p = 1 / (1 + math.exp(-0.4))
    assert abs(np.mean(hits) - p) < 3 * math.sqrt(p * (1 - p) / 3000)
    again = SimWorld.from_abilities({"mid": 0.4}, {"x": 0.0}, seed=1)
    assert again.respond("sim/mid", request, key="k5", role="panel") == \
        w.respond("sim/mid", request, key="k5", role="panel")


@pytest.mark.parametrize("role", ["panel", "rewriter", "judge", "grader"])
def test_a_call_without_a_typed_request_is_told_so(role):
    """No guessing from the prompt: a call with plain messages gets a SIMULATED reply that says what is missing."""
    text = world().respond("sim/strong", None, key="k", role=role)
    assert text.startswith("SIMULATED") and "no typed request" in text and f"offline {role} model" in text
    assert grade(ITEMS[3], text).label == "incorrect"  # not an answer, even when the prompt names the item


def test_rewriter_moves_children_toward_the_target():
    w = world(step=0.6, noise=0.2)
    parent = ITEMS[0]  # b = 0.0 ; b_range = (-0.5, 0.5)
    target_d = 0.9
    b_target = w.d_to_b(target_d)
    dists_before, dists_after = [], []
    for r in range(40):
        request = RewriteRequest.build(parent, target=10 * target_d, parent_difficulty=5.0, references=[("q", 3.0)])
        reply = json.loads(w.respond("sim/rw", request, key=f"r{r}", role="rewriter"))
        assert len(reply["children"]) == 4
        for child in reply["children"]:
            assert child["answer"] == "5" and "SIMULATED" in child["question"]
            b = latent_from_text(child["question"])
            dists_after.append(abs(b - b_target))
        dists_before.append(abs(0.0 - b_target))
    assert np.mean(dists_after) < 0.7 * np.mean(dists_before)


def test_blind_rewriter_scatters_around_the_parent():
    w = world(scatter=0.5)  # the parent's b (0.0) is its difficulty by id
    bs = []
    for r in range(50):
        reply = json.loads(w.respond("sim/rw", RewriteRequest.build(ITEMS[0], target=None), key=f"b{r}",
                                     role="rewriter"))
        bs += [latent_from_text(c["question"]) for c in reply["children"]]
    assert abs(np.mean(bs)) < 0.15 and 0.35 < np.std(bs) < 0.65


def test_child_of_child_starts_from_its_latent():
    w = world(step=1.0, noise=0.0)
    parent = Item(id="c", question="What is 2+3? [SIMULATED latent_b=+0.2000]", answer="5")
    reply = json.loads(w.respond("sim/rw", RewriteRequest.build(parent, target=0.0), key="z", role="rewriter"))
    assert latent_from_text(reply["children"][0]["question"]) == pytest.approx(w.d_to_b(0.0))


def test_judge_invalid_share():
    w = world(invalid_rate=0.3)
    request = ValidityRequest("What is 2+3?", "5")
    verdicts = [json.loads(w.respond("sim/j", request, key=f"j{i}", role="judge")) for i in range(2000)]
    share = np.mean([not v["well_posed"] for v in verdicts])
    assert abs(share - 0.3) < 0.04 and all("SIMULATED" in v["reason"] for v in verdicts)


def test_format_failures_count_as_wrong():
    w = world(format_failure_rate=1.0)
    text = w.respond("sim/strong", AnswerRequest(ITEMS[0]), key="k", role="panel")
    result = grade(ITEMS[0], text)
    assert result.label == "incorrect" and "no final answer" in result.reason  # SPEC 6: the model's fault


def test_sim_through_the_client_is_cached(tmp_path):
    w = world()
    model = ModelConfig(model="sim/strong")

    async def go():
        client = ModelClient(tmp_path / "c.sqlite", sim=w)
        answer = AnswerRequest(ITEMS[0])
        a = await client.complete_rollouts(model, answer.messages(), n=3, request=answer)
        b = await client.complete_rollouts(model, answer.messages(), n=3, request=answer)
        rewrite = RewriteRequest.build(ITEMS[0], target=5.0)
        rw = await client.complete_json(ModelConfig(model="sim/rw"), rewrite.messages(), lambda o: o["children"],
                                        role="rewriter", request=rewrite)
        await client.aclose()
        return a, b, rw

    a, b, rw = asyncio.run(go())
    assert all(r.simulated and not r.cached for r in a) and all(r.cached for r in b)
    assert [r.text for r in a] == [r.text for r in b]
    assert len(rw.parsed) == 4


def test_grader_reads_the_reference_and_the_response_from_its_request():
    item = Item(id="o", question="Name the colour of the sky.", answer="Blue", format="open")
    verdicts = [json.loads(world().respond("sim/g", GradeRequest(item, response), key="g", role="grader"))
                for response in ("It is blue.", "It is green.")]
    assert [v["label"] for v in verdicts] == ["correct", "incorrect"]
