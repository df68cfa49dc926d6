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
from typing import TYPE_CHECKING, Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from benchfill.aio import run_sync
from benchfill.data import Item, ResponseMatrix
from benchfill.diagnostics.calibrate import CalibrationResult
from benchfill.diagnostics.detect import DetectionResult
from benchfill.diagnostics.report import Diagnosis
from benchfill.errors import InputError, MissingExtra, did_you_mean, require_extra, require_sampler
from benchfill.irt.placement import PlacedItem
from benchfill.irt.prior import DEFAULT_POPULATION, POPULATION_KINDS
from benchfill.memory.record import ReviewStatus
from benchfill.memory.views import GapTrace, ReviewEntry, ReviewItem

if TYPE_CHECKING:  # the LLM client stack (litellm, sqlite-utils) loads only for commands that call models
    from benchfill.models.evaluate import EvaluationResult

DEFAULT_SAMPLER = "fast"
DIAGNOSIS_GAPS = 10  # gaps a diagnosis records, largest first (the CLI's --top-gaps shows 5 of them by default)


def load_responses(source: Any, *, items: str | Path | Sequence[Item] | None = None, models: int | None = None,
                   models_file: str | Path | None = None) -> ResponseMatrix:
    """Response counts from a path (long CSV/JSONL, wide 0/1, py-irt jsonlines, or eval logs: a file or a folder),
    a pandas DataFrame in long format (``model, item_id, n_correct, n_trials``) or wide 0/1 (a row per model, a
    column per item; names in the first column or the index), or a ResponseMatrix; validated
    against ``items`` when given; then ``models_file`` names the models to keep, else ``models`` keeps that many
    spread evenly by accuracy (the paper's 12), else all."""
    import pandas as pd

    from benchfill.data import keep_models, load_items, responses_from_frame
    from benchfill.importers import load_responses as _load

    item_list = load_items(items) if isinstance(items, (str, Path)) else (list(items) if items is not None else None)
    if isinstance(source, ResponseMatrix):
        resp = source
    elif isinstance(source, pd.DataFrame):
        resp = responses_from_frame(source, item_list)
    else:
        resp = _load(source, items=item_list)
    return keep_models(resp, models, models_file)


