"""``benchfill evaluate``: every panel model answers every item ``rollouts`` times; answers are graded; the counts
are written in the long response format that ``benchfill diagnose`` reads.

Outputs in the run folder:

- ``responses.csv``: ``model,item_id,n_correct,n_trials`` (one row per model x item with a counted answer; an
  answer with no extractable final answer, in the wrong form or cut by the token limit counts, as wrong; only
  failed calls and items that cannot be graded are not trials). Not written while any call failed;
- ``calls.sqlite``: the call cache and per-call log (:mod:`benchfill.models.cache`) plus every grade;
- ``skipped.csv``: each ungradable or failed answer with its reason;
- ``summary.json``: counts, tokens, cost, per-model accuracy, per model the answers counted wrong for their form
  (``wrong_form``, with reasons) and the skipped ones (``skipped``), ``complete`` (false while calls failed), and
  ``"simulated": true`` when any sim model played.

Calls that failed for infrastructure reasons (server down, timeouts, 5xx after every retry) are never an outcome:
:func:`evaluate` raises :class:`~benchfill.models.failures.CallsFailed` ("37 calls failed (server unreachable); ...")
after writing the summary, and a rerun retries exactly those calls.

A rerun of the same command is served from the cache (no model call) and writes identical files; an interrupted
run resumes where it stopped, because each finished call was committed when it returned.
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import BaseModel, Field, model_serializer

from benchfill.aio import run_sync
from benchfill.data import Item, load_items
from benchfill.errors import InputError
from benchfill.io import atomic_write_json, atomic_write_text
from benchfill.models.cache import CallCache
from benchfill.models.client import CallResult, ClientStats, ModelClient
from benchfill.models.config import ModelConfig, RunConfig, load_config, validate_config
from benchfill.models.failures import CallFailure, CallsFailed
from benchfill.models.grading import FORM_PREFIX, Grader, is_form_failure
from benchfill.models.panel import PanelAnswer, PanelEngine
from benchfill.models.prompts import PromptLibrary

RESPONSES = "responses.csv"
CALLS_DB = "calls.sqlite"
SKIPPED = "skipped.csv"
SUMMARY = "summary.json"


SIMULATED_LABEL = "SIMULATED: answers come from the offline simulated world, not from real models"


@dataclass
class Progress:
    """Counters a progress display reads; ``on_update`` is called after every graded answer."""

    answers_total: int = 0
    answers_done: int = 0
    items_total: int = 0
    items_done: int = 0
    stats: ClientStats | None = None
    on_update: Callable[["Progress", CallResult | None], None] | None = None


class EvaluationResult(BaseModel):
    """What ``evaluate`` did. ``model_dump`` / ``model_dump_json`` give ``summary.json`` (and the ``--json`` of
    ``benchfill evaluate``): ``failures`` left out, and for a simulated run a ``label`` saying so first."""

    out_dir: str
    responses_path: str
    calls_path: str
    simulated: bool
    n_items: int
    models: list[str]
    rollouts: dict[str, int]
    answers: int
    counted: int
    correct: int
    skipped: dict[str, dict[str, int]]
    call_errors: int
    calls_made: int
    cached: int
    retries: int
    tokens_in: int
    tokens_out: int
    cost: float
    accuracy: dict[str, float | None]
    items_without_gradable_answer: list[str] = Field(default_factory=list)
    first_errors: list[str] = Field(default_factory=list)
    wrong_form: dict[str, dict[str, int]] = Field(default_factory=dict)
    failed_calls: int = 0
    complete: bool = True
    failures: list[CallFailure] = Field(default_factory=list, repr=False, exclude=True)

    @model_serializer(mode="wrap")
    def _labelled(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if self.simulated:
            data = {"label": SIMULATED_LABEL, **data}
        return data


def _rollouts(cfg: ModelConfig, override: int | None) -> int:
    return override if override is not None else cfg.rollouts


async def run_evaluation(
    items: Sequence[Item], config: RunConfig, out_dir: str | Path, *, rollouts: int | None = None,
    progress: Progress | None = None, client: ModelClient | None = None,
) -> EvaluationResult:
    """Answer, grade and count (see the module docstring). ``config`` must already be validated."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prompts = PromptLibrary.from_config(config)
    sim = None
    if config.simulated:
        from benchfill.models.config import SimConfig
        from benchfill.models.sim import SimWorld

        sim = SimWorld.from_config(config.sim or SimConfig())
    progress = progress or Progress()
    own_client = client is None
    client = client or ModelClient(CallCache(out / CALLS_DB), sim=sim)
    cache = client.cache
    progress.stats = client.stats
    if config.simulated:
        cache.set_meta("simulated", True)
    grader = Grader(client, config.grader, prompts)
    panel = config.panel
    n_roll = {m.label: _rollouts(m, rollouts) for m in panel}
    progress.answers_total = sum(n_roll.values()) * len(items)
    progress.items_total = len(items)
    engine = PanelEngine(client, grader, items, prompts)

    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    skips: list[tuple[str, str, int, str, str]] = []
    wrong_form: dict[str, Counter[str]] = defaultdict(Counter)
    failures: list[CallFailure] = []
    pending_per_item = [sum(n_roll.values()) for _ in items]

    def count(answer: PanelAnswer) -> None:
        model, item, k, grade = answer.job.model, items[answer.job.item], answer.job.rollout, answer.grade
        cell = counts[(model.label, item.id)]
        if grade.label == "skip":
            skips.append((model.label, item.id, k, grade.method, grade.reason or ""))
            if answer.retryable:
                failures.append(answer.failure())
        else:
            if is_form_failure(grade):
                wrong_form[model.label][(grade.reason or "").removeprefix(FORM_PREFIX)] += 1
            cell[1] += 1
            cell[0] += grade.label == "correct"
        progress.answers_done += 1
        pending_per_item[answer.job.item] -= 1
        if pending_per_item[answer.job.item] == 0:
            progress.items_done += 1
        if progress.on_update is not None:
            progress.on_update(progress, answer.result)

    try:
        await engine.answer(PanelEngine.all_jobs(panel, len(items), lambda m: n_roll[m.label]), on_answer=count)
    finally:
        if own_client:
            await client.aclose()
    return _write_outputs(out, items, config, n_roll, counts, skips, client, wrong_form, failures)


