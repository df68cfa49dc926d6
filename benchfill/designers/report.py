"""Rendering of a designer evaluation: the rich leaderboard, the preference and across-designer tables, and the
PNG heatmap of the designer x answerer accuracy matrix (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from rich import box
from rich.table import Table
from rich.text import Text


def _pct(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * float(x):.{digits}f}%"


def _num(x: Any, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(float(x))


def leaderboard_rows(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Designers ordered as the leaderboard shows them: lowest broken rate first, then highest discrimination."""
    def key(row: Mapping[str, Any]) -> tuple[float, float, str]:
        br = row.get("broken_rate")
        disc = row["discrimination"].get("mean")
        return (1.0 if br is None else br, -(disc if disc is not None else -1.0), row["designer"])

    return sorted(report["designers"], key=key)


def leaderboard_table(report: Mapping[str, Any]) -> Table:
    """One row per designer: suite size, broken rate, spec alignment, difficulty, discrimination, ranking
    preservation, preferences, self-ranking, design score."""
    title = f"designer leaderboard: {report['card']['name']}"
    if report.get("simulated"):
        title += " [bold yellow](SIMULATED)[/]"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0))
    for col in ("designer", "core/n", "broken", "TVD", "difficulty", "1-acc", "discr", "tau", "calib", "self",
                "family", "self rank", "score"):
        t.add_column(col, justify="left" if col == "designer" else "right", no_wrap=True)
    for row in leaderboard_rows(report):
        def pref(p: Mapping[str, Any] | None) -> str:
            if not p or p.get("estimate") is None:
                return "-"
            mark = "[bold red]*[/]" if p.get("detected") else ""
            return f"{p['estimate']:+.2f}{mark}"

        def self_rank(r: Mapping[str, Any] | None) -> str:
            if not r or r.get("rank") is None:
                return "-"
            lo, hi = (r.get("rank_ci") or [None, None])[:2]
            ref = r.get("seed_rank") if r.get("reference") == "seed" else r.get("ability_rank")
            return (f"{r['rank']:g}" + ("" if lo is None or hi is None else f" \\[{lo:g},{hi:g}]")
                    + ("" if ref is None else f" vs {ref:g}") + ("[bold red]*[/]" if r.get("detected") else ""))

        iv = row.get("intervals") or {}

        def ci(key: str, fmt: str, scale: float = 1.0) -> str:
            lo, hi = (iv.get(key) or [None, None])[:2]
            return "" if lo is None or hi is None else f" \\[{fmt.format(scale * lo)},{fmt.format(scale * hi)}]"

        eff = (row["difficulty"].get("designer_effect") or {})
        diff = "-" if eff.get("mean") is None else (
            f"{eff['mean']:+.2f} [{eff['mean_ci'][0]:+.2f},{eff['mean_ci'][1]:+.2f}]")
        cal = row.get("calibration") or {}
        if cal.get("error") is not None:
            calib = f"{cal['error']:.2f}"
        elif cal.get("spearman") is not None:
            calib = f"rho {cal['spearman']:+.2f}"
        else:
            calib = "-"
        t.add_row(
            Text(f"{row['designer']} ({row['family']})"), f"{row['n_core']}/{row['n_suite']}",
            _pct(row["broken_rate"]) + ci("broken_rate", "{:.0f}", 100),
            _num(row["mean_tvd"], "{:.2f}") + ci("mean_tvd", "{:.2f}"), diff,
            _pct(row["difficulty"].get("error_rate"), 0) + ci("error_rate", "{:.0f}", 100),
            _num(row["discrimination"].get("mean"), "{:.2f}") + ci("discrimination", "{:.2f}"),
            _num(row["ranking"].get("r"), "{:+.2f}") + ci("kendall_tau", "{:+.2f}"), calib,
            pref(row.get("self_preference")), pref(row.get("family_preference")), self_rank(row.get("self_ranking")),
            _num(row.get("design_score"), "{:.2f}"),
        )
    t.caption = ("designer (family); core/n = core items / suite; \\[lo,hi] = 95 % item-bootstrap intervals; broken = "
                 "non-core share of the suite (%); TVD = mean total variation distance to the quotas (4 axes); "
                 "difficulty = designer-level IRT effect mu + beta mean(L - 3) on the joint scale (logits, 95 % CI); "
                 "discr = mean corrected item-rest point-biserial; tau = Kendall tau of the answerer ranking vs the "
                 "seed benchmark; calib = mean |shift| per level vs the seed benchmark's per-level difficulty "
                 "(logits), else rho = Spearman of requested level vs difficulty; self / family = preference "
                 "(logit interaction vs the out-of-family answerers: own answerer / the family's other answerers; "
                 "* detected, Bonferroni); self rank = the own answerer's rank on this suite (1 = best) \\[95 % "
                 "item-bootstrap] vs its rank on the seed benchmark (else by the joint fit's ability; * detected: "
                 "ranked higher here, one-sided bootstrap, Bonferroni); by level: report.json calibration.by_level")
    return t


