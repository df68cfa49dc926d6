"""Structured output: JSON calls carry the reply's JSON schema as ``response_format`` where the provider takes one,
fall back form by form where it refuses (remembered per model), and keep today's parse-and-re-ask behind it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from aiohttp import web
from openai_stub import StubServer
from pydantic import BaseModel

from benchfill.data import Item
from benchfill.models.client import SCHEMA_FORMS, ModelClient, response_format
from benchfill.models.config import ModelConfig
from benchfill.models.grading import Grader, JudgeReply

MSG = [{"role": "user", "content": "Is the item well posed?"}]
GOOD = '{"well_posed": true, "answer_correct": false, "reason": "the key is wrong"}'


class Verdict(BaseModel):
    well_posed: bool
    answer_correct: bool
    reason: str = ""


def cfg(stub: StubServer, **kw) -> ModelConfig:
    base = dict(model="hosted_vllm/stub-model", api_base=stub.api_base, timeout=2.0, max_retries=2,
                backoff_initial=0.01, backoff_max=0.05)
    base.update(kw)
    return ModelConfig(**base)


def refusing(stub: StubServer, refused: set[str], status: int = 422, message: str | None = None) -> StubServer:
    """Make the stub refuse requests whose response_format type is in ``refused`` (as a server that does not know
    the form answers: a 4xx naming response_format)."""
    respond = stub._respond

    async def _respond(body, mode, auth, request=None):
        fmt = body.get("response_format")
        if fmt is not None and fmt.get("type") in refused:
            text = message or f"response_format: Input should be 'text' or 'json_object' (got {fmt.get('type')!r})"
            return web.json_response({"error": {"message": text, "type": "invalid_request_error"}}, status=status)
        return await respond(body, mode, auth, request)

    stub._respond = _respond  # type: ignore[method-assign]
    return stub


def run_json(db: Path, model: ModelConfig, n: int = 1, **kw):
    async def go():
        client = ModelClient(db, structured_output=kw.pop("structured_output", True))
        results = [await client.complete_json(model, MSG + [{"role": "user", "content": f"#{i}"}], Verdict, **kw)
                   for i in range(n)]
        await client.aclose()
        return results, client.stats

    return asyncio.run(go())


def log_outcomes(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT outcome FROM call_log ORDER BY id")]


def test_response_format_forms_carry_the_pydantic_schema():
    schema = Verdict.model_json_schema()
    assert response_format(Verdict) == {"type": "json_schema", "json_schema": {"name": "Verdict", "schema": schema}}
    assert response_format(Verdict, "json_object") == {"type": "json_object", "schema": schema}
    assert set(schema["required"]) == {"well_posed", "answer_correct"}
    with pytest.raises(ValueError, match="unknown response_format form"):
        response_format(Verdict, "grammar")


def test_schema_is_sent_where_the_provider_takes_it(stub, tmp_path):
    stub.responder = lambda body: GOOD
    (res,), stats = run_json(tmp_path / "c.sqlite", cfg(stub))
    assert res.ok and isinstance(res.parsed, Verdict) and res.parsed.answer_correct is False
    assert stub.calls == 1 and stats.errors == 0
    sent = stub.bodies[0]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == Verdict.model_json_schema()


# llama-cpp-python 0.3.36's server answers a json_schema response_format with a 500 carrying its validation error
LLAMA_CPP_PYTHON_REFUSAL = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input "
    "should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or 'json_object'\"}}"
)


@pytest.mark.parametrize("status, message", [(422, None), (400, "Unsupported parameter: response_format"),
                                             (500, LLAMA_CPP_PYTHON_REFUSAL)])
def test_a_refused_form_falls_back_and_is_remembered_for_the_model(stub, tmp_path, status, message):
    refusing(stub, {"json_schema"}, status=status, message=message)
    stub.responder = lambda body: GOOD
    db = tmp_path / "c.sqlite"
    results, stats = run_json(db, cfg(stub), n=3)
    assert all(r.ok and r.parsed is not None for r in results)
    types = [b.get("response_format", {}).get("type") for b in stub.bodies]
    # one refusal (not retried, even as a 500), then the llama-cpp-python form for every later call of the model
    assert types == ["json_schema", "json_object", "json_object", "json_object"]
    assert stub.bodies[1]["response_format"]["schema"] == Verdict.model_json_schema()
    assert stats.errors == 0 and not any(r.failed for r in results)
    assert log_outcomes(db).count("refused") == 1 and "error" not in log_outcomes(db)


def test_no_form_accepted_means_todays_parse_and_reask(stub, tmp_path):
    refusing(stub, set(SCHEMA_FORMS), status=400, message="Unsupported parameter: response_format")
    replies = iter(["Sure! Here it is: {well_posed: yes", "```json\n" + GOOD + "\n```"])
    stub.responder = lambda body: next(replies)
    (res,), stats = run_json(tmp_path / "c.sqlite", cfg(stub))
    assert res.ok and res.parsed.well_posed is True
    sent = [b.get("response_format", {}).get("type") for b in stub.bodies]
    assert sent == ["json_schema", "json_object", None, None]  # two refusals, then a reply and one re-ask
    assert stats.malformed == 1 and stats.errors == 0


def test_an_error_that_is_not_about_the_format_is_a_failed_call(stub, tmp_path):
    refusing(stub, {"json_schema"}, status=400, message="This model's maximum context length is 2048 tokens")
    stub.responder = lambda body: GOOD
    results, stats = run_json(tmp_path / "c.sqlite", cfg(stub), n=2)
    assert all(not r.ok and r.failed and "BadRequest" in (r.error or "") for r in results)
    # not remembered as a refusal: the second call asks in the same form again
    assert [b["response_format"]["type"] for b in stub.bodies] == ["json_schema", "json_schema"]
    assert stats.errors == 2


def test_a_server_error_not_about_the_format_is_retried_in_the_same_form(stub, tmp_path):
    stub.script[:] = ["500"]  # "stub internal error": a hiccup, retried in the same form
    stub.responder = lambda body: GOOD
    (res,), stats = run_json(tmp_path / "c.sqlite", cfg(stub))
    assert res.ok and stats.retries == 1
    assert [b["response_format"]["type"] for b in stub.bodies] == ["json_schema", "json_schema"]


def test_structured_output_off_sends_no_format(stub, tmp_path):
    stub.responder = lambda body: GOOD
    (res,), _ = run_json(tmp_path / "c.sqlite", cfg(stub), structured_output=False)
    assert res.ok and "response_format" not in stub.bodies[0]


def test_simulated_models_keep_their_cache_keys(tmp_path):
    from benchfill.graphs.fill import Children
    from benchfill.models.requests import RewriteRequest
    from benchfill.models.sim import SimWorld

    item = Item(id="p1", question="What is 2 + 3?", answer="5", format="numeric")
    request = RewriteRequest.build(item, target=5.0)
    messages = request.messages()
    model = ModelConfig(model="sim/rw")

    async def go():
        client = ModelClient(tmp_path / "c.sqlite", sim=SimWorld({}, seed=0))
        res = await client.complete_json(model, messages, Children, role="rewriter", request=request)
        key = client.key_for(model, messages)
        await client.aclose()
        return res, key

    res, key = asyncio.run(go())
    assert res.parsed is not None and res.key == key  # no response_format entered the key


def test_grader_asks_for_the_judge_reply_schema(stub, tmp_path):
    stub.responder = lambda body: '{"label": "Correct", "score": 0.9, "reason": "same answer"}'
    item = Item(id="o1", question="Name a primary colour.", answer="red", format="open")

    async def go():
        client = ModelClient(tmp_path / "c.sqlite")
        verdict = await Grader(client, cfg(stub)).grade(item, "Red is one.")
        await client.aclose()
        return verdict

    verdict = asyncio.run(go())
    assert verdict.label == "correct" and verdict.score == 0.9
    sent = stub.bodies[0]["response_format"]
    assert sent["json_schema"]["schema"] == JudgeReply.model_json_schema()
    assert json.dumps(sent).count('"correct"') == 1  # the label's enum