class ImportResult(BaseModel):
    """What :func:`import_logs` read (``benchfill import``; its ``--json``): the figures of the summary, what was
    written, and, not serialised, the response counts (``responses``) and the item texts (``items``) themselves."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    format: str = Field(description="the importer (lm-eval, inspect, helm, opencompass, openllm)")
    files: list[str] = Field(description="the log files (HELM: run folders) read")
    models: list[str]
    n_items: int
    n_trials: int = Field(description="graded answers read: epochs, repeats and rollouts each count")
    tasks: dict[str, int] = Field(description="items per task; item ids are <task>/<the log's sample id>")
    chosen: dict[str, str] = Field(description="what was read, e.g. {'metric': 'acc', 'filter': 'none'}")
    skipped: dict[str, int] = Field(description="per model, samples that are not trials (errored) and were left out")
    notes: list[str]
    summary: list[str] = Field(description="the lines `benchfill import` prints")
    out: str | None = Field(None, description="the long response file written (model,item_id,n_correct,n_trials,task)")
    rows: int = Field(description="rows of that file: attempted (model, item) pairs")
    items_out: str | None = Field(None, description="the items JSONL written (None when the logs carry no texts)")
    n_item_texts: int = Field(description="items whose question and answer the logs carry")
    responses: SkipValidation[ResponseMatrix] = Field(exclude=True, repr=False)
    items: list[Item] = Field(default_factory=list, exclude=True, repr=False)


def import_logs(fmt: str, paths: str | Path | Sequence[str | Path], *, out: str | Path | None = None,
                items_out: str | Path | None = None, metric: str | None = None, filter: str | None = None,
                threshold: float | None = None) -> ImportResult:
    """Read another harness's eval logs (``benchfill import FORMAT PATHS``): ``fmt`` one of lm-eval, inspect, helm,
    opencompass, openllm; ``paths`` log files or folders (searched recursively). ``metric``: the metric (lm-eval,
    openllm, helm) or ``scorer[/key]`` (inspect) to read, default the log's first / main one; ``filter``: the
    lm-eval filter, default ``none`` if present, else the first; ``threshold``: count a non-0/1 score >= it as
    correct (default: scores must be 0/1). With ``out`` the long response file (plus a ``task`` column) is
    written, with ``items_out`` the item texts the logs carry (JSONL). Returns the :class:`ImportResult`; its
    ``responses`` go straight to :func:`diagnose` or :func:`suite` (``by="task"``)."""
    from benchfill.data import write_items
    from benchfill.importers import Options, resolve_format, write_responses
    from benchfill.importers import import_logs as _read

    name = resolve_format(fmt)
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    logs = _read(name, paths, Options(metric=metric, filter=filter, threshold=threshold))
    matrix = logs.matrix(", ".join(map(str, paths)), min_models=1)
    rows = write_responses(out, matrix, logs.tasks) if out is not None else int((matrix.n_trials > 0).sum())
    items = logs.item_list()
    if items_out is not None and items:
        write_items(items_out, items)
    tasks: dict[str, int] = {}
    for item in matrix.item_ids:
        tasks[logs.tasks[item]] = tasks.get(logs.tasks[item], 0) + 1
    return ImportResult(format=name, files=list(logs.files), models=list(matrix.models), n_items=matrix.shape[1],
                        n_trials=int(matrix.n_trials.sum()), tasks=tasks, chosen=dict(logs.chosen),
                        skipped=dict(logs.skipped), notes=list(logs.notes), summary=logs.summary_lines(),
                        out=None if out is None else str(out), rows=rows,
                        items_out=None if items_out is None or not items else str(items_out),
                        n_item_texts=len(items), responses=matrix, items=items)


def check_fit_options(sampler: str = "", *, chains: int | None = None, tune: int | None = None,
                      draws: int | None = None, guessing: float | None = None, choices: int | None = None,
                      top_gaps: int | None = None, robustness: bool = False) -> None:
    """The IRT fit's options, checked before any data is read or any fit starts (:func:`diagnose`, :func:`suite`,
    :func:`place` and :func:`fill_run` call it; so does the CLI, for the same one-line messages). Raises
    :class:`~benchfill.errors.InputError` naming the option as the CLI spells it (``--chains: 0: must be at least
    1``), or :class:`~benchfill.errors.MissingExtra` for a sampler whose extra is not installed. ``sampler`` ``""``
    is the default (``fast``); an option left None is not checked. The rules: a known sampler; ``chains``,
    ``draws``, ``top_gaps`` at least 1 and ``tune`` at least 0 (whole numbers); ``guessing`` in [0, 1);
    ``choices`` at least 2; not both ``guessing`` and ``choices``."""
    from benchfill.irt.fit import SAMPLERS, available_samplers

    if not isinstance(sampler, str):
        raise InputError("--sampler", f"{sampler!r}: a sampler is named by a string")
    require_sampler(sampler, robustness)
    known = available_samplers()
    if sampler and sampler not in known:
        if sampler.lower() in ("nuts", "hmc", "mcmc"):
            hint = " (NUTS is pymc, nutpie or numpyro)"
        else:
            hint = did_you_mean(sampler, known)
        missing = " (not installed here)" if sampler in SAMPLERS else ""
        raise InputError("--sampler", f"{sampler!r}{missing}: choose from {', '.join(known)}{hint}")
    for name, value, least in (("--chains", chains, 1), ("--draws", draws, 1), ("--tune", tune, 0),
                               ("--top-gaps", top_gaps, 1)):
        if value is not None and _whole(name, value) < least:
            raise InputError(name, f"{value}: must be at least {least}")
    if guessing is not None:
        try:
            rate = float(guessing)
        except (TypeError, ValueError):
            raise InputError("--guessing", f"{guessing!r}: a guessing rate is a number in [0, 1)") from None
        if not 0.0 <= rate < 1.0:
            raise InputError("--guessing", f"{rate:g}: a guessing rate must lie in [0, 1)")
    if choices is not None and _whole("--choices", choices) < 2:
        raise InputError("--choices", f"{choices}: multiple choice needs at least 2 options")
    if guessing is not None and choices is not None:
        raise InputError("--guessing/--choices", "give one of them, not both")


def _whole(name: str, value: Any) -> int:
    """``value`` as a whole number (an int, numpy's too; not a float or a bool), else the option's InputError."""
    import operator

    try:
        if not isinstance(value, bool):
            return operator.index(value)
    except TypeError:
        pass
    raise InputError(name, f"{value!r}: must be a whole number")


def diagnose(responses: ResponseMatrix | Any, *, items: str | Path | Sequence[Item] | None = None,
             sampler: str = DEFAULT_SAMPLER, chains: int = 4, tune: int = 1000, draws: int = 1000, seed: int = 0,
             guessing: float | None = None, choices: int | None = None, robustness: bool = False,
             top_gaps: int = DIAGNOSIS_GAPS, on_stage: Any = None, on_picture: Any = None,
             prior: str = DEFAULT_POPULATION, compare_guessing: bool = True) -> Diagnosis:
    """Fit the IRT model and diagnose the benchmark (README: IRT and checks; Reading the figures): the same defaults as ``benchfill
    diagnose``. ``responses``: anything :func:`load_responses` takes. Multiple-choice items (``choices``) get the
    guessing rate 1/k; ``guessing`` or ``choices`` set one for every item. ``prior``: the difficulties'
    population, learned from the benchmark (``"spline"``, the default, or ``"normal"``) or the paper's fixed N(0, 1)
    (``"paper"``, for comparison with its tables), as ``--prior``. ``on_stage(text)``, if given, is told
    each stage (fit, exact difficulties, checks, metrics, null, robustness) as it starts; ``on_picture(picture)``
    gets the diagnosis picture (:class:`benchfill.diagnostics.picture.Picture`, ``top_gaps`` gaps) as soon as the
    verdicts are known. With a guessing rate (``guessing``, ``choices`` or the items' own) and
    ``compare_guessing`` the 1PL is fitted once more without it (c = 0, one more fast fit) and ``guessing_comparison``
    says which of the two the counts favour, by leave-one-item-out elpd, with the verdicts under c = 0. Returns the
    :class:`Diagnosis`; its ``save(folder)`` writes the JSON, the picture and the scale. A bad sampler setting is an
    :class:`~benchfill.errors.InputError` before anything is read (:func:`check_fit_options`)."""
    from benchfill.diagnostics.report import diagnose as _diagnose
    from benchfill.irt.model import IRTSpec, SamplerSettings

    check_fit_options(sampler, chains=chains, tune=tune, draws=draws, guessing=guessing, choices=choices,
                      top_gaps=top_gaps, robustness=robustness)
    sampler = sampler or DEFAULT_SAMPLER
    item_list = None
    if items is not None:
        from benchfill.data import load_items

        item_list = load_items(items) if isinstance(items, (str, Path)) else list(items)
    resp = responses if isinstance(responses, ResponseMatrix) else load_responses(responses, items=item_list)
    if prior not in POPULATION_KINDS:
        raise InputError("--prior", f"{prior!r}: choose from {', '.join(POPULATION_KINDS)}")
    spec = IRTSpec.for_items(resp.item_ids, item_list, guessing=guessing, choices=choices,
                             population=prior)  # type: ignore[arg-type]
    settings = SamplerSettings(method=sampler, chains=chains, tune=tune, draws=draws, seed=seed)
    dg, fit = _diagnose(resp, spec, settings, top_gaps=top_gaps, on_stage=on_stage, on_picture=on_picture,
                        compare_guessing=compare_guessing)
    if robustness:
        if on_stage is not None:
            on_stage("robustness: leave-one-model-out refits and 1PL vs 2PL BIC")
        from benchfill.irt.robustness import compare_1pl_2pl, leave_one_model_out

        dg.robustness = {"leave_one_model_out": leave_one_model_out(resp, fit).model_dump(),
                         "bic": compare_1pl_2pl(resp, spec.guessing, seed=seed).model_dump()}
    dg.attach_scale(fit)  # the difficulty draws go with the fit when this returns
    return dg


class SuiteRow(BaseModel):
    benchmark: str
    diagnosis: Diagnosis


class SuiteEntry(BaseModel):
    """One benchmark's line of a suite's ``summary.json``: the headline figures of its diagnosis."""

    benchmark: str
    n_items: int
    ddm: float
    ddm_sd: float | None
    max_gap: float
    max_gap_sd: float | None
    top5_sum: float
    top5_sum_sd: float | None
    posterior: dict[str, Any] | None
    null: dict[str, Any] | None
    resolution: dict[str, Any] | None
    uniform_baseline_ratio: float
    flags: dict[str, bool]
    verdicts: dict[str, str]
    checks_passed: int
    checks_run: int
    json_path: str | None = Field(None, serialization_alias="json")


class SuiteSummary(BaseModel):
    """What ``benchfill suite`` writes as ``summary.json`` (and prints with ``--json``)."""

    source: str
    n_models: int
    benchmarks: list[SuiteEntry]


class Suite(BaseModel):
    """One diagnosis per benchmark of a suite (Table 1)."""

    source: str
    n_models: int
    benchmarks: list[SuiteRow]

    def summary(self) -> SuiteSummary:
        return SuiteSummary(source=self.source, n_models=self.n_models, benchmarks=[
            SuiteEntry(benchmark=r.benchmark, n_items=d.n_items, ddm=d.ddm, ddm_sd=d.ddm_sd, max_gap=d.max_gap,
                       max_gap_sd=d.max_gap_sd, top5_sum=d.top5_sum, top5_sum_sd=d.top5_sum_sd,
                       posterior=None if d.posterior is None else {k: v.model_dump() for k, v in d.posterior.items()},
                       null=d.null.model_dump() if d.null else None,
                       resolution=d.resolution.model_dump() if d.resolution else None,
                       uniform_baseline_ratio=d.uniform_baseline_ratio, flags=d.flags, verdicts=d.verdicts,
                       checks_passed=d.checks_passed, checks_run=sum(c.passed is not None for c in d.checks),
                       json_path=d.files.get("json"))
            for r, d in ((r, r.diagnosis) for r in self.benchmarks)])

    def save(self, folder: str | Path) -> Path:
        """One folder per benchmark (diagnosis.json / .png / .scale.npz) and ``summary.json``; returns its path."""
        from benchfill.io import atomic_write_text

        folder = Path(folder)
        for row in self.benchmarks:
            row.diagnosis.save(folder / safe_name(row.benchmark))
        return atomic_write_text(folder / "summary.json",
                                 self.summary().model_dump_json(indent=2, by_alias=True) + "\n")


def safe_name(name: str) -> str:
    """A benchmark's name as a folder name."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "group"


def suite(responses: ResponseMatrix | Any, *, by: str = "benchmark", items_table: str | Path | None = None,
          sampler: str = DEFAULT_SAMPLER, chains: int = 4, tune: int = 1000, draws: int = 1000, seed: int = 0,
          choices: int | None = None, on_benchmark: Any = None, prior: str = DEFAULT_POPULATION,
          compare_guessing: bool = True) -> Suite:
    """A diagnosis per benchmark: items grouped by the column ``by`` of ``items_table``, or by the grouping the
    responses carry (imported logs carry ``task``). ``on_benchmark(name, diagnosis)`` is called after each. With
    ``choices`` each benchmark's 1PL is also refitted without guessing, as in :func:`diagnose`, unless
    ``compare_guessing`` is False (half the fits)."""
    from benchfill.data import item_groups

    check_fit_options(sampler, chains=chains, tune=tune, draws=draws, choices=choices)
    resp = responses if isinstance(responses, ResponseMatrix) else load_responses(responses)
    rows = []
    for name, ids in item_groups(resp, by, items_table).items():
        dg = diagnose(resp.subset(items=ids), sampler=sampler, chains=chains, tune=tune, draws=draws, seed=seed,
                      choices=choices, prior=prior, compare_guessing=compare_guessing)
        rows.append(SuiteRow(benchmark=name, diagnosis=dg))
        if on_benchmark is not None:
            on_benchmark(name, dg)
    return Suite(source=resp.source, n_models=resp.shape[0], benchmarks=rows)


class Placements(BaseModel):
    """New items on a benchmark's scale (abilities fixed): b and its SD in logits, d on the benchmark's axis
    d = (b - b_min) / (b_max - b_min). ``model_dump_json`` is the ``--json`` of ``benchfill place``."""

    scale: str
    responses: str = ""
    models: list[str] = []
    b_min: float = 0.0
    b_max: float = 1.0
    n_draws: int = 0
    guessing: float = 0.0
    population: str = Field("", description="the difficulty population the items were placed under (the scale's)")
    ignored_models: list[str]
    items: list[PlacedItem]


def place(scale: Any, responses: ResponseMatrix | Any, *, guessing: float | None = None) -> Placements:
    """Place new items on a saved scale (a ``.scale.npz`` path or a :class:`benchfill.irt.scale.Scale`), as
    ``benchfill place``, under the scale's own difficulty population (the one its benchmark was measured with).
    ``responses``: the new items' counts, keyed by the scale's model names. ``guessing``: the new items' lower
    asymptote (default: the scale's)."""
    from benchfill.irt.placement import place_responses
    from benchfill.irt.scale import Scale

    check_fit_options(guessing=guessing)
    sc = scale if isinstance(scale, Scale) else Scale.load(scale)
    where = sc.source if isinstance(scale, Scale) else str(scale)
    resp = responses if isinstance(responses, ResponseMatrix) else load_responses(responses)
    placed = place_responses(sc, resp, guessing)
    return Placements(scale=where, population=sc.population.label(),
                      responses=str(responses) if isinstance(responses, (str, Path)) else resp.source, models=list(sc.models), b_min=sc.b_min, b_max=sc.b_max, n_draws=sc.n_draws,
                      guessing=sc.guessing if guessing is None else guessing,
                      ignored_models=placed.ignored_models, items=placed.placed_items())


def default_diagnosis_path(responses: str | Path, *, models: int | None = None,
                           models_file: str | Path | None = None) -> Path:
    """Where ``benchfill diagnose`` writes by default: ``runs/<name>/diagnosis.json``, the name being the response
    file's without its suffixes, plus the model selection (``-m12`` for ``--models 12``, ``-<file name>`` for
    ``--models-file``), so that diagnoses of one file with different models do not collide."""
    path = Path(responses)
    name = path.name
    for suffix in (".gz", ".csv", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    if models_file is not None:
        name += f"-{Path(models_file).stem}"
    elif models is not None:
        name += f"-m{models}"
    return Path("runs") / name / "diagnosis.json"


def load_diagnosis(path: str | Path) -> Diagnosis:
    """A diagnosis JSON written by ``benchfill diagnose`` (or :meth:`Diagnosis.save`)."""
    from pydantic import ValidationError

    from benchfill.errors import InputError

    path = Path(path)
    try:
        return Diagnosis.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except (ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid"
        raise InputError(str(path), f"not a benchfill diagnosis JSON ({first})") from None


def calibration_target(spec: str) -> Any:
    """'uniform' -> None (U[0, 1]); 'beta:A,B' -> a frozen scipy Beta(A, B)."""
    from scipy import stats

    from benchfill.errors import InputError

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
    raise InputError("--target", f"{spec!r}: expected 'uniform' or 'beta:A,B'{did_you_mean(spec, ['uniform'])}")


def calibrate(diagnosis: Diagnosis | str | Path, k: int, *, target: str = "uniform") -> CalibrationResult:
    """Prune a benchmark toward a target difficulty distribution by greedy quantile matching (paper App. D), as
    ``benchfill calibrate``: ``diagnosis`` is a :class:`Diagnosis` or its JSON path, ``k`` the items to keep,
    ``target`` ``"uniform"`` or ``"beta:A,B"`` on [0, 1]. Returns the :class:`CalibrationResult` (kept ids in
    ``item_ids``)."""
    from benchfill.diagnostics.calibrate import calibrate as _calibrate

    dg = diagnosis if isinstance(diagnosis, Diagnosis) else load_diagnosis(diagnosis)
    return _calibrate([it.b for it in dg.items], k, target=calibration_target(target),
                      item_ids=[it.item_id for it in dg.items])


def detect(responses_a: str | Path, responses_b: str | Path | None = None, *, model_a: str | None = None,
           model_b: str | None = None, items: str | Path | None = None, permutations: int = 100_000,
           seed: int | None = 0, alpha: float = 0.05) -> DetectionResult:
    """Local-progress test (paper Table 12), as ``benchfill detect``: does model B beat model A? One-sided
    stratified randomization test over ``permutations`` draws; ``items``: a file of item ids to restrict to."""
    from benchfill.diagnostics.detect import detect_files

    return detect_files(responses_a, responses_b, model_a=model_a, model_b=model_b, items_path=items,
                        n_permutations=permutations, seed=seed, alpha=alpha)


def _open_bank(run_dir: str | Path):
    from benchfill.errors import InputError
    from benchfill.graphs.run import MEMORY_DB
    from benchfill.memory.bank import MemoryBank

    run_dir = Path(run_dir)
    if not (run_dir / MEMORY_DB).exists():
        raise InputError(str(run_dir), "not a fill run folder (no memory.sqlite)")
    return MemoryBank(run_dir / MEMORY_DB)


class Export(BaseModel):
    """What ``export`` wrote: the filled benchmark (JSONL) and, with ``hf``, a Hugging Face dataset."""

    out: str
    hf: str | None
    original: int
    added: int
    new_items: list[str]
    not_exported: dict[str, int] = {}  # chosen items left out, by review status (pending, blocked, rejected)

    def why_not(self, run_dir: str | Path) -> str:
        """One line on the chosen items that were left out and how to get them in ("" when none were)."""
        if not self.not_exported:
            return ""
        parts = ", ".join(f"{n} {status}" for status, n in sorted(self.not_exported.items()))
        return (f"{sum(self.not_exported.values())} chosen item(s) not exported ({parts}): an item is exported once "
                f"accepted by review (3 approvals and no standing rejection: benchfill review {run_dir}), or with "
                f"--include-pending")


def export(run_dir: str | Path, out: str | Path, *, hf: str | Path | None = None,
           include_pending: bool = False) -> Export:
    """Write the filled benchmark of a fill run (``benchfill export``): the original items plus the accepted new
    items (also those pending review with ``include_pending``) to ``out`` (JSONL), and with ``hf`` a Hugging Face
    ``datasets`` dataset saved to that folder (needs ``benchfill[hf]``)."""
    import json

    from benchfill.data import write_items
    from benchfill.memory.trace import filled_benchmark, review_queue

    bank = _open_bank(run_dir)
    try:
        rows, added = filled_benchmark(bank, include_pending=include_pending)
        left: dict[str, int] = {}
        for q in review_queue(bank):
            if q.status != ReviewStatus.ACCEPTED and not (include_pending and q.status == ReviewStatus.PENDING):
                left[q.status.value] = left.get(q.status.value, 0) + 1
    finally:
        bank.close()
    write_items(Path(out), rows)
    if hf is not None:
        try:
            import datasets
        except ImportError:
            raise MissingExtra("--hf", "hf", "datasets") from None
        datasets.disable_progress_bars()
        records = [r.model_dump(mode="json") for r in rows]
        for r in records:  # one column type per field for Arrow
            r["metadata"] = json.dumps(r.get("metadata") or {})
            r["choices"] = r.get("choices") or []
        datasets.Dataset.from_list(records).save_to_disk(str(hf))
    return Export(out=str(out), hf=None if hf is None else str(hf), original=len(rows) - added, added=added,
                  new_items=[r.id for r in rows[len(rows) - added:]], not_exported=left)


class ReviewQueue(BaseModel):
    """The review queue of a fill run: BenchFill's chosen items in gap order, with the acceptance rule."""

    rule: str
    queue: list[ReviewEntry]


# ReviewItem (benchfill.memory.views): one queued item in full (question, answer, verdict, panel counts, placement,
# votes), the result of review_item


class Vote(BaseModel):
    """A review vote and the item's standing after it."""

    item_id: str
    reviewer: str
    decision: str
    status: str
    approvals: int
    rejections: int
    rule: str


def review_queue(run_dir: str | Path) -> ReviewQueue:
    """The review queue of a fill run (``benchfill review RUN``)."""
    from benchfill.memory.bank import REVIEW_RULE
    from benchfill.memory.trace import review_queue as _queue

    bank = _open_bank(run_dir)
    try:
        return ReviewQueue(rule=REVIEW_RULE, queue=_queue(bank))
    finally:
        bank.close()


def review_item(run_dir: str | Path, item_id: str) -> ReviewItem:
    """One queued item in full (``benchfill review RUN --show ID``); an id not in the queue is an InputError."""
    from benchfill.memory.trace import review_item as _item

    bank = _open_bank(run_dir)
    try:
        return _item(bank, item_id)
    finally:
        bank.close()


def vote(run_dir: str | Path, item_id: str, decision: str, reviewer: str, note: str = "") -> Vote:
    """Approve or reject a queued item (``benchfill review RUN --approve/--reject ID --reviewer NAME``). One standing
    vote per reviewer and item (voting again replaces it); an item is accepted after 3 approvals and no standing
    rejection, and rejected after 3 rejections (``REVIEW_RULE``)."""
    from benchfill.errors import InputError
    from benchfill.memory.bank import REVIEW_RULE
    from benchfill.memory.trace import review_item as _item

    if decision not in ("approve", "reject"):
        raise InputError("decision", f"{decision!r}: choose approve or reject")
    if not reviewer or not reviewer.strip():
        raise InputError("--reviewer", "say who you are: --reviewer NAME")
    bank = _open_bank(run_dir)
    try:
        _item(bank, item_id)  # in the queue, else one line naming the queued ids
        bank.review(item_id, reviewer.strip(), decision, note)
        a, r = bank.approvals(item_id)
        return Vote(item_id=item_id, reviewer=reviewer.strip(), decision=decision, status=bank.review_status(item_id),
                    approvals=a, rejections=r, rule=REVIEW_RULE)
    finally:
        bank.close()


class GapFill(BaseModel):
    """One gap of a fill run: where it lies, whether it was filled, by which item and how close to the target.

    ``status``: "filled" (the chosen child's P(d inside the gap) reached ``[fill] fill_level``), "near" (a child
    was chosen, with the probability it reached in ``p_inside``), "unfilled" (no valid, placed child)."""

    model_config = ConfigDict(extra="allow")  # a field the run adds later is kept, not dropped

    gap: int
    lo: float | None = None
    hi: float | None = None
    target: float | None = None
    status: str | None = None
    chosen: str | None = None
    chosen_d: float | None = None
    chosen_d_sd: float | None = None
    deviation: float | None = None
    chosen_gap_sd: float | None = None  # SD of d relative to the gap's edges (b's SD / the axis' span: the axis'
    # ends move the edges with the item); chosen_d_sd is d's SD on the axis, the ends' uncertainty included
    p_inside: float | None = None  # posterior P(the chosen child's d lies inside [lo, hi])
    p_within: float | None = None  # posterior P(|d - target| <= tolerance)
    tolerance: float | None = None  # the tolerance the gap was judged at (configured, or the panel's resolution)
    resolution: float | None = None  # distance from the target to the nearest placement one child can get
    children_mu: float | None = None  # the posterior mean of the search's children population N(mu, sigma), logits
    children_sigma: float | None = None
    search_calls: int | None = None  # panel calls of the search (labelling) ...
    confirm_calls: int | None = None  # ... and of the chosen child's confirmation
    stop_reason: str | None = None
    rounds: int | None = None
    n_candidates: int | None = None
    cost: float | None = None
    note: str | None = None


class MethodFill(BaseModel):
    """One method's gaps (BenchFill, or the budget-matched baseline) and their totals."""

    model_config = ConfigDict(extra="allow")  # a field the run adds later is kept, not dropped

    gaps: list[GapFill]
    filled: int  # gaps whose chosen child is inside at P >= fill_level
    chosen: int = 0  # gaps with a chosen child (filled + near)
    top3_reduction: float | None
    mean_deviation: float | None
    candidates: int
    cost: float


class OracleFill(BaseModel):
    model_config = ConfigDict(extra="allow")

    inserted: list[float]
    top3_reduction: float | None


class FillSummary(BaseModel):
    """What a fill run did (``summary.json``; ``benchfill fill --json``): per method its gaps, the Top-3 gap-sum
    reduction, and the oracle's. ``label`` says SIMULATED when the models were simulated."""

    model_config = ConfigDict(extra="allow")

    label: str | None = None
    simulated: bool
    n_items: int
    top3_before: float
    methods: dict[str, MethodFill]
    oracle: OracleFill


def fill_run(items: str | Path, responses: str | Path, config: str | Path, out: str | Path, *,
             models: int | None = 12, models_file: str | Path | None = None, gaps: int = 3, sampler: str = "",
             seed: int = 0, compare: bool = False, resume: bool = False, allow_floor_gaps: bool = False,
             on_event: Any = None):
    """The fill run of :func:`fill`, set up (benchmark diagnosed, models configured) but not started: for a caller
    that shows ``run.model_selection`` or ``run.simulated`` before ``run.run()`` (the CLI); close it after."""
    require_extra("llm", "benchfill fill")
    check_fit_options(sampler)
    from benchfill.graphs.run import FillOptions, FillRun

    opts = FillOptions(items=Path(items), responses=Path(responses), config=Path(config), out=Path(out),
                       models=models, models_file=None if models_file is None else Path(models_file), n_gaps=gaps,
                       sampler=sampler, seed=seed, compare=compare, resume=resume, allow_floor_gaps=allow_floor_gaps)
    return FillRun(opts, on_event=on_event)


async def fill_async(items: str | Path, responses: str | Path, config: str | Path, out: str | Path, *,
                     models: int | None = 12, models_file: str | Path | None = None, gaps: int = 3,
                     sampler: str = "", seed: int = 0, compare: bool = False, resume: bool = False,
                     allow_floor_gaps: bool = False, on_event: Any = None) -> FillSummary:
    """The BenchFill search (``benchfill fill``), awaitable: runs in a worker thread so the caller's loop stays
    free. ``models``: models kept for the scale (spread evenly by accuracy); ``gaps``: gaps to fill; ``compare``:
    also the budget-matched baseline; ``resume``: continue the run in ``out``; ``on_event(dict)``: progress.
    Returns the :class:`FillSummary` (also written as ``out/summary.json``, with ``out/report.html``)."""
    return await asyncio.to_thread(_fill, items, responses, config, out, models=models, models_file=models_file,
                                   gaps=gaps, sampler=sampler, seed=seed, compare=compare, resume=resume,
                                   allow_floor_gaps=allow_floor_gaps, on_event=on_event)


def fill(items: str | Path, responses: str | Path, config: str | Path, out: str | Path, *,
         models: int | None = 12, models_file: str | Path | None = None, gaps: int = 3, sampler: str = "",
         seed: int = 0, compare: bool = False, resume: bool = False, allow_floor_gaps: bool = False,
         on_event: Any = None) -> FillSummary:
    """:func:`fill_async` from synchronous code (also inside a running event loop, e.g. Jupyter)."""
    return run_sync(fill_async(items, responses, config, out, models=models, models_file=models_file, gaps=gaps,
                               sampler=sampler, seed=seed, compare=compare, resume=resume,
                               allow_floor_gaps=allow_floor_gaps, on_event=on_event))


def _fill(items, responses, config, out, **options: Any) -> FillSummary:
    run = fill_run(items, responses, config, out, **options)
    try:
        return FillSummary.model_validate(run.run())
    finally:
        run.close()


async def evaluate_async(items: str | Path, config: str | Path, out: str | Path, *, limit: int | None = None,
                         rollouts: int | None = None, progress: Any = None) -> EvaluationResult:
    """Every panel model answers every item (``benchfill evaluate``), awaitable: ``limit`` only the first N items,
    ``rollouts`` overrides every panel model's; ``progress`` a :class:`benchfill.models.progress` state (or None).
    Writes ``out/responses.csv`` (what :func:`diagnose` reads), ``calls.sqlite`` (the cache: a rerun pays nothing
    twice) and ``summary.json``. Returns the :class:`EvaluationResult`."""
    require_extra("llm", "benchfill evaluate")
    from benchfill.models.evaluate import evaluate_async as _evaluate_async

    return await _evaluate_async(items, config, out, limit=limit, rollouts=rollouts, progress=progress)


def evaluate(items: str | Path, config: str | Path, out: str | Path, *, limit: int | None = None,
             rollouts: int | None = None, progress: Any = None) -> EvaluationResult:
    """:func:`evaluate_async` from synchronous code (also inside a running event loop, e.g. Jupyter)."""
    return run_sync(evaluate_async(items, config, out, limit=limit, rollouts=rollouts, progress=progress))


# GapTrace (benchfill.memory.views): one gap's search (``benchfill trace``): rounds, parents, children with
# verdicts, panel counts and placements, tokens and cost; the result of trace


def trace(run_dir: str | Path, *, gap: int = 1, method: str = "benchfill") -> GapTrace:
    """One gap of a fill run (``benchfill trace RUN --gap N --method M``): ``gap`` 1-based in the order filled,
    ``method`` benchfill or baseline."""
    from benchfill.errors import InputError
    from benchfill.memory.trace import gap_trace

    if method not in ("benchfill", "baseline"):
        raise InputError("--method", f"{method!r}: choose benchfill or baseline"
                                     f"{did_you_mean(method, ['benchfill', 'baseline'])}")
    bank = _open_bank(run_dir)
    try:
        return gap_trace(bank, method, gap)
    finally:
        bank.close()


def write_report(run_dir: str | Path) -> Path:
    """Write ``RUN/report.html`` (self-contained, offline: the run's gaps, searches and review queue) and return
    its path; ``benchfill view`` writes it, then serves it (see :func:`view`)."""
    from benchfill.viewer import write_report as _write

    bank = _open_bank(run_dir)
    try:
        return _write(run_dir, bank=bank)
    finally:
        bank.close()


def view(run_dir: str | Path, *, port: int = 0):
    """The run in the browser with review voting (``benchfill view``): writes ``report.html`` and returns a
    :class:`benchfill.viewer.server.ViewServer` on 127.0.0.1 (``port`` 0: a free one); its ``url`` is the address,
    ``serve_forever()`` serves until interrupted, ``close()`` stops it."""
    from benchfill.errors import InputError
    from benchfill.viewer.server import ViewServer

    write_report(run_dir)
    try:
        return ViewServer(run_dir, port=port)
    except OSError as exc:
        raise InputError(f"--port {port}", f"cannot listen on 127.0.0.1 ({exc.strerror or exc})") from None


# ----------------------------------------------------------------------------------------------- designers


def designers_card(items: str | Path, out: str | Path, *, config: str | Path | None = None, name: str | None = None,
                   language: str | None = None, max_categories: int = 8, examples: int = 12):
    """The domain card of a seed benchmark (``benchfill designers card``), saved to ``out`` (YAML) and returned as a
    :class:`~benchfill.designers.card.DomainCard`. Works inside a running event loop too (Jupyter)."""
    from benchfill.designers.card import build_card

    return run_sync(asyncio.to_thread(build_card, items, out, config_path=config, name=name, language=language,
                                      max_categories=max_categories, n_examples=examples))


async def designers_run_async(card: str | Path, quotas: str | Path, config: str | Path, out: str | Path, *,
                              seed_responses: str | Path | None = None, seed_items: str | Path | None = None,
                              seed_limit: int | None = None, irt: str | None = None, log: Any = None):
    """The designer evaluation (``benchfill designers run``), awaitable: every designer writes a quota-controlled
    suite, the panel answers, checks and the judge build the core set, the report is computed (resumable: rerun
    with the same ``out``). Returns a :class:`~benchfill.designers.results.DesignersRun` (``.report`` is
    ``report.json``)."""
    from benchfill.designers.pipeline import run_designers_async
    from benchfill.errors import InputError

    if irt is not None and irt not in ("map", "fast", "pymc", "nutpie"):
        raise InputError("--irt", f"{irt!r}: choose map, fast, pymc or nutpie")
    if seed_limit is not None and seed_limit < 1:
        raise InputError("--seed-limit", f"{seed_limit}: must be at least 1")
    return await run_designers_async(card, quotas, config, out, seed_responses=seed_responses, seed_items=seed_items,
                                     seed_limit=seed_limit, irt=irt, log=log)


def designers_run(card: str | Path, quotas: str | Path, config: str | Path, out: str | Path, **options: Any):
    """:func:`designers_run_async` from synchronous code (also inside a running event loop, e.g. Jupyter)."""
    return run_sync(designers_run_async(card, quotas, config, out, **options))


def designers_rewriters(runs: Sequence[str | Path], *, method: str = "benchfill", tolerance: float | None = None):
    """BenchFill rewriters ranked like designers (``benchfill designers rewriters``): gap-fill success, deviation
    |d - t| and cost from fill run folders. Returns a :class:`~benchfill.designers.results.RewriterReport`."""
    from benchfill.designers.rewriters import rewriter_report

    return rewriter_report(runs, method=method, tolerance=tolerance)


def local_server(model: str | Path | None = None, *, port: int = 8765, n_ctx: int = 2048, threads: int | None = None,
                 log: str | Path | None = None) -> Any:
    """A real small LLM on this machine (``benchfill local-server``): a context manager that starts llama.cpp's
    OpenAI-compatible server on 127.0.0.1 with ``model`` (a GGUF file; default: the bundled SmolLM2-135M-Instruct),
    waits until it answers and stops it on exit. ``port`` 8765 is ``examples/local.toml``'s ``api_base``; 0 picks a
    free one. ``threads``: CPU threads (default: half the cores, 1 to 4); ``log``: where its output goes. Yields a
    :class:`benchfill.models.local_server.LocalServer` (``.api_base``, ``.model`` for a config). Needs
    ``pip install 'benchfill[local]'`` (a missing extra is one :class:`~benchfill.errors.InputError` line)."""
    from benchfill.models.local_server import local_server as _serve

    return _serve(model, port=port or None, n_ctx=n_ctx, n_threads=threads, log=log)
