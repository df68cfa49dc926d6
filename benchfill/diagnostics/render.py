"""Presentation of a diagnosis: rich tables for the terminal and the PNG picture. No computation happens here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from benchfill.diagnostics.report import Diagnosis


def _fmt(x: float | None, nd: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _pm(x: float, sd: float | None) -> str:
    return _fmt(x) if sd is None or math.isnan(sd) else f"{x:.3f} ± {sd:.3f}"


def _flag(on: bool) -> Text:
    return Text("FLAG", style="bold red") if on else Text("ok", style="green")


def _pass(passed: bool | None) -> Text:
    if passed is None:
        return Text("n/a", style="dim")
    return Text("pass", style="green") if passed else Text("FAIL", style="bold red")


def diagnosis_tables(dg: Diagnosis, n_gaps: int = 5) -> Group:
    """The terminal view: headline metrics with posterior SDs and flags, largest gaps, and the seven checks."""
    s = dg.sampler
    title = f"{Path(dg.source).name}: {dg.n_models} models x {dg.n_items} items, {dg.irt_model} ({s.method}"
    title += ", MAP PREVIEW: SDs approximate, MCMC checks not run)" if s.preview else f", {s.chains}x{s.tune}+{s.draws})"
    head = Table(title=title, title_justify="left")
    head.add_column("metric")
    head.add_column("value ± posterior SD", justify="right")
    head.add_column("threshold", justify="right")
    head.add_column("flag")
    head.add_row("DDM (W1 to uniform grid)", _pm(dg.ddm, dg.ddm_sd), ">= 0.10", _flag(dg.flags["ddm"]))
    head.add_row("W1 to continuous U[0,1]", _pm(dg.w1_uniform, dg.w1_uniform_sd), "", "")
    head.add_row("max gap", _pm(dg.max_gap, dg.max_gap_sd), ">= 0.10", _flag(dg.flags["max_gap"]))
    head.add_row("Top-5 gap sum", _pm(dg.top5_sum, dg.top5_sum_sd), ">= 0.30", _flag(dg.flags["top5_sum"]))
    head.add_row("uniform-baseline ratio", f"{dg.uniform_baseline_ratio:.2f}x",
                 f"median uniform max gap {dg.uniform_median_max_gap:.3f}", "")

    gaps = Table(title="largest gaps (normalised difficulty)", title_justify="left")
    for col in ("#", "lo", "hi", "width", "fill target (mid)"):
        gaps.add_column(col, justify="right")
    for k, g in enumerate(dg.gaps[:n_gaps], start=1):
        gaps.add_row(str(k), _fmt(g.lo), _fmt(g.hi), _fmt(g.width), _fmt(g.mid))

    checks = Table(title=f"checks: {dg.checks_passed}/{len(dg.checks)} passed", title_justify="left")
    for col in ("check", "what", "result", "value", "threshold"):
        checks.add_column(col, justify="right" if col in ("value", "threshold") else "left")
    for c in dg.checks:
        checks.add_row(c.name, c.description, _pass(c.passed), _fmt(c.value, 4), f"{c.comparison} {c.threshold:g}")
    parts = [head, gaps, checks]
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
        t.add_row("preferred by BIC", bic["preferred"].upper())
    return t


def suite_table(rows: Sequence[tuple[str, Diagnosis]], title: str) -> Table:
    """Table-1-style summary: one row per benchmark."""
    t = Table(title=title, title_justify="left")
    for col in ("benchmark", "n", "DDM", "max gap", "Top-5", "baseline ratio", "flags", "checks"):
        t.add_column(col, justify="left" if col in ("benchmark", "flags") else "right")
    for name, dg in rows:
        flags = ",".join(k for k, on in dg.flags.items() if on) or "-"
        ran = [c for c in dg.checks if c.passed is not None]
        t.add_row(
            name, str(dg.n_items), _pm(dg.ddm, dg.ddm_sd), _pm(dg.max_gap, dg.max_gap_sd), _pm(dg.top5_sum, dg.top5_sum_sd),
            f"{dg.uniform_baseline_ratio:.2f}x", flags, f"{sum(bool(c.passed) for c in ran)}/{len(ran)}",
        )
    return t


def plot_diagnosis(dg: Diagnosis, path: str | Path, n_gaps: int = 5) -> Path:
    """PNG: ECDF of normalised difficulty against the uniform, items on the axis, largest gaps shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchfill.io import atomic_write_bytes

    d = np.sort(dg.d_values())
    n = len(d)
    fig, ax = plt.subplots(figsize=(7.5, 5.0), dpi=120)
    for k, g in enumerate(dg.gaps[:n_gaps]):
        ax.axvspan(g.lo, g.hi, color="tab:red", alpha=0.18, lw=0, label="largest gaps" if k == 0 else None)
        ax.text(g.mid, 1.01, str(k + 1), ha="center", va="bottom", fontsize=8, color="tab:red")
    ax.plot([0, 1], [0, 1], color="0.4", ls="--", lw=1, label="uniform target")
    ax.step(np.concatenate([[0], d, [1]]), np.concatenate([[0], np.arange(1, n + 1) / n, [1]]), where="post",
            color="tab:blue", lw=1.6, label="ECDF of d")
    ax.plot(d, np.full(n, -0.03), "|", color="k", ms=10, alpha=0.6 if n < 500 else 0.15, label="items")
    ax.set_xlim(-0.01, 1.01)
    ax.set_ylim(-0.06, 1.06)
    ax.set_xlabel("normalised difficulty d (0 = easiest item, 1 = hardest)")
    ax.set_ylabel("share of items with difficulty <= d")
    name = Path(dg.source).name
    tag = " [MAP preview]" if dg.sampler.preview else ""
    ax.set_title(f"{name}: {dg.n_models} models x {n} items{tag}\n"
                 f"DDM {_pm(dg.ddm, dg.ddm_sd)}   max gap {_pm(dg.max_gap, dg.max_gap_sd)}   "
                 f"Top-5 {_pm(dg.top5_sum, dg.top5_sum_sd)}", fontsize=10)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
