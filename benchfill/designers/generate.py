"""Quota-controlled generation (Stage 2): every designer writes one item per slot of the plan, in batches, with
top-up rounds for slots left without a usable item, and duplicate stems dropped.

Each requested slot of each round yields exactly one :class:`DesignedItem` record, so nothing a designer does is
lost from the denominator of its broken rate:

- ``ok``: parsed, passes the static checks, not a duplicate -> the slot is filled;
- ``broken``: the reply was not usable JSON (after the bounded re-asks), the slot got no item, or the item fails a
  static check (missing field, broken options, gold not among the options...) -> the slot is re-requested;
- ``duplicate``: same normalised stem (or a near duplicate) as an earlier item of this designer or a card example
  -> dropped, the slot is re-requested;
- ``failed``: the call itself failed after retries (rate limits, network): not the designer's doing, excluded from
  its metrics; a rerun retries it (failures are never cached).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import unicodedata
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping, Sequence, cast

from pydantic import BaseModel, Field

from benchfill.data import Item, ItemFormat, infer_format
from benchfill.designers.quotas import FORMATS, INTENTS, Plan, Slot, batches, deficits
from benchfill.designers.requests import DesignRequest
from benchfill.designers.validate import static_problems

if TYPE_CHECKING:  # pragma: no cover
    from benchfill.designers.card import DomainCard
    from benchfill.models.client import CallResult, ModelClient
    from benchfill.models.config import ModelConfig
    from benchfill.models.prompts import PromptLibrary

Status = Literal["ok", "broken", "duplicate", "failed"]
_KNOWN = {"slot", "category", "subdomain", "format", "difficulty", "intent", "question", "problem", "choices",
          "options", "answer", "rationale"}


class DesignedItem(BaseModel):
    """One record of a designer's suite (one per requested slot and round).

    Attributes:
        spec: what was asked (category, subdomain, format, difficulty, intent).
        declared: what the designer says it wrote ("unknown" where it did not say); spec alignment uses these,
            except ``format``, which is read from the item itself (options -> mcq).
        format: the item's format on the quota axis, read from the item itself: ``mcq`` / ``mcq_multi`` when it has
            options (``mcq_multi`` when declared so or when the gold keys several options), else the declared
            format (else inferred from the answer). ``mcq_multi`` items are graded as multiple choice (set
            equality); ``structured`` answers are stored as JSON text.
        metadata: every other field of the designer's JSON (a simulated designer's ground truth is under "sim").
        position: where the item stood in the designer's reply (0 = the first item it wrote in that reply);
            ``reply_size``: how many items that reply held. None for slots the reply left without an item.
            Generation-order degradation (does quality fall the later an item is written?) reads these.
    """

    id: str
    designer: str
    slot: str
    round: int
    spec: dict[str, str | None]
    declared: dict[str, str] = Field(default_factory=dict)
    question: str = ""
    answer: str = ""
    choices: list[str] | None = None
    format: str | None = None
    rationale: str = ""
    status: Status = "ok"
    problems: list[str] = Field(default_factory=list)
    duplicate_of: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    position: int | None = None
    reply_size: int | None = None

    @property
    def relative_position(self) -> float | None:
        """``position`` scaled to [0, 1] over its reply (0 = first written, 1 = last); None for a one-item reply."""
        if self.position is None or self.reply_size is None or self.reply_size < 2:
            return None
        return self.position / (self.reply_size - 1)

    @property
    def usable(self) -> bool:
        return self.status == "ok"

    def to_item(self) -> Item:
        """The record as a benchmark item (for answering and grading)."""
        # mcq_multi is graded as mcq, so every value left is one of data.ItemFormat
        fmt = cast("ItemFormat | None", "mcq" if self.format == "mcq_multi" else
                   self.format if self.format in FORMATS else None)
        return Item(id=self.id, question=self.question, answer=self.answer or "?", choices=self.choices or None,
                    format=fmt, metadata={**self.metadata, "designer": self.designer, "slot": self.slot})


# ----------------------------------------------------------------------------------------------- stems


def normalise_stem(text: str) -> str:
    """Unicode NFKC, lower case, every run of non-alphanumerics one space: "What is 2+3?" -> "what is 2 3"."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.sub(r"[\W_]+", " ", text).split())