def _write_outputs(out: Path, items: Sequence[Item], config: RunConfig, n_roll: dict[str, int],
                   counts: dict[tuple[str, str], list[int]], skips: list[tuple[str, str, int, str, str]],
                   client: ModelClient, wrong_form: dict[str, Counter[str]] | None = None,
                   failures: list[CallFailure] | None = None) -> EvaluationResult:
    failures = failures or []
    labels = [m.label for m in config.panel]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["model", "item_id", "n_correct", "n_trials"])
    attempted: set[str] = set()
    correct_total = counted_total = 0
    accuracy: dict[str, float | None] = {}
    for label in labels:  # fixed order (config, then items): a rerun writes the identical file
        c_sum = t_sum = 0
        for item in items:
            c, t = counts.get((label, item.id), (0, 0))
            if t > 0:
                writer.writerow([label, item.id, c, t])
                attempted.add(item.id)
            c_sum += c
            t_sum += t
        accuracy[label] = round(c_sum / t_sum, 6) if t_sum else None
        correct_total += c_sum
        counted_total += t_sum
    responses = out / RESPONSES
    if failures:  # counts with holes where calls failed are no result: never leave them where diagnose reads
        responses.unlink(missing_ok=True)
    else:
        atomic_write_text(responses, buf.getvalue())

    order = {item.id: n for n, item in enumerate(items)}
    skips.sort(key=lambda s: (labels.index(s[0]), order[s[1]], s[2]))
    sbuf = io.StringIO()
    swriter = csv.writer(sbuf, lineterminator="\n")
    swriter.writerow(["model", "item_id", "sample_index", "method", "reason"])
    swriter.writerows(skips)
    atomic_write_text(out / SKIPPED, sbuf.getvalue())

    by_model: dict[str, Counter[str]] = {label: Counter() for label in labels}
    for label, _, _, _, reason in skips:
        by_model[label][reason.split(":")[0] if reason.startswith("call failed") else reason] += 1
    stats = client.stats
    result = EvaluationResult(
        out_dir=str(out), responses_path=str(responses), calls_path=str(out / CALLS_DB), simulated=config.simulated,
        n_items=len(items), models=labels, rollouts=n_roll, answers=sum(n_roll.values()) * len(items),
        counted=counted_total, correct=correct_total,
        skipped={k: dict(sorted(v.items())) for k, v in by_model.items() if v},
        call_errors=sum(1 for s in skips if s[3] == "call"), calls_made=stats.calls, cached=stats.cached,
        retries=stats.retries, tokens_in=stats.tokens_in, tokens_out=stats.tokens_out, cost=round(stats.cost, 6),
        accuracy=accuracy, items_without_gradable_answer=[it.id for it in items if it.id not in attempted],
        first_errors=list(stats.first_errors),
        wrong_form={k: dict(sorted(v.items())) for k, v in sorted((wrong_form or {}).items()) if v},
        failed_calls=len(failures), complete=not failures, failures=list(failures),
    )
    summary = result.model_dump()
    # run-specific counters (calls made now vs cached) change between a run and its rerun; they go in the
    # summary, never in responses.csv, which stays byte-identical.
    atomic_write_json(out / SUMMARY, summary)
    return result


async def evaluate_async(items_path: str | Path, config_path: str | Path, out_dir: str | Path, *,
                         limit: int | None = None, rollouts: int | None = None,
                         progress: Progress | None = None) -> EvaluationResult:
    """Load and validate everything (no call is made before the config, keys and items check out), then run.
    Raises :class:`CallsFailed` when calls failed for good (nothing is counted; a rerun retries them)."""
    config = load_config(config_path)
    validate_config(config, need=("panel",))
    if limit is not None and limit < 1:
        raise InputError(str(items_path), f"--limit {limit}: must be at least 1")
    if rollouts is not None and rollouts < 1:
        raise InputError(str(config_path), f"--rollouts {rollouts}: must be at least 1")
    items = load_items(items_path)
    if limit is not None:
        items = items[:limit]
    if config.grader is not None and any(item.resolved_format == "open" for item in items):
        validate_config(config, need=("grader",))  # the judge of open answers is called: it must be callable
    PromptLibrary.from_config(config)  # template overrides exist and parse, before any call
    result = await run_evaluation(items, config, out_dir, rollouts=rollouts, progress=progress)
    if result.failed_calls:
        raise CallsFailed(result.failures, "rerun the same command to retry them (answers received are kept)")
    return result


def evaluate(items_path: str | Path, config_path: str | Path, out_dir: str | Path, *, limit: int | None = None,
             rollouts: int | None = None, progress: Progress | None = None) -> EvaluationResult:
    """:func:`evaluate_async` from synchronous code, also inside a running event loop (Jupyter)."""
    return run_sync(evaluate_async(items_path, config_path, out_dir, limit=limit, rollouts=rollouts,
                                   progress=progress))
