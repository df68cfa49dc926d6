"""The pure decisions of the BenchFill search (SPEC section 4), separate from the graph that sequences them:
which gaps to fill, which parents and references to show the rewriter, when to stop, and the Table-2 arithmetic
(Top-3 gap-sum reduction for BenchFill, the budget-matched baseline and the oracle).

All difficulties are on the benchmark's normalised axis d (0 = easiest item, 1 = hardest).
"""

from __future__ import annotations

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
    """The k valid, labelled items of the memory nearest to the target (SPEC section 4, step 3)."""
    return nearest(memory, target, k)


def select_references(memory: Sequence[T], target: float, parent_id: str, k: int = 16) -> list[T]:
    """Up to k (item, difficulty) pairs nearest to the target, other than the parent, for the rewriter."""
    return nearest(memory, target, k, exclude={parent_id})


def to_display(d: float, scale: float = 10.0) -> float:
    """Difficulty on the rewriter's 0-10 scale (the paper: models tell 0-10 apart better than 0-1)."""
    return round(float(d) * scale, 2)


def should_stop(best_deviation: float | None, round_: int, params: SearchParams) -> bool:
    """Stop when the best valid child is within tolerance of the target, or after ``max_rounds`` rounds."""
    if best_deviation is not None and best_deviation <= params.tolerance:
        return True
    return round_ >= params.max_rounds


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
