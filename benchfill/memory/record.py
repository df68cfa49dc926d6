"""The typed run record of a fill: one pydantic model per row of the memory bank (:mod:`benchfill.memory.bank`),
the status enums of gaps and candidates, and the transitions between their statuses.

The bank reads and writes only these models: its tables' columns are the models' fields (created with the bank, and
added to a bank file made by an older benchfill: ``SCHEMA_VERSION``), and every write is validated through them
(an unknown field, a wrong type or an illegal status change is an error before anything is written).

Tables and their records:

==============  ===========================  =====================================================
table           record                       key (the deterministic id of an upsert)
==============  ===========================  =====================================================
``gaps``        :class:`GapRecord`           (method, gap)
``seeds``       :class:`SeedRecord`          (method, gap, id)
``candidates``  :class:`CandidateRecord`     id (:func:`benchfill.graphs.fill.candidate_id`)
``usage``       :class:`UsageRecord`         (method, gap, round, node)
``reviews``     :class:`ReviewRecord`        (candidate, reviewer): each reviewer's standing vote
``review_log``  :class:`ReviewRecord`        none: every vote, appended
``runs``        (key, JSON value)            key: the run's metadata, ``schema_version`` among it
==============  ===========================  =====================================================

A candidate's status (:class:`CandidateStatus`) moves along :data:`CANDIDATE_TRANSITIONS`::

    (new) -> proposed | duplicate | rewrite_failed      rewrite: a child, a repeat of an item, a failed reply
    proposed -> valid | invalid                          validate: the judge's verdict
    valid -> labelled                                    label: the panel's answers
    labelled -> placed                                   place: b, d and the probabilities
    placed -> labelled                                   label re-run over a child it had placed (resume)
    placed -> chosen                                     finalize: the gap's chosen child

and a gap's (:class:`GapStatus`) along :data:`GAP_TRANSITIONS`::

    (new) -> searching                                   propose_gaps
    searching -> filled | near | unfilled                finalize

Every status may also be written again unchanged (a node re-run after a crash rewrites the same rows);
``duplicate``, ``rewrite_failed``, ``invalid`` and ``chosen`` are a candidate's ends, ``filled``, ``near`` and
``unfilled`` a gap's. :func:`check_transition` is the one check; an illegal change raises
:class:`StatusTransitionError`.
"""

from __future__ import annotations

import json
import types
import typing
from enum import StrEnum
from typing import Any, ClassVar, Iterable, Literal, Mapping, Self, TypeVar

from pydantic import BaseModel, ConfigDict, field_validator

SCHEMA_VERSION = 2
"""The memory bank's layout, stored as ``schema_version`` in its ``runs`` table. 1 (no ``schema_version``): columns
were added as they were first written (``answers``, ``labelling``, ``label_note``, ``prescreen_d``,
``review_log``); 2: every column of the records below is created with the bank (an older bank gets the missing
ones when it is opened)."""


class CandidateStatus(StrEnum):
    """Where a child of the search stands (:data:`CANDIDATE_TRANSITIONS`)."""

    PROPOSED = "proposed"
    """Written by the rewriter; awaits the validity judge."""
    DUPLICATE = "duplicate"
    """Repeats a benchmark item or an earlier child of the gap (``error`` names which): left out."""
    REWRITE_FAILED = "rewrite_failed"
    """The rewriter's reply held no usable child after the bounded re-asks (one row per such parent)."""
    VALID = "valid"
    """The judge found it well posed with a correct reference answer; awaits labelling."""
    INVALID = "invalid"
    """The judge rejected it (or its reply could not be read): left out."""
    LABELLED = "labelled"
    """The panel answered it (``counts``); awaits placement."""
    PLACED = "placed"
    """Placed on the difficulty axis (b, d, their SDs, P(inside), P(within)): a potential parent and choice."""
    CHOSEN = "chosen"
    """The gap's chosen child (finalize)."""


class GapStatus(StrEnum):
    """Where a gap's search stands (:data:`GAP_TRANSITIONS`)."""

    SEARCHING = "searching"
    """Proposed and being searched (a run stopped here is still open)."""
    FILLED = "filled"
    """A child was chosen and its P(d inside the gap) reached ``[fill] fill_level``."""
    NEAR = "near"
    """A child was chosen below that level (``p_inside`` holds the probability it reached)."""
    UNFILLED = "unfilled"
    """No valid, placed child."""


class ReviewDecision(StrEnum):
    """A reviewer's vote on a chosen item."""

    APPROVE = "approve"
    """The item may join the benchmark."""
    REJECT = "reject"
    """It may not (a standing rejection blocks it)."""


