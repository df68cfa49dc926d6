"""The pure decisions of the BenchFill search (README: BenchFill), separate from the graph that sequences them:
which gaps to fill, which parents and references to show the rewriter, when to stop, and the Table-2 arithmetic
(Top-3 gap-sum reduction for BenchFill, the budget-matched baseline and the oracle).

All difficulties are on the benchmark's normalised axis d (0 = easiest item, 1 = hardest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TypeVar

import numpy as np

from benchfill.diagnostics import metrics as M
from benchfill.memory.bank import MemoryItem
from benchfill.models.config import FillParams

T = TypeVar("T", bound=MemoryItem)


# The search's parameters are the config's typed and ranged ``[fill]`` section (validated before any call).
SearchParams = FillParams


def with_insertions(d: np.ndarray, inserted: Sequence[float]) -> np.ndarray:
    """The benchmark's d with new items added on the same axis; items outside [0, 1] sit at the ends."""
    return np.clip(np.concatenate([np.asarray(d, float), np.asarray(inserted, float)]), 0.0, 1.0)


def propose_gaps(d: np.ndarray, inserted: Sequence[float], n: int) -> list[M.Gap]:
    """The ``n`` largest gaps of the benchmark with the items inserted so far; the fill target is each midpoint."""
    return M.gaps(with_insertions(d, inserted), top=n)


def nearest(pool: Sequence[T], target: float, k: int, exclude: set[str] | None = None) -> list[T]:
    """The k items nearest to ``target`` (ties: smaller id first, so the choice is reproducible)."""
    exclude = exclude or set()
    ranked = sorted((it for it in pool if it.id not in exclude), key=lambda it: (abs(it.d - target), it.id))
    return ranked[:k]


def select_parents(memory: Sequence[T], target: float, k: int = 4) -> list[T]:
    """The k valid, labelled items of the memory nearest to the target (README: BenchFill, step 3)."""
    return nearest(memory, target, k)


def select_references(memory: Sequence[T], target: float, parent_id: str, k: int = 16) -> list[T]:
    """Up to k (item, difficulty) pairs nearest to the target, other than the parent, for the rewriter."""
    return nearest(memory, target, k, exclude={parent_id})


def to_display(d: float, scale: float = 10.0) -> float:
    """Difficulty on the rewriter's 0-10 scale (the paper: models tell 0-10 apart better than 0-1)."""
    return round(float(d) * scale, 2)


def should_stop(best_p_within: float | None, round_: int, params: SearchParams, *, stale_rounds: int = 0
                ) -> str | None:
    """Why the search of a gap stops after this round, or None to go on.

    Args:
        best_p_within: the best child's posterior P(|d - t| <= tolerance) so far (None: no placed child yet).
        round_: rounds run so far.
        stale_rounds: rounds in a row that did not raise ``best_p_within`` by ``params.min_gain``: the rounds so
            far are the evidence of what another round can be expected to bring.
    """
    if best_p_within is not None and best_p_within >= params.fill_level:
        return f"P(|d - t| <= tolerance) = {best_p_within:.2f} reached the level {params.fill_level:g}"
    if stale_rounds >= params.patience:
        return (f"{stale_rounds} round(s) in a row raised P(|d - t| <= tolerance) by less than {params.min_gain:g} "
                f"(best {best_p_within if best_p_within is not None else 0:.2f})")
    if round_ >= params.max_rounds:
        return f"the round cap max_rounds = {params.max_rounds}"
    return None


@dataclass(frozen=True)
class GapDesign:
    """What the labelling panel can measure about one gap's target (README: BenchFill).

    Attributes:
        tolerance: the tolerance the gap is judged at: the configured one, or the panel's resolution where no
            single child's answers can place it that close to the target.
        resolution: distance from the target to the nearest placement the panel's answers to one child can give
            (under the benchmark's population; None: unknown).
        note: one line for the gap's record when the tolerance was widened, else "".
    """

    tolerance: float
    resolution: float | None
    note: str = ""


