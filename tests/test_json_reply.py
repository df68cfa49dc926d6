"""The one JSON-from-reply reader (benchfill.models.replies.reply_json): reply texts -> the value, or the one failure.

The rows cover what the two readers it replaced handled (the client's ``parse_json_text``: the whole reply, a
fenced block, the outermost {...} / [...], reasoning removed; grading's structured JSON: balanced spans, the last
one first, strings respected, in a fence or after "Answer:"), with their old tests' and docstrings' cases."""

from __future__ import annotations

import pytest

from benchfill.models.grading import parse_structured
from benchfill.models.replies import balanced_spans, fenced_blocks, final_text, reply_json

NOT_JSON = object()  # the row's reply raises ValueError("reply is not JSON (...)")

REPLIES = [
    # the whole reply
    ('{"a": 1}', {"a": 1}),
    ('  [1, 2]\n', [1, 2]),
    ("5", 5),                                                       # any JSON value when it is the whole reply
    ('"yes"', "yes"),
    ("{}", {}),
    # a fenced block: ```json or a bare ```, the last first, prose around it ignored
    ('Sure!\n```json\n{"a": 2}\n```', {"a": 2}),
    ('```\n{"a": 2}\n```', {"a": 2}),
    ('Here:```json{"a": 2}```', {"a": 2}),                          # no newline after the fence
    ('```json\n{"a": 1}\n```\nor better:\n```json\n{"a": 2}\n```', {"a": 2}),
    ('```json\n{"a": 1}\n```\n```\nnot json\n```', {"a": 1}),         # a last block without JSON: the one before
    ('```\nthe verdict: {"a": 1} (final)\n```', {"a": 1}),           # a JSON span inside a block
    # prose before and after, the JSON a balanced span (strings respected)
    ('x {"k": [1, 2]} y', {"k": [1, 2]}),
    ('The verdict is {"well_posed": true, "answer_correct": false}. Done.',
     {"well_posed": True, "answer_correct": False}),
    ('note: {"k": "a}b", "n": "{"} ok', {"k": "a}b", "n": "{"}),
    ('escaped: {"k": "say \\"}\\" now"} end', {"k": 'say "}" now'}),
    ('the steps: ["boil", "steep", "pour"].', ["boil", "steep", "pour"]),
    ('list: [{"x": 1}, {"x": 2}] done', [{"x": 1}, {"x": 2}]),
    ('first draft {"a": 1}, final answer {"a": 2}', {"a": 2}),      # the last span wins
    ('[note] {"a": 1}', {"a": 1}),                                  # "[note]" is not JSON: skipped
    # an unbalanced bracket in the prose: the first "{" to the last "}", then the first "[" to the last "]"
    ('see [the note: {"a": 1}', {"a": 1}),
    ('oops { then [1, 2]', [1, 2]),
    # reasoning removed first
    ('<think>{"draft": 0}</think> verdict: {"a": 3} done', {"a": 3}),
    ('<think>draft</think>\n```json\n{"a": 3}\n```', {"a": 3}),
    ('<|channel|>analysis<|message|>{"draft": 0}<|end|><|channel|>final<|message|>{"a": 4}<|return|>', {"a": 4}),
    # the one failure
    ("no json here", NOT_JSON),
    ("", NOT_JSON),
    (None, NOT_JSON),
    ("   \n", NOT_JSON),
    ('<think>{"a": 1}', NOT_JSON),                                  # unfinished reasoning leaves nothing
    ('{"a": 1', NOT_JSON),
    ("Sure! Here are some great questions for your benchmark. 1) What is ...", NOT_JSON),
    ("{not: json} and [neither", NOT_JSON),
]


@pytest.mark.parametrize("text, expected", REPLIES)
def test_reply_json(text, expected) -> None:
    if expected is NOT_JSON:
        with pytest.raises(ValueError, match=r"^reply is not JSON \(.+\)$"):
            reply_json(text)
    else:
        assert reply_json(text) == expected


@pytest.mark.parametrize("text, why", [
    ("no json here", "Expecting value"),
    ("", "Expecting value"),                                      # as the client's reader said for an empty reply
    ('{"a": 1', "Expecting ',' delimiter"),
    ('{"a": 1, }', "Expecting property name enclosed in double quotes"),
])
def test_the_failure_names_the_decoders_reason(text, why) -> None:
    with pytest.raises(ValueError) as err:
        reply_json(text)
    assert str(err.value) == f"reply is not JSON ({why})"


