"""Read-only views of a fill run's memory bank: one gap's search trace, the review queue, the filled benchmark.

Each view is a pydantic model of :mod:`benchfill.memory.views`, built from the bank's records
(:mod:`benchfill.memory.record`); its ``model_dump_json()`` is the JSON that ``benchfill trace --json`` /
``benchfill review --json`` write, and its ``model_dump()`` what ``report.html`` reads.
"""

from __future__ import annotations

import json
from typing import Any

from benchfill.data import Item, load_items
from benchfill.errors import InputError
from benchfill.memory.bank import MemoryBank
from benchfill.memory.record import CHOSEN_GAP_STATUSES, ReviewStatus, UsageTotals
from benchfill.memory.views import (
    GapTrace,
    Placement,
    ReviewEntry,
    ReviewItem,
    TraceChild,
    TraceParent,
    TraceRound,
)


def gap_trace(bank: MemoryBank, method: str, gap: int) -> GapTrace:
    """One gap's search as data: rounds -> parents and children (verdict, panel counts, placement), with usage."""
    row = bank.gap(method, gap)
    if row is None:
        known = sorted({g.gap for g in bank.gaps(method)})
        raise InputError(str(bank.path), f"no gap {gap} for method {method!r} (gaps: {known or 'none yet'})")
    cands = bank.candidates(method, gap)
    usage = bank.usage_by_round(method, gap)
    seeds = {s.id: s for s in bank.seeds_for(method, gap)}
    by_id = {c.id: c for c in cands}
    rounds = []
    for r in sorted({c.round for c in cands}):
        kids = [c for c in cands if c.round == r]
        parents = []
        for pid in dict.fromkeys(c.parent for c in kids):
            assert pid is not None  # every child of the search names its parent
            src = seeds.get(pid)
            d = src.d if src else (by_id[pid].d if pid in by_id else None)
            parents.append(TraceParent(id=pid, kind="seed" if src else "candidate", d=d))
        rounds.append(TraceRound(round=r, parents=parents, children=[TraceChild.of(c) for c in kids],
                                 usage=usage.get(r, UsageTotals())))
    return GapTrace(method=method, gap=gap, lo=row.lo, hi=row.hi, target=row.target, status=row.status,
                    chosen=row.chosen, chosen_d=row.chosen_d, chosen_d_sd=row.chosen_d_sd, deviation=row.deviation,
                    p_inside=row.p_inside, p_within=row.p_within, tolerance=row.tolerance,
                    resolution=row.resolution, stop_reason=row.stop_reason, rounds_used=row.rounds, note=row.note,
                    confirmation=_confirmation(bank, method, gap), usage=bank.gap_usage(method, gap),
                    simulated=bool(bank.meta("simulated")), rounds=rounds)


def _confirmation(bank: MemoryBank, method: str, gap: int) -> dict[str, Any] | None:
    """The chosen child's confirmation steps (labels/<method>-g<gap>-confirm/confirm.json), if it had any."""
    path = bank.path.parent / "labels" / f"{method}-g{gap}-confirm" / "confirm.json"
    return json.loads(path.read_text()) if path.exists() else None


def review_queue(bank: MemoryBank) -> list[ReviewEntry]:
    """BenchFill's chosen items awaiting (or past) human review, in gap order: the filled gaps' and the "near"
    ones' (their P(inside) shown, so a reviewer sees how sure the placement is)."""
    out = []
    for g in bank.gaps("benchfill"):
        if g.status not in CHOSEN_GAP_STATUSES:
            continue
        assert g.chosen is not None and g.status is not None, g.gap  # a chosen gap names its item
        approve, reject = bank.approvals(g.chosen)
        chosen = bank.candidate(g.chosen)
        assert chosen is not None, g.chosen  # a gap's chosen item is one of its candidates
        out.append(ReviewEntry(candidate=g.chosen, gap=g.gap, target=g.target, d=g.chosen_d, d_sd=g.chosen_d_sd,
                               gap_status=g.status, p_inside=g.p_inside, p_within=g.p_within, approvals=approve,
                               rejections=reject, status=bank.review_status(g.chosen), question=chosen.question,
                               answer=chosen.answer))
    return out


Z90 = 1.6448536269514722  # the 90 % interval of a placement: d ± 1.645 SD (its posterior is close to normal)


def review_item(bank: MemoryBank, candidate: str) -> ReviewItem:
    """One queued item in full: question, reference answer, judge verdict and reason, panel counts per model,
    placement with its 90 % interval against the gap's target and the search's tolerance, and the votes."""
    from benchfill.memory.bank import REVIEW_RULE

    queue = {q.candidate: q for q in review_queue(bank)}
    if candidate not in queue:
        known = ", ".join(queue) or "none"
        raise InputError(str(bank.path), f"{candidate!r} is not in the review queue (queued: {known})")
    q, c = queue[candidate], bank.candidate(candidate)
    assert c is not None
    gap = bank.gap(c.method, c.gap)
    tolerance = (gap.tolerance if gap else None) or (bank.meta("params") or {}).get("tolerance")
    target = gap.target if gap else None
    d, sd = c.d, c.d_sd
    lo_hi = (None, None) if d is None or sd is None else (d - Z90 * sd, d + Z90 * sd)
    return ReviewItem(
        **{**q.model_dump(), "question": c.question, "answer": c.answer}, rule=REVIEW_RULE,
        simulated=bool(bank.meta("simulated")), method=c.method, format=c.format, parent=c.parent, round=c.round,
        rewriter=c.rewriter, judge=c.judge or None, valid=bool(c.valid), verdict=c.verdict, counts=c.counts or {},
        placement=Placement(d=d, d_sd=sd, d_lo=lo_hi[0], d_hi=lo_hi[1], b=c.b, b_sd=c.b_sd, target=target,
                            tolerance=tolerance, lo=gap.lo if gap else None, hi=gap.hi if gap else None,
                            deviation=c.deviation, p_inside=c.p_inside, p_within=c.p_within,
                            target_in_interval=None if lo_hi[0] is None or lo_hi[1] is None or target is None
                            else bool(lo_hi[0] <= target <= lo_hi[1])),
        reviews=bank.reviews(candidate),
    )


def filled_benchmark(bank: MemoryBank, include_pending: bool = False) -> tuple[list[Item], int]:
    """The original items plus each accepted new item (with its difficulty and provenance in metadata)."""
    items = load_items(bank.meta("items"))
    simulated = bool(bank.meta("simulated"))
    added = 0
    for entry in review_queue(bank):
        if entry.status != ReviewStatus.ACCEPTED and not (include_pending and entry.status == ReviewStatus.PENDING):
            continue
        c = bank.candidate(entry.candidate)
        assert c is not None, entry.candidate  # the review queue lists the bank's own candidates
        items.append(Item.model_validate(dict(
            id=f"benchfill-{c.id}", question=c.question, answer=c.answer, format=c.format or None,
            metadata={"benchfill": {
                "gap": entry.gap, "target_d": entry.target, "d": c.d, "d_sd": c.d_sd, "b": c.b,
                "b_sd": c.b_sd, "p_inside": entry.p_inside, "p_within": entry.p_within,
                "gap_status": entry.gap_status.value, "parent": c.parent, "rewriter": c.rewriter, "judge": c.judge,
                "approvals": entry.approvals, "review": entry.status.value, "panel_counts": c.counts,
                "simulated": simulated,
            }},
        )))
        added += 1
    return items, added


__all__ = ["GapTrace", "ReviewEntry", "ReviewItem", "filled_benchmark", "gap_trace", "review_item", "review_queue"]
