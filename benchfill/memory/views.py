"""The read model of a fill run: the views that ``benchfill trace``, ``benchfill review`` and ``report.html`` show,
as pydantic models (their JSON is the commands' ``--json`` output). Built from the bank's records by
:mod:`benchfill.memory.trace`; this module needs pydantic only (the API imports it without the LLM stack)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from benchfill.memory.record import (
    CandidateRecord,
    CandidateStatus,
    GapStatus,
    Labelling,
    ReviewRecord,
    ReviewStatus,
    UsageTotals,
)

_DOCS = ConfigDict(use_attribute_docstrings=True)


class TraceParent(BaseModel):
    """A parent of one round's children."""

    model_config = _DOCS

    id: str
    """The seed's or the earlier candidate's id."""
    kind: Literal["seed", "candidate"]
    """A benchmark item near the target (seed) or an earlier child of the gap (candidate)."""
    d: float | None
    """Its d (None: not known to this gap)."""


class TraceChild(BaseModel):
    """One child of a round: its text, verdict, panel counts and placement (:class:`CandidateRecord`'s fields)."""

    model_config = _DOCS

    id: str
    """The candidate's id."""
    parent: str | None
    """The id of the item it was rewritten from."""
    question: str | None
    """Its question."""
    answer: str | None
    """Its reference answer."""
    status: CandidateStatus
    """Where it stands."""
    valid: bool
    """The judge's verdict."""
    verdict: dict[str, Any] | None
    """The judge's reply (None: none)."""
    counts: dict[str, list[int]] | None
    """The panel's answers per model, [n_correct, n_trials]."""
    b: float | None
    """Placement: b (logits)."""
    b_sd: float | None
    """SD of b."""
    d: float | None
    """Placement: d."""
    d_sd: float | None
    """SD of d."""
    deviation: float | None
    """|d - t|."""
    p_inside: float | None
    """P(d inside the gap)."""
    p_within: float | None
    """P(|d - t| <= tolerance)."""
    confirm_steps: int | None
    """Confirmation steps (the chosen child)."""
    error: str | None
    """Why it was left out (None: it was not)."""
    rewriter: str | None
    """The rewriter model."""
    judge: str | None
    """The validity judge (None: none read it)."""
    answers: int | None
    """Adaptive labelling: the answers it was given."""
    labelling: Labelling | None
    """Adaptive labelling: why it stopped."""
    label_note: str | None
    """Adaptive labelling: that reason in one line."""
    prescreen_d: float | None
    """The pre-screen's predicted d."""

    @classmethod
    def of(cls, c: CandidateRecord) -> "TraceChild":
        return cls(id=c.id, parent=c.parent, question=c.question, answer=c.answer, status=c.status,
                   valid=bool(c.valid), verdict=c.verdict, counts=c.counts, b=c.b, b_sd=c.b_sd, d=c.d, d_sd=c.d_sd,
                   deviation=c.deviation, p_inside=c.p_inside, p_within=c.p_within, confirm_steps=c.confirm_steps,
                   error=c.error or None, rewriter=c.rewriter, judge=c.judge or None, answers=c.answers,
                   labelling=c.labelling, label_note=c.label_note, prescreen_d=c.prescreen_d)


class TraceRound(BaseModel):
    """One round of a gap's search."""

    model_config = _DOCS

    round: int
    """The round (1-based)."""
    parents: list[TraceParent]
    """Its parents, in the order the search chose them."""
    children: list[TraceChild]
    """Every child it wrote (with the ones left out)."""
    usage: UsageTotals
    """Model usage of the round."""


