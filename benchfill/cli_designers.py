"""``benchfill designers ...``: evaluate LLMs as benchmark designers (BenchBench, benchfill/designers/README.md).

    benchfill designers card examples/math500.items.jsonl --out runs/m500.card.yaml
    benchfill designers run --card runs/m500.card.yaml --quotas examples/quotas.yaml \\
        --config examples/designers.toml --out runs/dz
    benchfill designers rewriters runs/fill-a runs/fill-b

``benchfill.cli`` mounts it with one ``add_typer`` line; both share :mod:`benchfill.cli_support`.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from benchfill.cli_support import console, friendly_errors, result_console, write_json_result
from benchfill.options import DESIGNERS_RUN, DesignersRunOptions

designers_app = typer.Typer(add_completion=False, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
                            help="Evaluate LLMs as benchmark designers (BenchBench): domain card, quota-controlled "
                                 "suites, panel validation, designer leaderboard; rewriters of fill runs too.")


@designers_app.command("card")
@friendly_errors
def card_cmd(
    items: Path = typer.Argument(..., help="seed benchmark items (JSONL: id, question, answer[, choices, metadata])"),
    out: Path = typer.Option(..., "--out", "-o", help="where to write the domain card (YAML)"),
    config: Optional[Path] = typer.Option(None, "--config", "-c",
                                          help="designers config; its [card] model labels the items (optional)"),
    name: Optional[str] = typer.Option(None, help="benchmark name (default: from the file name)"),
    language: Optional[str] = typer.Option(None, help="ISO 639-1 language code (default: detected)"),
    max_categories: int = typer.Option(8, help="super-categories of the keyword fallback"),
    examples: int = typer.Option(12, help="example items in the card"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write the card as JSON (- = stdout)"),
) -> None:
    """Extract a domain card: ontology with counts, glossary, examples, formats, levels, modality, language."""
    from benchfill.api import designers_card

    with console.status("extracting the domain card ..."):
        card = designers_card(items, out, config=config, name=name, language=language,
                              max_categories=max_categories, examples=examples)
    from rich.table import Table
    from rich.text import Text

    title = Text(f"domain card {card.name}: {card.n_items} items, {card.language}, {card.modality}")
    if card.simulated:
        title.append(" (SIMULATED labels)", style="bold yellow")
    t = Table(title=title, title_justify="left")
    t.add_column("category")
    t.add_column("items", justify="right")
    t.add_column("sub-domains")
    for node in card.ontology:
        t.add_row(Text(node.name), str(node.count), Text(", ".join(f"{s.name} ({s.count})" for s in node.subdomains)))
    con = result_console(json_out)
    con.print(t)
    con.print(f"formats {card.formats}; levels {card.difficulty_levels or 'unknown'}; "
              f"{len(card.glossary)} glossary terms; {len(card.examples)} examples ({card.method.get('categories')})")
    con.print(f"wrote {out}")
    write_json_result(json_out, card.model_dump_json(indent=2) + "\n", note=con)


@designers_app.command("run")
@friendly_errors(resume_hint="finished stages and answers so far are kept; rerun the same command to continue")
def run_cmd(
    card: Path = typer.Option(..., "--card", help="domain card (YAML) from `benchfill designers card`"),
    quotas: Path = typer.Option(..., "--quotas", help="quota file (YAML): total, super_categories, formats, "
                                                     "difficulty, intent"),
    config: Path = typer.Option(..., "--config", "-c", help="designers config (TOML/YAML): [[designers]], "
                                                            "[[panel]], [judge]"),
    out: Path = typer.Option(..., "--out", "-o", help="run folder (resumable: rerun the same command)"),
    seed_responses: Optional[Path] = typer.Option(DESIGNERS_RUN.seed_responses, "--seed-responses",
                                                  help="answerers' responses on the seed benchmark (long CSV/JSONL); "
                                                       "default: the panel answers the card's seed items"),
    seed_items: Optional[Path] = typer.Option(DESIGNERS_RUN.seed_items, "--seed-items", help="seed items to answer (default: the card's "
                                                                          "source file)"),
    seed_limit: Optional[int] = typer.Option(DESIGNERS_RUN.seed_limit, "--seed-limit", help="answer only the first N seed items"),
    irt: Optional[str] = typer.Option(DESIGNERS_RUN.irt, "--irt", help="IRT inference for the joint difficulty scale: map "
                                                          "(default), fast, pymc, nutpie"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write report.json's content here (- = stdout)"),
) -> None:
    """Every designer writes a quota-controlled suite; every answerer answers every item; checks and the judge
    build the core set; the leaderboard, report.json, matrix.csv and heatmap.png go to the run folder."""
    from rich.markup import escape

    from benchfill.api import designers_run
    from benchfill.designers.quotas import load_quotas, quota_warnings
    from benchfill.designers.report import (
        across_table,
        breakdown_table,
        calibration_table,
        leaderboard_table,
        preference_table,
    )
    from benchfill.designers.results import SIM_NOTE

    opts = DesignersRunOptions(seed_responses=seed_responses, seed_items=seed_items, seed_limit=seed_limit, irt=irt)
    for line in quota_warnings(load_quotas(quotas), str(quotas)):
        result_console(json_out).print(f"[yellow]warning: {escape(line)}[/]", highlight=False)
    with console.status("designer evaluation ...") as status:
        result = designers_run(card, quotas, config, out, **opts.keywords(),
                               on_event=lambda event: status.update(event.message))
    report = result.report.model_dump(mode="json")
    con = result_console(json_out)
    if result.report.simulated:
        con.print(f"[bold yellow]{SIM_NOTE}[/]")
    con.print(leaderboard_table(report))
    con.print(preference_table(report))
    con.print(calibration_table(report))
    con.print(breakdown_table(report))
    con.print(across_table(report))
    if result.report.seed is None:
        con.print("[yellow]no seed-benchmark accuracies: ranking preservation (tau) not computed[/]")
    write_json_result(json_out, result.report.model_dump_json(indent=2) + "\n", note=con)
    u = result.usage
    skipped = f"; stages reused: {', '.join(result.skipped_stages)}" if result.skipped_stages else ""
    con.print(f"calls made {u.calls_made}, cached {u.cached}, errors {u.errors}, cost ${u.cost:.4f}{skipped}")
    con.print(f"wrote {out}/report.json, matrix.csv, heatmap.png, core.jsonl")


@designers_app.command("rewriters")
@friendly_errors
def rewriters_cmd(
    runs: List[Path] = typer.Argument(..., help="fill run folders (each with memory.sqlite)"),
    method: str = typer.Option("benchfill", help="which search's gaps to score (benchfill, baseline)"),
    tolerance: Optional[float] = typer.Option(None, help="|d - t| that counts as on target (default: each run's)"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="write the report as JSON here (- = stdout)"),
) -> None:
    """Rank BenchFill rewriters like designers: gap-fill success, mean deviation |d - t|, cost per filled gap."""
    from benchfill.api import designers_rewriters
    from benchfill.designers.rewriters import rewriter_table

    report = designers_rewriters(runs, method=method, tolerance=tolerance)
    con = result_console(json_out)
    con.print(rewriter_table(report))
    write_json_result(json_out, report.model_dump_json(indent=2) + "\n", note=con)
