"""Presentation of a diagnosis: rich tables for the terminal and the PNG picture. No computation happens here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from benchfill.diagnostics.null import THRESHOLDS
from benchfill.diagnostics.picture import Picture, model_label, population_on_axis, write_picture

if TYPE_CHECKING:  # the report draws itself through this module (Diagnosis.plot), so no import back at run time
    from benchfill.diagnostics.report import Diagnosis


def _fmt(x: float | None, nd: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _pass(passed: bool | None) -> Text:
    if passed is None:
        return Text("n/a", style="dim")
    return Text("pass", style="green") if passed else Text("FAIL", style="bold red")


VERDICT_STYLE = {"flag": "bold red", "at floor": "yellow", "ok": "green"}


def _verdict(dg: Diagnosis, key: str) -> Text:
    v = dg.verdicts.get(key) or ("flag" if dg.flags.get(key) else "ok")
    return Text(v.upper() if v == "flag" else v, style=VERDICT_STYLE.get(v, ""))


def _posterior(dg: Diagnosis, key: str) -> tuple[str, str]:
    p = (dg.posterior or {}).get(key)
    if p is None:
        return "-", "-"
    return f"{p.mean:.3f} ± {p.sd:.3f}", f"[{p.q05:.3f}, {p.q95:.3f}]"


def _null(dg: Diagnosis, key: str) -> str:
    n = getattr(dg.null, key, None) if dg.null is not None else None
    return "-" if n is None else f"{n.median:.3f} / {n.q95:.3f}"


def headline_table(dg: Diagnosis) -> Table:
    """The three metrics: posterior (mean ± SD, 90 % interval), the paper's plug-in, the design's null, verdict."""
    s = dg.sampler
    title = f"{Path(dg.source).name}: {dg.n_models} models x {dg.n_items} items, {dg.irt_model} ({s.method}"
    title += ", MAP PREVIEW: no posterior, SDs approximate, MCMC checks not run)" if s.preview else f", {s.chains}x{s.tune}+{s.draws})"
    head = Table(title=Text(title), title_justify="left")  # the file name is the user's: printed literally
    for col in ("metric", "posterior mean ± SD", "90 % interval", "paper's plug-in", "null median / 95 %",
                "threshold", "verdict"):
        head.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
    rows = (("DDM (W1 to uniform grid)", "ddm", ">= 0.10"), ("max gap", "max_gap", ">= 0.10"),
            ("Top-5 gap sum", "top5_sum", ">= 0.30"))
    for label, key, threshold in rows:
        head.add_row(label, *_posterior(dg, key), _fmt(getattr(dg, key)), _null(dg, key), threshold, _verdict(dg, key))
    head.add_row("W1 to continuous U[0,1]", *_posterior(dg, "w1_uniform"), _fmt(dg.w1_uniform), "-", "", "")
    return head


def diagnosis_tables(dg: Diagnosis, n_gaps: int = 5) -> Group:
    """The terminal view: the metrics (posterior, plug-in, null, verdict), the design's resolution and warnings,
    the largest gaps, and the seven checks."""
    parts: list = [headline_table(dg)]
    notes = []
    if dg.resolution is not None:
        r = dg.resolution
        notes.append(f"resolution: {r.distinct_keys} distinct likelihood keys -> max gap >= {r.max_gap_floor:.3f}, "
                     f"Top-5 >= {r.top5_floor:.3f} for any benchmark"
                     + (f"; null: {dg.null.replicates} hole-free benchmarks of this design" if dg.null else ""))
    if dg.population is not None:
        notes.append(f"difficulty population: {dg.population.label}; 90 % of it in [{dg.population.q05:.2f}, "
                     f"{dg.population.q95:.2f}] logits")
    if dg.reach is not None and dg.reach.solved_by_none + dg.reach.solved_by_all:
        notes.append(f"beyond the panel's reach: {dg.reach.solved_by_none} item(s) solved by no model, "
                     f"{dg.reach.solved_by_all} by every model (b bounded on one side only)")
    notes.append(f"paper's i.i.d. uniform baseline: max gap / median max gap of {dg.n_items} uniform points = "
                 f"{dg.uniform_baseline_ratio:.2f}x (median {dg.uniform_median_max_gap:.4f}; ignores the design)")
    parts.append(Text("\n".join(notes), style="dim"))
    for w in dg.warnings:
        parts.append(Text(f"warning: {w}", style="yellow"))
    for a in dg.advice:
        parts.append(Text(f"next: {a}", style="cyan"))

    gaps = Table(title="largest gaps (normalised difficulty; plug-in)", title_justify="left")
    for col in ("#", "lo", "hi", "width", "fill target (mid)", "design"):
        gaps.add_column(col, justify="right")
    for k, g in enumerate(dg.gaps[:n_gaps], start=1):
        design = (Text("beyond reach", style="yellow") if g.beyond_reach else
                  Text("at floor", style="yellow") if g.at_floor else Text("resolvable", style="green"))
        gaps.add_row(str(k), _fmt(g.lo), _fmt(g.hi), _fmt(g.width), _fmt(g.mid), design)

    checks = Table(title=f"checks: {dg.checks_passed}/{len(dg.checks)} passed", title_justify="left")
    for col in ("check", "what", "result", "value", "threshold"):
        checks.add_column(col, justify="right" if col in ("value", "threshold") else "left")
    for c in dg.checks:
        checks.add_row(c.name, c.description, _pass(c.passed), _fmt(c.value, 4), f"{c.comparison} {c.threshold:g}")
    parts += [gaps, checks]
    if dg.robustness:
        parts.append(robustness_table(dg.robustness))
    return Group(*parts)


def robustness_table(rob: dict) -> Table:
    t = Table(title="robustness", title_justify="left")
    t.add_column("what")
    t.add_column("result", justify="right")
    loo = rob.get("leave_one_model_out")
    if loo:
        t.add_row("leave-one-model-out Pearson of b (mean / worst)", f"{loo['mean_pearson']:.4f} / {loo['worst_pearson']:.4f}")
        t.add_row("leave-one-model-out Spearman of b (mean / worst)", f"{loo['mean_spearman']:.4f} / {loo['worst_spearman']:.4f}")
    bic = rob.get("bic")
    if bic:
        t.add_row("BIC 1PL / 2PL (lower is better)", f"{bic['bic_1pl']:.1f} / {bic['bic_2pl']:.1f}")
        t.add_row("preferred by BIC (low power with few models: 0 of 8 simulated 2PL benchmarks of 12 models x 200 "
                  "items x 4 rollouts were called 2PL; bench/bic_power.py)", bic["preferred"].upper())
    return t


def suite_table(rows: Sequence[tuple[str, Diagnosis]], title: str) -> Table:
    """Table-1-style summary: one row per benchmark; posterior mean ± SD, with the paper's plug-in beside it."""
    t = Table(title=title if isinstance(title, Text) else Text(title), title_justify="left")
    for col in ("benchmark", "n", "keys", "DDM", "max gap", "Top-5", "plug-in DDM / gap / Top-5", "flags",
                "checks"):
        t.add_column(col, justify="left" if col in ("benchmark", "flags") else "right")
    for name, dg in rows:
        flags = ",".join(k for k, on in dg.flags.items() if on) or "-"
        floor = [k for k, v in dg.verdicts.items() if v == "at floor"]
        if floor:
            flags += f" (at floor: {','.join(floor)})"
        ran = [c for c in dg.checks if c.passed is not None]
        t.add_row(
            Text(name), str(dg.n_items), str(dg.resolution.distinct_keys) if dg.resolution else "-",
            _posterior(dg, "ddm")[0], _posterior(dg, "max_gap")[0], _posterior(dg, "top5_sum")[0],
            f"{dg.ddm:.3f} / {dg.max_gap:.3f} / {dg.top5_sum:.3f}", flags,
            f"{sum(bool(c.passed) for c in ran)}/{len(ran)}",
        )
    return t


def picture_of(dg: Diagnosis, n_gaps: int = 5) -> Picture:
    b = np.array([it.b for it in dg.items])
    pop = dg.population
    on_axis = None if pop is None or b.size < 2 else population_on_axis(pop.curve, float(b.min()), float(b.max()))
    return Picture.of(dg.source, dg.n_models, dg.d_values(), dg.gaps, dg.posterior,
                      {"ddm": dg.ddm, "max_gap": dg.max_gap, "top5_sum": dg.top5_sum}, dg.sampler.preview, n_gaps,
                      on_axis, "" if pop is None else pop.kind, dg.verdicts, THRESHOLDS,
                      model_label(dg.irt_model.split("+")[0], dg.guessing))


def diagnosis_figure(dg: Diagnosis, n_gaps: int = 5):
    """The diagnosis picture as a matplotlib Figure (for a notebook)."""
    from benchfill.diagnostics.picture import picture_figure

    return picture_figure(picture_of(dg, n_gaps))


def plot_diagnosis(dg: Diagnosis, path: str | Path, n_gaps: int = 5) -> Path:
    """Write the diagnosis picture as a PNG (atomically)."""
    return write_picture(picture_of(dg, n_gaps), path)
