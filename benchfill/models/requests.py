"""Typed model requests: what one model call asks, as data (benchfill/models/README.md, "Typed requests").

A prompt is the wording of a request, a template that a user may override (:mod:`benchfill.models.prompts`); the
request is what the call asks: the item to answer, the parent to rewrite and the difficulty to aim at, the item to
judge. Whoever makes a call builds its request, renders the messages from it (:meth:`ModelRequest.messages`, in the
run's prompt library) and passes both to :meth:`~benchfill.models.client.ModelClient.complete` (``request=``).
The real backends (litellm, vLLM) send the messages and never look at the request; the offline worlds (simulated,
replay) read the request's fields, never the prompt's text, so a reworded template changes what a real model reads
but nothing an offline one does. The cache key hashes the messages, as before.

The designers' own requests (a batch of item specifications, an item to audit, seed items to label) subclass
:class:`ModelRequest` in :mod:`benchfill.designers.requests`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterable

from benchfill.data import Item
from benchfill.models.prompts import (
    MAX_REFERENCES,
    PromptLibrary,
    answer_messages,
    grade_judge_messages,
    rewrite_messages,
    shown_question,
    validity_messages,
)

DISPLAY_DECIMALS = 1  # the rewrite prompt tells a difficulty with one decimal on its 0-10 scale


def told(difficulty: float) -> float:
    """A difficulty on the 0-10 scale as the rewrite prompt tells it (:data:`DISPLAY_DECIMALS` decimals)."""
    return float(f"{difficulty:.{DISPLAY_DECIMALS}f}")


@dataclass(frozen=True)
class ModelRequest(ABC):
    """The base of every typed request: the type is the role's question, the fields are what it asks."""

    @abstractmethod
    def messages(self, library: PromptLibrary | None = None) -> list[dict[str, str]]:
        """The chat messages that put this request to a model, in ``library``'s wording (default: the built-in
        templates)."""


@dataclass(frozen=True)
class AnswerRequest(ModelRequest):
    """A panel model's call: answer ``item`` (its question, and its options for multiple choice)."""

    item: Item

    def messages(self, library: PromptLibrary | None = None) -> list[dict[str, str]]:
        return answer_messages(self.item, library)


@dataclass(frozen=True)
class Reference:
    """A benchmark item shown to the rewriter as a calibration point: its text and its difficulty (0-10, as told)."""

    text: str
    difficulty: float


@dataclass(frozen=True)
class RewriteRequest(ModelRequest):
    """The BenchFill rewriter's call: write ``n_children`` new items derived from ``parent``.

    Attributes:
        parent: the item rewritten.
        target: the difficulty to aim at on the 0-10 scale, as the rewriter is told it (:func:`told`); None for the
            budget-matched baseline, which is told no difficulty at all.
        parent_difficulty: the parent's difficulty on the 0-10 scale as told; None when it is not told.
        references: the reference items shown, nearest the target first (at most ``MAX_REFERENCES``).
        n_children: how many children the rewriter is asked for.

    Build one with :meth:`build`, which rounds the difficulties as the prompt tells them.
    """

    parent: Item
    target: float | None
    parent_difficulty: float | None = None
    references: tuple[Reference, ...] = ()
    n_children: int = 4

    def __post_init__(self) -> None:
        if self.n_children < 1:
            raise ValueError(f"a rewrite asks for at least one child, not {self.n_children}")
        if len(self.references) > MAX_REFERENCES:
            raise ValueError(f"a rewrite shows at most {MAX_REFERENCES} references, not {len(self.references)}")
        for name in ("target", "parent_difficulty"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite difficulty on the 0-10 scale, not {value}")

    @classmethod
    def build(cls, parent: Item, *, target: float | None, parent_difficulty: float | None = None,
              references: Iterable[tuple[str, float]] = (), n_children: int = 4) -> "RewriteRequest":
        """The request that tells the rewriter ``target`` and ``parent_difficulty`` (0-10) and the first
        ``MAX_REFERENCES`` of ``references`` ((text, difficulty) pairs), rounded as the prompt shows them;
        ``target=None``: the baseline's request, which tells no difficulty and shows no reference."""
        if target is None:
            return cls(parent, None, n_children=n_children)
        shown = tuple(Reference(text.strip(), told(d)) for text, d in list(references)[:MAX_REFERENCES])
        return cls(parent, told(target), told(parent_difficulty) if parent_difficulty is not None else None, shown,
                   n_children)

    @property
    def blind(self) -> bool:
        """The budget-matched baseline's request: no target, no difficulty feedback."""
        return self.target is None

    @property
    def parent_text(self) -> str:
        """The parent as the rewriter is shown it: its question, then its options for multiple choice."""
        return shown_question(self.parent)

    @property
    def parent_answer(self) -> str:
        """The parent's reference answer, as the rewriter is shown it."""
        return self.parent.answer.strip()

    def messages(self, library: PromptLibrary | None = None) -> list[dict[str, str]]:
        return rewrite_messages(self.parent, target=self.target, parent_difficulty=self.parent_difficulty,
                                references=[(r.text, r.difficulty) for r in self.references],
                                n_children=self.n_children, library=library)


@dataclass(frozen=True)
class ValidityRequest(ModelRequest):
    """The validity judge's call: is ``question`` well posed, and is ``reference_answer`` its correct answer?"""

    question: str
    reference_answer: str

    def messages(self, library: PromptLibrary | None = None) -> list[dict[str, str]]:
        return validity_messages(self.question, self.reference_answer, library)


@dataclass(frozen=True)
class GradeRequest(ModelRequest):
    """The grading judge's call: does ``response`` (its final answer) agree with ``item``'s reference answer?

    Attributes:
        item: the item answered (its question, options and reference answer).
        response: the answer graded (the final answer, reasoning removed).
        rubric: how to judge; None: the item's own (``metadata['rubric']``), else the default rubric.
    """

    item: Item
    response: str
    rubric: str | None = None

    def messages(self, library: PromptLibrary | None = None) -> list[dict[str, str]]:
        return grade_judge_messages(self.item, self.response, self.rubric, library)
