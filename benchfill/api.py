"""The Python API: one documented function per command, with the command's defaults, returning typed results.

    import benchfill as bf
    resp = bf.load_responses("examples/math500.responses.csv.gz", models=12)   # a path, a log folder or a DataFrame
    dx = bf.diagnose(resp)                    # a Diagnosis (pydantic): dx.posterior, dx.flags, dx.gaps, ...
    dx.save("runs/math500")                   # diagnosis.json, .png and .scale.npz, as `benchfill diagnose`
    placed = bf.place("runs/math500/diagnosis.scale.npz", new_responses)
    summary = bf.fill("items.jsonl", "responses.csv", "fill.toml", "runs/fill")    # also inside Jupyter
    result = await bf.evaluate_async("items.jsonl", "panel.toml", "runs/eval")      # or bf.evaluate(...)

The CLI is a thin face on these functions: what it can do, Python can.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel

from benchfill.aio import run_sync
from benchfill.data import Item, ResponseMatrix
from benchfill.diagnostics.report import Diagnosis

DEFAULT_SAMPLER = "fast"


def load_responses(source: Any, *, items: str | Path | Sequence[Item] | None = None, models: int | None = None,
                   models_file: str | Path | None = None) -> ResponseMatrix:
    """Response counts from a path (long CSV/JSONL, wide 0/1, py-irt jsonlines, or eval logs: a file or a folder),
    a pandas DataFrame in long format (``model, item_id, n_correct, n_trials``) or a ResponseMatrix; validated
    against ``items`` when given; then ``models_file`` names the models to keep, else ``models`` keeps that many
    spread evenly by accuracy (the paper's 12), else all."""
    import pandas as pd

    from benchfill.data import keep_models, load_items, responses_from_frame
    from benchfill.data import load_responses as _load

    item_list = load_items(items) if isinstance(items, (str, Path)) else (list(items) if items is not None else None)
    if isinstance(source, ResponseMatrix):
        resp = source
    elif isinstance(source, pd.DataFrame):
        resp = responses_from_frame(source, item_list)
    else:
        resp = _load(source, items=item_list)
    return keep_models(resp, models, models_file)


def diagnose(responses: ResponseMatrix | Any, *, items: str | Path | Sequence[Item] | None = None,
             sampler: str = DEFAULT_SAMPLER, chains: int = 4, tune: int = 1000, draws: int = 1000, seed: int = 0,
             guessing: float | None = None, choices: int | None = None, robustness: bool = False,
             top_gaps: int = 10) -> Diagnosis:
    """Fit the IRT model and diagnose the benchmark (SPEC sections 2-3): the same defaults as ``benchfill
    diagnose``. ``responses``: anything :func:`load_responses` takes. Multiple-choice items (``choices``) get the
    guessing rate 1/k; ``guessing`` or ``choices`` set one for every item. Returns the :class:`Diagnosis`; its
    ``save(folder)`` writes the JSON, the picture and the scale."""
    from benchfill.diagnostics.report import diagnose as _diagnose
    from benchfill.irt.model import IRTSpec, SamplerSettings

    item_list = None
    if items is not None:
        from benchfill.data import load_items

        item_list = load_items(items) if isinstance(items, (str, Path)) else list(items)
    resp = responses if isinstance(responses, ResponseMatrix) else load_responses(responses, items=item_list)
    spec = IRTSpec.for_items(resp.item_ids, item_list, guessing=guessing, choices=choices)
    settings = SamplerSettings(method=sampler, chains=chains, tune=tune, draws=draws, seed=seed)
    dg, fit = _diagnose(resp, spec, settings, top_gaps=top_gaps)
    if robustness:
        from benchfill.irt.robustness import compare_1pl_2pl, leave_one_model_out

        dg.robustness = {"leave_one_model_out": leave_one_model_out(resp, fit).as_dict(),
                         "bic": compare_1pl_2pl(resp, spec.guessing, seed=seed).as_dict()}
    dg.attach_scale(fit)  # the difficulty draws go with the fit when this returns
    return dg


class SuiteRow(BaseModel):
    benchmark: str
    diagnosis: Diagnosis


class Suite(BaseModel):
    """One diagnosis per benchmark of a suite (Table 1)."""

    source: str
    n_models: int
    benchmarks: list[SuiteRow]

    def save(self, folder: str | Path) -> Path:
        """One folder per benchmark (diagnosis.json / .png / .scale.npz) and ``summary.json``."""
        import re

        from benchfill.io import atomic_write_text

        folder = Path(folder)
        for row in self.benchmarks:
            safe = re.sub(r"[^A-Za-z0-9._-]+", "_", row.benchmark).strip("_") or "group"
            row.diagnosis.save(folder / safe)
        return atomic_write_text(folder / "summary.json", self.model_dump_json(indent=2, exclude={
            "benchmarks": {"__all__": {"diagnosis": {"items", "models", "checks", "theory"}}}}) + "\n")


def suite(responses: ResponseMatrix | Any, *, by: str = "benchmark", items_table: str | Path | None = None,
          sampler: str = DEFAULT_SAMPLER, chains: int = 4, tune: int = 1000, draws: int = 1000, seed: int = 0,
          choices: int | None = None, on_benchmark: Any = None) -> Suite:
    """A diagnosis per benchmark: items grouped by the column ``by`` of ``items_table``, or by the grouping the
    responses carry (imported logs carry ``task``). ``on_benchmark(name, diagnosis)`` is called after each."""
    from benchfill.data import item_groups

    resp = responses if isinstance(responses, ResponseMatrix) else load_responses(responses)
    rows = []
    for name, ids in item_groups(resp, by, items_table).items():
        dg = diagnose(resp.subset(items=ids), sampler=sampler, chains=chains, tune=tune, draws=draws, seed=seed,
                      choices=choices)
        rows.append(SuiteRow(benchmark=name, diagnosis=dg))
        if on_benchmark is not None:
            on_benchmark(name, dg)
    return Suite(source=resp.source, n_models=resp.shape[0], benchmarks=rows)


class PlacedItem(BaseModel):
    item_id: str
    b: float
    b_sd: float
    d: float
    d_sd: float


class Placements(BaseModel):
    """New items on a benchmark's scale (abilities fixed): b and its SD in logits, d on the benchmark's axis."""

    scale: str
    items: list[PlacedItem]
    ignored_models: list[str]


def place(scale: Any, responses: ResponseMatrix | Any, *, guessing: float | None = None,
          prior_sd: float = 1.0) -> Placements:
    """Place new items on a saved scale (a ``.scale.npz`` path or a :class:`benchfill.irt.scale.Scale`), as
    ``benchfill place``. ``responses``: the new items' counts, keyed by the scale's model names."""
    from benchfill.errors import InputError
    from benchfill.irt.placement import place_responses
    from benchfill.irt.scale import Scale

    sc = scale if isinstance(scale, Scale) else Scale.load(scale)
    if guessing is not None and not 0.0 <= guessing < 1.0:
        raise InputError(sc.source or "<scale>", f"guessing {guessing}: must lie in [0, 1)")
    if not prior_sd > 0:
        raise InputError("prior_sd", f"{prior_sd}: must be a positive number")
    resp = responses if isinstance(responses, ResponseMatrix) else load_responses(responses)
    placed = place_responses(sc, resp, guessing, prior_sd)
    return Placements(scale=sc.source, items=[PlacedItem(**r) for r in placed.to_records()],
                      ignored_models=placed.ignored_models)


async def fill_async(items: str | Path, responses: str | Path, config: str | Path, out: str | Path, *,
                     models: int | None = 12, models_file: str | Path | None = None, gaps: int = 3,
                     sampler: str = "", seed: int = 0, compare: bool = False, resume: bool = False,
                     allow_floor_gaps: bool = False, on_event: Any = None) -> dict[str, Any]:
    """The BenchFill search (``benchfill fill``), awaitable: runs in a worker thread so the caller's loop stays
    free. Returns the run's summary (as ``summary.json``)."""
    return await asyncio.to_thread(_fill, items, responses, config, out, models, models_file, gaps, sampler, seed,
                                   compare, resume, allow_floor_gaps, on_event)


def fill(items: str | Path, responses: str | Path, config: str | Path, out: str | Path, **options: Any
         ) -> dict[str, Any]:
    """:func:`fill_async` from synchronous code (also inside a running event loop, e.g. Jupyter)."""
    return run_sync(fill_async(items, responses, config, out, **options))


def _fill(items, responses, config, out, models, models_file, gaps, sampler, seed, compare, resume,
          allow_floor_gaps, on_event) -> dict[str, Any]:
    from benchfill.graphs.run import FillOptions, FillRun

    opts = FillOptions(items=Path(items), responses=Path(responses), config=Path(config), out=Path(out),
                       models=models, models_file=None if models_file is None else Path(models_file), n_gaps=gaps,
                       sampler=sampler, seed=seed, compare=compare, resume=resume, allow_floor_gaps=allow_floor_gaps)
    run = FillRun(opts, on_event=on_event)
    try:
        return run.run()
    finally:
        run.close()


async def evaluate_async(items: str | Path, config: str | Path, out: str | Path, *, limit: int | None = None,
                         rollouts: int | None = None, progress: Any = None):
    """Every panel model answers every item (``benchfill evaluate``), awaitable. Returns the EvaluationResult."""
    from benchfill.models.evaluate import evaluate_async as _evaluate_async

    return await _evaluate_async(items, config, out, limit=limit, rollouts=rollouts, progress=progress)


def evaluate(items: str | Path, config: str | Path, out: str | Path, **options: Any):
    """:func:`evaluate_async` from synchronous code (also inside a running event loop, e.g. Jupyter)."""
    return run_sync(evaluate_async(items, config, out, **options))