class ReviewStatus(StrEnum):
    """A chosen item's standing in the review queue, from its standing votes (``REVIEW_RULE`` in the bank)."""

    PENDING = "pending"
    """Fewer approvals than needed and no standing rejection."""
    BLOCKED = "blocked"
    """At least one standing rejection (until that reviewer votes again)."""
    ACCEPTED = "accepted"
    """Enough approvals and no standing rejection: exported."""
    REJECTED = "rejected"
    """Enough rejections: never exported."""


PLACED_STATUSES = (CandidateStatus.PLACED, CandidateStatus.CHOSEN)
"""A candidate with a place on the axis: it joins the search's memory and can be (or is) the gap's choice."""
CHOSEN_GAP_STATUSES = (GapStatus.FILLED, GapStatus.NEAR)
"""A gap whose search chose a child: "filled" at P(inside) >= fill_level, else "near"."""

_C = CandidateStatus
CANDIDATE_TRANSITIONS: dict[CandidateStatus | None, frozenset[CandidateStatus]] = {
    None: frozenset({_C.PROPOSED, _C.DUPLICATE, _C.REWRITE_FAILED}),
    _C.PROPOSED: frozenset({_C.PROPOSED, _C.VALID, _C.INVALID}),
    _C.DUPLICATE: frozenset({_C.DUPLICATE}),
    _C.REWRITE_FAILED: frozenset({_C.REWRITE_FAILED}),
    _C.VALID: frozenset({_C.VALID, _C.LABELLED}),
    _C.INVALID: frozenset({_C.INVALID}),
    _C.LABELLED: frozenset({_C.LABELLED, _C.PLACED}),
    _C.PLACED: frozenset({_C.PLACED, _C.LABELLED, _C.CHOSEN}),
    _C.CHOSEN: frozenset({_C.CHOSEN}),
}
"""Old status (None: a new row) -> the statuses it may be written as (see the module docstring)."""

_G = GapStatus
GAP_TRANSITIONS: dict[GapStatus | None, frozenset[GapStatus]] = {
    None: frozenset({_G.SEARCHING}),
    _G.SEARCHING: frozenset({_G.SEARCHING, _G.FILLED, _G.NEAR, _G.UNFILLED}),
    _G.FILLED: frozenset({_G.FILLED}),
    _G.NEAR: frozenset({_G.NEAR}),
    _G.UNFILLED: frozenset({_G.UNFILLED}),
}
"""Old status (None: a new row, or one written without a status) -> the statuses it may be written as."""


class StatusTransitionError(ValueError):
    """A write would move a candidate or a gap along a transition the table does not have."""


S = TypeVar("S", CandidateStatus, GapStatus)


def check_transition(old: S | None, new: S, subject: str = "") -> None:
    """Raise :class:`StatusTransitionError` unless a row in status ``old`` (None: a new row) may be written with
    status ``new`` (:data:`CANDIDATE_TRANSITIONS` / :data:`GAP_TRANSITIONS`, chosen by ``new``'s type);
    ``subject`` (e.g. ``candidate be-g1-r1-p0-c0``) leads the message."""
    table: Mapping[Any, frozenset[Any]] = CANDIDATE_TRANSITIONS if isinstance(new, CandidateStatus) else GAP_TRANSITIONS
    kind = "candidate" if table is CANDIDATE_TRANSITIONS else "gap"
    allowed = table.get(old, frozenset())
    if new not in allowed:
        start = f"a new {kind}" if old is None else f"a {kind} in status {old.value!r}"
        then = ", ".join(sorted(s.value for s in allowed)) or "nothing"
        raise StatusTransitionError(f"{subject or kind}: {start} cannot become {new.value!r} (allowed: {then}; "
                                    f"the table is {kind.upper()}_TRANSITIONS in benchfill/memory/record.py)")


# ------------------------------------------------------------------------------------------------- the records

_JSON_FIELDS = ("counts", "verdict")  # stored as JSON text


