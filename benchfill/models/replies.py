"""Reading a model's reply text: the part that holds the answer (:func:`final_text`) and the JSON value in it
(:func:`reply_json`, the one JSON-from-reply reader of the package: the client's ``complete_json`` and the grading
of ``structured`` answers both use it).

This module imports nothing of benchfill, so every module of :mod:`benchfill.models` (and every layer above) can
use it without an import circle.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterator

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", flags=re.DOTALL)


def final_text(response: str | None) -> tuple[str | None, str | None]:
    """The part of a response that holds the answer: reasoning (``<think>...</think>``, a gpt-oss analysis channel)
    removed. Returns (text, reason-it-is-ungradable)."""
    if response is None:
        return None, "no response"
    text = response
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    elif "<think>" in text:
        return None, "unfinished reasoning (<think> without </think>)"
    if "<|channel|>final<|message|>" in text:
        text = text.rsplit("<|channel|>final<|message|>", 1)[1]
    text = text.replace("<|end|>", "").replace("<|return|>", "").strip()
    if not text:
        return None, "empty response"
    return text, None


def fenced_blocks(text: str) -> list[str]:
    """The contents of the fenced blocks of ``text`` (```` ```json ... ``` ```` or ```` ``` ... ``` ````), in order."""
    return _FENCE.findall(text)


def balanced_spans(text: str) -> list[str]:
    """Balanced ``[...]`` / ``{...}`` spans of ``text`` (outermost only, in order; strings inside them respected)."""
    spans: list[str] = []
    depth, start, in_str, esc = 0, -1, False, False
    for pos, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth > 0:
            in_str = True
        elif ch in "[{":
            if depth == 0:
                start = pos
            depth += 1
        elif ch in "]}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start: pos + 1])
    return spans


def _candidates(body: str) -> Iterator[str]:
    yield body
    for block in fenced_blocks(body)[::-1]:
        yield block
        yield from balanced_spans(block)[::-1]
    yield from balanced_spans(body)[::-1]
    for open_, close in (("{", "}"), ("[", "]")):
        i, j = body.find(open_), body.rfind(close)
        if 0 <= i < j:
            yield body[i: j + 1]


def reply_json(text: str | None, accept: Callable[[Any], bool] | None = None) -> Any:
    """The JSON value in a model's reply.

    Reasoning is removed first (:func:`final_text`: ``<think>...</think>``, a gpt-oss analysis channel; an
    unfinished ``<think>`` or an empty reply leaves nothing). Then these are tried in order, and the first that
    parses as JSON (and that ``accept`` takes, when it is given) is the value:

    1. the whole reply (any JSON value: an object, an array, also a bare number or string);
    2. each fenced block (```` ```json ... ``` ```` or ```` ``` ... ``` ````), the last first: its whole text, then
       its balanced ``{...}`` / ``[...]`` spans, the last first;
    3. the balanced ``{...}`` / ``[...]`` spans of the reply (outermost ones, strings respected), the last first —
       so prose before and after the JSON is ignored, and of a draft and a final object the final one wins;
    4. the text from the first ``{`` to the last ``}``, then from the first ``[`` to the last ``]`` (a JSON value
       after an unbalanced bracket of the prose).

    Failure, the one way: :class:`ValueError` ``"reply is not JSON (<why>)"``, ``<why>`` being the JSON
    decoder's message for the last candidate that did not parse (``"Expecting value"`` for an empty reply or one
    without JSON), or ``"no JSON value of the kind wanted"`` when some candidate parsed but ``accept`` refused
    it (and every other). Callers that want None instead catch the ValueError.
    """
    body = (final_text(text)[0] or "").strip()
    last, refused = "empty", False
    for cand in _candidates(body):
        try:
            value = json.loads(cand)
        except ValueError as exc:  # a JSONDecodeError, or an integer past Python's digit limit
            last = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            continue
        if accept is None or accept(value):
            return value
        refused = True
    raise ValueError(f"reply is not JSON ({'no JSON value of the kind wanted' if refused else last})")
