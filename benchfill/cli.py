"""The `benchfill` command line: thin wrappers that parse options, call the library and render results.

Every command turns :class:`benchfill.errors.InputError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from benchfill.cli_support import console, err_console, friendly_errors
from benchfill.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Benchmarks as empirical measures over difficulty.")


@app.callback()
def _root() -> None:
    """benchfill: estimate item difficulty with IRT, diagnose difficulty coverage, fill the gaps with LLMs."""


# ---- commands are added below, one block each -------------------------------------------------------------

# ---- diagnose / suite / calibrate ------------------------------------------------------------------------

SAMPLER_HELP = "IRT inference: fast (exact: quadrature + independence MH on the abilities; default), pymc (reference NUTS), nutpie, numpyro, map (quick preview)"


def _panel(responses_path: Path, items_path: Path | None, models: int | None, models_file: Path | None):
    from benchfill.data import load_panel

    return load_panel(responses_path, items_path, models, models_file)


def _spec(responses, items, guessing: float | None, choices: int | None, kind: str = "1pl"):
    from benchfill.irt.model import IRTSpec

    return IRTSpec.for_items(responses.item_ids, items, guessing=guessing, choices=choices, kind=kind)


def _default_sampler() -> str:
    from benchfill.irt.fit import available_samplers

    return "fast" if "fast" in available_samplers() else "pymc"


def _run_diagnosis(responses, spec, sampler: str, chains: int, tune: int, draws: int, seed: int, robustness: bool):
    from benchfill.diagnostics.report import diagnose
    from benchfill.irt.model import SamplerSettings

    settings = SamplerSettings(method=sampler or _default_sampler(), chains=chains, tune=tune, draws=draws, seed=seed)
    with console.status(f"fitting {spec.kind.upper()} IRT on {responses.shape[0]} models x {responses.shape[1]} items "
                        f"with {settings.method} ..."):
        dg, fit = diagnose(responses, spec, settings)
    if robustness:
        from benchfill.irt.robustness import compare_1pl_2pl, leave_one_model_out

        with console.status("robustness: leave-one-model-out refits and 1PL vs 2PL BIC ..."):
            loo = leave_one_model_out(responses, fit)
            bic = compare_1pl_2pl(responses, spec.guessing, seed=seed)
        dg.robustness = {"leave_one_model_out": loo.as_dict(), "bic": bic.as_dict()}
    return dg, fit


@app.command()
@friendly_errors
def diagnose(
    responses: Path = typer.Argument(..., help="response file: long CSV/JSONL (model,item_id,n_correct,n_trials) or wide 0/1"),
    items: Optional[Path] = typer.Option(None, help="items JSONL: checks item ids; multiple choice gets c = 1/k"),
    models: Optional[int] = typer.Option(None, help="keep this many models spread evenly by accuracy (paper: 12)"),
    models_file: Optional[Path] = typer.Option(None, help="keep exactly these models (one name per line)"),
    sampler: str = typer.Option("", help=SAMPLER_HELP),
    chains: int = typer.Option(4),
    tune: int = typer.Option(1000),
    draws: int = typer.Option(1000),
    seed: int = typer.Option(0),
    guessing: Optional[float] = typer.Option(None, help="fixed guessing rate c for every item"),
    choices: Optional[int] = typer.Option(None, help="every item is k-option multiple choice: c = 1/k"),
    robustness: bool = typer.Option(False, "--robustness", help="leave-one-model-out refits and 1PL vs 2PL BIC"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="where to write the JSON (default runs/<name>/diagnosis.json)"),
    png: Optional[Path] = typer.Option(None, help="picture path (default: next to the JSON)"),
    top_gaps: int = typer.Option(5, help="gaps shown in the table and shaded in the picture"),
) -> None:
    """Estimate item difficulty with IRT and diagnose the benchmark: DDM, gaps, flags, checks, picture, JSON."""
    from benchfill.diagnostics.render import diagnosis_tables, plot_diagnosis
    from benchfill.io import atomic_write_text

    resp, its = _panel(responses, items, models, models_file)
    spec = _spec(resp, its, guessing, choices)
    dg, fit = _run_diagnosis(resp, spec, sampler, chains, tune, draws, seed, robustness)
    json_out = json_out or Path("runs") / _stem(responses) / "diagnosis.json"
    png = png or json_out.with_suffix(".png")
    scale_path = json_out.with_suffix(".scale.npz")
    dg.files = {"json": str(json_out), "png": str(png), "scale": str(scale_path)}
    plot_diagnosis(dg, png, n_gaps=top_gaps)
    _save_scale(fit, scale_path)
    atomic_write_text(json_out, dg.model_dump_json(indent=2) + "\n")
    console.print(diagnosis_tables(dg, n_gaps=top_gaps))
    console.print(f"wrote {json_out}, {png}, {scale_path}")


@app.command()
@friendly_errors
def suite(
    responses: Path = typer.Argument(..., help="response file covering every benchmark of the suite"),
    items_table: Optional[Path] = typer.Option(None, help="CSV mapping item_id to its benchmark (or any grouping column); "
                                               "imported eval logs carry their task: --by task"),
    by: str = typer.Option("benchmark", help="column of the items table that names the benchmark"),
    models: Optional[int] = typer.Option(None, help="keep this many models spread evenly by accuracy"),
    models_file: Optional[Path] = typer.Option(None),
    sampler: str = typer.Option("", help=SAMPLER_HELP),
    chains: int = typer.Option(4),
    tune: int = typer.Option(1000),
    draws: int = typer.Option(1000),
    seed: int = typer.Option(0),
    choices: Optional[int] = typer.Option(None, help="every item is k-option multiple choice: c = 1/k"),
    out: Path = typer.Option(Path("runs/suite"), help="folder for one diagnosis per benchmark and summary.json"),
) -> None:
    """Table-1-style summary of a suite: one IRT fit and diagnosis per benchmark."""
    from benchfill.data import item_groups
    from benchfill.diagnostics.render import plot_diagnosis, suite_table
    from benchfill.io import atomic_write_json, atomic_write_text

    resp, _ = _panel(responses, None, models, models_file)
    groups = item_groups(resp, by, items_table)
    rows = []
    for name, ids in groups.items():
        sub = resp.subset(items=ids)
        dg, fit = _run_diagnosis(sub, _spec(sub, None, None, choices), sampler, chains, tune, draws, seed, False)
        folder = out / _safe_name(name)
        dg.files = {"json": str(folder / "diagnosis.json"), "png": str(folder / "diagnosis.png"),
                    "scale": str(folder / "diagnosis.scale.npz")}
        plot_diagnosis(dg, folder / "diagnosis.png")
        _save_scale(fit, folder / "diagnosis.scale.npz")
        atomic_write_text(folder / "diagnosis.json", dg.model_dump_json(indent=2) + "\n")
        rows.append((name, dg))
        console.print(f"[dim]{name}: {dg.n_items} items, plug-in DDM {dg.ddm:.3f}, max gap {dg.max_gap:.3f} "
                      f"({dg.sampler.wall_time_s:.1f} s)[/]")
    summary = [
        {"benchmark": name, "n_items": dg.n_items, "ddm": dg.ddm, "ddm_sd": dg.ddm_sd, "max_gap": dg.max_gap,
         "max_gap_sd": dg.max_gap_sd, "top5_sum": dg.top5_sum, "top5_sum_sd": dg.top5_sum_sd,
         "posterior": {k: v.model_dump() for k, v in (dg.posterior or {}).items()},
         "null": dg.null.model_dump() if dg.null else None,
         "resolution": dg.resolution.model_dump() if dg.resolution else None,
         "uniform_baseline_ratio": dg.uniform_baseline_ratio, "flags": dg.flags, "verdicts": dg.verdicts,
         "checks_passed": dg.checks_passed, "checks_run": sum(c.passed is not None for c in dg.checks),
         "json": dg.files["json"]}
        for name, dg in rows
    ]
    atomic_write_json(out / "summary.json", {"source": str(responses), "n_models": resp.shape[0], "benchmarks": summary})
    console.print(suite_table(rows, f"{responses.name}: {resp.shape[0]} models, {len(rows)} benchmarks"))
    console.print(f"wrote {out / 'summary.json'} and one folder per benchmark")


def _safe_name(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "group"


@app.command()
@friendly_errors
def calibrate(
    diagnosis: Path = typer.Argument(..., help="diagnosis JSON written by `benchfill diagnose`"),
    k: int = typer.Option(..., "--k", help="items to keep (the target's equal-probability bins)"),
    target: str = typer.Option("uniform", help="target distribution: uniform, or beta:A,B on [0, 1]"),
    out: Optional[Path] = typer.Option(None, help="write the kept item ids (one per line) here"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write the calibration result as JSON"),
) -> None:
    """Prune a benchmark toward a target difficulty distribution by greedy quantile matching (paper App. D)."""
    from rich.table import Table

    from benchfill.diagnostics.calibrate import calibrate as run_calibration
    from benchfill.io import atomic_write_json, atomic_write_text

    dg = _load_diagnosis(diagnosis)
    result = run_calibration([it.b for it in dg.items], k, target=_target(target),
                             item_ids=[it.item_id for it in dg.items])
    table = Table(title=f"calibration of {dg.source}: {result.n_items} -> {result.k} items, target {target}",
                  title_justify="left")
    for col in ("", "before", "after"):
        table.add_column(col, justify="right")
    table.add_row("DDM (own min-max axis)", f"{result.ddm_before:.4f}", f"{result.ddm_after:.4f}")
    table.add_row("W1 to target", f"{result.w1_target_before:.4f}", f"{result.w1_target_after_renormalised:.4f}")
    console.print(table)
    if out:
        atomic_write_text(out, "".join(f"{i}\n" for i in result.item_ids or ()))
        console.print(f"wrote {out}")
    if json_out:
        atomic_write_json(json_out, result.as_dict())
        console.print(f"wrote {json_out}")


def _load_diagnosis(path: Path):
    from pydantic import ValidationError

    from benchfill.diagnostics.report import Diagnosis

    try:
        return Diagnosis.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except (ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid"
        raise InputError(str(path), f"not a benchfill diagnosis JSON ({first})") from None


def _target(spec: str):
    """'uniform' -> None (U[0, 1]); 'beta:A,B' -> a frozen Beta(A, B)."""
    from scipy import stats

    if spec == "uniform":
        return None
    if spec.startswith("beta:"):
        try:
            a, b = (float(x) for x in spec[5:].split(","))
        except ValueError:
            raise InputError("--target", f"{spec!r}: expected beta:A,B with positive numbers") from None
        if a <= 0 or b <= 0:
            raise InputError("--target", f"{spec!r}: Beta parameters must be positive")
        return stats.beta(a, b)
    raise InputError("--target", f"{spec!r}: expected 'uniform' or 'beta:A,B'")


# ---- fill / trace / review / export ----------------------------------------------------------------------

CALLS_FAILED_EXIT = 3  # calls failed for infrastructure reasons: nothing was recorded as an outcome; rerun


@app.command()
@friendly_errors
def fill(
    items: Path = typer.Argument(..., help="the benchmark's items (JSONL)"),
    responses: Path = typer.Option(..., help="the benchmark's response data (long CSV/JSONL)"),
    config: Path = typer.Option(..., help="models config (TOML/YAML): rewriter, judge, panel, [fill] parameters"),
    out: Path = typer.Option(..., help="run folder (memory bank, checkpoints, labels, summary)"),
    models: Optional[int] = typer.Option(12, help="models kept for the scale, spread evenly by accuracy"),
    models_file: Optional[Path] = typer.Option(None),
    gaps: int = typer.Option(3, help="gaps to fill"),
    sampler: str = typer.Option("", help=SAMPLER_HELP),
    seed: int = typer.Option(0),
    compare: bool = typer.Option(False, "--compare", help="also run the budget-matched baseline and the oracle"),
    resume: bool = typer.Option(False, "--resume", help="continue the run in --out where it stopped (starts it if there is none)"),
    allow_floor_gaps: bool = typer.Option(False, "--allow-floor-gaps", help="also target gaps at the design's resolution floor (no wider than hole-free benchmarks of this panel show)"),
) -> None:
    """Fill the largest difficulty gaps with the BenchFill search (rewrite -> validate -> label -> place)."""
    from benchfill.graphs.render import FillLive, fill_summary_table
    from benchfill.graphs.run import SIM_BANNER, FillOptions, FillRun

    opts = FillOptions(items=items, responses=responses, config=config, out=out, models=models,
                       models_file=models_file, n_gaps=gaps, sampler=sampler, seed=seed, compare=compare,
                       resume=resume, allow_floor_gaps=allow_floor_gaps)
    from benchfill.models.client import CallsFailed

    live = FillLive(console)
    with console.status("diagnosing the benchmark (IRT fit) ..."):
        run = FillRun(opts, on_event=live.update)
    if run.simulated:
        console.print(f"[bold yellow]{SIM_BANNER}[/]")
    try:
        with live:
            summary = run.run()
    except CallsFailed as exc:  # an outage is not an outcome: the node that met it re-runs on --resume
        err_console.print(f"benchfill: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(CALLS_FAILED_EXIT) from None
    finally:
        run.close()
    console.print(fill_summary_table(summary))
    console.print(f"wrote {out / 'summary.json'}; inspect a gap with: benchfill trace {out} --gap 1")


@app.command()
@friendly_errors
def trace(
    run_dir: Path = typer.Argument(..., help="a fill run folder"),
    gap: int = typer.Option(1, help="which gap (1-based, in the order filled)"),
    method: str = typer.Option("benchfill", help="benchfill or baseline"),
    json_out: bool = typer.Option(False, "--json", help="print the trace as JSON instead of a tree"),
) -> None:
    """Show one gap's search: rounds, parents, children, verdicts, panel counts, placement, tokens and cost."""
    import json as _json

    from benchfill.graphs.render import trace_tree
    from benchfill.graphs.trace import gap_trace

    data = gap_trace(_open_bank(run_dir), method, gap)
    if json_out:
        typer.echo(_json.dumps(data, indent=2))
    else:
        console.print(trace_tree(data))