def _column_type(annotation: Any) -> type:
    """The SQLite column type (sqlite-utils' Python type) of a field: int, float or str (enums, literals and
    JSON-valued fields are text)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)] if isinstance(
        annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union else [annotation]
    kind = args[0]
    if typing.get_origin(kind) in (Literal, dict) or isinstance(kind, type) and issubclass(kind, str):
        return str
    if kind is bool or kind is int:
        return int
    if kind is float:
        return float
    raise TypeError(f"no column type for {annotation!r}")  # pragma: no cover - a new field of a new type


class BankRecord(BaseModel):
    """One row of a memory bank table. Fields are the table's columns; a write names the fields it sets (an
    upsert leaves the others as they are)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    TABLE: ClassVar[str]
    KEY: ClassVar[tuple[str, ...]]

    @classmethod
    def columns(cls) -> dict[str, type]:
        """Column name -> type, in field order (what the bank creates, and adds to an older bank)."""
        return {name: _column_type(f.annotation) for name, f in cls.model_fields.items()}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        """The record of a stored row (columns the record does not know are ignored)."""
        return cls.model_validate({k: v for k, v in row.items() if k in cls.model_fields})

    def to_row(self, fields: Iterable[str] | None = None) -> dict[str, Any]:
        """The row to store: ``fields`` (default: every field), enums as their values, booleans as 0/1, the
        JSON-valued fields as JSON text."""
        known = type(self).model_fields
        wanted = set(known if fields is None else fields)
        if wanted - set(known):
            raise ValueError(f"{type(self).__name__} has no field {', '.join(sorted(wanted - set(known)))}")
        names = [n for n in known if n in wanted]  # in field order
        out: dict[str, Any] = {}
        for name in names:
            value = getattr(self, name)
            if name == "verdict":
                value = "" if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            elif name in _JSON_FIELDS:
                value = None if value is None else json.dumps(value)
            elif isinstance(value, StrEnum):
                value = value.value
            elif isinstance(value, bool):
                value = int(value)
            out[name] = value
        return out


def _json_or_none(value: Any) -> Any:
    """A JSON-valued column as stored (text; "" or NULL: none) or as given."""
    if isinstance(value, str):
        return json.loads(value) if value else None
    return value


class GapRecord(BankRecord):
    """One gap of a method's search (table ``gaps``): where it lies, how its search went and what it chose."""

    TABLE: ClassVar[str] = "gaps"
    KEY: ClassVar[tuple[str, ...]] = ("method", "gap")

    method: str
    """The search: ``benchfill``, or ``baseline`` (the budget-matched baseline)."""
    gap: int
    """1-based index of the gap in the order the search proposed it."""
    lo: float | None = None
    """The gap's lower edge on the normalised difficulty axis d."""
    hi: float | None = None
    """Its upper edge."""
    target: float | None = None
    """The target t, the gap's midpoint."""
    status: GapStatus | None = None
    """Where the gap's search stands (:class:`GapStatus`)."""
    rounds: int | None = None
    """Rounds the search ran on this gap so far."""
    chosen: str | None = None
    """Id of the chosen candidate (None: none chosen)."""
    chosen_d: float | None = None
    """The chosen candidate's d (posterior mean)."""
    chosen_d_sd: float | None = None
    """Its posterior SD of d on the axis (the axis ends' uncertainty included)."""
    deviation: float | None = None
    """|d - t| of the chosen candidate."""
    n_candidates: int | None = None
    """Children the search wrote for this gap (rows with a question)."""
    cost: float | None = None
    """Model cost of the gap's search in US$ (from the usage table)."""
    note: str | None = None
    """Why the gap ended as it did (near: the probability reached) and the design's note (tolerance vs the
    panel's resolution); "" when there is nothing to say."""
    tolerance: float | None = None
    """The tolerance the gap is judged at: the configured one, or the panel's resolution where that is coarser."""
    resolution: float | None = None
    """Distance from the target to the nearest placement one child can get from this panel."""
    stop_reason: str | None = None
    """Why the search stopped on this gap ("" while it continues)."""
    p_inside: float | None = None
    """Posterior P(the chosen child's d lies inside [lo, hi])."""
    p_within: float | None = None
    """Posterior P(|d - t| <= tolerance) of the chosen child."""
    children_mu: float | None = None
    """Posterior mean of the search's children population N(mu, sigma), in logits."""
    children_sigma: float | None = None
    """Its sigma, in logits."""
    chosen_gap_sd: float | None = None
    """The chosen child's SD of d relative to the gap's edges (b's SD / the axis' span)."""


class SeedRecord(BankRecord):
    """An existing benchmark item near a gap's target (table ``seeds``): the search's first parents."""

    TABLE: ClassVar[str] = "seeds"
    KEY: ClassVar[tuple[str, ...]] = ("method", "gap", "id")

    method: str
    """The search (benchfill or baseline)."""
    gap: int
    """The gap it seeds."""
    id: str
    """The benchmark item's id."""
    question: str
    """Its question."""
    answer: str
    """Its reference answer."""
    b: float
    """Its difficulty b on the scale (posterior mean, logits)."""
    b_sd: float | None = None
    """SD of b (None for a benchmark item: its place is the scale's own)."""
    d: float
    """Its normalised difficulty d."""
    format: str | None = None
    """Its answer format (:data:`benchfill.data.ItemFormat`)."""


Labelling = Literal["dropped", "precise", "cap", "budget"]