def test_accept_skips_values_it_refuses_and_says_so_when_all_are_refused() -> None:
    nonempty = lambda v: isinstance(v, (list, dict)) and bool(v)  # noqa: E731
    assert reply_json('x {"a": 1} then []', accept=nonempty) == {"a": 1}
    with pytest.raises(ValueError, match=r"reply is not JSON \(no JSON value of the kind wanted\)"):
        reply_json("{} and []", accept=nonempty)  # the spans parse, and are refused
    with pytest.raises(ValueError, match="kind wanted"):
        reply_json("5", accept=nonempty)


# ---- the structured answers of grading: JSON via reply_json, else a written list after "Answer:" --------------

@pytest.mark.parametrize("text, expected", [
    ('{"mean": 4, "median": 3.5}', {"mean": 4, "median": 3.5}),
    ('Answer: {"mean": 4}', {"mean": 4}),
    ('Answer: ["boil", "steep", "pour"]', ["boil", "steep", "pour"]),
    ("Answer: boil -> steep -> pour", ["boil", "steep", "pour"]),      # a written list
    ("Answer: a; b; c", ["a", "b", "c"]),
    ("Answer: a, b", ["a", "b"]),
    ("Some reasoning first: [1, 2] is not it.\nAnswer: boil -> steep -> pour", ["boil", "steep", "pour"]),
    ('Some reasoning first: [1, 2] is not it.\nAnswer: ["x", "y"]', ["x", "y"]),
    ('Here:\n```json\n{"a": 1.0}\n```', {"a": 1.0}),
    ('```json\n{"a": 1}\n```\nAnswer: b, c', {"a": 1}),               # the last fence before "Answer:"
    ('x {"k": [1, 2]} y', {"k": [1, 2]}),
    ('I tried [1] and then {"a": 2}', {"a": 2}),                        # the last span
    ('x {"a": 1} then []', {"a": 1}),                                  # an empty one is no answer: the one before
    ("Answer: {}", None),
    ("[]", None),
    ("5", None),
    ("I think it is one.", None),
    ("one", None),
    (None, None),
])
def test_parse_structured(text, expected) -> None:
    assert parse_structured(text) == expected


# ---- the pieces --------------------------------------------------------------------------------------------------

def test_pieces() -> None:
    assert fenced_blocks('a ```json\n{"x": 1}\n``` b ```\n[2]\n```') == ['{"x": 1}\n', "[2]\n"]
    assert balanced_spans('p [1, [2]] q {"a": "}"} r ]') == ["[1, [2]]", '{"a": "}"}']
    assert final_text("<think>x</think> y") == ("y", None)
    assert final_text("<think>x") == (None, "unfinished reasoning (<think> without </think>)")
    assert final_text(None) == (None, "no response") and final_text("  ") == (None, "empty response")


def test_grading_and_client_read_replies_with_it() -> None:
    import benchfill.models.client as client
    import benchfill.models.grading as grading

    assert client.reply_json is reply_json and grading.reply_json is reply_json
    assert grading.final_text is final_text
    assert not hasattr(client, "parse_json_text") and not hasattr(grading, "_json_spans")


def test_the_client_reads_the_value_its_validator_takes():
    """Of several JSON values in a reply the client keeps the one the validator takes (the last such); where none
    does, the validator's own error (not "not JSON") is what the re-ask says."""
    from pydantic import BaseModel, ValidationError

    from benchfill.models.client import _reply_value

    class Verdict(BaseModel):
        ok: bool

    assert _reply_value('{"ok": true} (see [1])', Verdict) == {"ok": True}
    assert _reply_value('draft {"ok": "maybe"} final {"ok": false}', Verdict) == {"ok": False}
    assert _reply_value('{"ok": false} then {"nope": 1}', Verdict) == {"ok": False}
    with pytest.raises(ValidationError):
        Verdict.model_validate(_reply_value('{"nope": 1}', Verdict))
    assert _reply_value('{"a": 1} see [1]', None) == [1]  # without a validator: the last value, as reply_json
