"""Quotas: how many items of each kind a designer must write, and the slot plan every designer receives.

A quota file (YAML) gives target shares on four axes — super-category, format, difficulty level (L1-L5) and intent
(standard / adversarial) — and the suite size per designer. An axis written ``from_card`` (or left out) takes the
domain card's own distribution. Each axis is apportioned to whole items with the largest-remainder (Hamilton)
method, so every axis's marginal counts are exact; the axes are then combined into one list of item *slots*
(category, format, level, intent) by a seeded shuffle per axis, which keeps every marginal exact and makes the
joint close to the product of the marginals. Every designer gets the same slots.

Example (``examples/quotas.yaml``)::

    total: 60
    super_categories: from_card
    formats: {math: 0.5, numeric: 0.3, mcq: 0.2}
    difficulty: {L1: 0.2, L2: 0.2, L3: 0.2, L4: 0.2, L5: 0.2}
    intent: {standard: 0.8, adversarial: 0.2}
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from benchfill.errors import InputError, from_validation_error

AXES = ("category", "format", "difficulty", "intent")
LEVELS = ("L1", "L2", "L3", "L4", "L5")
INTENTS = ("standard", "adversarial")
#: BenchBench's question types in this project's grading routes: ``mcq`` = one keyed option (mcq_single);
#: ``mcq_multi`` = select all that apply (a set of keyed options, graded by set equality); ``structured`` = a JSON
#: list in a fixed order or an object of named fields (graded field by field); ``short`` = a term or phrase (cloze,
#: judgment "true"/"false"); ``open`` = free form (a rubric judge); ``numeric`` and ``math`` as for any item.
FORMATS = ("mcq", "mcq_multi", "numeric", "math", "short", "structured", "open")
FROM_CARD = "from_card"
#: BenchBench's defaults: difficulty levels 15/25/30/20/10 % and 75/25 standard/adversarial
DEFAULT_LEVELS = {"L1": 0.15, "L2": 0.25, "L3": 0.30, "L4": 0.20, "L5": 0.10}
DEFAULT_INTENT = {"standard": 0.75, "adversarial": 0.25}


def design_format(item: Any) -> str:
    """An item's format on the quota axis: ``mcq_multi`` for multiple choice keying more than one option, else its
    grading route (:attr:`benchfill.data.Item.resolved_format`)."""
    fmt = item.resolved_format
    if fmt == "mcq":
        from benchfill.models.grading import _gold_letters

        gold = _gold_letters(item)
        if gold is not None and len(gold) > 1:
            return "mcq_multi"
    return fmt


class QuotaSpec(BaseModel):
    """A quota file. Shares that do not sum to 1 are normalised (:func:`quota_warnings` says so); ``from_card``
    takes the card's distribution. Defaults: BenchBench's level mix (L1-L5 15/25/30/20/10 %) and 75/25
    standard/adversarial intent; categories and formats from the card."""

    model_config = ConfigDict(extra="forbid")

    total: int = Field(ge=1, le=100_000)
    super_categories: dict[str, float] | str = FROM_CARD
    formats: dict[str, float] | str = FROM_CARD
    difficulty: dict[str, float] | str = Field(default_factory=lambda: dict(DEFAULT_LEVELS))
    intent: dict[str, float] | str = Field(default_factory=lambda: dict(DEFAULT_INTENT))

    @field_validator("super_categories", "formats", "difficulty", "intent")
    @classmethod
    def _shares(cls, v: dict[str, float] | str) -> dict[str, float] | str:
        if isinstance(v, str):
            if v != FROM_CARD:
                raise ValueError(f"expected a mapping of shares or {FROM_CARD!r}")
            return v
        if not v:
            raise ValueError("no categories")
        for key, share in v.items():
            if not (isinstance(share, (int, float)) and math.isfinite(share) and share >= 0):
                raise ValueError(f"share of {key!r} must be a number >= 0")
        if sum(v.values()) <= 0:
            raise ValueError("shares sum to 0")
        return {str(k): float(s) for k, s in v.items()}


def load_quotas(path: str | Path) -> QuotaSpec:
    """Read a quota file (YAML or JSON); every problem -> one InputError."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(str(path), "quota file not found") from None
    except yaml.YAMLError as exc:
        raise InputError(str(path), f"invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise InputError(str(path), "a quota file is a mapping (total, super_categories, formats, difficulty, intent)")
    try:
        return QuotaSpec.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(str(path), exc) from None


def quota_warnings(spec: QuotaSpec, source: str = "<quotas>") -> list[str]:
    """One line per axis whose shares do not sum to 1 (they are normalised)."""
    out = []
    for name in ("super_categories", "formats", "difficulty", "intent"):
        v = getattr(spec, name)
        if isinstance(v, dict) and abs(sum(v.values()) - 1.0) > 1e-6:
            total = sum(v.values())
            shares = ", ".join(f"{k} {x / total:.3f}" for k, x in v.items())
            out.append(f"{source}: {name}: shares sum to {total:g}, not 1; normalised to {shares}")
    return out


# ----------------------------------------------------------------------------------------------- apportionment


def largest_remainder(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Apportion ``total`` whole items to categories in proportion to ``shares`` (Hamilton's method).

    Each category first gets floor(total * share / sum); the items left over go one each to the largest
    fractional remainders — ties to the larger share, then to the category listed first. The counts sum to
    ``total`` and each differs from its exact quota by less than one.
    """
    if total < 0:
        raise ValueError("total must be >= 0")
    weight = sum(shares.values())
    if weight <= 0:
        raise ValueError("shares sum to 0")
    names = list(shares)
    exact = [total * shares[n] / weight for n in names]
    # floor with a tolerance: 0.3 * 10 is 2.9999999999999996 in floating point, and must count as 3
    counts = [int(math.floor(q + 1e-9)) for q in exact]
    left = total - sum(counts)
    order = sorted(range(len(names)), key=lambda k: (-(exact[k] - counts[k]), -shares[names[k]], k))
    for k in order[:left]:
        counts[k] += 1
    return dict(zip(names, counts))


@dataclass(frozen=True)
class Slot:
    """One item a designer is asked to write (the same slot ids for every designer)."""

    slot: str
    category: str
    subdomain: str | None
    format: str
    difficulty: str
    intent: str

    def as_spec(self) -> dict[str, Any]:
        """The specification shown to the designer."""
        spec = {"slot": self.slot, "category": self.category, "format": self.format, "difficulty": self.difficulty,
                "intent": self.intent}
        if self.subdomain:
            spec["subdomain"] = self.subdomain
        return spec

    def value(self, axis: str) -> str:
        return str(getattr(self, axis))


@dataclass(frozen=True)
class Plan:
    """The quota plan: target shares and counts per axis, and the slots.

    Attributes:
        targets: {axis: {label: share}} (shares normalised to 1).
        counts: {axis: {label: items}} (largest-remainder apportionment of ``total``).
        slots: the ``total`` slots, sorted by (category, format, difficulty, intent) so a batch is coherent.
    """

    total: int
    targets: dict[str, dict[str, float]]
    counts: dict[str, dict[str, int]]
    slots: list[Slot]

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "targets": self.targets, "counts": self.counts,
                "slots": [asdict(s) for s in self.slots]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Plan":
        return cls(int(data["total"]), {k: dict(v) for k, v in data["targets"].items()},
                   {k: dict(v) for k, v in data["counts"].items()}, [Slot(**s) for s in data["slots"]])


def _normalise(shares: Mapping[str, float]) -> dict[str, float]:
    total = sum(shares.values())
    return {k: v / total for k, v in shares.items() if v > 0}


def axis_targets(spec: QuotaSpec, card: Any) -> dict[str, dict[str, float]]:
    """Target shares per axis: the quota file's, or the card's distribution where it says ``from_card``."""
    def from_card(axis: str) -> dict[str, float]:
        if axis == "category":
            return {node.name: float(node.count) for node in card.ontology}
        if axis == "format":
            return {k: float(v) for k, v in card.formats.items()} or {"open": 1.0}
        if axis == "difficulty":
            return {k: float(v) for k, v in card.difficulty_levels.items()} or {level: 1.0 for level in LEVELS}
        raise ValueError(axis)

    raw = {"category": spec.super_categories, "format": spec.formats, "difficulty": spec.difficulty,
           "intent": spec.intent}
    out: dict[str, dict[str, float]] = {}
    for axis, value in raw.items():
        shares = from_card(axis) if value == FROM_CARD else dict(value)  # type: ignore[arg-type]
        if axis == "category" and value != FROM_CARD and getattr(card, "ontology", None):
            known = [node.name for node in card.ontology]
            bad = [k for k in shares if k not in known]
            if bad:
                import difflib

                close = difflib.get_close_matches(bad[0], known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise InputError("<quotas>", f"super_categories: unknown category {bad[0]!r}{hint} (the card's "
                                             f"categories: {', '.join(known)})")
        if axis == "format":
            bad = [k for k in shares if k not in FORMATS]
            if bad:
                raise InputError("<quotas>", f"formats: unknown format {bad[0]!r} (known: {', '.join(FORMATS)})")
        if axis == "difficulty":
            bad = [k for k in shares if k not in LEVELS]
            if bad:
                raise InputError("<quotas>", f"difficulty: unknown level {bad[0]!r} (levels are L1-L5)")
        if axis == "intent":
            bad = [k for k in shares if k not in INTENTS]
            if bad:
                raise InputError("<quotas>", f"intent: unknown intent {bad[0]!r} (standard, adversarial)")
        out[axis] = _normalise(shares)
    return out


def _subdomain_cycle(card: Any, category: str, n: int) -> list[str | None]:
    """Sub-domains for the ``n`` slots of a category, apportioned by the card's sub-domain counts."""
    node = next((c for c in card.ontology if c.name == category), None) if card is not None else None
    if node is None or not node.subdomains:
        return [None] * n
    counts = largest_remainder(n, {s.name: float(s.count) for s in node.subdomains})
    return [name for name, k in counts.items() for _ in range(k)]


def make_plan(targets: Mapping[str, Mapping[str, float]], total: int, *, seed: int = 0, card: Any = None) -> Plan:
    """The slot plan: exact largest-remainder counts per axis, combined by a seeded shuffle per axis.

    Args:
        targets: {axis: {label: share}} for the four ``AXES``.
        total: items per designer.
        seed: the shuffle seed (a plan is a pure function of its inputs).
        card: the domain card, to spread a category's slots over its sub-domains (optional).
    """
    counts = {axis: largest_remainder(total, targets[axis]) for axis in AXES}
    rng = np.random.default_rng(seed)
    columns: dict[str, list[str]] = {}
    for axis in AXES:
        labels = [label for label, k in counts[axis].items() for _ in range(k)]
        if axis != "category":
            rng.shuffle(labels)  # the category column stays in order; the others are shuffled against it
        columns[axis] = labels
    rows = sorted(zip(*(columns[a] for a in AXES)), key=lambda r: (r[0], r[1], r[2], r[3]))
    subdomains: dict[str, list[str | None]] = {}
    for cat in counts["category"]:
        subs = _subdomain_cycle(card, cat, counts["category"][cat])
        order: Sequence[int] = rng.permutation(len(subs)).tolist() if subs else []
        subdomains[cat] = [subs[k] for k in order]
    used: dict[str, int] = {}
    slots = []
    width = max(4, len(str(total)))
    for n, (cat, fmt, level, intent) in enumerate(rows, start=1):
        k = used.get(cat, 0)
        used[cat] = k + 1
        sub = subdomains[cat][k] if k < len(subdomains[cat]) else None
        slots.append(Slot(f"s{n:0{width}d}", cat, sub, fmt, level, intent))
    return Plan(total, {a: dict(targets[a]) for a in AXES}, counts, slots)


def batches(slots: Sequence[Slot], size: int) -> list[list[Slot]]:
    """Consecutive chunks of at most ``size`` slots (slots are sorted, so a batch shares its category)."""
    return [list(slots[i: i + size]) for i in range(0, len(slots), size)]


def deficits(slots: Sequence[Slot], filled: set[str]) -> list[Slot]:
    """The slots that still lack a usable item (to re-request in a top-up round), in plan order."""
    return [s for s in slots if s.slot not in filled]