class CandidateRecord(BankRecord):
    """One child the rewriter wrote (table ``candidates``): its text, the judge's verdict, the panel's answers and
    its placement. Fields other than the identity and status are None (never written) until the step that sets
    them has run."""

    TABLE: ClassVar[str] = "candidates"
    KEY: ClassVar[tuple[str, ...]] = ("id",)

    id: str
    """Deterministic id ``<method[:2]>-g<gap>-r<round>-p<parent index>-c<child index>``."""
    method: str
    """The search (benchfill or baseline)."""
    gap: int
    """The gap whose search wrote it."""
    round: int
    """The round (1-based) that wrote it."""
    parent: str | None = None
    """Id of the item it was rewritten from (a seed or an earlier candidate)."""
    question: str | None = None
    """Its question ("" for a rewrite_failed row)."""
    answer: str | None = None
    """Its reference answer."""
    rewriter: str | None = None
    """Label of the rewriter model."""
    judge: str | None = None
    """Label of the validity judge that read it ("" before, or when its reply could not be read)."""
    valid: bool | None = None
    """The judge's verdict: well posed and the reference answer correct."""
    verdict: dict[str, Any] | None = None
    """The judge's reply (``well_posed``, ``answer_correct``, ``reason``); stored as JSON text, "" for none."""
    counts: dict[str, list[int]] | None = None
    """The panel's answers per model: ``[n_correct, n_trials]``; stored as JSON text."""
    b: float | None = None
    """Placement: b (posterior mean, logits)."""
    b_sd: float | None = None
    """Posterior SD of b."""
    d: float | None = None
    """Placement on the normalised axis: d (posterior mean)."""
    d_sd: float | None = None
    """Posterior SD of d (the axis ends' uncertainty included)."""
    deviation: float | None = None
    """|d - t| against the gap's target."""
    status: CandidateStatus
    """Where it stands (:class:`CandidateStatus`, :data:`CANDIDATE_TRANSITIONS`)."""
    error: str | None = None
    """Why it was left out (rewrite failure, duplicate, judge failure; "" when none)."""
    format: str | None = None
    """Its answer format, the parent's (:data:`benchfill.data.ItemFormat`; "" when unknown)."""
    created: float | None = None
    """When its row was (last) written by the rewrite step (Unix time)."""
    p_inside: float | None = None
    """Posterior P(d inside the gap)."""
    p_within: float | None = None
    """Posterior P(|d - t| <= the gap's tolerance)."""
    confirm_steps: int | None = None
    """Confirmation steps the chosen child was given (None: none)."""
    answers: int | None = None
    """Adaptive labelling: the panel answers it was given."""
    labelling: Labelling | None = None
    """Adaptive labelling: why its labelling stopped (dropped, precise, cap, budget)."""
    label_note: str | None = None
    """Adaptive labelling: that reason in one line."""
    prescreen_d: float | None = None
    """The text pre-screen's predicted d (``[fill] prescreen``; None without one)."""

    @field_validator("counts", "verdict", mode="before")
    @classmethod
    def _stored_json(cls, value: Any) -> Any:
        return _json_or_none(value)

    @property
    def placed(self) -> bool:
        """It has a place on the axis (placed or chosen)."""
        return self.status in PLACED_STATUSES


class UsageRecord(BankRecord):
    """Model usage of one node run (table ``usage``): a re-run node replaces its row."""

    TABLE: ClassVar[str] = "usage"
    KEY: ClassVar[tuple[str, ...]] = ("method", "gap", "round", "node")

    method: str
    """The search (benchfill or baseline)."""
    gap: int
    """The gap being searched."""
    round: int
    """The round (0 before the first)."""
    node: str
    """The graph node (:data:`benchfill.graphs.fill.NODES`)."""
    calls: int
    """Model calls (cached ones included)."""
    cached: int
    """Of them, answered from the call cache."""
    tokens: int
    """Tokens in and out."""
    cost: float
    """Cost in US$ (a cached call reports the cost it had when it was made)."""


class UsageTotals(BaseModel):
    """Usage summed over a gap or one of its rounds."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    calls: int = 0
    """Model calls."""
    tokens: int = 0
    """Tokens in and out."""
    cost: float = 0.0
    """Cost in US$."""


class ReviewRecord(BankRecord):
    """A review vote (table ``reviews``: each reviewer's standing vote per item; ``review_log``: every vote)."""

    TABLE: ClassVar[str] = "reviews"
    KEY: ClassVar[tuple[str, ...]] = ("candidate", "reviewer")

    candidate: str
    """Id of the chosen candidate voted on."""
    reviewer: str
    """Who voted."""
    decision: ReviewDecision
    """approve or reject."""
    note: str | None = ""
    """The reviewer's reason ("" when none)."""
    at: float
    """When (Unix time)."""


RECORDS: tuple[type[BankRecord], ...] = (GapRecord, SeedRecord, CandidateRecord, UsageRecord, ReviewRecord)
"""Every table's record (``review_log`` holds :class:`ReviewRecord` rows too)."""