def preference_table(report: Mapping[str, Any]) -> Table:
    t = Table(title="self / family preference (item-level logit interaction, adjusted for ability and difficulty)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("kind", "designer", "answerers", "logit", "95% CI", "p", "detected", "acc DiD"):
        t.add_column(col, justify="left" if col in ("kind", "designer", "answerers") else "right",
                     no_wrap=col != "answerers")
    for p in report.get("preferences", []):
        est = p.get("estimate")
        ci = "-" if p.get("ci_low") is None else f"[{p['ci_low']:+.2f}, {p['ci_high']:+.2f}]"
        ref = p.get("accuracy_did") or {}
        t.add_row(p["kind"], Text(p["designer"]), Text(", ".join(p["answerers"])), "-" if est is None else f"{est:+.2f}",
                  ci, "-" if p.get("p_value") is None else f"{p['p_value']:.3g}",
                  "[bold red]yes[/]" if p.get("detected") else "no",
                  "-" if ref.get("estimate") is None else f"{100 * ref['estimate']:+.1f}")
    t.caption = ("logit and CI: interaction of the designer's items with its own answerer (self), its family's other "
                 "answerers (family) or both (family_incl_self: their answer-weighted mean), each against the "
                 "answerers outside its family; detected: p < alpha / number of tests (Bonferroni, every row "
                 "counted); acc DiD: the accuracy-scale difference in differences (points; biased by difficulty and "
                 "ability, not tested)")
    if not report.get("preferences"):
        t.caption = "no test possible: needs >= 2 designers, and a designer's own model or family on the panel"
    return t


def calibration_table(report: Mapping[str, Any]) -> Table:
    """Per designer and requested level: items, mean b (joint scale) and the shift against the seed benchmark."""
    t = Table(title="calibration by requested level (mean b, logits; shift vs the seed benchmark's level)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("designer")
    for L in ("L1", "L2", "L3", "L4", "L5"):
        t.add_column(L, justify="right", no_wrap=True)
    t.add_column("slope [95% CI]", justify="right", no_wrap=True)
    t.add_column("rho", justify="right")
    seed = (report.get("joint_fit") or {}).get("seed_by_level") or {}
    if seed:
        t.add_row("seed", *[("-" if seed.get(L) is None else f"{seed[L]:+.2f}") for L in ("L1", "L2", "L3", "L4", "L5")],
                  "", "")
    for row in report["designers"]:
        cal = row.get("calibration") or {}
        by = cal.get("by_level") or {}
        cells = []
        for L in ("L1", "L2", "L3", "L4", "L5"):
            c = by.get(L)
            if not c:
                cells.append("-")
            else:
                cells.append(f"{c['mean_b']:+.2f}" + (f" ({c['shift']:+.2f})" if c.get("shift") is not None else "")
                             + f" n={c['n']}")
        eff = (row["difficulty"].get("designer_effect") or {})
        slope = "-" if eff.get("beta") is None else f"{eff['beta']:+.2f} [{eff['beta_ci'][0]:+.2f},{eff['beta_ci'][1]:+.2f}]"
        t.add_row(Text(row["designer"]), *cells, slope, _num(cal.get("spearman"), "{:+.2f}"))
    t.caption = "slope: designer-level logits per requested level (0 = the level is ignored, < 0 = inverted)"
    return t


def breakdown_table(report: Mapping[str, Any]) -> Table:
    """Per designer: broken rate and error rate (1 - mean correct) by requested format and intent, and the
    generation-order effect (broken rate of the first / last third of its replies, slope with 95 % CI and p)."""
    t = Table(title="breakdowns: broken % / error % by format and intent; generation order (broken rate by place in "
                    "the reply)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    rows = report["designers"]
    formats = sorted({f for r in rows for f in (r.get("breakdown") or {}).get("format", {})})
    intents = sorted({f for r in rows for f in (r.get("breakdown") or {}).get("intent", {})})
    t.add_column("designer")
    for f in formats + intents:
        t.add_column(f, justify="right", no_wrap=True)
    t.add_column("first / last third", justify="right", no_wrap=True)
    t.add_column("order slope [95% CI]", justify="right", no_wrap=True)
    t.add_column("p", justify="right")

    def cell(c: Mapping[str, Any] | None) -> str:
        if not c:
            return "-"
        err = "-" if c.get("error_rate") is None else f"{100 * c['error_rate']:.0f}"
        return f"{_pct(c.get('broken_rate'), 0)[:-1]} / {err} n={c['n_suite']}"

    for row in rows:
        bd = row.get("breakdown") or {}
        go = row.get("generation_order") or {}
        thirds = go.get("by_third") or {}
        first, last = (thirds.get(k, {}).get("broken_rate") for k in ("first", "last"))
        ci = go.get("ci") or [None, None]
        slope = "-" if go.get("slope") is None else (
            f"{100 * go['slope']:+.0f} pts" + ("" if ci[0] is None else f" [{100 * ci[0]:+.0f},{100 * ci[1]:+.0f}]")
            + ("[bold red]*[/]" if go.get("detected") else ""))
        t.add_row(Text(row["designer"]), *[cell(bd.get("format", {}).get(f)) for f in formats],
                  *[cell(bd.get("intent", {}).get(f)) for f in intents],
                  f"{_pct(first, 0)} / {_pct(last, 0)}", slope, _num(go.get("p_value"), "{:.3g}"))
    t.caption = ("format / intent cells: broken % / error % of the core items, n = suite items asked for; order slope: "
                 "change of the broken rate from the first to the last item of a reply (percentage points; > 0 = "
                 "quality falls the later an item is written; * detected: permutation p < alpha / designers, "
                 "Bonferroni); by level and by place: report.json breakdown")
    return t


def across_table(report: Mapping[str, Any]) -> Table:
    t = Table(title="across designers", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("relation")
    t.add_column("r", justify="right")
    t.add_column("p", justify="right")
    t.add_column("n", justify="right")
    across = report["across_designers"]

    def add(name: str, c: Mapping[str, Any]) -> None:
        t.add_row(name, _num(c.get("r"), "{:+.2f}"), _num(c.get("p_value"), "{:.3g}"), str(c.get("n", 0)))

    add("design score vs answering ability (Spearman)", across["design_vs_answering"])
    for name, c in across["components_vs_answering"].items():
        add(f"  {name} vs answering ability (Spearman)", c)
    add("broken rate vs discrimination (Pearson)", across["broken_vs_discrimination"])
    t.caption = "paper (BenchBench): design vs answering rho ~ 0.37; broken vs discrimination r ~ -0.62"
    return t


def plot_heatmap(A: np.ndarray, designers: Sequence[str], answerers: Sequence[str], path: str | Path, *,
                 designer_family: Sequence[str] | None = None, answerer_family: Sequence[str] | None = None,
                 n_items: Sequence[int] | None = None, simulated: bool = False, title: str = "",
                 residual: np.ndarray | None = None, marks: Sequence[Sequence[str]] | None = None) -> Path:
    """Heatmap of A (D designers x J answerers, accuracy in [0, 1], NaN blank), cells annotated, families in the
    tick labels; with ``residual`` (D, J) a second panel shows observed - expected accuracy under the joint model
    without interactions (the interaction); ``marks`` ("self" / "family" / "") outlines those cells (solid / dashed).
    Written atomically as PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from benchfill.io import atomic_write_bytes

    D, J = A.shape if A.size else (len(designers), len(answerers))
    panels = 2 if residual is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(panels * max(5.0, 1.0 + 0.75 * J), max(3.0, 1.4 + 0.5 * D)),
                             dpi=120, squeeze=False)
    xt = [f"{a}\n({f})" if answerer_family else a for a, f in zip(answerers, answerer_family or [""] * J)]
    yt = [f"{d} ({f})" + (f" n={n}" if n_items else "")
          for d, f, n in zip(designers, designer_family or [""] * D, n_items or [0] * D)]

    def draw(ax, M_, vmin, vmax, cmap, fmt, label):
        data = np.ma.masked_invalid(M_.astype(float)) if M_.size else np.ma.masked_all((D, J))
        im = ax.imshow(data, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto")
        ax.set_xticks(range(J))
        ax.set_xticklabels(xt, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(D))
        ax.set_yticklabels(yt, fontsize=8)
        for i in range(D):
            for j in range(J):
                v = M_[i, j] if M_.size else np.nan
                if np.isfinite(v):
                    dark = (v < 0.6) if cmap == "viridis" else abs(v) > 0.6 * vmax
                    ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=7,
                            color="white" if dark else "black")
                kind = marks[i][j] if marks is not None else ""
                if kind:
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=2.0, ec="red",
                                           ls="-" if kind == "self" else "--"))
        ax.set_xlabel("answerer")
        ax.set_ylabel("designer")
        fig.colorbar(im, ax=ax, fraction=0.04, label=label)

    prefix = "SIMULATED - " if simulated else ""
    draw(axes[0, 0], A, 0.0, 1.0, "viridis", "{:.2f}", "accuracy on core items")
    axes[0, 0].set_title(prefix + (title or "designer x answerer accuracy"), fontsize=9)
    if residual is not None:
        lim = max(0.05, float(np.nanmax(np.abs(residual))) if np.isfinite(residual).any() else 0.05)
        draw(axes[0, 1], residual, -lim, lim, "RdBu_r", "{:+.2f}", "observed - expected accuracy")
        axes[0, 1].set_title(prefix + "residual: accuracy beyond ability and difficulty"
                             + ("\n(red box: self, dashed: family)" if marks is not None else ""), fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
