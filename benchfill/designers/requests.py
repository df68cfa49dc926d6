"""The designers' typed requests (:mod:`benchfill.models.requests`): what a designer, the item judge and the card
model are asked, as data, and their wording (``messages``: the designer prompt templates). The simulated designers
(:mod:`benchfill.designers.sim`) read the requests, never the prompts' text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from benchfill.data import Item
from benchfill.designers.quotas import Slot
from benchfill.models.prompts import LETTERS, PromptLibrary, default_library, format_choices
from benchfill.models.requests import ModelRequest


@dataclass(frozen=True)
class DesignRequest(ModelRequest):
    """A designer's call: write one item per slot of ``slots``, in order, for the benchmark of ``card_text``.

    Attributes:
        card_text: the domain card as the designer is shown it.
        slots: the specifications to write items for (category, sub-domain, format, level, intent).
        n_options: how many options a multiple-choice item has.
        language: the benchmark's language.
        round_no: 0 for the first request of a slot, k for its k-th top-up round.
    """

    card_text: str
    slots: tuple[Slot, ...]
    n_options: int
    language: str
    round_no: int = 0

    def __post_init__(self) -> None:
        if not self.slots:
            raise ValueError("a design request asks for at least one slot")

    @property
    def specs(self) -> list[dict[str, Any]]:
        """The specifications as the designer is shown them, in order."""
        return [slot.as_spec() for slot in self.slots]

    def messages(self, library: PromptLibrary | None = None) -> list[dict[str, str]]:
        """The designer's messages for one batch of slots (prompts/designer_generate.txt)."""
        note = "" if self.round_no == 0 else (
            f"\nThis is top-up round {self.round_no}: earlier items for these specifications were missing, "
            "malformed or duplicates of other items. Write new, different items.\n")
        return (library or default_library()).messages(
            "designer_generate", card=self.card_text, n_items=len(self.slots),
            specs=json.dumps(self.specs, ensure_ascii=False, indent=1), n_options=self.n_options,
            letters=", ".join(LETTERS[: self.n_options]), language=self.language, round_note=note,
        )


@dataclass(frozen=True)
class ItemJudgeRequest(ModelRequest):
    """The item judge's call: audit ``item``, sent for review for ``flags``; ``panel_answers`` is how the panel
    answered it, as the judge is told (:func:`benchfill.designers.validate.panel_summary`)."""

    item: Item
    flags: tuple[str, ...] = ()
    panel_answers: str = "(no answers)"

    def messages(self, library: PromptLibrary | None = None) -> list[dict[str, str]]:
        """The item judge's messages (prompts/designer_item_judge.txt)."""
        item = self.item
        options = f"<options>\n{format_choices(item.choices)}\n</options>" if item.choices else ""
        return (library or default_library()).messages(
            "designer_item_judge", question=item.question.strip(), options=options, reference_answer=item.answer,
            flags=", ".join(self.flags) or "none", panel_answers=self.panel_answers)


@dataclass(frozen=True)
class CardEntry:
    """One seed item the card model labels: its id, its question (as shown) and the label it already has, if any."""

    id: str
    question: str
    existing_label: str | None = None

    def as_row(self) -> dict[str, str]:
        """The entry as the card prompt lists it."""
        return {"id": self.id, "question": self.question,
                **({"existing_label": self.existing_label} if self.existing_label else {})}


@dataclass(frozen=True)
class CardRequest(ModelRequest):
    """The card model's call: label each of ``entries`` with a category, a sub-domain and its terms."""

    entries: tuple[CardEntry, ...]

    @classmethod
    def build(cls, items: Sequence[Item], hints: Mapping[str, str] | None = None) -> "CardRequest":
        """The request to label ``items`` (each question cut to 600 characters; ``hints``: an existing label by
        item id)."""
        return cls(tuple(CardEntry(it.id, it.question.strip()[:600], (hints or {}).get(it.id) or None)
                         for it in items))

    def messages(self, library: PromptLibrary | None = None) -> list[dict[str, str]]:
        """The card model's messages (prompts/designer_card.txt)."""
        rows = [entry.as_row() for entry in self.entries]
        return (library or default_library()).messages(
            "designer_card", items=json.dumps(rows, ensure_ascii=False, indent=1), n_items=len(rows))
