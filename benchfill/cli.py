"""The `benchfill` command line: thin wrappers that parse options, call the library and render results.

Every command turns :class:`benchfill.errors.InputError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from benchfill import options
from benchfill.cli_support import (
    JsonFlagCommand,
    StatusLine,
    console,
    err_console,
    friendly_errors,
    install_sigint_handler,
    lit,
    quiet_worker_start,
    result_console,
    write_json_result,
)
from benchfill.errors import InputError
from benchfill.progress import Event, OnEvent

if TYPE_CHECKING:
    from benchfill.diagnostics.picture import Painter

# help as wide as the terminal up to 120 columns (click's default of 80 cut each command's summary at ~60)
HELP_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 120}
app = typer.Typer(add_completion=False, no_args_is_help=True, help="Benchmarks as empirical measures over difficulty.",
                  context_settings=HELP_CONTEXT)


def _print_version(value: bool) -> None:
    if value:
        from benchfill import __version__

        typer.echo(f"benchfill {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """benchfill: estimate item difficulty with IRT, diagnose difficulty coverage, fill the gaps with LLMs."""
    install_sigint_handler()


# ---- commands are added below, one block each -------------------------------------------------------------

# ---- diagnose / suite / calibrate ------------------------------------------------------------------------

PRIOR_HELP = ("the difficulties' prior: spline (a population learned from the benchmark, log-spline: holes and "
              "tails; default), normal (learned N(mu, sigma)) or paper (the paper's fixed N(0, 1), for its tables)")
CHAINS_HELP = "posterior chains (the paper: 4)"
TUNE_HELP = "warm-up steps per chain (the fast sampler discards at most 100: an independence chain needs no more)"
DRAWS_HELP = "kept posterior draws per chain (the paper: 1,000)"
SEED_HELP = "random seed: the same seed and inputs give the same result"
MODELS_FILE_HELP = "keep exactly these models (one name per line)"
SAMPLER_HELP = "IRT inference: fast (exact: quadrature + independence MH on the abilities; default), pymc (reference NUTS), nutpie, numpyro, map (quick preview)"

# the IRT fit's flags, declared once for diagnose and suite; their defaults are the fit options' (benchfill.options),
# as are the API's keywords'
SAMPLER = typer.Option(options.FIT.sampler, help=SAMPLER_HELP)
CHAINS = typer.Option(options.FIT.chains, help=CHAINS_HELP)
TUNE = typer.Option(options.FIT.tune, help=TUNE_HELP)
DRAWS = typer.Option(options.FIT.draws, help=DRAWS_HELP)
SEED = typer.Option(options.FIT.seed, help=SEED_HELP)
CHOICES = typer.Option(options.FIT.choices, help="every item is k-option multiple choice: c = 1/k")
PRIOR = typer.Option(options.FIT.prior, "--prior", help=PRIOR_HELP)
MODELS_FILE = typer.Option(None, help=MODELS_FILE_HELP)


def _panel(responses_path: Path, items_path: Path | None, models: int | None, models_file: Path | None):
    from benchfill.importers import load_panel

    return load_panel(responses_path, items_path, models, models_file)


def _selection_note(resp, out=None) -> None:
    """Say which models were kept when a subset was taken (diagnose and fill use the same rule)."""
    sel = resp.meta.get("selection")
    if resp.meta.get("selection_note"):
        (out or err_console).print(resp.meta["selection_note"], markup=False, highlight=False, soft_wrap=True)
    if sel:
        (out or err_console).print(
            f"kept {len(sel['kept'])} of {sel['of']} models ({sel['rule']}): {', '.join(sel['kept'])}",
            markup=False, highlight=False, soft_wrap=True)


def _diagnosis_progress(status: StatusLine, painter: Painter, n_gaps: int) -> OnEvent:
    """The diagnosis' events on the command line: each stage on the status line, the picture (its first ``n_gaps``
    gaps shaded) to the painter."""

    def on_event(event: Event) -> None:
        if event.kind == "stage":
            status.stage(event.message)
        elif event.kind == "picture":
            painter.draw(replace(event.payload, gaps=event.payload.gaps[:n_gaps]))

    return on_event


def _quiet_workers_if_served() -> None:
    """The fit's workers are forked when no other thread runs (the status line runs none); only where they must
    come from a fork server is it started now, Ctrl-C-proof (starting one costs a second of another core)."""
    from benchfill.forking import start_method

    if start_method() != "fork":
        quiet_worker_start()


@app.command()
@friendly_errors
def diagnose(
    responses: Path = typer.Argument(..., help="response file: long CSV/JSONL (model,item_id,n_correct,n_trials) or wide 0/1"),
    items: Optional[Path] = typer.Option(None, help="items JSONL: checks item ids; multiple choice gets c = 1/k"),
    models: Optional[int] = typer.Option(None, help="keep this many models spread evenly by accuracy (paper: 12; default: all; fill's default is 12, same rule)"),
    models_file: Optional[Path] = MODELS_FILE,
    sampler: str = SAMPLER,
    chains: int = CHAINS,
    tune: int = TUNE,
    draws: int = DRAWS,
    seed: int = SEED,
    guessing: Optional[float] = typer.Option(options.DIAGNOSE.guessing, help="fixed guessing rate c for every item"),
    choices: Optional[int] = CHOICES,
    prior: str = PRIOR,
    robustness: bool = typer.Option(options.DIAGNOSE.robustness, "--robustness", help="leave-one-model-out refits and 1PL vs 2PL BIC"),
    json_out: Optional[str] = typer.Option(options.DIAGNOSIS_OUTPUT.json_out, "--json", metavar="PATH|-", help="where to write the JSON (default runs/<name>/diagnosis.json, <name> = the file's name, plus -m<N> with --models N; - = stdout, the picture and scale then go to runs/<name>/)"),
    png: Optional[Path] = typer.Option(options.DIAGNOSIS_OUTPUT.png, help="picture path (default: next to the JSON)"),
    top_gaps: int = typer.Option(options.DIAGNOSIS_OUTPUT.n_gaps, help="gaps shown in the table and shaded in the picture"),
    force: bool = typer.Option(options.DIAGNOSIS_OUTPUT.force, "--force", help="overwrite an earlier diagnosis in the default folder runs/<name>/"),
) -> None:
    """Estimate item difficulty with IRT and diagnose the benchmark: DDM, gaps, flags, checks, picture, JSON."""
    from benchfill.diagnostics.picture import Painter

    # forked first, before the statistics are imported: the picture's process imports matplotlib on the other
    # core while this one imports, loads and fits
    with Painter() as painter:
        from benchfill import api
        from benchfill.diagnostics.render import diagnosis_tables

        # the diagnosis records at least its own number of gaps; the table and the picture show --top-gaps of them
        opts = options.DiagnoseOptions(sampler=sampler, chains=chains, tune=tune, draws=draws, seed=seed,
                                       guessing=guessing, choices=choices, robustness=robustness, prior=prior,
                                       top_gaps=max(top_gaps, options.DIAGNOSIS_GAPS))
        files = api.diagnosis_files(responses, models=models, models_file=models_file, json_out=json_out, png=png,
                                    force=force, n_gaps=top_gaps)
        out = result_console(json_out)
        clock = time.perf_counter()
        resp, its = _panel(responses, items, models, models_file)
        load_s = time.perf_counter() - clock
        _selection_note(resp)
        if (opts.sampler or options.DEFAULT_SAMPLER) == "fast":
            _quiet_workers_if_served()
        what = " and leave-one-model-out refits" if opts.robustness else ""
        with StatusLine(err_console, f"fitting IRT on {resp.shape[0]} models x {resp.shape[1]} items with "
                                     f"{opts.sampler or options.DEFAULT_SAMPLER}{what}") as status:
            dg = api.diagnose(resp, items=its, **opts.keywords(),
                              on_event=_diagnosis_progress(status, painter, files.n_gaps))
        dg.timings = {"load": round(load_s, 3), **dg.timings}
        replaced = files.save(dg, painter=painter)
        if files.json_to_stdout:
            write_json_result("-", dg)
    out.print(diagnosis_tables(dg, n_gaps=files.n_gaps))
    what = f"{files.png}, {files.scale}" if files.json_to_stdout else f"{files.json_path}, {files.png}, {files.scale}"
    out.print(f"wrote {what}" + (" (overwrote the earlier diagnosis)" if replaced else ""),
              markup=False, highlight=False, soft_wrap=True)


@app.command()
@friendly_errors
def suite(
    responses: Path = typer.Argument(..., help="response file covering every benchmark of the suite"),
    items_table: Optional[Path] = typer.Option(None, help="CSV mapping item_id to its benchmark (or any grouping column); "
                                               "imported eval logs carry their task: --by task"),
    by: str = typer.Option(options.SUITE.by, help="column of the items table that names the benchmark"),
    models: Optional[int] = typer.Option(None, help="keep this many models spread evenly by accuracy"),
    models_file: Optional[Path] = MODELS_FILE,
    sampler: str = SAMPLER,
    chains: int = CHAINS,
    tune: int = TUNE,
    draws: int = DRAWS,
    seed: int = SEED,
    choices: Optional[int] = CHOICES,
    prior: str = PRIOR,
    out: Path = typer.Option(Path("runs/suite"), help="folder for one diagnosis per benchmark and summary.json"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write the summary as JSON (- = stdout)"),
) -> None:
    """Table-1-style summary of a suite: one IRT fit and diagnosis per benchmark."""
    from benchfill import api

    opts = options.SuiteOptions(by=by, sampler=sampler, chains=chains, tune=tune, draws=draws, seed=seed,
                                choices=choices, prior=prior)
    con = result_console(json_out)
    resp, _ = _panel(responses, None, models, models_file)
    _selection_note(resp)

    def progress(event: Event) -> None:  # each benchmark's line as it is done
        con.print(event.message, style="dim", markup=False, highlight=False)

    if (opts.sampler or options.DEFAULT_SAMPLER) == "fast":
        _quiet_workers_if_served()
    with StatusLine(err_console, f"fitting one IRT model per benchmark of {responses.name}"):
        result = api.suite(resp, items_table=items_table, **opts.keywords(), on_event=progress)
    summary_path = result.save(out)
    con.print(result)
    write_json_result(json_out, result.summary(), note=con)
    con.print(f"wrote {summary_path} and one folder per benchmark", markup=False, highlight=False)


@app.command()
@friendly_errors
def calibrate(
    diagnosis: Path = typer.Argument(..., help="diagnosis JSON written by `benchfill diagnose`"),
    k: int = typer.Option(..., "--k", help="items to keep (the target's equal-probability bins)"),
    target: str = typer.Option(options.CALIBRATE.target, help="target distribution: uniform, or beta:A,B on [0, 1]"),
    out: Optional[Path] = typer.Option(None, help="write the kept item ids (one per line) here"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="write the calibration result as JSON (- = stdout)"),
) -> None:
    """Prune a benchmark toward a target difficulty distribution by greedy quantile matching (paper App. D)."""
    from benchfill import api
    from benchfill.io import atomic_write_text

    opts = options.CalibrateOptions(k=k, target=target)
    result = api.calibrate(diagnosis, **opts.keywords())
    con = result_console(json_out)
    con.print(result)
    if out:
        atomic_write_text(out, "".join(f"{i}\n" for i in result.item_ids or ()))
        con.print(f"wrote {out}", markup=False, highlight=False)
    write_json_result(json_out, result, note=con)


# ---- fill / trace / review / export ----------------------------------------------------------------------

CALLS_FAILED_EXIT = 3  # calls failed for infrastructure reasons: nothing was recorded as an outcome; rerun


@app.command()
@friendly_errors(resume_hint="everything saved so far is kept; rerun the same command with --resume to continue")
def fill(
    items: Path = typer.Argument(..., help="the benchmark's items (JSONL)"),
    responses: Path = typer.Option(..., help="the benchmark's response data (long CSV/JSONL)"),
    config: Path = typer.Option(..., help="models config (TOML/YAML): rewriter, judge, panel, [fill] parameters"),
    out: Path = typer.Option(..., help="run folder (memory bank, checkpoints, labels, summary)"),
    models: Optional[int] = typer.Option(options.FILL.models, help="models kept for the scale, spread evenly by accuracy"),
    models_file: Optional[Path] = typer.Option(options.FILL.models_file, help=MODELS_FILE_HELP),
    gaps: int = typer.Option(options.FILL.gaps, help="gaps to fill"),
    sampler: str = typer.Option(options.FILL.sampler, help=SAMPLER_HELP + " (default: fast)"),
    seed: int = typer.Option(options.FILL.seed, help=SEED_HELP),
    compare: bool = typer.Option(options.FILL.compare, "--compare", help="also run the budget-matched baseline and the oracle"),
    resume: bool = typer.Option(options.FILL.resume, "--resume", help="continue the run in --out where it stopped (starts it if there is none)"),
    allow_floor_gaps: bool = typer.Option(options.FILL.allow_floor_gaps, "--allow-floor-gaps", help="also target gaps at the design's resolution floor (no wider than hole-free benchmarks of this panel show)"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write the summary as JSON (- = stdout)"),
) -> None:
    """Fill the largest difficulty gaps with the BenchFill search (rewrite -> validate -> label -> place)."""
    from benchfill import api
    from benchfill.graphs.render import FillLive
    from benchfill.models.failures import CallsFailed

    opts = options.FillOptions(models=models, models_file=models_file, gaps=gaps, sampler=sampler, seed=seed,
                               compare=compare, resume=resume, allow_floor_gaps=allow_floor_gaps)
    con = result_console(json_out)
    if (opts.sampler or options.DEFAULT_SAMPLER) == "fast":
        quiet_worker_start()
    live = FillLive(con)
    with con.status("diagnosing the benchmark (IRT fit) ..."):
        run = api.fill_run(items, responses, config, out, **opts.keywords(), on_event=live.update)
    if run.model_selection:  # the same rule as `diagnose --models N`
        sel = run.model_selection
        con.print(f"scale: kept {len(sel['kept'])} of {sel['of']} models ({sel['rule']}; --models N, --models-file "
                  f"F): {', '.join(sel['kept'])}", markup=False, highlight=False, soft_wrap=True)
    if run.simulated:
        con.print(run.banner, style="bold yellow", markup=False, highlight=False)
    con.print(run.diagnosis_line(), markup=False, highlight=False, soft_wrap=True)
    try:
        with live:
            summary = api.FillSummary.model_validate(run.run())
    except CallsFailed as exc:  # an outage is not an outcome: the node that met it re-runs on --resume
        err_console.print(f"benchfill: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(CALLS_FAILED_EXIT) from None
    finally:
        run.close()
    con.print(summary)
    write_json_result(json_out, summary, note=con)
    con.print(f"wrote {out / 'summary.json'} and {out / 'report.html'}; inspect a gap with: benchfill trace {out} "
              f"--gap 1, or open the report (benchfill view {out})", markup=False, highlight=False, soft_wrap=True)


@app.command(cls=JsonFlagCommand)
@friendly_errors
def trace(
    run_dir: Path = typer.Argument(..., help="a fill run folder"),
    gap: int = typer.Option(1, help="which gap (1-based, in the order filled)"),
    method: str = typer.Option("benchfill", help="benchfill or baseline"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="[PATH|-]",
                                           help="write the trace as JSON to PATH, or to stdout (- or no value) instead of the tree"),
    full: bool = typer.Option(False, "--full", help="print every question whole (default: its first 70 characters)"),
) -> None:
    """Show one gap's search: rounds, parents, children, verdicts, panel counts, placement, tokens and cost."""
    from benchfill import api
    from benchfill.graphs.render import trace_tree

    data = api.trace(run_dir, gap=gap, method=method)
    if json_out is not None:
        write_json_result(json_out, data)
    else:
        console.print(trace_tree(data, full=full))