@app.command()
@friendly_errors
def review(
    run_dir: Path = typer.Argument(..., help="a fill run folder"),
    approve: Optional[str] = typer.Option(None, help="candidate id to approve"),
    reject: Optional[str] = typer.Option(None, help="candidate id to reject"),
    reviewer: Optional[str] = typer.Option(None, help="your name (one vote per reviewer and item)"),
    note: str = typer.Option(""),
) -> None:
    """List the review queue of chosen items, or record an approval / rejection (accepted after 3 approvals)."""
    from benchfill.graphs.render import review_table
    from benchfill.graphs.trace import review_queue

    bank = _open_bank(run_dir)
    if approve or reject:
        cid = approve or reject
        if approve and reject:
            raise InputError("--approve/--reject", "give one of them, not both")
        if not reviewer:
            raise InputError("--reviewer", "say who you are: --reviewer NAME")
        cand = bank.candidate(cid)
        if cand is None or cand["status"] != "chosen":
            raise InputError(str(run_dir), f"{cid!r} is not in the review queue (see `benchfill review {run_dir}`)")
        bank.review(cid, reviewer, "approve" if approve else "reject", note)
        console.print(f"{cid}: {bank.review_status(cid)} ({bank.approvals(cid)[0]} approvals)")
    console.print(review_table(review_queue(bank)))