def gap_design(attainable_d: np.ndarray | None, target: float, tolerance: float) -> GapDesign:
    """The design's resolution at ``target``: ``attainable_d``, every d the labelling panel's answers can place a
    child at (:func:`benchfill.graphs.run.panel_attainable_d`; None: too many to enumerate). One rule with the floor
    test of :func:`benchfill.diagnostics.null.gap_is_unfillable`: both read the same placements."""
    if attainable_d is None:
        return GapDesign(tolerance, None)
    resolution = float(np.min(np.abs(np.asarray(attainable_d) - target)))
    tol = tolerance
    note = ""
    if resolution > tolerance:
        tol = resolution * (1 + 1e-6)
        note = (f"tolerance {tolerance:g} is finer than this panel can place: the nearest placement it can give is "
                f"{resolution:.4f} from the target, so the gap is judged at {tol:.4f}")
    return GapDesign(tol, resolution, note)


def confirmation_cap(rollouts: Sequence[int], step: int, max_rollouts: int, finalists: int) -> int:
    """The most panel calls a confirmation can ask: ``finalists`` children that each model has answered
    ``rollouts`` times, raised ``step`` answers per model at a time to ``max_rollouts``, the weaker half dropped
    after each step (the confirm node's successive halving, run to its end)."""
    base = np.asarray(rollouts, dtype=np.int64)
    level, calls, steps = int(base.min()), 0, 0
    while level < max_rollouts:
        reached = min(level + step, max_rollouts)
        racing = -(-finalists // 2**steps)
        calls += racing * int(np.maximum(0, reached - np.maximum(base, level)).sum())
        level, steps = reached, steps + 1
    return calls


@dataclass(frozen=True)
class CallBudget:
    """The panel calls one gap may spend, search + confirmation (README: BenchFill, confirmation).

    Attributes:
        calls: the budget (0: no limit).
        rule: ``"none"``, ``"fixed"`` (the config's number) or ``"equal"`` (what full labelling would have spent).
        full_search: ``"equal"``: full labelling's search on the rounds this search ran (each valid child answered
            by every panel model its rollouts times); else None.
        full_confirmation: ``"equal"``: the most full labelling's confirmation can ask (:func:`confirmation_cap`
            under full labelling's settings); else None.
    """

    calls: int
    rule: str
    full_search: int | None = None
    full_confirmation: int | None = None


def gap_call_budget(params: SearchParams, rollouts: Sequence[int], valid_children: int) -> CallBudget:
    """The gap's call budget under ``params`` (:attr:`FillParams.confirmation`'s ``budget``), for a search that
    answered ``valid_children`` valid children with a panel of these ``rollouts`` per model. ``"equal"`` holds
    adaptive labelling to full labelling's cost on the same rounds, so what it saved goes to the confirmation and
    the two are compared at equal budget."""
    budget = params.confirmation.budget
    if budget != "equal":
        return CallBudget(budget, "fixed" if budget else "none")
    full = params.with_full_labelling.confirmation
    search = valid_children * int(np.sum(rollouts))
    confirmation = confirmation_cap(rollouts, params.confirm_step, full.max_rollouts, full.finalists)
    return CallBudget(search + confirmation, "equal", search, confirmation)


def top_k_reduction(d: np.ndarray, inserted: Sequence[float], k: int = 3) -> float:
    """Relative reduction of the Top-k gap sum after inserting items: (before - after) / before."""
    before = M.top_k_gap_sum(np.clip(d, 0, 1), k)
    after = M.top_k_gap_sum(with_insertions(d, inserted), k)
    return float((before - after) / before) if before > 0 else 0.0


def oracle_insertions(d: np.ndarray, n: int = 3) -> list[float]:
    """The ideal items: each exactly at the midpoint of the current largest gap, ``n`` times in sequence."""
    inserted: list[float] = []
    for _ in range(n):
        inserted.append(propose_gaps(d, inserted, 1)[0].mid)
    return inserted
