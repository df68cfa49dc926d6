"""Importers: eval logs of other harnesses -> the project's response counts (and item texts).

One module per format, each with ``NAME`` and ``read(paths, Options) -> ImportedLogs``:

| format | reads |
|---|---|
| ``lm-eval`` | lm-evaluation-harness ``--log_samples``: ``samples_<task>_<date>.jsonl`` + ``results_<date>.json`` |
| ``inspect`` | inspect_ai logs, ``.eval`` (zip) and ``.json`` |
| ``helm`` | HELM run folders: ``run_spec.json`` + ``per_instance_stats.json`` (+ ``instances.json``) |
| ``opencompass`` | OpenCompass ``results/<model>/<dataset>.json`` with ``details`` |
| ``openllm`` | Open LLM Leaderboard details: lm-eval sample files or Parquet |

:func:`detect` names the format of a file or folder when it is unambiguous; :func:`import_logs` reads it, one file
at a time (a progress step per file, :func:`benchfill.progress.step`), keeping only the counts;
:func:`write_responses` writes them as a long response file.
:func:`load_responses` is the one reader of response data every command uses: benchfill's own files
(:func:`benchfill.data.read_responses`) or any of these logs.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Sequence

from benchfill.data import Item, ResponseMatrix, align_to_items, keep_models, load_items, read_responses
from benchfill.errors import InputError, did_you_mean
from benchfill.importers import helm, inspect_log, lm_eval, opencompass, openllm
from benchfill.importers.base import ImportedLogs, Options, write_responses

FORMATS: dict[str, ModuleType] = {m.NAME: m for m in (lm_eval, inspect_log, helm, opencompass, openllm)}
ALIASES = {"lmeval": "lm-eval", "lm_eval": "lm-eval", "lm-evaluation-harness": "lm-eval", "inspect_ai": "inspect",
           "inspect-ai": "inspect", "open-llm-leaderboard": "openllm", "open_llm_leaderboard": "openllm"}

__all__ = ["FORMATS", "ImportedLogs", "Options", "detect", "import_logs", "load_panel", "load_responses",
           "resolve_format", "write_responses"]


def resolve_format(name: str) -> str:
    """A format's name as the importers know it (aliases accepted); else one line with the closest name."""
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in FORMATS:

        raise InputError("FORMAT", f"{name!r}: unknown import format; one of {', '.join(FORMATS)}"
                                   f"{did_you_mean(key, [*FORMATS, *ALIASES])}")
    return key


def _classify(path: Path) -> str | None:
    """The format a single file belongs to, or None (not a log of any known harness)."""
    name = path.name
    if name == "run_spec.json":
        return helm.NAME if (path.parent / "per_instance_stats.json").exists() else None
    if (path.parent / "run_spec.json").exists():  # the other files of a HELM run folder
        return None
    if lm_eval.is_samples_file(path):
        return lm_eval.NAME
    if name.endswith(".parquet"):
        return openllm.NAME
    if inspect_log.is_log(path):
        return inspect_log.NAME
    if name.endswith(".json") and path.parent.parent.name == "results" and opencompass._has_details(path):
        return opencompass.NAME  # OpenCompass's layout: <work_dir>/results/<model_abbr>/<dataset_abbr>.json
    return None


def detect(path: str | Path) -> str | None:
    """The log format of a file or folder; None for a file of none (e.g. a response CSV). A folder must hold logs
    of exactly one format (lm-eval sample files next to Parquet details count as ``openllm``); OpenCompass results
    are recognised in their layout, ``results/<model>/<dataset>.json`` (``benchfill import opencompass`` reads any
    ``.json`` with ``details``)."""
    p = Path(path)
    if p.is_file():
        return _classify(p)
    if not p.is_dir():
        return None
    found: dict[str, Path] = {}
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        fmt = _classify(f)
        if fmt:
            found.setdefault(fmt, f)
    if set(found) == {lm_eval.NAME, openllm.NAME}:
        return openllm.NAME
    if len(found) > 1:
        which = "; ".join(f"{k} ({v})" for k, v in found.items())
        raise InputError(str(p), f"holds logs of several formats: {which}; import them with `benchfill import "
                                 "FORMAT PATHS` one format at a time")
    if not found:
        raise InputError(str(p), "a folder with no eval logs benchfill can read (lm-eval, inspect, helm, "
                                 "opencompass, openllm)")
    return next(iter(found))


def import_logs(fmt: str, paths: Sequence[str | Path], opts: Options | None = None) -> ImportedLogs:
    """Read ``paths`` (files or folders) as logs of ``fmt``."""
    if not paths:
        raise InputError(fmt, "no paths given")
    return FORMATS[resolve_format(fmt)].read(list(paths), opts or Options())


def load_responses(path: str | Path, items: Sequence[Item] | None = None, *, min_models: int = 2) -> ResponseMatrix:
    """Read and validate a response file (long CSV/JSONL, wide 0/1 CSV, or py-irt jsonlines), or eval logs of
    lm-eval, inspect_ai, HELM, OpenCompass or the Open LLM Leaderboard (a file or folder; format detected; logs are
    read with the format's defaults: ``benchfill import`` chooses the metric, filter or threshold).

    When ``items`` is given, every item id in the responses must be one of them and every item must have been
    attempted by some model; the matrix columns then follow the items' order. ``min_models`` is the fewest models
    the file must hold: 2 for IRT (the default), 1 for a single checkpoint's file (``benchfill detect``).
    """
    path = Path(path)
    fmt = detect(path)
    if fmt is None:
        return read_responses(path, items, min_models=min_models)
    matrix = import_logs(fmt, [path]).matrix(str(path), min_models)
    return matrix if items is None else align_to_items(matrix, items, path)


def load_panel(
    responses_path: str | Path, items_path: str | Path | None = None, models: int | None = None,
    models_file: str | Path | None = None,
) -> tuple[ResponseMatrix, list[Item] | None]:
    """Load responses (validated against the items file when given) and keep the requested models: the names in
    ``models_file``, else ``models`` spread evenly by accuracy, else all."""
    items = load_items(items_path) if items_path else None
    return keep_models(load_responses(responses_path, items=items), models, models_file), items