@app.command()
@friendly_errors
def review(
    run_dir: Path = typer.Argument(..., help="a fill run folder"),
    show: Optional[str] = typer.Option(None, "--show", metavar="ID", help="one item in full: question, reference answer, judge verdict and reason, panel counts per model, placement with its interval, votes"),
    approve: Optional[str] = typer.Option(None, metavar="ID", help="candidate id to approve"),
    reject: Optional[str] = typer.Option(None, metavar="ID", help="candidate id to reject"),
    reviewer: Optional[str] = typer.Option(None, help="your name (one standing vote per reviewer and item; voting again replaces it)"),
    note: str = typer.Option("", help="a reason, kept with the vote"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write the queue (or the --show item) as JSON; - = stdout"),
) -> None:
    """The review queue of chosen items; --show ID for one in full; --approve/--reject ID --reviewer NAME to vote.
    An item is accepted after 3 approvals and no standing rejection; a rejection blocks it until that reviewer
    votes again; 3 rejections reject it. Votes are stored in the run's memory bank."""
    from benchfill import api
    from benchfill.graphs.render import review_detail

    out = result_console(json_out)
    _open_bank(run_dir).close()  # a fill run folder, else one line
    if approve or reject:
        if approve and reject:
            raise InputError("--approve/--reject", "give one of them, not both")
        v = api.vote(run_dir, str(approve or reject), "approve" if approve else "reject", reviewer or "", note)
        out.print(lit(f"{v.item_id}: {v.status} ({v.approvals} approval(s), {v.rejections} rejection(s); {v.rule})"))
    if show:
        item = api.review_item(run_dir, show)
        out.print(review_detail(item))
        write_json_result(json_out, item, note=out)
        return
    queue = api.review_queue(run_dir)
    out.print(queue)
    write_json_result(json_out, queue, note=out)


@app.command()
@friendly_errors
def view(
    run_dir: Path = typer.Argument(..., help="a fill run folder"),
    port: int = typer.Option(0, help="port on 127.0.0.1 (0: a free one)"),
    serve: bool = typer.Option(True, "--serve/--no-serve", help="serve the page (votes reach the memory bank); --no-serve only writes report.html"),
) -> None:
    """The run in the browser: writes RUN/report.html (self-contained, offline) and serves it on 127.0.0.1 with
    review voting (approve / reject per reviewer, stored in the memory bank) until Ctrl-C."""
    from benchfill import api

    if not serve:
        path = api.write_report(run_dir)
        console.print(f"wrote {path}", markup=False, highlight=False, soft_wrap=True)
        return
    server = api.view(run_dir, port=port)
    console.print(f"wrote {Path(run_dir) / 'report.html'}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"serving {run_dir} at {server.url} (Ctrl-C to stop)", markup=False, highlight=False, soft_wrap=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped", markup=False, highlight=False)
    finally:
        server.close()


@app.command()
@friendly_errors
def export(
    run_dir: Path = typer.Argument(..., help="a fill run folder"),
    out: Path = typer.Option(..., help="the filled benchmark, JSONL"),
    hf: Optional[Path] = typer.Option(None, help="also save a Hugging Face datasets dataset to this folder"),
    include_pending: bool = typer.Option(False, help="also export chosen items not yet accepted by review"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write what was exported as JSON (- = stdout)"),
) -> None:
    """Write the filled benchmark: the original items plus accepted new items with difficulty and provenance."""
    from benchfill import api

    res = api.export(run_dir, out, hf=hf, include_pending=include_pending)
    con = result_console(json_out)
    con.print(f"wrote {out}: {res.original} original + {res.added} new item(s)", markup=False, highlight=False)
    if res.why_not(run_dir):
        con.print(res.why_not(run_dir), markup=False, highlight=False, soft_wrap=True)
    if hf is not None:
        con.print(f"wrote Hugging Face dataset to {hf}", markup=False, highlight=False)
    write_json_result(json_out, res, note=con)


def _open_bank(run_dir: Path):
    from benchfill.api import _open_bank as open_bank

    return open_bank(run_dir)


# ---- detect -----------------------------------------------------------------------------------------------


@app.command()
@friendly_errors
def detect(
    responses_a: Path = typer.Argument(..., help="model A's response file (or both models', with --model-a/-b)"),
    responses_b: Optional[Path] = typer.Argument(None, help="response file of model B (e.g. the later checkpoint)"),
    model_a: Optional[str] = typer.Option(options.DETECT.model_a, "--model-a", help="model A (when its file has several)"),
    model_b: Optional[str] = typer.Option(options.DETECT.model_b, "--model-b", help="model B (when its file has several)"),
    items: Optional[Path] = typer.Option(options.DETECT.items, help="restrict to these item ids (one per line)"),
    permutations: int = typer.Option(options.DETECT.permutations, help="random permutations B (paper: 100,000)"),
    seed: int = typer.Option(options.DETECT.seed, help=SEED_HELP),
    alpha: float = typer.Option(options.DETECT.alpha, help="test level"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write the result as JSON here (- = stdout)"),
) -> None:
    """Local-progress test (paper Table 12): does model B beat model A? One-sided stratified randomization test,
    strata = items, statistic = mean per-item accuracy difference B - A over rollouts."""
    from benchfill import api

    opts = options.DetectOptions(model_a=model_a, model_b=model_b, items=items, permutations=permutations,
                                 seed=seed, alpha=alpha)
    con = result_console(json_out)
    with err_console.status(f"randomization test, {opts.permutations:,} permutations ..."):
        res = api.detect(responses_a, responses_b, **opts.keywords())
    con.print(res)
    write_json_result(json_out, res, note=con)


# ---- evaluate ---------------------------------------------------------------------------------------------


@app.command()
@friendly_errors(resume_hint="answers received so far are cached; rerun the same command to continue")
def evaluate(
    items: Path = typer.Argument(..., help="items JSONL (id, question, answer[, choices, format])"),
    config: Path = typer.Option(..., "--config", "-c", help="run config (TOML or YAML) naming the panel models"),
    out: Path = typer.Option(..., "--out", "-o", help="run folder: responses.csv, calls.sqlite, summary.json"),
    limit: Optional[int] = typer.Option(options.EVALUATE.limit, "--limit", help="only the first N items"),
    rollouts: Optional[int] = typer.Option(options.EVALUATE.rollouts, "--rollouts", help="override every panel model's rollouts"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="live progress bar"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write the summary as JSON (- = stdout)"),
) -> None:
    """Every panel model answers every item `rollouts` times; answers are graded (objective first) and counted
    into a response file `benchfill diagnose` reads. Calls are cached: a rerun or a resumed run pays nothing twice."""
    from benchfill import api
    from benchfill.models.config import load_config
    from benchfill.models.failures import CallsFailed
    from benchfill.models.progress import live_progress, print_summary, simulated_banner

    opts = options.EvaluateOptions(limit=limit, rollouts=rollouts)
    con = result_console(json_out)
    if load_config(config).simulated:
        simulated_banner(con)
    try:
        with live_progress(con, enabled=progress and con.is_terminal) as bar:
            draw = bar.on_update  # the bar's drawing (None when there is no bar), fed by the answers' counters
            result = api.evaluate(items, config, out, **opts.keywords(),
                                  on_event=None if draw is None else lambda event: draw(event.payload, None))
    except CallsFailed as exc:  # an outage is not an outcome: nothing counted, exit 3, a rerun retries them
        err_console.print(f"benchfill: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(CALLS_FAILED_EXIT) from None
    from rich.markup import escape

    print_summary(con, result.model_copy(update={
        "first_errors": [escape(e) for e in result.first_errors],
        "items_without_gradable_answer": [escape(i) for i in result.items_without_gradable_answer]}))
    write_json_result(json_out, result, note=con)


# ---- place ------------------------------------------------------------------------------------------------


@app.command()
@friendly_errors
def place(
    responses: Path = typer.Argument(..., help="responses of the NEW items (same formats as diagnose), keyed by the scale's model names"),
    scale: Path = typer.Option(..., "--scale", help="<name>.scale.npz written by `benchfill diagnose`"),
    guessing: Optional[float] = typer.Option(options.PLACE.guessing, help="lower asymptote c of the new items (default: the scale's)"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write the placements as JSON (- = stdout)"),
) -> None:
    """Place new items on a benchmark's difficulty scale, abilities fixed (exact quadrature): b, SD, d, d SD."""
    from benchfill import api

    opts = options.PlaceOptions(guessing=guessing)
    placed = api.place(scale, responses, **opts.keywords())
    if placed.ignored_models:
        err_console.print(lit(f"note: ignored {len(placed.ignored_models)} model(s) not on the scale: "
                              f"{', '.join(placed.ignored_models)}"))
    con = result_console(json_out)
    con.print(placed)
    write_json_result(json_out, placed, note=con)


# ---- import (other harnesses' eval logs) ------------------------------------------------------------------


@app.command("import")
@friendly_errors
def import_(
    fmt: str = typer.Argument(..., metavar="FORMAT", help="lm-eval, inspect, helm, opencompass or openllm"),
    paths: list[Path] = typer.Argument(..., help="log files or folders (searched recursively)"),
    out: Path = typer.Option(..., "--out", "-o", help="response file to write (long CSV: model,item_id,n_correct,n_trials,task)"),
    items_out: Optional[Path] = typer.Option(None, "--items-out", help="also write the item texts the logs carry (JSONL)"),
    metric: Optional[str] = typer.Option(None, help="metric (lm-eval, openllm, helm) or scorer[/key] (inspect) to read; default: the log's first / main one"),
    filter_: Optional[str] = typer.Option(None, "--filter", help="lm-eval filter (default: none if present, else the first)"),
    threshold: Optional[float] = typer.Option(None, help="count a non-0/1 score >= this as correct (default: scores must be 0/1)"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="PATH|-", help="also write the import summary as JSON (- = stdout)"),
) -> None:
    """Import eval logs of another harness into a response file (and items) the other commands read."""
    import contextlib

    from benchfill import api
    from benchfill.progress import on_step

    with contextlib.ExitStack() as stack:
        if err_console.is_terminal:  # a bar over the log files (one file at a time); nothing when piped
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            bar = stack.enter_context(Progress(
                TextColumn("reading logs"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                TextColumn("{task.fields[name]}", markup=False), console=err_console, transient=True))
            task = bar.add_task("read", total=None, name="")

            def on_file(done: int, total: int, name: str) -> None:
                bar.update(task, completed=done, total=total, name=name if done < total else "writing")

            stack.enter_context(on_step(on_file))
        res = api.import_logs(fmt, paths, out=out, items_out=items_out, metric=metric, filter=filter_,
                              threshold=threshold)
    con = result_console(json_out)
    for line in res.summary:
        con.print(line, markup=False, highlight=False, soft_wrap=True)
    con.print(f"wrote {out}: {res.rows} rows", markup=False, highlight=False, soft_wrap=True)
    if items_out is not None and res.items_out is None:
        err_console.print(f"note: {items_out} not written: these logs carry no item texts (question and answer)",
                          markup=False, highlight=False, soft_wrap=True)
    elif res.items_out is not None:
        con.print(f"wrote {items_out}: {res.n_item_texts} of {res.n_items} items (those whose question and answer "
                  "the logs carry)", markup=False, highlight=False, soft_wrap=True)
    write_json_result(json_out, res, note=con)


# ---- local-server -----------------------------------------------------------------------------------------


@app.command("local-server")
@friendly_errors
def local_server(
    port: int = typer.Option(8765, help="port on 127.0.0.1 (8765: examples/local.toml's api_base; 0: a free one)"),
    n_ctx: int = typer.Option(2048, "--n-ctx", min=256, help="context window in tokens (prompt + reply)"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (default: half the cores, 1 to 4)"),
    model: Optional[Path] = typer.Option(None, "--model", help="a GGUF file (default: the bundled SmolLM2-135M-Instruct)"),
    log: Optional[Path] = typer.Option(None, "--log", help="write the server's output to this file"),
) -> None:
    """Serve a small real LLM on this machine (the bundled SmolLM2-135M-Instruct on llama.cpp, CPU only) as an
    OpenAI-compatible server on 127.0.0.1 until Ctrl-C; needs pip install 'benchfill[local]'."""
    import contextlib

    from benchfill import api
    from benchfill.models.local_server import DEFAULT_PORT, LocalServerError

    # Ctrl-C and a plain kill (SIGTERM) raise KeyboardInterrupt here (cli_support.install_sigint_handler): the
    # server is stopped, one line, exit 0
    try:
        with contextlib.ExitStack() as stack:
            with err_console.status("starting the local model server (llama.cpp) ..."):
                server = stack.enter_context(api.local_server(model, port=port, n_ctx=n_ctx, threads=threads, log=log))
            console.print(f"serving {server.alias} ({server.model_path.name}) at {server.api_base}; litellm model "
                          f"{server.model} (Ctrl-C to stop)", markup=False, highlight=False, soft_wrap=True)
            if server.port == DEFAULT_PORT:
                console.print("try: benchfill evaluate examples/math500.items.jsonl --config examples/local.toml "
                              "--out runs/local --limit 3", markup=False, highlight=False, soft_wrap=True)
            while server.alive():
                time.sleep(0.5)
            raise LocalServerError(f"the server exited with code {server.process.returncode}: {server.log_tail()}")
    except KeyboardInterrupt:
        console.print("stopped", markup=False, highlight=False)


# ---- designers (BenchBench: card / run / rewriters) -------------------------------------------------------

from benchfill.cli_designers import designers_app  # noqa: E402  (a light import: typer only, the rest is lazy)
from benchfill.cli_support import plain_help  # noqa: E402

app.add_typer(designers_app, name="designers")
plain_help(app, designers_app)  # help text as written ("[fill]" kept), no "<bool>" on flags


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
