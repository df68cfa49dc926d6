"""Typed model requests (issue 24): what a call asks is data beside its messages; the offline worlds read it, so a
reworded prompt template changes the messages (and the cache key) but not one simulated or replayed reply."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from benchfill.data import Item
from benchfill.models.cache import call_key
from benchfill.models.client import ModelClient, offline_key
from benchfill.models.config import ModelConfig
from benchfill.models.prompts import (
    BUILTIN_DIR,
    MAX_REFERENCES,
    PromptLibrary,
    answer_messages,
    grade_judge_messages,
    rewrite_messages,
    validity_messages,
)
from benchfill.models.replay import ReplayWorld
from benchfill.models.requests import (
    AnswerRequest,
    GradeRequest,
    ModelRequest,
    Reference,
    RewriteRequest,
    ValidityRequest,
    told,
)
from benchfill.models.sim import SimWorld, latent_from_text

PARENT = Item(id="p", question="  Which is a colour?  ", answer=" B ", choices=["dog", "red"], format="mcq")
NUMERIC = Item(id="n", question="What is 2 + 3?", answer="5", format="numeric")

# ---- the request objects -------------------------------------------------------------------------------------


def test_a_rewrite_request_holds_what_the_prompt_tells():
    refs = [(f" ref {k} ", 3.04 + k / 100) for k in range(MAX_REFERENCES + 4)]
    request = RewriteRequest.build(PARENT, target=6.25, parent_difficulty=2.96, references=refs, n_children=3)
    assert (request.target, request.parent_difficulty, request.n_children) == (told(6.25), 3.0, 3)
    assert len(request.references) == MAX_REFERENCES and request.references[0] == Reference("ref 0", 3.0)
    assert request.parent_text == "Which is a colour?\n\nOptions:\nA. dog\nB. red" and request.parent_answer == "B"
    assert not request.blind
    # the prompt is the request's wording: rendering it equals the messages built from the same arguments
    assert request.messages() == rewrite_messages(PARENT, target=6.25, parent_difficulty=2.96, references=refs,
                                                  n_children=3)
    text = request.messages()[-1]["content"]
    assert f"Target difficulty: {request.target:.1f} / 10" in text and "[16] (difficulty 3.2 / 10)" in text


def test_the_baseline_rewrite_request_tells_no_difficulty():
    request = RewriteRequest.build(PARENT, target=None, parent_difficulty=4.0, references=[("r", 1.0)])
    assert request.blind and request.parent_difficulty is None and request.references == ()
    assert request.messages() == rewrite_messages(PARENT, target=None)


@pytest.mark.parametrize("bad", [dict(n_children=0), dict(target=float("nan")), dict(parent_difficulty=float("inf")),
                                 dict(references=(Reference("r", 1.0),) * (MAX_REFERENCES + 1))])
def test_a_rewrite_request_refuses_what_no_prompt_can_tell(bad):
    with pytest.raises(ValueError):
        RewriteRequest(**{"parent": NUMERIC, "target": 5.0, **bad})


def test_requests_are_frozen_values_and_the_base_is_abstract():
    request = ValidityRequest("What is 2+3?", "5")
    assert request == ValidityRequest("What is 2+3?", "5") and request != ValidityRequest("What is 2+3?", "6")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.question = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ModelRequest()  # type: ignore[abstract]


def test_each_request_renders_its_roles_template():
    library = PromptLibrary()
    assert AnswerRequest(NUMERIC).messages(library) == answer_messages(NUMERIC)
    assert ValidityRequest(" Q ", "A").messages() == validity_messages(" Q ", "A")
    grade = GradeRequest(PARENT, "Answer: B")
    assert grade.messages() == grade_judge_messages(PARENT, "Answer: B")
    assert "Rubric:\nThe response is correct if" in grade.messages()[-1]["content"]  # the default rubric
    assert "Rubric:\nexact" in GradeRequest(PARENT, "B", rubric="exact").messages()[-1]["content"]


# ---- prompt overrides: the offline worlds answer the request, not its wording --------------------------------


def reworded(folder: Path) -> PromptLibrary:
    """Override templates that say the same in other words: the target line, the parent block, the judge's
    question block and the answer instruction reworded, and a system message the built-in prompts do not have."""
    edits = {
        "rewrite": [("Target difficulty: $target / 10", "Aim for difficulty $target (out of ten)."),
                    ("<parent>", "<source_item>"), ("</parent>", "</source_item>"),
                    ("Reference answer of the parent: $parent_answer", "Its answer: $parent_answer"),
                    ('with exactly $n_children entries in "children".', "($n_children children)")],
        "rewrite_blind": [("<parent>", "<original>"), ("</parent>", "</original>"),
                          ('with exactly $n_children entries in "children".', "($n_children children)")],
        "validity_judge": [("<question>", "<item>"), ("</question>", "</item>"),
                           ("<reference_answer>", "Claimed answer: "), ("</reference_answer>", "")],
        "answer_numeric": [("Solve the following problem.", "Please work out this problem."),
                           ("Problem:\n$question", "<problem>$question</problem>")],
    }
    for name, pairs in edits.items():
        text = (BUILTIN_DIR / f"{name}.txt").read_text()
        for old, new in pairs:
            assert old in text, (name, old)
            text = text.replace(old, new)
        (folder / f"{name}.txt").write_text(text)
    (folder / "rewrite.system.txt").write_text("You write benchmark items.")
    library = PromptLibrary(folder)
    library.check()
    return library


def offline_calls(world: SimWorld, db: Path, library: PromptLibrary) -> tuple[list[str], list[str]]:
    """A rewrite, a baseline rewrite, a validity verdict and three panel answers through the client; returns the
    replies and the cache keys."""
    async def go() -> list:
        client = ModelClient(db, sim=world)
        rewrite = RewriteRequest.build(NUMERIC, target=8.0, parent_difficulty=4.0, references=[("q", 3.0)])
        blind = RewriteRequest.build(NUMERIC, target=None)
        judge = ValidityRequest("What is 2 + 4?", "6")
        answer = AnswerRequest(NUMERIC)
        out = [await client.complete_json(ModelConfig(model="sim/rw"), r.messages(library), None, role="rewriter",
                                          sample_index=k, request=r) for k, r in enumerate((rewrite, blind))]
        out.append(await client.complete_json(ModelConfig(model="sim/j"), judge.messages(library), None,
                                              role="judge", request=judge))
        out += await client.complete_rollouts(ModelConfig(model="sim/m"), answer.messages(library), n=3,
                                              request=answer)
        await client.aclose()
        return out

    results = asyncio.run(go())
    assert all(r.ok for r in results)
    return [r.text for r in results], [r.key for r in results]


def sim_world() -> SimWorld:
    return SimWorld.from_abilities({"m": 0.3}, {"n": 0.0, "x": 1.0}, seed=3, b_range=(-2.0, 2.0))


def replay_world() -> ReplayWorld:
    items = [NUMERIC] + [Item(id=f"r{k}", question=f"Replay item {k}?", answer=str(k)) for k in range(12)]
    rates = np.linspace(0.1, 0.9, 13)[None, :]
    return ReplayWorld(rates, ["m"], items, np.linspace(-2, 2, 13), [it.id for it in items[1:]], seed=3)


@pytest.mark.parametrize("make", [sim_world, replay_world], ids=["simulated", "replay"])
def test_a_reworded_prompt_gives_the_same_offline_replies(tmp_path, make):
    library = reworded(tmp_path)
    builtin_replies, builtin_keys = offline_calls(make(), tmp_path / "builtin.sqlite", PromptLibrary())
    override_replies, override_keys = offline_calls(make(), tmp_path / "override.sqlite", library)
    assert not set(builtin_keys) & set(override_keys)  # the override is what was sent (and cached)
    assert override_replies == builtin_replies
    children = json.loads(builtin_replies[0])["children"]
    assert len(children) == 4  # what the request asks, though the override never says "exactly 4 entries"
    if make is sim_world:  # the same children: the same latent difficulties, moved toward the target
        assert all(latent_from_text(c["question"]) > 0.5 for c in children)


def test_the_offline_key_is_the_builtin_wordings_cache_key(tmp_path):
    request = RewriteRequest.build(NUMERIC, target=8.0)
    builtin = request.messages()
    override = request.messages(reworded(tmp_path))
    params = {"temperature": 1.0}
    assert offline_key("sim/rw", builtin, params, 2, request) == call_key("sim/rw", builtin, params, 2)
    assert offline_key("sim/rw", override, params, 2, request) == call_key("sim/rw", builtin, params, 2)
    reask = [{"role": "assistant", "content": "not JSON"}, {"role": "user", "content": "again"}]
    # a re-ask keeps the turns it added (a new draw), after the built-in wording of its prompt
    assert offline_key("sim/rw", override + reask, params, 2, request) == \
        call_key("sim/rw", builtin + reask, params, 2)
    assert offline_key("sim/rw", override, params, 2, None) == call_key("sim/rw", override, params, 2)


@pytest.mark.slow  # two small fills (~7 s)
def test_a_simulated_fill_with_reworded_prompts_chooses_the_same_children(tmp_path):
    """The whole search under a prompt override folder: every rewriter, judge and panel prompt reads differently,
    and the fill proposes, keeps and chooses the same children (same latent difficulties) as with the built-in
    templates."""
    import sqlite3

    from test_fill import fill, make_benchmark, write_config

    items, resp = make_benchmark(tmp_path)
    (tmp_path / "prompts").mkdir()
    reworded(tmp_path / "prompts")
    runs = {}
    for name, extra in (("builtin", ""), ("override", '\n[prompts]\ndir = "prompts"\n')):
        cfg = write_config(tmp_path, max_rounds=2, name=f"{name}.toml")
        cfg.write_text(cfg.read_text() + extra)
        res = fill(items, resp, cfg, tmp_path / name, "--gaps", "1", "--compare")
        assert res.exit_code == 0, res.output
        con = sqlite3.connect(tmp_path / name / "memory.sqlite")
        questions = con.execute("select id, question from candidates order by id").fetchall()
        keys = {k for (k,) in con.execute("select key from calls")}
        con.close()
        summary = json.loads((tmp_path / name / "summary.json").read_text())["methods"]
        runs[name] = summary, [(cid, latent_from_text(q or "")) for cid, q in questions], keys
    assert runs["override"][0] == runs["builtin"][0]  # the same gaps, children chosen, placements
    assert runs["override"][1] == runs["builtin"][1] and len(runs["builtin"][1]) > 0
    assert not runs["override"][2] & runs["builtin"][2]  # every call was worded (and cached) differently
