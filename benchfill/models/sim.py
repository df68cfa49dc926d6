"""The offline simulated world: ``sim/<name>`` model strings answer like an IRT panel. Everything it writes says
SIMULATED.

benchfill/models/README.md: tests, the demo and search-efficiency benchmarks need LLM stand-ins, and no PyPI package ships a
small generative model. A :class:`SimWorld` holds an ability theta per simulated model and a latent difficulty b
per item, and plays every role through the same :class:`~benchfill.models.client.ModelClient` path as a real
model, so the real prompts, cache, grading and IRT code all run:

- panel: answers correctly with probability ``c + (1 - c) sigmoid(theta - b)`` (c = 1/k for k-option multiple
  choice, else 0) — the gold answer in a gradable form (``\\boxed{gold}``, ``Answer: C``) or a plausible wrong one;
- rewriter: reads the target difficulty (0-10) and the parent from the real rewrite prompt and returns the JSON it
  asks for; each child's latent b moves from the parent's toward the target, ``b + step (b_target - b) + noise z``;
  without a target (the budget-matched baseline prompt) children scatter around the parent, ``b + scatter z``;
- judge: a validity verdict, invalid for a configurable share of children;
- grader: a rubric verdict for open answers (correct when the gold text appears in the response).

A child's latent difficulty travels in its text as ``[SIMULATED latent_b=+0.4312]``, so a resumed run — whose
rewriter replies come from the cache, not from this object — still knows it. All randomness is a pure function of
(seed, model, the call's cache key), so a rerun or a resume gives identical answers.

Build it from a fitted scale with :meth:`SimWorld.from_abilities` (theta by model name, b by item id), or from a
config's ``[sim]`` section with :meth:`SimWorld.from_config`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from benchfill.data import Item, text_key

SIM_LABEL = "SIMULATED"
SIM_PREFIX = "sim/"
_TAG = re.compile(r"\[SIMULATED latent_b=([+-]?\d+(?:\.\d+)?)\]")
_TARGET = re.compile(r"Target difficulty:\s*([0-9]+(?:\.[0-9]+)?)\s*/\s*10")
_BLOCK = {name: re.compile(rf"<{name}>\n?(.*?)\n?</{name}>", re.DOTALL)
          for name in ("parent", "question", "reference_answer", "response")}
_CHILDREN = re.compile(r"exactly (\d+) entries")


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


@dataclass(frozen=True)
class _Known:
    item: Item
    b: float


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
        self._by_text: dict[str, _Known] = {}

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

    def register_items(self, items: Iterable[Item]) -> None:
        """Make items findable from prompt text (for calls made without ``item=``)."""
        for item in items:
            self._by_text[text_key(item.question)] = _Known(item, self.latent_b(item))

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

    def respond(self, model: str, messages: Sequence[Mapping[str, Any]], *, key: str, role: str,
                item: Item | None = None) -> str:
        """The simulated reply to one call (deterministic in seed, model and ``key``)."""
        prompt = str(messages[-1].get("content", "")) if messages else ""
        kind = role
        if kind not in ("panel", "rewriter", "judge", "grader"):
            kind = self._guess_kind(prompt)
        if kind == "rewriter":
            return self._rewrite(model, prompt, key)
        if kind == "judge":
            return self._judge(model, prompt, key)
        if kind == "grader":
            return self._grade(prompt)
        return self._answer(model, prompt, key, item)

    @staticmethod
    def _guess_kind(prompt: str) -> str:
        if "<parent>" in prompt:
            return "rewriter"
        if "<reference_answer>" in prompt and "<response>" in prompt:
            return "grader"
        if "<reference_answer>" in prompt:
            return "judge"
        return "panel"

    def _find_item(self, prompt: str) -> Item | None:
        flat = " ".join(prompt.split())
        for known in self._by_text.values():
            if " ".join(known.item.question.split()) in flat:
                return known.item
        return None

    # ------------------------------------------------------------------------------------------- panel

    def _answer(self, model: str, prompt: str, key: str, item: Item | None) -> str:
        item = item or self._find_item(prompt)
        if item is None:
            return f"{SIM_LABEL}: this simulated model was not told the item (pass item=) and cannot answer."
        if self.format_failure_rate and _u(self.seed, "fmt", model, key) < self.format_failure_rate:
            return f"{SIM_LABEL}: the simulated model rambles and gives no final answer."
        correct = _u(self.seed, "panel", model, key) < self.p_correct(model, item)
        return render_answer(item, correct, _u(self.seed, "wrong", model, key))

    # ------------------------------------------------------------------------------------------- rewriter

    def _rewrite(self, model: str, prompt: str, key: str) -> str:
        block = _BLOCK["parent"].search(prompt)
        parent_text = block.group(1).strip() if block else prompt
        parent_b = latent_from_text(parent_text)
        parent_answer = ""
        m = re.search(r"Reference answer of the parent:\s*(.*)", prompt)
        if m:
            parent_answer = m.group(1).strip()
        if parent_b is None:
            known = self._by_text.get(text_key(parent_text.split("\n\nOptions:\n")[0]))
            parent_b = known.b if known else float(_rng(self.seed, "b", text_key(parent_text)).standard_normal())
        target = _TARGET.search(prompt)
        asked = _CHILDREN.search(prompt)
        n = int(asked.group(1)) if asked else 4
        rng = _rng(self.seed, "rewrite", model, key)
        children = []
        base = strip_tag(parent_text)
        for k in range(n):
            z = float(rng.standard_normal())
            if target is not None:
                b_target = self.d_to_b(float(target.group(1)) / 10.0)
                b = parent_b + self.step * (b_target - parent_b) + self.noise * z
            else:
                b = parent_b + self.scatter * z
            tag = f"[SIMULATED latent_b={b:+.4f}]"
            children.append({
                "question": f"{base}\n{tag} (simulated variant {key[:8]}-{k})",
                "answer": parent_answer,
                "rationale": f"{SIM_LABEL}: latent difficulty {b:+.3f}",
            })
        return json.dumps({"children": children}, ensure_ascii=False)

    # ------------------------------------------------------------------------------------------- judges

    def _judge(self, model: str, prompt: str, key: str) -> str:
        valid = _u(self.seed, "judge", model, key) >= self.invalid_rate
        return json.dumps({
            "well_posed": valid, "answer_correct": valid,
            "reason": f"{SIM_LABEL} verdict ({'valid' if valid else 'marked invalid at random'})",
        })

    def _grade(self, prompt: str) -> str:
        ref = _BLOCK["reference_answer"].search(prompt)
        resp = _BLOCK["response"].search(prompt)
        from benchfill.models.grading import normalize_short

        ok = bool(ref and resp and normalize_short(ref.group(1)) in normalize_short(resp.group(1)))
        return json.dumps({"label": "correct" if ok else "incorrect", "score": 1.0 if ok else 0.0,
                           "reason": f"{SIM_LABEL} grade"})


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
