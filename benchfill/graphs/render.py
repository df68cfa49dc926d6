"""Terminal views of a fill run: the live progress panel, the Table-2 summary, a gap's trace tree, the review queue."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from benchfill.memory.bank import REVIEW_APPROVALS_NEEDED
from benchfill.memory.views import GapTrace, ReviewEntry, ReviewItem
from benchfill.progress import Event


def _f(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


class FillLive:
    """A one-line live view: method, gap, round, best deviation, calls, cost (fed by the graph's events)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.state: dict[str, Any] = {}
        self._live = Live(self._render(), console=console, refresh_per_second=4, transient=True)

    def _render(self) -> Table:
        s = self.state
        t = Table.grid(padding=(0, 2))
        t.add_row(
            f"[bold]{s.get('method', 'benchfill')}[/]", f"gap {s.get('gap', '-')}", f"round {s.get('round', '-')}",
            f"step {s.get('node', '-')}", f"best |d - t| {_f(s.get('best_deviation'))}",
            f"P(within tol) {_f(s.get('best_p'), 2)}",
            f"calls {int(s.get('calls', 0))} ({int(s.get('cached', 0))} cached)", f"cost ${s.get('cost', 0.0):.4f}",
        )
        return t

    def update(self, progress: Event) -> None:
        """Show a node's report (the ``payload`` of the search's ``node`` events; other events are not its)."""
        if progress.kind != "node":
            return
        event: dict[str, Any] = progress.payload
        if event.get("node") == "propose_gaps":
            self.state.pop("best_deviation", None)
            self.state.pop("best_p", None)
        self.state.update({k: v for k, v in event.items() if v is not None})
        if event.get("node") == "finalize":
            gap = event.get("gap")
            if event.get("filled"):
                msg = f"gap {gap} filled, |d - t| = {_f(event.get('deviation'))}, P(inside) = {_f(event.get('p_inside'), 2)}"
            elif event.get("p_inside") is not None:
                msg = f"gap {gap}: placed near, P(inside) = {_f(event.get('p_inside'), 2)}"
            else:
                msg = f"gap {gap} left unfilled (no valid child)"
            self.console.print(f"[dim]{event.get('method')}:[/] {msg}")
        self._live.update(self._render())

    def __enter__(self) -> "FillLive":
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._live.__exit__(*exc)


def fill_summary_table(summary: dict[str, Any]) -> Group:
    """Table 2 of the paper for this run: one row per gap and method, then the Top-3 reductions per method."""
    sim = " [SIMULATED]" if summary.get("simulated") else ""
    t = Table(title=f"BenchFill: chosen items{sim}", title_justify="left")
    for col in ("method", "gap", "t", "d ± SD", "SD vs gap", "|d-t|", "P(inside)", "P(within tol)", "rounds",
                "calls", "cands", "cost $", "status"):
        t.add_column(col, justify="left" if col in ("method", "status") else "right")
    for method, m in summary["methods"].items():
        for g in m["gaps"]:
            chosen = "-" if g["chosen_d"] is None else f"{g['chosen_d']:.3f}±{g['chosen_d_sd']:.3f}"
            calls = f"{g.get('search_calls') or 0}+{g.get('confirm_calls') or 0}"
            t.add_row(method, str(g["gap"]), _f(g["target"]), chosen, _f(g.get("chosen_gap_sd")), _f(g["deviation"]),
                      _f(g.get("p_inside"), 2),
                      _f(g.get("p_within"), 2), str(g["rounds"]), calls, str(g["n_candidates"]),
                      f"{g['cost'] or 0:.3f}", g["status"])
    r = Table(title=f"Top-3 gap sum {summary['top3_before']:.3f} before{sim}", title_justify="left")
    for col in ("method", "reduction", "mean |d-t|", "candidates", "cost $"):
        r.add_column(col, justify="left" if col == "method" else "right")
    for method, m in summary["methods"].items():
        r.add_row(method, f"{100 * m['top3_reduction']:.1f} %", _f(m["mean_deviation"]), str(m["candidates"]),
                  f"{m['cost']:.3f}")
    r.add_row("oracle", f"{100 * summary['oracle']['top3_reduction']:.1f} %", "0.000", "", "")
    notes = [Text(f"{method} gap {g['gap']}: {g['note']}", "dim") for method, m in summary["methods"].items()
             for g in m["gaps"] if g.get("note")]
    legend = Text("filled: P(d inside the gap) >= the level [fill] fill_level; near: a child was chosen below it; "
                  "d ± SD: on the axis, its ends' uncertainty included; SD vs gap: relative to the gap's edges (the "
                  "ends move them with the item), what P(inside) reads; calls: search + confirmation panel calls",
                  "dim")
    return Group(t, legend, *notes, r)


def trace_tree(data: GapTrace, full: bool = False) -> Tree:
    """A gap's search as a tree: rounds -> parents -> children with verdict, panel counts and placement.

    Model- and user-written text (questions, judge reasons, errors, ids) goes in as :class:`rich.text.Text`, never
    as markup: ``[/INST]`` in an answer is printed as written. ``full`` prints whole questions (else 70 chars)."""
    head = Text.assemble((f"{data.method} gap {data.gap}", "bold"),
                         f": [{_f(data.lo)}, {_f(data.hi)}] target {_f(data.target)}, {data.status}")
    if data.chosen:
        head.append(f", chosen {data.chosen} d = {_f(data.chosen_d)} ± {_f(data.chosen_d_sd)}")
        if data.p_inside is not None:
            head.append(f", P(inside) {data.p_inside:.2f}, P(|d - t| <= {_f(data.tolerance)}) "
                        f"{_f(data.p_within, 2)}")
    u = data.usage
    head.append(f"  (calls {int(u.calls)}, tokens {int(u.tokens)}, cost ${u.cost:.4f})")
    if data.simulated:
        head.append(" SIMULATED", "yellow")
    tree = Tree(head)
    for r in data.rounds:
        ru = r.usage
        branch = tree.add(Text(f"round {r.round}  (calls {int(ru.calls)}, cost ${ru.cost:.4f})"))
        for p in r.parents:
            pb = branch.add(Text(f"parent {p.id} ({p.kind}, d = {_f(p.d)})"))
            for c in (c for c in r.children if c.parent == p.id):
                text = " ".join((c.question or "").split())
                if not full:
                    text = text[:70]
                line = Text(f"{c.id}: {c.status}")
                if c.d is not None:
                    line.append(f"  d = {c.d:.3f} ± {_f(c.d_sd)}  |d - t| = {_f(c.deviation)}")
                    if c.p_inside is not None:
                        line.append(f"  P(inside) {c.p_inside:.2f}  P(within tol) {_f(c.p_within, 2)}")
                if c.counts:
                    k = sum(v[0] for v in c.counts.values())
                    n = sum(v[1] for v in c.counts.values())
                    line.append(f"  panel {k}/{n}")
                if c.labelling:
                    line.append(f"  adaptive: {c.labelling} ({c.label_note or ''})")
                if c.prescreen_d is not None:
                    line.append(f"  pre-screen d = {c.prescreen_d:.3f}")
                if c.verdict and not c.valid:
                    line.append(f"  judge: {str(c.verdict.get('reason', ''))[:60]}")
                if c.error:
                    line.append(f"  {str(c.error)[:60]}", "red")
                if c.id == data.chosen:
                    line.append(" <- chosen")
                    line.stylize("bold green")
                line.append("\n")
                line.append(text, "dim")
                pb.add(line)
    return tree


def review_table(queue: list[ReviewEntry]) -> Table:
    """The review queue, one row per chosen item (text printed literally)."""
    t = Table(title=f"review queue (accepted after {REVIEW_APPROVALS_NEEDED} approvals and no standing rejection; "
                    "details: --show ID)", title_justify="left")
    for col in ("candidate", "gap", "target", "d ± SD", "P(inside)", "approvals", "rejections", "status", "question"):
        t.add_column(col)
    for q in queue:
        t.add_row(Text(str(q.candidate)), str(q.gap), _f(q.target), f"{_f(q.d)} ± {_f(q.d_sd)}",
                  _f(q.p_inside, 2),
                  str(q.approvals), str(q.rejections), str(q.status),
                  Text(" ".join(str(q.question).split())[:80]))
    return t


def review_detail(d: ReviewItem) -> Group:
    """One queued item in full: question, reference answer, judge verdict and reason, panel counts per model,
    placement with its interval against the target and tolerance, the votes."""
    lines: list[Any] = []
    head = Text.assemble((f"candidate {d.candidate}", "bold"), f"  gap {d.gap}  status {d.status} "
                         f"({d.approvals} approval(s), {d.rejections} rejection(s); {d.rule})")
    if d.simulated:
        head.append("  SIMULATED", "yellow")
    lines.append(head)
    lines.append(Text("question:", "bold"))
    lines.append(Text(d.question or ""))
    lines.append(Text.assemble(("reference answer: ", "bold"), d.answer or ""))
    v = d.verdict or {}
    lines.append(Text.assemble(("judge: ", "bold"), f"{d.judge or '-'}: "
                               f"{'valid' if d.valid else 'invalid'}; {v.get('reason', '') or 'no reason given'}"))
    p = d.placement
    lines.append(Text.assemble(("placement: ", "bold"),
                               f"d = {_f(p.d)} ± {_f(p.d_sd)}, 90 % interval [{_f(p.d_lo)}, {_f(p.d_hi)}]; "
                               f"target {_f(p.target)} ± tolerance {_f(p.tolerance)} in gap "
                               f"[{_f(p.lo)}, {_f(p.hi)}]; |d - t| = {_f(p.deviation)}; b = {_f(p.b)} ± "
                               f"{_f(p.b_sd)}; P(inside the gap) = {_f(p.p_inside, 2)}, "
                               f"P(within tolerance) = {_f(p.p_within, 2)}"))
    lines.append(Text.assemble(("rewriter: ", "bold"), f"{d.rewriter or '-'}; parent {d.parent or '-'}"))
    t = Table(title="panel counts per model", title_justify="left")
    for col in ("model", "correct", "trials", "accuracy"):
        t.add_column(col, justify="left" if col == "model" else "right")
    for model, (k, n) in sorted((d.counts or {}).items()):
        t.add_row(Text(str(model)), str(k), str(n), f"{k / n:.2f}" if n else "-")
    lines.append(t)
    if d.reviews:
        r = Table(title="reviews", title_justify="left")
        for col in ("reviewer", "decision", "note"):
            r.add_column(col)
        for rv in d.reviews:
            r.add_row(Text(str(rv.reviewer)), str(rv.decision), Text(str(rv.note or "")))
        lines.append(r)
    return Group(*lines)
