"""Read-only views of a fill run's memory bank: one gap's search trace, the review queue, the filled benchmark."""

from __future__ import annotations

import json
from typing import Any

from benchfill.data import Item, load_items
from benchfill.errors import InputError
from benchfill.memory.bank import MemoryBank


def gap_trace(bank: MemoryBank, method: str, gap: int) -> dict[str, Any]:
    """One gap's search as data: rounds -> parents and children (verdict, panel counts, placement), with usage."""
    row = bank.gap(method, gap)
    if row is None:
        known = sorted({g["gap"] for g in bank.gaps(method)})
        raise InputError(str(bank.path), f"no gap {gap} for method {method!r} (gaps: {known or 'none yet'})")
    cands = bank.candidates(method, gap)
    usage = bank.usage_by_round(method, gap)
    seeds = {s.id: s for s in bank.seeds_for(method, gap)}
    by_id = {c["id"]: c for c in cands}
    rounds = []
    for r in sorted({c["round"] for c in cands}):
        kids = [c for c in cands if c["round"] == r]
        parents = []
        for pid in dict.fromkeys(c["parent"] for c in kids):
            src = seeds.get(pid)
            d = src.d if src else (by_id[pid]["d"] if pid in by_id else None)
            parents.append({"id": pid, "kind": "seed" if src else "candidate", "d": d})
        rounds.append({
            "round": r,
            "parents": parents,
            "children": [{
                "id": c["id"], "parent": c["parent"], "question": c["question"], "answer": c["answer"],
                "status": c["status"], "valid": bool(c["valid"]),
                "verdict": json.loads(c["verdict"]) if c["verdict"] else None, "counts": c["counts"],
                "b": c["b"], "b_sd": c["b_sd"], "d": c["d"], "d_sd": c["d_sd"], "deviation": c["deviation"],
                "error": c["error"] or None, "rewriter": c["rewriter"], "judge": c["judge"] or None,
                "answers": c.get("answers"), "labelling": c.get("labelling"), "label_note": c.get("label_note"),
            } for c in kids],
            "usage": usage.get(r, {"calls": 0, "tokens": 0, "cost": 0.0}),
        })
    return {"method": method, "gap": gap, "lo": row["lo"], "hi": row["hi"], "target": row["target"],
            "status": row["status"], "chosen": row["chosen"], "chosen_d": row["chosen_d"],
            "chosen_d_sd": row["chosen_d_sd"], "deviation": row["deviation"], "rounds_used": row["rounds"],
            "note": row["note"], "usage": bank.gap_usage(method, gap), "simulated": bool(bank.meta("simulated")),
            "rounds": rounds}


def review_queue(bank: MemoryBank) -> list[dict[str, Any]]:
    """BenchFill's chosen items awaiting (or past) human review, in gap order."""
    out = []
    for g in bank.gaps("benchfill"):
        if g["status"] != "filled":
            continue
        approve, reject = bank.approvals(g["chosen"])
        out.append({"candidate": g["chosen"], "gap": g["gap"], "target": g["target"], "d": g["chosen_d"],
                    "d_sd": g["chosen_d_sd"], "approvals": approve, "rejections": reject,
                    "status": bank.review_status(g["chosen"]),
                    "question": bank.candidate(g["chosen"])["question"]})
    return out


def filled_benchmark(bank: MemoryBank, include_pending: bool = False) -> tuple[list[Item], int]:
    """The original items plus each accepted new item (with its difficulty and provenance in metadata)."""
    items = load_items(bank.meta("items"))
    simulated = bool(bank.meta("simulated"))
    added = 0
    for entry in review_queue(bank):
        if entry["status"] != "accepted" and not (include_pending and entry["status"] == "pending"):
            continue
        c = bank.candidate(entry["candidate"])
        items.append(Item(
            id=f"benchfill-{c['id']}", question=c["question"], answer=c["answer"], format=c.get("format") or None,
            metadata={"benchfill": {
                "gap": entry["gap"], "target_d": entry["target"], "d": c["d"], "d_sd": c["d_sd"], "b": c["b"],
                "b_sd": c["b_sd"], "parent": c["parent"], "rewriter": c["rewriter"], "judge": c["judge"],
                "approvals": entry["approvals"], "review": entry["status"], "panel_counts": c["counts"],
                "simulated": simulated,
            }},
        ))
        added += 1
    return items, added