class GapTrace(BaseModel):
    """One gap's search (``benchfill trace``): rounds -> parents and children (verdict, panel counts, placement),
    with the gap's outcome and usage."""

    model_config = _DOCS

    method: str
    """The search (benchfill or baseline)."""
    gap: int
    """The gap (1-based, in the order proposed)."""
    lo: float | None
    """Its lower edge on d."""
    hi: float | None
    """Its upper edge."""
    target: float | None
    """The target t."""
    status: GapStatus | None
    """Where its search stands."""
    chosen: str | None
    """The chosen candidate (None: none)."""
    chosen_d: float | None
    """Its d."""
    chosen_d_sd: float | None
    """Its SD of d."""
    deviation: float | None
    """Its |d - t|."""
    p_inside: float | None
    """Its P(d inside the gap)."""
    p_within: float | None
    """Its P(|d - t| <= tolerance)."""
    tolerance: float | None
    """The tolerance the gap is judged at."""
    resolution: float | None
    """The panel's resolution at the target."""
    stop_reason: str | None
    """Why the search stopped."""
    rounds_used: int | None
    """Rounds run."""
    note: str | None
    """The gap's note."""
    confirmation: dict[str, Any] | None
    """The chosen child's confirmation steps (``labels/<method>-g<gap>-confirm/confirm.json``), if it had any."""
    usage: UsageTotals
    """Model usage of the gap's search."""
    simulated: bool
    """The run's models were simulated."""
    rounds: list[TraceRound]
    """The rounds, in order."""


class ReviewEntry(BaseModel):
    """One chosen item in the review queue."""

    model_config = _DOCS

    candidate: str
    """The chosen candidate's id."""
    gap: int
    """Its gap."""
    target: float | None
    """The gap's target t."""
    d: float | None
    """The item's d."""
    d_sd: float | None
    """Its SD of d."""
    gap_status: GapStatus
    """filled or near."""
    p_inside: float | None
    """P(d inside the gap)."""
    p_within: float | None
    """P(|d - t| <= tolerance)."""
    approvals: int
    """Standing approvals."""
    rejections: int
    """Standing rejections."""
    status: ReviewStatus
    """Its standing under the review rule."""
    question: str | None
    """Its question."""
    answer: str | None
    """Its reference answer."""


class Placement(BaseModel):
    """A queued item's placement against its gap: d with its 90 % interval, the target and the tolerance."""

    model_config = _DOCS

    d: float | None
    """d (posterior mean)."""
    d_sd: float | None
    """SD of d."""
    d_lo: float | None
    """Lower end of the 90 % interval d - 1.645 SD."""
    d_hi: float | None
    """Upper end."""
    b: float | None
    """b (logits)."""
    b_sd: float | None
    """SD of b."""
    target: float | None
    """The gap's target."""
    tolerance: float | None
    """The tolerance the gap is judged at (else the run's configured one)."""
    lo: float | None
    """The gap's lower edge."""
    hi: float | None
    """Its upper edge."""
    deviation: float | None
    """|d - t|."""
    p_inside: float | None
    """P(d inside the gap)."""
    p_within: float | None
    """P(|d - t| <= tolerance)."""
    target_in_interval: bool | None
    """The target lies in the 90 % interval (None: no placement or no target)."""


class ReviewItem(ReviewEntry):
    """One queued item in full (``benchfill review --show``): question, reference answer, judge verdict and reason,
    panel counts per model, placement with its 90 % interval against the target and tolerance, and the votes."""

    rule: str
    """The acceptance rule."""
    simulated: bool
    """The run's models were simulated."""
    method: str
    """The search that chose it."""
    format: str | None
    """Its answer format."""
    parent: str | None
    """The item it was rewritten from."""
    round: int
    """The round that wrote it."""
    rewriter: str | None
    """The rewriter model."""
    judge: str | None
    """The validity judge."""
    valid: bool
    """The judge's verdict."""
    verdict: dict[str, Any] | None
    """The judge's reply."""
    counts: dict[str, list[int]]
    """The panel's answers per model, [n_correct, n_trials]."""
    placement: Placement
    """Where it lies against its gap."""
    reviews: list[ReviewRecord]
    """The standing votes, oldest first."""
