"""The offline simulated world: ``sim/<name>`` model strings answer like an IRT panel. Everything it writes says
SIMULATED.

benchfill/models/README.md: tests, the demo and search-efficiency benchmarks need LLM stand-ins, and no PyPI package ships a
small generative model. A :class:`SimWorld` holds an ability theta per simulated model and a latent difficulty b
per item, and plays every role through the same :class:`~benchfill.models.client.ModelClient` path as a real
model, so the real prompts, cache, grading and IRT code all run. It reads each call's typed request
(:mod:`benchfill.models.requests`), never the prompt's text, so a reworded prompt template changes nothing here:

- panel (:class:`AnswerRequest`): answers correctly with probability ``c + (1 - c) sigmoid(theta - b)`` (c = 1/k
  for k-option multiple choice, else 0) — the gold answer in a gradable form (``\\boxed{gold}``, ``Answer: C``) or
  a plausible wrong one;
- rewriter (:class:`RewriteRequest`): returns the JSON the rewrite prompt asks for, ``n_children`` children whose
  latent b moves from the parent's toward the target (0-10), ``b + step (b_target - b) + noise z``; without a target
  (the budget-matched baseline) children scatter around the parent, ``b + scatter z``;
- judge (:class:`ValidityRequest`): a validity verdict, invalid for a configurable share of children;
- grader (:class:`GradeRequest`): a rubric verdict for open answers (correct when the gold text appears in the
  response).

A call without a request (plain messages through the client) gets a reply that says so: the world does not guess
what a prompt asks.

A child's latent difficulty travels in its text as ``[SIMULATED latent_b=+0.4312]``, so a resumed run — whose
rewriter replies come from the cache, not from this object — still knows it. All randomness is a pure function of
(seed, model, the call's key), so a rerun or a resume gives identical answers; the key is the call's cache key as the
built-in templates word it (:func:`~benchfill.models.client.offline_key`), so a prompt override leaves it alone.

Build it from a fitted scale with :meth:`SimWorld.from_abilities` (theta by model name, b by item id), or from a
config's ``[sim]`` section with :meth:`SimWorld.from_config`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Mapping

import numpy as np

from benchfill.data import Item, text_key
from benchfill.models.requests import AnswerRequest, GradeRequest, ModelRequest, RewriteRequest, ValidityRequest

SIM_LABEL = "SIMULATED"
SIM_PREFIX = "sim/"
_TAG = re.compile(r"\[SIMULATED latent_b=([+-]?\d+(?:\.\d+)?)\]")


def _u(*parts: Any) -> float:
    """A uniform in [0, 1) that is a pure function of ``parts``."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _rng(*parts: Any) -> np.random.Generator:
    digest = hashlib.sha256("|".join(map(str, parts)).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def latent_from_text(text: str) -> float | None:
    """The latent difficulty a simulated child carries in its text, if any."""
    m = _TAG.search(text)
    return float(m.group(1)) if m else None


def strip_tag(text: str) -> str:
    return _TAG.sub("", text).strip()


class SimWorld:
    """The simulated panel, rewriter, judge and grader.

    Args:
        abilities: theta by simulated model name (``sim/<name>`` -> ``name``).
        difficulties: latent b by item id (an item without one gets a deterministic N(0, 1) draw from its text).
        seed: everything random is a pure function of this seed and the call's cache key.
        step: share of the way a child moves from the parent's b toward the target's b (0..1).
        noise: SD of a child's b around that point.
        scatter: SD of a child's b around the parent without a target (the budget-matched baseline).
        invalid_rate: share of children the simulated judge marks invalid.
        format_failure_rate: share of panel answers with no extractable answer (graded wrong, reason logged).
        b_range: (min b, max b) that maps the 0-10 difficulty scale to b; default: the range of ``difficulties``.
    """

    def __init__(
        self, abilities: Mapping[str, float], difficulties: Mapping[str, float] | None = None, *, seed: int = 0,
        step: float = 0.5, noise: float = 0.3, scatter: float = 0.8, invalid_rate: float = 0.1,
        format_failure_rate: float = 0.0, b_range: tuple[float, float] | None = None,
    ) -> None:
        self.abilities = {str(k).removeprefix(SIM_PREFIX): float(v) for k, v in abilities.items()}
        self.difficulties = {str(k): float(v) for k, v in (difficulties or {}).items()}
        self.seed = seed
        self.step = step
        self.noise = noise
        self.scatter = scatter
        self.invalid_rate = invalid_rate
        self.format_failure_rate = format_failure_rate
        if b_range is None and len(self.difficulties) >= 2:
            b_range = (min(self.difficulties.values()), max(self.difficulties.values()))
        self.b_range = b_range or (-3.0, 3.0)

    # ------------------------------------------------------------------------------------------- construction

    @classmethod
    def from_abilities(cls, models: Mapping[str, float], items: Mapping[str, float], seed: int = 0,
                       **kwargs: Any) -> "SimWorld":
        """From a fitted scale: theta posterior means by model name, b posterior means by item id."""
        return cls(models, items, seed=seed, **kwargs)

    @classmethod
    def from_config(cls, sim: Any) -> "SimWorld":
        """From a :class:`~benchfill.models.config.SimConfig` (a config's ``[sim]`` section)."""
        return cls(
            sim.abilities, sim.difficulties, seed=sim.seed, step=sim.step, noise=sim.noise, scatter=sim.scatter,
            invalid_rate=sim.invalid_rate, format_failure_rate=sim.format_failure_rate,
            b_range=tuple(sim.b_range) if sim.b_range else None,
        )

    # ------------------------------------------------------------------------------------------- the model

    def latent_b(self, item: Item) -> float:
        """b of an item: its text tag, ``metadata['sim_latent_b']``, the difficulty by id, else a draw from its text."""
        tagged = latent_from_text(item.question)
        if tagged is not None:
            return tagged
        if "sim_latent_b" in item.metadata:
            return float(item.metadata["sim_latent_b"])
        if item.id in self.difficulties:
            return self.difficulties[item.id]
        return float(_rng(self.seed, "b", text_key(item.question)).standard_normal())

    def theta(self, model: str) -> float:
        name = model.removeprefix(SIM_PREFIX)
        if name not in self.abilities:
            raise KeyError(f"simulated model {model!r} has no ability")
        return self.abilities[name]

    def p_correct(self, model: str, item: Item) -> float:
        """c + (1 - c) sigmoid(theta - b); c = the item's guessing rate (:attr:`benchfill.data.Item.guessing_rate`)."""
        c = item.guessing_rate
        return c + (1.0 - c) * _sigmoid(self.theta(model) - self.latent_b(item))

    def d_to_b(self, d: float) -> float:
        lo, hi = self.b_range
        return lo + d * (hi - lo)

    def b_to_d(self, b: float) -> float:
        lo, hi = self.b_range
        return (b - lo) / (hi - lo) if hi > lo else 0.5

    # ------------------------------------------------------------------------------------------- dispatch

    def respond(self, model: str, request: ModelRequest | None, *, key: str, role: str) -> str:
        """The simulated reply to one call (deterministic in seed, model and ``key``), from its typed request."""
        if isinstance(request, AnswerRequest):
            return self._answer(model, request.item, key)
        if isinstance(request, RewriteRequest):
            return self._rewrite(model, request, key)
        if isinstance(request, ValidityRequest):
            return self._judge(model, key)
        if isinstance(request, GradeRequest):
            return self._grade(request)
        return unread_request(role, request)

    # ------------------------------------------------------------------------------------------- panel

    def _answer(self, model: str, item: Item, key: str) -> str:
        if self.format_failure_rate and _u(self.seed, "fmt", model, key) < self.format_failure_rate:
            return f"{SIM_LABEL}: the simulated model rambles and gives no final answer."
        correct = _u(self.seed, "panel", model, key) < self.p_correct(model, item)
        return render_answer(item, correct, _u(self.seed, "wrong", model, key))

    # ------------------------------------------------------------------------------------------- rewriter

    def _rewrite(self, model: str, request: RewriteRequest, key: str) -> str:
        parent_b = self.latent_b(request.parent)
        rng = _rng(self.seed, "rewrite", model, key)
        base = strip_tag(request.parent_text)
        children = []
        for k in range(request.n_children):
            z = float(rng.standard_normal())
            if request.target is not None:
                b_target = self.d_to_b(request.target / 10.0)
                b = parent_b + self.step * (b_target - parent_b) + self.noise * z
            else:
                b = parent_b + self.scatter * z
            tag = f"[SIMULATED latent_b={b:+.4f}]"
            children.append({
                "question": f"{base}\n{tag} (simulated variant {key[:8]}-{k})",
                "answer": request.parent_answer,
                "rationale": f"{SIM_LABEL}: latent difficulty {b:+.3f}",
            })
        return json.dumps({"children": children}, ensure_ascii=False)

    # ------------------------------------------------------------------------------------------- judges

    def _judge(self, model: str, key: str) -> str:
        valid = _u(self.seed, "judge", model, key) >= self.invalid_rate
        return json.dumps({
            "well_posed": valid, "answer_correct": valid,
            "reason": f"{SIM_LABEL} verdict ({'valid' if valid else 'marked invalid at random'})",
        })

    def _grade(self, request: GradeRequest) -> str:
        from benchfill.models.grading import normalize_short

        ok = normalize_short(request.item.answer) in normalize_short(request.response)
        return json.dumps({"label": "correct" if ok else "incorrect", "score": 1.0 if ok else 0.0,
                           "reason": f"{SIM_LABEL} grade"})


def unread_request(role: str, request: ModelRequest | None) -> str:
    """The offline worlds' reply to a call whose typed request they do not read (or that carries none): they never
    guess from a prompt's text what it asks."""
    given = f"a {type(request).__name__}, which it does not read" if request is not None else "no typed request"
    return (f"{SIM_LABEL}: this offline {role} model was given {given} (ModelClient.complete(..., request=...)); "
            "it reads what a call asks from its request, never from the prompt, and cannot answer.")


def render_answer(item: Item, correct: bool, u: float) -> str:
    """A simulated panel answer in the form the item's grader reads: the gold, or a plausible wrong answer."""
    from benchfill.models.grading import _gold_letters, parse_number
    from benchfill.models.prompts import LETTERS

    fmt = item.resolved_format
    gold = item.answer.strip()
    if fmt == "mcq":
        letters = _gold_letters(item) or {"A"}
        k = len(item.choices or []) or 4
        if correct:
            pick = sorted(letters)
        else:
            others = [c for c in LETTERS[:k] if c not in letters] or ["A"]
            pick = [others[int(u * len(others)) % len(others)]]
        return f"{SIM_LABEL} answer.\nAnswer: {', '.join(pick)}"
    if fmt in ("numeric", "math"):
        if correct:
            return f"{SIM_LABEL} answer. The final answer is $\\boxed{{{gold}}}$."
        delta = 1 + int(u * 5)
        number = parse_number(gold)
        if number is not None:
            # a step well outside the grader's relative tolerance (1e-4 |gold|), however large the gold
            value = number[0] + delta * max(1.0, round(abs(number[0]) * 0.01))
            wrong = str(int(value)) if float(value).is_integer() else repr(value)
        else:
            wrong = f"{gold}+{delta}"
        return f"{SIM_LABEL} answer. The final answer is $\\boxed{{{wrong}}}$."
    if fmt == "short":
        return f"{SIM_LABEL} answer.\nAnswer: {gold if correct else 'something else entirely'}"
    return f"{SIM_LABEL} answer: {gold if correct else 'I am not sure about this one.'}"


def is_simulated_model(model: str) -> bool:
    return model.startswith(SIM_PREFIX)
