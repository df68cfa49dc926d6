"""Rendering of a designer evaluation: the rich leaderboard, the preference and across-designer tables, and the
PNG heatmap of the designer x answerer accuracy matrix (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from rich import box
from rich.table import Table


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
    preservation, preferences, design score."""
    title = f"designer leaderboard: {report['card']['name']}"
    if report.get("simulated"):
        title += " [bold yellow](SIMULATED)[/]"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0))
    for col in ("designer", "core/n", "broken", "TVD", "mean b", "1-acc", "discr", "tau", "self", "family",
                "score"):
        t.add_column(col, justify="left" if col == "designer" else "right", no_wrap=True)
    for row in leaderboard_rows(report):
        def pref(p: Mapping[str, Any] | None) -> str:
            if not p or p.get("estimate") is None:
                return "-"
            mark = "[bold red]*[/]" if p.get("detected") else ""
            return f"{100 * p['estimate']:+.1f}{mark}"

        t.add_row(
            f"{row['designer']} ({row['family']})", f"{row['n_core']}/{row['n_suite']}", _pct(row["broken_rate"]),
            _num(row["mean_tvd"], "{:.2f}"), _num(row["difficulty"].get("mean_b"), "{:+.2f}"),
            _pct(row["difficulty"].get("error_rate"), 0), _num(row["discrimination"].get("mean"), "{:.2f}"),
            _num(row["ranking"].get("r"), "{:+.2f}"), pref(row.get("self_preference")),
            pref(row.get("family_preference")), _num(row.get("design_score"), "{:.2f}"),
        )
    t.caption = ("designer (family); core/n = core items / suite; broken = non-core share of the suite; TVD = mean total variation distance to the quotas (4 axes); "
                 "mean b = IRT difficulty, joint scale (logits); discr = mean corrected item-rest point-biserial; "
                 "tau = Kendall tau of the answerer ranking vs the seed benchmark; self / family = preference "
                 "(difference in differences, accuracy points; * detected, Bonferroni); duplicates: report.json")
    return t


def preference_table(report: Mapping[str, Any]) -> Table:
    t = Table(title="self / family preference (difference in differences on the accuracy matrix)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("kind", "designer", "answerers", "DiD", "95% CI", "p", "detected"):
        t.add_column(col, justify="left" if col in ("kind", "designer", "answerers") else "right",
                     no_wrap=col != "answerers")
    for p in report.get("preferences", []):
        est = p.get("estimate")
        ci = "-" if p.get("ci_low") is None else f"[{100 * p['ci_low']:+.1f}, {100 * p['ci_high']:+.1f}]"
        t.add_row(p["kind"], p["designer"], ", ".join(p["answerers"]), "-" if est is None else f"{100 * est:+.1f}",
                  ci, "-" if p.get("p_value") is None else f"{p['p_value']:.3g}",
                  "[bold red]yes[/]" if p.get("detected") else "no")
    t.caption = "DiD and CI in accuracy points; detected: p < alpha / number of tests (Bonferroni)"
    if not report.get("preferences"):
        t.caption = "no test possible: needs >= 2 designers, and a designer's own model or family on the panel"
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
                 n_items: Sequence[int] | None = None, simulated: bool = False, title: str = "") -> Path:
    """Heatmap of A (D designers x J answerers, accuracy in [0, 1], NaN blank), cells annotated, families in the
    tick labels; written atomically as PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchfill.io import atomic_write_bytes

    D, J = A.shape if A.size else (len(designers), len(answerers))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.0 + 0.75 * J), max(3.0, 1.4 + 0.5 * D)), dpi=120)
    data = np.ma.masked_invalid(A.astype(float)) if A.size else np.ma.masked_all((D, J))
    im = ax.imshow(data, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xticks(range(J))
    ax.set_xticklabels([f"{a}\n({f})" if answerer_family else a
                        for a, f in zip(answerers, answerer_family or [""] * J)], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(D))
    ax.set_yticklabels([f"{d} ({f})" + (f" n={n}" if n_items else "")
                        for d, f, n in zip(designers, designer_family or [""] * D, n_items or [0] * D)], fontsize=8)
    for i in range(D):
        for j in range(J):
            v = A[i, j] if A.size else np.nan
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v < 0.6 else "black")
    ax.set_xlabel("answerer")
    ax.set_ylabel("designer")
    ax.set_title((("SIMULATED - " if simulated else "") + (title or "designer x answerer accuracy")), fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04, label="accuracy on core items")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