@app.command()
@friendly_errors
def export(
    run_dir: Path = typer.Argument(..., help="a fill run folder"),
    out: Path = typer.Option(..., help="the filled benchmark, JSONL"),
    hf: Optional[Path] = typer.Option(None, help="also save a Hugging Face datasets dataset to this folder"),
    include_pending: bool = typer.Option(False, help="also export chosen items not yet accepted by review"),
) -> None:
    """Write the filled benchmark: the original items plus accepted new items with difficulty and provenance."""
    from benchfill.graphs.trace import filled_benchmark

    rows, added = filled_benchmark(_open_bank(run_dir), include_pending=include_pending)
    from benchfill.data import write_items

    write_items(out, rows)
    console.print(f"wrote {out}: {len(rows) - added} original + {added} new item(s)")
    if hf is not None:
        try:
            import datasets
        except ImportError:
            raise InputError("--hf", "needs the Hugging Face datasets package: pip install 'benchfill[hf]'") from None
        datasets.disable_progress_bars()
        records = [r.model_dump(mode="json") for r in rows]
        for r in records:  # one column type per field for Arrow
            r["metadata"] = json.dumps(r.get("metadata") or {})
            r["choices"] = r.get("choices") or []
        datasets.Dataset.from_list(records).save_to_disk(str(hf))
        console.print(f"wrote Hugging Face dataset to {hf}")


