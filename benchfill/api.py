"""The Python API: one documented function per command, with the command's defaults, returning typed results.

    import benchfill as bf
    resp = bf.load_responses("examples/math500.responses.csv.gz", models=12)   # a path, a log folder or a DataFrame
    dx = bf.diagnose(resp)                    # a Diagnosis (pydantic): dx.posterior, dx.flags, dx.gaps, ...
    dx.save("runs/math500")                   # diagnosis.json, .png and .scale.npz, as `benchfill diagnose`
    placed = bf.place("runs/math500/diagnosis.scale.npz", new_responses)
    summary = bf.fill("items.jsonl", "responses.csv", "fill.toml", "runs/fill")    # also inside Jupyter
    result = await bf.evaluate_async("items.jsonl", "panel.toml", "runs/eval")      # or bf.evaluate(...)

The CLI is a thin face on these functions: what it can do, Python can. One shape for all of them: a command's
options are its :mod:`benchfill.options` model (defaults and rules, shared with the CLI's flags), a long-running
call reports progress as :class:`benchfill.progress.Event` objects to its ``on_event``, and a result printed with
rich (``rich.print(result)``) shows what the command shows.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from benchfill import options
from benchfill.data import Item, ResponseMatrix
from benchfill.diagnostics.calibrate import CalibrationResult
from benchfill.diagnostics.detect import DetectionResult
from benchfill.diagnostics.report import Diagnosis
from benchfill.errors import InputError, MissingExtra, did_you_mean, require_extra
from benchfill.irt.placement import PlacedItem
from benchfill.options import DEFAULT_SAMPLER as DEFAULT_SAMPLER
from benchfill.options import DIAGNOSIS_GAPS as DIAGNOSIS_GAPS
from benchfill.options import check_fit_options as check_fit_options
from benchfill.progress import Event, OnEvent, notify

if TYPE_CHECKING:  # annotations only: the LLM client stack (litellm, sqlite-utils) loads only for commands that
    # call models, rich and the picture's process for those that show or draw
    from rich.console import RenderableType

    from benchfill.diagnostics.picture import Painter
    from benchfill.memory.views import GapTrace, ReviewEntry, ReviewItem
    from benchfill.models.evaluate import EvaluationResult


def _path(value: str | Path | None) -> Path | None:
    """A path option as a Path (None stays None)."""
    return None if value is None else Path(value)


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


def diagnose(responses: ResponseMatrix | Any, *, items: str | Path | Sequence[Item] | None = None,
             sampler: str = options.DIAGNOSE.sampler, chains: int = options.DIAGNOSE.chains,
             tune: int = options.DIAGNOSE.tune, draws: int = options.DIAGNOSE.draws, seed: int = options.DIAGNOSE.seed,
             guessing: float | None = options.DIAGNOSE.guessing, choices: int | None = options.DIAGNOSE.choices,
             robustness: bool = options.DIAGNOSE.robustness, top_gaps: int = options.DIAGNOSE.top_gaps,
             prior: str = options.DIAGNOSE.prior, compare_guessing: bool = options.DIAGNOSE.compare_guessing,
             on_event: OnEvent | None = None, on_stage: Callable[[str], None] | None = None,
             on_picture: Callable[[Any], None] | None = None) -> Diagnosis:
    """Fit the IRT model and diagnose the benchmark (README: IRT and checks; Reading the figures): the same
    defaults as ``benchfill diagnose``. ``responses``: anything :func:`load_responses` takes. Multiple-choice items
    (``choices``) get the guessing rate 1/k; ``guessing`` or ``choices`` set one for every item. ``prior``: the
    difficulties' population, learned from the benchmark (``"spline"``, the default, or ``"normal"``) or the paper's
    fixed N(0, 1) (``"paper"``, for comparison with its tables), as ``--prior``. ``on_event``, if given, gets a
    :class:`benchfill.progress.Event` as each stage (fit, exact difficulties, metrics, null, checks, robustness)
    starts (kind ``stage``, the stage in ``message``) and the diagnosis picture (kind ``picture``, a
    :class:`benchfill.diagnostics.picture.Picture` of ``top_gaps`` gaps in ``payload``) as soon as the verdicts are
    known; ``on_stage(text)`` and ``on_picture(picture)`` are its deprecated forerunners. With a guessing rate
    (``guessing``, ``choices`` or the items' own) and ``compare_guessing`` the 1PL is fitted once more without it
    (c = 0, one more fast fit) and ``guessing_comparison`` says which of the two the counts favour, by
    leave-one-item-out elpd, with the verdicts under c = 0. Returns the :class:`Diagnosis`; its ``save(folder)``
    writes the JSON, the picture and the scale (:func:`diagnosis_files`: where ``benchfill diagnose`` writes). The
    options are :class:`~benchfill.options.DiagnoseOptions`: a bad one is an :class:`~benchfill.errors.InputError`
    before anything is read."""
    opts = options.DiagnoseOptions(sampler=sampler, chains=chains, tune=tune, draws=draws, seed=seed,
                                   guessing=guessing, choices=choices, robustness=robustness, top_gaps=top_gaps,
                                   prior=prior, compare_guessing=compare_guessing)
    on_event = _with_deprecated_callbacks(on_event, on_stage, on_picture)
    item_list = None
    if items is not None:
        from benchfill.data import load_items

        item_list = load_items(items) if isinstance(items, (str, Path)) else list(items)
    resp = responses if isinstance(responses, ResponseMatrix) else load_responses(responses, items=item_list)
    return _diagnosis(resp, opts, item_list, on_event)


def _diagnosis(resp: ResponseMatrix, opts: options.DiagnoseOptions, item_list: list[Item] | None,
               on_event: OnEvent | None) -> Diagnosis:
    """The diagnosis of :func:`diagnose` (and of each benchmark of :func:`suite`), its options checked."""
    from benchfill.diagnostics.report import diagnose as _diagnose
    from benchfill.irt.model import IRTSpec, SamplerSettings

    spec = IRTSpec.for_items(resp.item_ids, item_list, guessing=opts.guessing, choices=opts.choices,
                             population=opts.prior)  # type: ignore[arg-type]
    settings = SamplerSettings(method=opts.sampler or DEFAULT_SAMPLER, chains=opts.chains, tune=opts.tune,
                               draws=opts.draws, seed=opts.seed)
    on_stage, on_picture = _report_callbacks(on_event)
    dg, fit = _diagnose(resp, spec, settings, top_gaps=opts.top_gaps, on_stage=on_stage, on_picture=on_picture,
                        compare_guessing=opts.compare_guessing)
    if opts.robustness:
        notify(on_event, "stage", "robustness: leave-one-model-out refits and 1PL vs 2PL BIC")
        from benchfill.irt.robustness import compare_1pl_2pl, leave_one_model_out

        dg.robustness = {"leave_one_model_out": leave_one_model_out(resp, fit).model_dump(),
                         "bic": compare_1pl_2pl(resp, spec.guessing, seed=opts.seed).model_dump()}
    dg.attach_scale(fit)  # the difficulty draws go with the fit when this returns
    return dg


def _report_callbacks(on_event: OnEvent | None) -> tuple[Callable[[str], None] | None, Callable[[Any], None] | None]:
    """The diagnosis report's callbacks, ``on_stage(text)`` and ``on_picture(picture)``, giving ``on_event`` their
    events (None, None without it: the report then makes no picture early)."""
    if on_event is None:
        return None, None

    def stage(text: str) -> None:
        notify(on_event, "stage", text)

    def picture(pic: Any) -> None:
        notify(on_event, "picture", "the diagnosis picture", pic)

    return stage, picture


def _with_deprecated_callbacks(on_event: OnEvent | None, on_stage: Callable[[str], None] | None,
                               on_picture: Callable[[Any], None] | None) -> OnEvent | None:
    """``on_event`` that also feeds diagnose's former callbacks, ``on_stage(text)`` and ``on_picture(picture)``,
    with a DeprecationWarning when either is given."""
    if on_stage is None and on_picture is None:
        return on_event
    warnings.warn("diagnose(on_stage=..., on_picture=...) are deprecated: pass on_event=, which gets a "
                  "benchfill.progress.Event (kind 'stage': the stage in its message; kind 'picture': the picture in "
                  "its payload)", DeprecationWarning, stacklevel=3)

    def relay(event: Event) -> None:
        if on_event is not None:
            on_event(event)
        if event.kind == "stage" and on_stage is not None:
            on_stage(event.message)
        elif event.kind == "picture" and on_picture is not None:
            on_picture(event.payload)

    return relay


class SuiteRow(BaseModel):
    """One benchmark of a suite and its diagnosis."""

    benchmark: str
    diagnosis: Diagnosis

    def line(self) -> str:
        """What ``benchfill suite`` prints as the benchmark is done (and its ``benchmark`` event says)."""
        d = self.diagnosis
        return (f"{self.benchmark}: {d.n_items} items, plug-in DDM {d.ddm:.3f}, max gap {d.max_gap:.3f} "
                f"({d.sampler.wall_time_s:.1f} s)")


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
    """One diagnosis per benchmark of a suite (Table 1); printed with rich, the table ``benchfill suite`` shows."""

    source: str
    n_models: int
    benchmarks: list[SuiteRow]

    def __rich__(self) -> RenderableType:
        from benchfill.diagnostics.render import suite_table

        return suite_table([(r.benchmark, r.diagnosis) for r in self.benchmarks],
                           f"{Path(self.source).name}: {self.n_models} models, {len(self.benchmarks)} benchmarks")

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


def suite(responses: ResponseMatrix | Any, *, by: str = options.SUITE.by, items_table: str | Path | None = None,
          sampler: str = options.SUITE.sampler, chains: int = options.SUITE.chains, tune: int = options.SUITE.tune,
          draws: int = options.SUITE.draws, seed: int = options.SUITE.seed, choices: int | None = options.SUITE.choices,
          prior: str = options.SUITE.prior, compare_guessing: bool = options.SUITE.compare_guessing,
          on_event: OnEvent | None = None) -> Suite:
    """A diagnosis per benchmark: items grouped by the column ``by`` of ``items_table``, or by the grouping the
    responses carry (imported logs carry ``task``). ``on_event`` gets a :class:`benchfill.progress.Event` after
    each (kind ``benchmark``: its line in ``message``, its :class:`SuiteRow` in ``payload``). With ``choices`` each
    benchmark's 1PL is also refitted without guessing, as in :func:`diagnose`, unless ``compare_guessing`` is False
    (half the fits). The options are :class:`~benchfill.options.SuiteOptions`, checked before anything is read."""
    from benchfill.data import item_groups

    opts = options.SuiteOptions(by=by, sampler=sampler, chains=chains, tune=tune, draws=draws, seed=seed,
                                choices=choices, prior=prior, compare_guessing=compare_guessing)
    resp = responses if isinstance(responses, ResponseMatrix) else load_responses(responses)
    each = opts.diagnosis()
    rows = []
    for name, ids in item_groups(resp, opts.by, items_table).items():
        row = SuiteRow(benchmark=name, diagnosis=_diagnosis(resp.subset(items=ids), each, None, None))
        rows.append(row)
        notify(on_event, "benchmark", row.line(), row)
    return Suite(source=resp.source, n_models=resp.shape[0], benchmarks=rows)


class Placements(BaseModel):
    """New items on a benchmark's scale (abilities fixed): b and its SD in logits, d on the benchmark's axis
    d = (b - b_min) / (b_max - b_min). ``model_dump_json`` is the ``--json`` of ``benchfill place``; printed with
    rich, the table it shows."""

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

    def __rich__(self) -> RenderableType:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        sign = "-" if self.b_min >= 0 else "+"
        # the title as its own line: a table's title wraps to the (narrow) table's width
        title = Text(f"{len(self.items)} item(s) placed on {Path(self.scale).name} ({self.n_draws} ability draws; "
                     f"d = (b {sign} {abs(self.b_min):.3f}) / {self.b_max - self.b_min:.3f}; "
                     f"prior: the scale's population, {self.population})")
        table = Table()
        for col in ("item", "b", "SD", "d", "d SD"):
            table.add_column(col, justify="left" if col == "item" else "right")
        for rec in self.items:
            d_txt = f"{rec.d:.3f}" if 0.0 <= rec.d <= 1.0 else f"[yellow]{rec.d:.3f}[/] (outside)"
            table.add_row(Text(rec.item_id), f"{rec.b:.3f}", f"{rec.b_sd:.3f}", d_txt, f"{rec.d_sd:.3f}")
        return Group(title, table)


def place(scale: Any, responses: ResponseMatrix | Any, *,
          guessing: float | None = options.PLACE.guessing) -> Placements:
    """Place new items on a saved scale (a ``.scale.npz`` path or a :class:`benchfill.irt.scale.Scale`), as
    ``benchfill place``, under the scale's own difficulty population (the one its benchmark was measured with).
    ``responses``: the new items' counts, keyed by the scale's model names. ``guessing``: the new items' lower
    asymptote (default: the scale's), checked before the scale is read (:class:`~benchfill.options.PlaceOptions`)."""
    from benchfill.irt.placement import place_responses
    from benchfill.irt.scale import Scale

    opts = options.PlaceOptions(guessing=guessing)
    sc = scale if isinstance(scale, Scale) else Scale.load(scale)
    where = sc.source if isinstance(scale, Scale) else str(scale)
    resp = responses if isinstance(responses, ResponseMatrix) else load_responses(responses)
    placed = place_responses(sc, resp, opts.guessing)
    return Placements(scale=where, population=sc.population.label(),
                      responses=str(responses) if isinstance(responses, (str, Path)) else resp.source,
                      models=list(sc.models), b_min=sc.b_min, b_max=sc.b_max, n_draws=sc.n_draws,
                      guessing=sc.guessing if opts.guessing is None else opts.guessing,
                      ignored_models=placed.ignored_models, items=placed.placed_items())


# ---- where a diagnosis is written ---------------------------------------------------------------------------


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


class DiagnosisFiles(BaseModel):
    """Where a diagnosis goes (:func:`diagnosis_files`): the JSON (with ``json_to_stdout`` to standard output
    instead, which the caller writes), the picture and the scale, and the gaps the picture shades."""

    json_path: Path
    json_to_stdout: bool = False
    png: Path
    scale: Path
    n_gaps: int

    def save(self, dg: Diagnosis, *, painter: Painter | None = None) -> bool:
        """Write the picture, the scale and (unless it goes to standard output) the JSON, creating their folders;
        returns whether an earlier JSON was replaced. A ``painter`` started earlier draws the picture
        (:meth:`Diagnosis.save`). A folder that cannot be made is an InputError naming it."""
        try:
            for folder in {self.png.parent, self.json_path.parent}:
                folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(str(exc.filename or self.json_path.parent),
                             f"cannot create the folder ({exc.strerror})") from None
        replaced = self.json_path.exists() and not self.json_to_stdout
        dg.save(self.json_path, self.png, n_gaps=self.n_gaps, write_json=not self.json_to_stdout, painter=painter)
        if self.json_to_stdout:
            dg.files["json"] = "-"
        return replaced


def diagnosis_files(responses: str | Path, *, models: int | None = None, models_file: str | Path | None = None,
                    json_out: str | Path | None = options.DIAGNOSIS_OUTPUT.json_out,
                    png: str | Path | None = options.DIAGNOSIS_OUTPUT.png, force: bool = options.DIAGNOSIS_OUTPUT.force,
                    n_gaps: int = options.DIAGNOSIS_OUTPUT.n_gaps) -> DiagnosisFiles:
    """Where ``benchfill diagnose RESPONSES`` writes, by its rules (:class:`~benchfill.options.DiagnosisOutput`),
    decided before the fit: ``json_out`` None writes into the default folder (:func:`default_diagnosis_path`: the
    response file's name, plus ``-m<models>`` or ``-<models_file's name>``) and refuses, with an
    :class:`~benchfill.errors.InputError`, to replace a diagnosis there unless ``force``; ``"-"`` sends the JSON to
    standard output (the caller writes it) and the picture and scale to the default folder; a path is the JSON's
    (replaced if there), a folder (existing, or a path ending in ``/``) gets ``diagnosis.json`` inside. ``png``:
    the picture's path (default: beside the JSON); ``n_gaps``: gaps the picture shades (and the CLI's table shows).
    ``DiagnosisFiles.save(dg)`` then writes them."""
    output = options.DiagnosisOutput(json_out=json_out, png=_path(png), force=force, n_gaps=n_gaps)
    default = default_diagnosis_path(responses, models=models, models_file=models_file)
    to_stdout = output.json_out is not None and str(output.json_out) == "-"
    if output.json_out is None or to_stdout:
        json_path = default
    elif Path(output.json_out).is_dir() or str(output.json_out).endswith(("/", "\\")):
        json_path = Path(output.json_out) / "diagnosis.json"  # a folder: the JSON, picture and scale go inside it
    else:
        json_path = Path(output.json_out)
    if output.json_out is None and default.exists() and not output.force:
        raise InputError(str(default), "exists (an earlier diagnose of this file): pass --force to overwrite it, "
                                       "or --json PATH to write elsewhere")
    return DiagnosisFiles(json_path=json_path, json_to_stdout=to_stdout,
                          png=output.png or json_path.with_suffix(".png"), scale=json_path.with_suffix(".scale.npz"),
                          n_gaps=output.n_gaps)


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
    """'uniform' -> None (U[0, 1]); 'beta:A,B' -> a frozen scipy Beta(A, B) (the rules:
    :func:`benchfill.options.parse_target`)."""
    ab = options.parse_target(spec)
    if ab is None:
        return None
    from scipy import stats

    return stats.beta(*ab)


class Calibration(CalibrationResult):
    """A :class:`~benchfill.diagnostics.calibrate.CalibrationResult` with what was calibrated: the diagnosis'
    source and the target as written (not serialised: the JSON is the result's). Printed with rich, what
    ``benchfill calibrate`` shows."""

    source: str = Field("", exclude=True)
    target: str = Field("uniform", exclude=True)

    def __rich__(self) -> RenderableType:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        # the title as its own line: a table's title wraps to the (narrow) table's width
        title = Text(f"calibration of {self.source}: {self.n_items} -> {self.k} items, target {self.target}")
        table = Table()
        for col in ("", "before", "after"):
            table.add_column(col, justify="right")
        table.add_row("DDM (own min-max axis)", f"{self.ddm_before:.4f}", f"{self.ddm_after:.4f}")
        table.add_row("W1 to target", f"{self.w1_target_before:.4f}", f"{self.w1_target_after_renormalised:.4f}")
        return Group(title, table)


def calibrate(diagnosis: Diagnosis | str | Path, k: int, *, target: str = options.CALIBRATE.target) -> Calibration:
    """Prune a benchmark toward a target difficulty distribution by greedy quantile matching (paper App. D), as
    ``benchfill calibrate``: ``diagnosis`` is a :class:`Diagnosis` or its JSON path, ``k`` the items to keep,
    ``target`` ``"uniform"`` or ``"beta:A,B"`` on [0, 1] (:class:`~benchfill.options.CalibrateOptions`, checked
    first). Returns the :class:`Calibration` (kept ids in ``item_ids``)."""
    from benchfill.diagnostics.calibrate import calibrate as _calibrate

    opts = options.CalibrateOptions(k=k, target=target)
    dg = diagnosis if isinstance(diagnosis, Diagnosis) else load_diagnosis(diagnosis)
    result = _calibrate([it.b for it in dg.items], opts.k, target=calibration_target(opts.target),
                        item_ids=[it.item_id for it in dg.items])
    return Calibration(**dict(result), source=dg.source, target=opts.target)


def detect(responses_a: str | Path, responses_b: str | Path | None = None, *,
           model_a: str | None = options.DETECT.model_a, model_b: str | None = options.DETECT.model_b,
           items: str | Path | None = options.DETECT.items,
           permutations: int = options.DETECT.permutations, seed: int | None = options.DETECT.seed,
           alpha: float = options.DETECT.alpha) -> DetectionResult:
    """Local-progress test (paper Table 12), as ``benchfill detect``: does model B beat model A? One-sided
    stratified randomization test over ``permutations`` draws; ``items``: a file of item ids to restrict to (the
    options: :class:`~benchfill.options.DetectOptions`). Returns the :class:`DetectionResult`; printed with rich,
    the table the command shows."""
    from benchfill.diagnostics.detect import detect_files

    opts = options.DetectOptions(model_a=model_a, model_b=model_b, items=_path(items), permutations=permutations,
                                 seed=seed, alpha=alpha)
    return detect_files(responses_a, responses_b, model_a=opts.model_a, model_b=opts.model_b,
                        items_path=opts.items, n_permutations=opts.permutations, seed=opts.seed,
                        alpha=opts.alpha)


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
    from benchfill.memory.record import ReviewStatus
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
    """The review queue of a fill run: BenchFill's chosen items in gap order, with the acceptance rule; printed with
    rich, the table ``benchfill review`` shows."""

    # built on first use (:func:`review_queue`), where ReviewEntry is imported: the memory bank's models are not
    # imported by `benchfill diagnose` (~0.06 s of a 1.8 s command)
    model_config = ConfigDict(defer_build=True)

    rule: str
    queue: list[ReviewEntry]

    def __rich__(self) -> RenderableType:
        from benchfill.graphs.render import review_table

        return review_table(self.queue)


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
    from benchfill.memory.views import ReviewEntry

    ReviewQueue.model_rebuild(_types_namespace={"ReviewEntry": ReviewEntry})
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
    reduction, and the oracle's. ``label`` says SIMULATED when the models were simulated. Printed with rich, the
    tables ``benchfill fill`` shows."""

    model_config = ConfigDict(extra="allow")

    label: str | None = None
    simulated: bool
    n_items: int
    top3_before: float
    methods: dict[str, MethodFill]
    oracle: OracleFill

    def __rich__(self) -> RenderableType:
        from benchfill.graphs.render import fill_summary_table

        return fill_summary_table(self.model_dump())


def fill_run(items: str | Path, responses: str | Path, config: str | Path, out: str | Path, *,
             models: int | None = options.FILL.models, models_file: str | Path | None = options.FILL.models_file,
             gaps: int = options.FILL.gaps, sampler: str = options.FILL.sampler, seed: int = options.FILL.seed,
             compare: bool = options.FILL.compare, resume: bool = options.FILL.resume,
             allow_floor_gaps: bool = options.FILL.allow_floor_gaps, on_event: OnEvent | None = None):
    """The fill run of :func:`fill`, set up (benchmark diagnosed, models configured) but not started: for a caller
    that shows ``run.model_selection`` or ``run.simulated`` before ``run.run()`` (the CLI); close it after."""
    require_extra("llm", "benchfill fill")
    opts = options.FillOptions(models=models, models_file=_path(models_file), gaps=gaps, sampler=sampler, seed=seed,
                               compare=compare, resume=resume, allow_floor_gaps=allow_floor_gaps)
    from benchfill.graphs import run

    spec = run.FillInputs(items=Path(items), responses=Path(responses), config=Path(config), out=Path(out),
                          options=opts)
    nodes = None if on_event is None else lambda report: notify(on_event, "node", str(report.get("node", "")), report)
    return run.FillRun(spec, on_event=nodes)


async def fill_async(items: str | Path, responses: str | Path, config: str | Path, out: str | Path, *,
                     models: int | None = options.FILL.models,
                     models_file: str | Path | None = options.FILL.models_file, gaps: int = options.FILL.gaps,
                     sampler: str = options.FILL.sampler, seed: int = options.FILL.seed,
                     compare: bool = options.FILL.compare, resume: bool = options.FILL.resume,
                     allow_floor_gaps: bool = options.FILL.allow_floor_gaps,
                     on_event: OnEvent | None = None) -> FillSummary:
    """The BenchFill search (``benchfill fill``), awaitable: runs in a worker thread so the caller's loop stays
    free. ``models``: models kept for the scale (spread evenly by accuracy); ``gaps``: gaps to fill; ``compare``:
    also the budget-matched baseline; ``resume``: continue the run in ``out`` (the options:
    :class:`~benchfill.options.FillOptions`). ``on_event`` gets a :class:`benchfill.progress.Event` as each node of
    the search has run (kind ``node``: its name in ``message``, its report, a dict of method, gap, round, calls,
    cost, ..., in ``payload``). Returns the :class:`FillSummary` (also written as ``out/summary.json``, with
    ``out/report.html``)."""
    import asyncio

    return await asyncio.to_thread(_fill, items, responses, config, out, models=models, models_file=models_file,
                                   gaps=gaps, sampler=sampler, seed=seed, compare=compare, resume=resume,
                                   allow_floor_gaps=allow_floor_gaps, on_event=on_event)


def fill(items: str | Path, responses: str | Path, config: str | Path, out: str | Path, *,
         models: int | None = options.FILL.models, models_file: str | Path | None = options.FILL.models_file,
         gaps: int = options.FILL.gaps, sampler: str = options.FILL.sampler, seed: int = options.FILL.seed,
         compare: bool = options.FILL.compare, resume: bool = options.FILL.resume,
         allow_floor_gaps: bool = options.FILL.allow_floor_gaps, on_event: OnEvent | None = None) -> FillSummary:
    """:func:`fill_async` from synchronous code (also inside a running event loop, e.g. Jupyter)."""
    from benchfill.aio import run_sync

    return run_sync(fill_async(items, responses, config, out, models=models, models_file=models_file, gaps=gaps,
                               sampler=sampler, seed=seed, compare=compare, resume=resume,
                               allow_floor_gaps=allow_floor_gaps, on_event=on_event))


def _fill(items, responses, config, out, **keywords: Any) -> FillSummary:
    run = fill_run(items, responses, config, out, **keywords)
    try:
        return FillSummary.model_validate(run.run())
    finally:
        run.close()


async def evaluate_async(items: str | Path, config: str | Path, out: str | Path, *,
                         limit: int | None = options.EVALUATE.limit, rollouts: int | None = options.EVALUATE.rollouts,
                         on_event: OnEvent | None = None) -> EvaluationResult:
    """Every panel model answers every item (``benchfill evaluate``), awaitable: ``limit`` only the first N items,
    ``rollouts`` overrides every panel model's (:class:`~benchfill.options.EvaluateOptions`). ``on_event`` gets a
    :class:`benchfill.progress.Event` after each graded answer (kind ``answer``: ``message`` "N of M answers",
    ``payload`` the counters, a :class:`benchfill.models.evaluate.Progress`). Writes ``out/responses.csv`` (what
    :func:`diagnose` reads), ``calls.sqlite`` (the cache: a rerun pays nothing twice) and ``summary.json``. Returns
    the :class:`EvaluationResult`."""
    require_extra("llm", "benchfill evaluate")
    opts = options.EvaluateOptions(limit=limit, rollouts=rollouts)
    from benchfill.models.evaluate import Progress
    from benchfill.models.evaluate import evaluate_async as _evaluate_async

    def answered(counters: Progress, _result: Any) -> None:
        notify(on_event, "answer", f"{counters.answers_done} of {counters.answers_total} answers",
               replace(counters, on_update=None))

    progress = None if on_event is None else Progress(on_update=answered)
    return await _evaluate_async(items, config, out, limit=opts.limit, rollouts=opts.rollouts,
                                 progress=progress)


def evaluate(items: str | Path, config: str | Path, out: str | Path, *, limit: int | None = options.EVALUATE.limit,
             rollouts: int | None = options.EVALUATE.rollouts, on_event: OnEvent | None = None) -> EvaluationResult:
    """:func:`evaluate_async` from synchronous code (also inside a running event loop, e.g. Jupyter)."""
    from benchfill.aio import run_sync

    return run_sync(evaluate_async(items, config, out, limit=limit, rollouts=rollouts, on_event=on_event))


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
    import asyncio

    from benchfill.aio import run_sync
    from benchfill.designers.card import build_card

    return run_sync(asyncio.to_thread(build_card, items, out, config_path=config, name=name, language=language,
                                      max_categories=max_categories, n_examples=examples))


async def designers_run_async(card: str | Path, quotas: str | Path, config: str | Path, out: str | Path, *,
                              seed_responses: str | Path | None = options.DESIGNERS_RUN.seed_responses,
                              seed_items: str | Path | None = options.DESIGNERS_RUN.seed_items,
                              seed_limit: int | None = options.DESIGNERS_RUN.seed_limit,
                              irt: str | None = options.DESIGNERS_RUN.irt, on_event: OnEvent | None = None):
    """The designer evaluation (``benchfill designers run``), awaitable: every designer writes a quota-controlled
    suite, the panel answers, checks and the judge build the core set, the report is computed (resumable: rerun
    with the same ``out``; the options: :class:`~benchfill.options.DesignersRunOptions`). ``on_event`` gets a
    :class:`benchfill.progress.Event` as each stage runs (kind ``stage``, what it does in ``message``). Returns a
    :class:`~benchfill.designers.results.DesignersRun` (``.report`` is ``report.json``)."""
    from benchfill.designers.pipeline import run_designers_async

    opts = options.DesignersRunOptions(seed_responses=_path(seed_responses), seed_items=_path(seed_items),
                                       seed_limit=seed_limit, irt=irt)
    stages = None if on_event is None else lambda text: notify(on_event, "stage", text)
    return await run_designers_async(card, quotas, config, out, **opts.keywords(), log=stages)


def designers_run(card: str | Path, quotas: str | Path, config: str | Path, out: str | Path, **keywords: Any):
    """:func:`designers_run_async` from synchronous code (also inside a running event loop, e.g. Jupyter)."""
    from benchfill.aio import run_sync

    return run_sync(designers_run_async(card, quotas, config, out, **keywords))


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
