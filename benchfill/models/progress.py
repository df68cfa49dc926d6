"""Terminal rendering for ``benchfill evaluate``: a live rich progress bar and the closing summary table."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from benchfill.models.client import CallResult, ClientStats
from benchfill.models.evaluate import EvaluationResult
from benchfill.models.evaluate import Progress as EvalProgress

SIM_BANNER = "SIMULATED: answers come from the offline simulated world (sim/... models), not from real LLMs"


def simulated_banner(console: Console) -> None:
    console.print(Panel(f"[bold yellow]{SIM_BANNER}[/]", border_style="yellow"), highlight=False)


def _stats_text(stats: ClientStats | None) -> str:
    if stats is None:
        return ""
    return (f"calls {stats.calls} | cached {stats.cached} | errors {stats.errors} | retries {stats.retries} | "
            f"tokens {stats.tokens_in:,}/{stats.tokens_out:,} | ${stats.cost:.4f}")


@contextmanager
def live_progress(console: Console, enabled: bool = True) -> Iterator[EvalProgress]:
    """An :class:`~benchfill.models.evaluate.Progress` wired to a rich bar (items, answers, calls, errors,
    tokens, cost); a no-op display when ``enabled`` is false or the console is not a terminal."""
    state = EvalProgress()
    if not enabled:
        yield state
        return
    bar = Progress(
        TextColumn("[bold]{task.description:<8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), TextColumn("{task.fields[stats]}"), console=console, transient=False,
        refresh_per_second=4,
    )
    items_task = bar.add_task("items", total=None, stats="")
    answers_task = bar.add_task("answers", total=None, stats="")

    def update(p: EvalProgress, result: CallResult | None) -> None:
        bar.update(items_task, completed=p.items_done, total=p.items_total)
        bar.update(answers_task, completed=p.answers_done, total=p.answers_total,
                   stats=_stats_text(p.stats))

    state.on_update = update
    with bar:
        yield state


def summary_table(result: EvaluationResult) -> Table:
    """Per-model accuracy, counted and skipped answers."""
    title = "evaluate" + (" [bold yellow](SIMULATED)[/]" if result.simulated else "")
    table = Table(title=title, title_justify="left")
    table.add_column("model")
    table.add_column("rollouts", justify="right")
    table.add_column("accuracy", justify="right")
    table.add_column("wrong: no answer / form", justify="right")
    table.add_column("skipped", justify="right")
    table.add_column("why skipped")
    for label in result.models:
        skipped = result.skipped.get(label, {})
        acc = result.accuracy.get(label)
        table.add_row(
            Text(label), str(result.rollouts[label]), "-" if acc is None else f"{acc:.3f}",
            str(sum(result.wrong_form.get(label, {}).values())), str(sum(skipped.values())),
            Text("; ".join(f"{k} x{v}" for k, v in skipped.items())),  # model and provider text: literal
        )
    return table


def print_summary(console: Console, result: EvaluationResult) -> None:
    console.print(summary_table(result))
    console.print(
        f"{result.n_items} items, {result.answers} answers: {result.counted} graded "
        f"({sum(sum(v.values()) for v in result.wrong_form.values())} of them wrong for no extractable answer, "
        f"wrong form or cut off), {result.answers - result.counted} skipped (not trials), "
        f"{result.call_errors} failed calls. "
        f"Calls made {result.calls_made}, from cache {result.cached}, retries {result.retries}; "
        f"tokens {result.tokens_in:,} in / {result.tokens_out:,} out; cost ${result.cost:.4f}.",
        highlight=False,
    )
    if result.items_without_gradable_answer:
        ids = ", ".join(result.items_without_gradable_answer[:10])
        more = len(result.items_without_gradable_answer) - 10
        console.print(f"[yellow]items with no gradable answer (left out of responses): {ids}"
                      f"{f' and {more} more' if more > 0 else ''}[/]", highlight=False)
    for err in result.first_errors:
        console.print(f"[red]call error:[/] {err}", highlight=False, soft_wrap=True)
    console.print(f"responses -> {result.responses_path}\ncall log  -> {result.calls_path}", highlight=False)
