"""A BenchFill rewriter is a designer too (benchfill/designers/README.md): rank rewriter models by gap-fill success, target
deviation and cost, read from the memory banks of fill runs.

Each run folder holds ``memory.sqlite`` (:class:`~benchfill.memory.bank.MemoryBank`). From its ``gaps`` table
(``method = 'benchfill'`` by default) a gap counts as

- filled: ``status = 'filled'`` (the chosen child lies inside the gap at posterior P >= ``fill.fill_level``);
- near: ``status = 'near'`` (a child was chosen below that level): finished, not filled;
- within tolerance: a chosen child (filled or near) with deviation |d - t| = ``deviation`` <= the tolerance (the
  run's ``fill.tolerance``, else 0.01);
- open: still ``searching`` (an interrupted run): left out of the rates and reported.

The run's rewriter comes from ``MemoryBank.meta("rewriter")`` or ``meta("config")["rewriter"]``, else from the most
frequent ``candidates.rewriter`` of the run. Runs with the same rewriter are pooled.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchfill.designers.results import RewriterReport, RewriterRun, RewriterScore
from benchfill.errors import InputError
from benchfill.memory.record import CHOSEN_GAP_STATUSES, GapRecord, GapStatus

DEFAULT_TOLERANCE = 0.01


@dataclass(frozen=True)
class RunGaps:
    """The gap rows of one fill run."""

    run: str
    rewriter: str
    tolerance: float
    simulated: bool
    gaps: list[GapRecord]


def _rewriter_from_config(conf: Any) -> str | None:
    if isinstance(conf, dict):
        rw = conf.get("rewriter")
        if isinstance(rw, dict):
            return rw.get("name") or rw.get("model")
        if isinstance(rw, str) and rw:
            return rw
    return None


def read_run(path: str | Path, method: str = "benchfill") -> RunGaps:
    """Read one fill run (a run folder or its ``memory.sqlite``)."""
    from benchfill.memory.bank import MemoryBank

    path = Path(path)
    db = path / "memory.sqlite" if path.is_dir() else path
    if not db.is_file():
        raise InputError(str(path), "no memory.sqlite here (expected a `benchfill fill` run folder)")
    bank = MemoryBank(db)
    conf = bank.meta("config")
    named = bank.meta("rewriter")
    rewriter = named if isinstance(named, str) and named else _rewriter_from_config(conf)
    if rewriter is None:  # the most frequent rewriter of the run's candidates (ties: the first by name)
        used = Counter(c.rewriter for c in bank.candidates(method) if c.rewriter)
        rewriter = min(used.items(), key=lambda kv: (-kv[1], kv[0]))[0] if used else "unknown"
    tol = DEFAULT_TOLERANCE
    if isinstance(conf, dict) and isinstance(conf.get("fill"), dict) and conf["fill"].get("tolerance") is not None:
        tol = float(conf["fill"]["tolerance"])
    simulated = bool(bank.meta("simulated", False)) or str(rewriter).startswith("sim/") or (
        isinstance(conf, dict) and isinstance(conf.get("rewriter"), dict)
        and str(conf["rewriter"].get("model", "")).startswith("sim/"))
    return RunGaps(str(path), str(rewriter), tol, simulated, bank.gaps(method))


def score_rewriters(runs: Sequence[RunGaps], tolerance: float | None = None) -> list[RewriterScore]:
    """Pool runs by rewriter and score each; sorted by success rate, then mean deviation, then cost per gap."""
    by: dict[str, list[RunGaps]] = defaultdict(list)
    for r in runs:
        by[r.rewriter].append(r)
    out = []
    for name, group in by.items():
        finished, dev, rounds, cands, within = [], [], [], [], 0
        n_open = 0
        cost = 0.0
        for run in group:
            tol = tolerance if tolerance is not None else run.tolerance
            for g in run.gaps:
                cost += float(g.cost or 0.0)
                if g.status not in (*CHOSEN_GAP_STATUSES, GapStatus.UNFILLED):
                    n_open += 1
                    continue
                finished.append(g)
                rounds.append(float(g.rounds or 0))
                cands.append(float(g.n_candidates or 0))
                if g.status in CHOSEN_GAP_STATUSES and g.deviation is not None:
                    dev.append(float(g.deviation))
                    within += float(g.deviation) <= tol + 1e-12
        n = len(finished)
        filled = sum(g.status == GapStatus.FILLED for g in finished)
        out.append(RewriterScore(
            rewriter=name, runs=[r.run for r in group], n_gaps=n + n_open, n_open=n_open, n_filled=filled,
            success_rate=filled / n if n else None, within_tolerance_rate=within / n if n else None,
            mean_deviation=float(np.mean(dev)) if dev else None,
            median_deviation=float(np.median(dev)) if dev else None,
            mean_rounds=float(np.mean(rounds)) if rounds else None,
            candidates_per_gap=float(np.mean(cands)) if cands else None,
            total_cost=round(cost, 6), cost_per_filled_gap=cost / filled if filled else None,
            simulated=any(r.simulated for r in group),
        ))

    def key(s: RewriterScore) -> tuple[float, float, float, str]:
        def last(x: float | None, sign: int = 1) -> float:  # undefined values sort last
            return sign * x if x is not None and math.isfinite(x) else math.inf

        return (last(s.success_rate, -1), last(s.mean_deviation), last(s.cost_per_filled_gap), s.rewriter)

    return sorted(out, key=key)


def rewriter_report(paths: Sequence[str | Path], method: str = "benchfill", tolerance: float | None = None
                    ) -> RewriterReport:
    """The rewriter leaderboard of ``paths`` (run folders)."""
    runs = [read_run(p, method) for p in paths]
    return RewriterReport(
        method=method, tolerance=tolerance if tolerance is not None else "per run (fill.tolerance, else 0.01)",
        runs=[RewriterRun(run=r.run, rewriter=r.rewriter, gaps=len(r.gaps),
                          statuses=dict(Counter(str(g.status) for g in r.gaps))) for r in runs],
        rewriters=score_rewriters(runs, tolerance))


def rewriter_table(report: RewriterReport):
    from rich import box
    from rich.table import Table

    title = "rewriters as designers: BenchFill gap filling" + (" [bold yellow](SIMULATED)[/]" if report.simulated else "")
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("rewriter", "runs", "gaps", "success", "within tol", "mean |d-t|", "rounds", "cost/filled"):
        t.add_column(col, justify="left" if col == "rewriter" else "right", no_wrap=col == "rewriter")

    def num(x: Any, spec: str) -> str:
        return "-" if x is None else spec.format(x)

    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    for s in report.rewriters:
        gaps = f"{s.n_filled}/{s.n_gaps}" + (f" ({s.n_open} open)" if s.n_open else "")
        t.add_row(s.rewriter, str(len(s.runs)), gaps, pct(s.success_rate), pct(s.within_tolerance_rate),
                  num(s.mean_deviation, "{:.4f}"), num(s.mean_rounds, "{:.1f}"), num(s.cost_per_filled_gap, "${:.4f}"))
    t.caption = ("gaps = filled / all; success = filled share of finished gaps; within tol = filled with |d - t| <= "
                 "tolerance; cost in US$ (children per gap and totals: --json)")
    return t


__all__ = ["RewriterScore", "RunGaps", "read_run", "rewriter_report", "rewriter_table", "score_rewriters"]