def shingles(norm: str, n: int = 5) -> set[str]:
    """Character ``n``-grams of a normalised stem (the whole stem when shorter)."""
    if len(norm) <= n:
        return {norm}
    return {norm[i: i + n] for i in range(len(norm) - n + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def _order(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "big")


class StemIndex:
    """Exact and near-duplicate lookup of stems (character 5-gram Jaccard >= ``threshold``).

    Near duplicates are found with prefix filtering: under one fixed total order of shingles, two sets with
    Jaccard >= t must share one of the first |A| - ceil(t |A|) + 1 shingles of each, so only those prefixes are
    indexed and probed, and every candidate is verified exactly. Cost stays near linear in the number of stems.
    """

    def __init__(self, threshold: float = 0.9) -> None:
        self.threshold = threshold
        self._exact: dict[str, str] = {}
        self._sets: dict[str, set[str]] = {}
        self._postings: dict[str, list[str]] = {}

    def _prefix(self, sh: set[str]) -> list[str]:
        import math

        keep = len(sh) - math.ceil(self.threshold * len(sh) - 1e-9) + 1
        return sorted(sh, key=_order)[: max(1, keep)]

    def find(self, text: str) -> tuple[str, str] | None:
        """(id of the earlier stem, "exact" | "near") when ``text`` duplicates one, else None."""
        norm = normalise_stem(text)
        if norm in self._exact:
            return self._exact[norm], "exact"
        sh = shingles(norm)
        seen: set[str] = set()
        for g in self._prefix(sh):
            for other in self._postings.get(g, ()):
                if other in seen:
                    continue
                seen.add(other)
                if jaccard(sh, self._sets[other]) >= self.threshold:
                    return other, "near"
        return None

    def add(self, key: str, text: str) -> None:
        norm = normalise_stem(text)
        self._exact.setdefault(norm, key)
        sh = shingles(norm)
        self._sets[key] = sh
        for g in self._prefix(sh):
            self._postings.setdefault(g, []).append(key)


# ----------------------------------------------------------------------------------------------- replies


def reply_items(obj: Any) -> list[Any]:
    """The list of items in a designer reply (``{"items": [...]}`` or a bare list); anything else is malformed
    and re-asked. Individual items are not checked here: a bad item is recorded as broken, not re-asked."""
    if isinstance(obj, dict):
        for key in ("items", "questions", "suite"):
            if isinstance(obj.get(key), list):
                return obj[key]
        raise ValueError('expected a JSON object with an "items" list')
    if isinstance(obj, list):
        return obj
    raise ValueError('expected a JSON object with an "items" list')


# ----------------------------------------------------------------------------------------------- parsing


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):  # ["A"] or ["A", "C"]
        return ", ".join(str(v).strip() for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _level(value: Any) -> str:
    text = _text(value).upper().replace("LEVEL", "").strip()
    m = re.fullmatch(r"L?\s*([1-5])", text)
    return f"L{m.group(1)}" if m else "unknown"


def _choices(value: Any) -> tuple[list[str] | None, str | None]:
    """Options as a list of strings; a {"A": ..., "B": ...} mapping is read in key order."""
    if value is None or value == [] or value == {}:
        return None, None
    if isinstance(value, dict):
        value = [value[k] for k in sorted(value, key=str)]
    if not isinstance(value, list):
        return None, "options are not a list"
    return [_text(v) for v in value], None


def _category(value: Any, card: "DomainCard | None") -> str:
    raw = _text(value)
    if not raw:
        return "unknown"
    if card is not None:
        from benchfill.designers.card import canonical_name

        key = canonical_name(raw)
        for node in card.ontology:
            if canonical_name(node.name) == key:
                return node.name
    return raw


def parse_element(el: Any, slot: Slot, *, designer: str, round_no: int, n_options: int,
                  card: "DomainCard | None" = None) -> DesignedItem:
    """One element of a designer reply -> a record with its static problems (never raises)."""
    rid = record_id(designer, slot.slot, round_no)
    base: dict[str, Any] = dict(id=rid, designer=designer, slot=slot.slot, round=round_no, spec=slot.as_spec())
    if not isinstance(el, dict):
        return DesignedItem(**base, status="broken", problems=["item is not a JSON object"])
    question = _text(el.get("question", el.get("problem")))
    raw_answer = el.get("answer")
    choices, choice_problem = _choices(el.get("choices", el.get("options")))
    declared_fmt = _text(el.get("format")).lower()
    if isinstance(raw_answer, dict) or (isinstance(raw_answer, list) and not choices and declared_fmt == "structured"):
        answer = json.dumps(raw_answer, ensure_ascii=False) if raw_answer else ""
    else:
        answer = _text(raw_answer)
    fmt: str | None
    if choices:
        fmt = "mcq_multi" if declared_fmt == "mcq_multi" or _n_keyed(answer, choices) > 1 else "mcq"
    elif declared_fmt in FORMATS:
        fmt = declared_fmt
    else:
        fmt = infer_format(answer, None) if answer else None
    intent = _text(el.get("intent")).lower()
    declared = {
        "category": _category(el.get("category"), card),
        "subdomain": _text(el.get("subdomain")) or "unknown",
        "format": fmt or "unknown",
        "difficulty": _level(el.get("difficulty")),
        "intent": intent if intent in INTENTS else "unknown",
    }
    extra = {k: v for k, v in el.items() if k not in _KNOWN}
    rec = DesignedItem(**base, declared=declared, question=question, answer=answer, choices=choices, format=fmt,
                       rationale=_text(el.get("rationale"))[:1000], metadata=extra)
    problems = ([choice_problem] if choice_problem else []) + static_problems(rec, n_options, declared_fmt)
    if problems:
        rec.status, rec.problems = "broken", problems
    return rec


def _n_keyed(answer: str, choices: list[str]) -> int:
    """How many options a multiple-choice gold keys (0 when it keys none)."""
    from benchfill.models.grading import _gold_letters

    if not answer.strip() or len(choices) < 2:
        return 0
    gold = _gold_letters(Item(id="_", question="_", answer=answer, choices=choices, format="mcq"))
    return len(gold) if gold else 0


def record_id(designer: str, slot: str, round_no: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", designer).strip("_") or "designer"
    return f"{safe}-{slot}-r{round_no}"


def parse_reply(result: "CallResult", slots: Sequence[Slot], *, designer: str, round_no: int, n_options: int,
                card: "DomainCard | None" = None) -> tuple[list[DesignedItem], int]:
    """Match a reply's items to the batch's slots: by ``slot`` id where it names an open slot of the batch, else in
    order. Returns (one record per slot, number of extra items ignored). Never raises."""
    def placeholder(slot: Slot, status: Status, problem: str) -> DesignedItem:
        return DesignedItem(id=record_id(designer, slot.slot, round_no), designer=designer, slot=slot.slot,
                            round=round_no, spec=slot.as_spec(), status=status, problems=[problem])

    if not result.ok or result.parsed is None:
        error = result.error or "no reply"
        if error.startswith("malformed output"):
            return [placeholder(s, "broken", f"designer reply unusable: {error}") for s in slots], 0
        return [placeholder(s, "failed", f"call failed: {error}") for s in slots], 0
    elements = list(result.parsed)
    by_slot: dict[str, tuple[int, Any]] = {}
    rest: list[tuple[int, Any]] = []
    open_ids = {s.slot for s in slots}
    for pos, el in enumerate(elements):
        sid = _text(el.get("slot")) if isinstance(el, dict) else ""
        if sid in open_ids and sid not in by_slot:
            by_slot[sid] = (pos, el)
        else:
            rest.append((pos, el))
    records = []
    for slot in slots:
        if slot.slot not in by_slot and rest:
            by_slot[slot.slot] = rest.pop(0)
        if slot.slot in by_slot:
            pos, el = by_slot[slot.slot]
            rec = parse_element(el, slot, designer=designer, round_no=round_no, n_options=n_options, card=card)
            rec.position, rec.reply_size = pos, len(elements)
            records.append(rec)
        else:
            records.append(placeholder(slot, "broken", "designer returned no item for this slot"))
    return records, len(rest)


# ----------------------------------------------------------------------------------------------- the loop


async def generate_suite(
    designer: "ModelConfig", plan: Plan, card: "DomainCard", client: "ModelClient", *, batch_size: int = 10,
    max_topup_rounds: int = 2, n_options: int = 4, near_duplicate: float = 0.9, max_reasks: int = 2,
    library: "PromptLibrary | None" = None, references: Iterable[tuple[str, str]] = (),
) -> tuple[list[DesignedItem], dict[str, Any]]:
    """One designer's suite: round 0 asks for every slot, each top-up round for the slots still unfilled.

    Args:
        references: (id, stem) pairs a new item must not duplicate (the card's examples).
    Returns:
        (records in round / plan order, stats {rounds, requests, extra_items, tokens_out, cost, unfilled}).
    """
    from benchfill.designers.card import card_prompt_text

    card_text = card_prompt_text(card)
    index = StemIndex(near_duplicate)
    for rid, stem in references:
        index.add(f"card:{rid}", stem)
    records: list[DesignedItem] = []
    filled: set[str] = set()
    stats: dict[str, Any] = {"rounds": 0, "requests": 0, "extra_items": 0, "tokens_out": 0, "cost": 0.0}
    for round_no in range(max_topup_rounds + 1):
        todo = deficits(plan.slots, filled)
        if not todo:
            break
        stats["rounds"] = round_no + 1
        chunks = batches(todo, batch_size)

        async def ask(chunk: list[Slot], rnd: int = round_no) -> "CallResult":
            request = DesignRequest(card_text, tuple(chunk), n_options, card.language, rnd)
            return await client.complete_json(designer, request.messages(library), reply_items, role="designer",
                                              max_reasks=max_reasks, request=request)

        results = await asyncio.gather(*(ask(c) for c in chunks))
        stats["requests"] += len(chunks)
        for chunk, res in zip(chunks, results):  # in plan order, whatever order the calls finished in
            # what the final reply of each request cost when it was made (a cache hit reports its original cost);
            # replies that were re-asked are not included
            stats["tokens_out"] += res.tokens_out
            stats["cost"] = round(stats["cost"] + (res.cost or 0.0), 6)
            recs, extra = parse_reply(res, chunk, designer=designer.label, round_no=round_no, n_options=n_options,
                                      card=card)
            stats["extra_items"] += extra
            for rec in recs:
                if rec.status == "ok":
                    hit = index.find(rec.question)
                    if hit is not None:
                        rec.status = "duplicate"
                        rec.duplicate_of = hit[0]
                        rec.problems = [f"{hit[1]} duplicate of {hit[0]}"]
                    else:
                        index.add(rec.id, rec.question)
                        filled.add(rec.slot)
                records.append(rec)
    stats["unfilled"] = len(deficits(plan.slots, filled))
    return records, stats


def suite_counts(records: Sequence[DesignedItem]) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for r in records:
        out[r.status] = out.get(r.status, 0) + 1
    return out


__all__ = ["DesignedItem", "StemIndex", "generate_suite", "normalise_stem", "parse_element",
           "parse_reply", "record_id", "reply_items", "shingles", "jaccard", "suite_counts"]