def _open_bank(run_dir: Path):
    from benchfill.graphs.run import MEMORY_DB
    from benchfill.memory.bank import MemoryBank

    if not (run_dir / MEMORY_DB).exists():
        raise InputError(str(run_dir), "not a fill run folder (no memory.sqlite)")
    return MemoryBank(run_dir / MEMORY_DB)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name


def _save_scale(fit, path: Path) -> None:
    """The fitted abilities, saved so new items can be placed on this benchmark's axis later (`benchfill place`)."""
    from benchfill.irt.scale import Scale

    Scale.from_fit(fit).save(path)


# ---- detect -----------------------------------------------------------------------------------------------


@app.command()
@friendly_errors
def detect(
    responses_a: Path = typer.Argument(..., help="model A's response file (or both models', with --model-a/-b)"),
    responses_b: Optional[Path] = typer.Argument(None, help="response file of model B (e.g. the later checkpoint)"),
    model_a: Optional[str] = typer.Option(None, "--model-a", help="model A (when its file has several)"),
    model_b: Optional[str] = typer.Option(None, "--model-b", help="model B (when its file has several)"),
    items: Optional[Path] = typer.Option(None, help="restrict to these item ids (one per line)"),
    permutations: int = typer.Option(100_000, help="random permutations B (paper: 100,000)"),
    seed: int = typer.Option(0),
    alpha: float = typer.Option(0.05, help="test level"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="also write the result as JSON here"),
) -> None:
    """Local-progress test (paper Table 12): does model B beat model A? One-sided stratified randomization test,
    strata = items, statistic = mean per-item accuracy difference B - A over rollouts."""
    import json

    from rich.table import Table

    from benchfill.diagnostics.detect import detect_files
    from benchfill.io import atomic_write_text

    with console.status(f"randomization test, {permutations:,} permutations ..."):
        res = detect_files(
            responses_a, responses_b, model_a=model_a, model_b=model_b, items_path=items,
            n_permutations=permutations, seed=seed, alpha=alpha,
        )
    table = Table(title=f"local progress: {res.model_b} (B) vs {res.model_a} (A)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("items (informative)", f"{res.n_items} ({res.n_informative})")
    table.add_row("accuracy A / B", f"{res.accuracy_a:.4f} / {res.accuracy_b:.4f}")
    table.add_row("gain (points)", f"{res.gain:+.3f}")
    table.add_row("p-value (one-sided)", f"{res.p_value:.5g}")
    table.add_row("permutations", f"{res.n_permutations:,} (seed {res.seed})")
    verdict = "[green]yes[/]" if res.significant else "[yellow]no[/]"
    table.add_row(f"B better at alpha={res.alpha:g}", verdict)
    console.print(table)
    if json_out is not None:
        atomic_write_text(json_out, json.dumps(res.as_dict(), indent=2) + "\n")
        console.print(f"wrote {json_out}")


# ---- evaluate ---------------------------------------------------------------------------------------------


@app.command()
@friendly_errors
def evaluate(
    items: Path = typer.Argument(..., help="items JSONL (id, question, answer[, choices, format])"),
    config: Path = typer.Option(..., "--config", "-c", help="run config (TOML or YAML) naming the panel models"),
    out: Path = typer.Option(..., "--out", "-o", help="run folder: responses.csv, calls.sqlite, summary.json"),
    limit: Optional[int] = typer.Option(None, "--limit", help="only the first N items"),
    rollouts: Optional[int] = typer.Option(None, "--rollouts", help="override every panel model's rollouts"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="live progress bar"),
) -> None:
    """Every panel model answers every item `rollouts` times; answers are graded (objective first) and counted
    into a response file `benchfill diagnose` reads. Calls are cached: a rerun or a resumed run pays nothing twice."""
    from benchfill.models.config import load_config
    from benchfill.models.evaluate import evaluate as run_evaluate
    from benchfill.models.progress import live_progress, print_summary, simulated_banner

    from benchfill.models.client import CallsFailed

    if load_config(config).simulated:
        simulated_banner(console)
    try:
        with live_progress(console, enabled=progress and console.is_terminal) as state:
            result = run_evaluate(items, config, out, limit=limit, rollouts=rollouts, progress=state)
    except CallsFailed as exc:  # an outage is not an outcome: nothing counted, exit 3, a rerun retries them
        err_console.print(f"benchfill: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(CALLS_FAILED_EXIT) from None
    print_summary(console, result)


# ---- place ------------------------------------------------------------------------------------------------


@app.command()
@friendly_errors
def place(
    responses: Path = typer.Argument(..., help="responses of the NEW items (same formats as diagnose), keyed by the scale's model names"),
    scale: Path = typer.Option(..., "--scale", help="<name>.scale.npz written by `benchfill diagnose`"),
    guessing: Optional[float] = typer.Option(None, help="lower asymptote c of the new items (default: the scale's)"),
    prior_sd: float = typer.Option(1.0, help="SD of b's Normal prior: 1 is the benchmark's model; 3 gives items beyond the benchmark's range intervals that cover (measured 0.92 vs 0.81), at a wider SD"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="also write the placements as JSON"),
) -> None:
    """Place new items on a benchmark's difficulty scale, abilities fixed (exact quadrature): b, SD, d, d SD."""
    from rich.table import Table

    from benchfill.data import load_responses
    from benchfill.io import atomic_write_json
    from benchfill.irt.placement import place_responses
    from benchfill.irt.scale import Scale

    sc = Scale.load(scale)
    if guessing is not None and not 0.0 <= guessing < 1.0:
        raise InputError(str(scale), f"--guessing {guessing}: must lie in [0, 1)")
    resp = load_responses(responses)
    if not prior_sd > 0:
        raise InputError("--prior-sd", f"{prior_sd}: must be a positive number")
    placed = place_responses(sc, resp, guessing, prior_sd)
    if placed.ignored_models:
        err_console.print(f"note: ignored {len(placed.ignored_models)} model(s) not on the scale: "
                          f"{', '.join(placed.ignored_models)}")
    sign = "-" if sc.b_min >= 0 else "+"
    table = Table(title=f"{resp.shape[1]} item(s) placed on {scale.name} ({sc.n_draws} ability draws; "
                        f"d = (b {sign} {abs(sc.b_min):.3f}) / {sc.span:.3f})")
    for col in ("item", "b", "SD", "d", "d SD"):
        table.add_column(col, justify="left" if col == "item" else "right")
    for rec in placed.to_records():
        d = rec["d"]
        d_txt = f"{d:.3f}" if 0.0 <= d <= 1.0 else f"[yellow]{d:.3f}[/] (outside)"
        table.add_row(str(rec["item_id"]), f"{rec['b']:.3f}", f"{rec['b_sd']:.3f}", d_txt, f"{rec['d_sd']:.3f}")
    console.print(table)
    if json_out is not None:
        atomic_write_json(json_out, {
            "scale": str(scale), "responses": str(responses), "models": sc.models, "b_min": sc.b_min,
            "b_max": sc.b_max, "n_draws": sc.n_draws, "guessing": sc.guessing if guessing is None else guessing,
            "ignored_models": placed.ignored_models, "items": placed.to_records(),
        })
        console.print(f"wrote {json_out}")


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
) -> None:
    """Import eval logs of another harness into a response file (and items) the other commands read."""
    import io

    from benchfill.data import write_items
    from benchfill.importers import Options, import_logs
    from benchfill.io import atomic_write_text

    res = import_logs(fmt, paths, Options(metric=metric, filter=filter_, threshold=threshold))
    matrix = res.matrix(", ".join(map(str, paths)), min_models=1)
    frame = matrix.to_long()
    frame["task"] = frame["item_id"].map(res.tasks)
    buf = io.StringIO()
    frame.to_csv(buf, index=False)
    atomic_write_text(out, buf.getvalue())
    for line in res.summary_lines():
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {out}: {len(frame)} rows", markup=False, highlight=False, soft_wrap=True)
    if items_out is not None:
        items = res.item_list()
        if not items:
            err_console.print(f"note: {items_out} not written: these logs carry no item texts (question and answer)",
                              markup=False, highlight=False, soft_wrap=True)
            return
        write_items(items_out, items)
        console.print(f"wrote {items_out}: {len(items)} of {matrix.shape[1]} items (those whose question and "
                      "answer the logs carry)", markup=False, highlight=False, soft_wrap=True)


# ---- designers (BenchBench: card / run / rewriters) -------------------------------------------------------

from benchfill.designers.cli import designers_app  # noqa: E402  (a light import: typer only, the rest is lazy)

app.add_typer(designers_app, name="designers")


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
