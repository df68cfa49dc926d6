"""Open LLM Leaderboard "details" (the ``open-llm-leaderboard/<org>__<model>-details`` datasets).

Leaderboard v2 details are lm-evaluation-harness sample files: ``<org>__<model>/samples_<task>_<date>.jsonl``
(read exactly as :mod:`benchfill.importers.lm_eval` reads them), or the same rows as Parquet (the Hub's
conversion; one file per model and task). The model is the results file's ``model_name`` where one is next to the
file, else the folder name ``<org>__<model>`` -> ``<org>/<model>``; the task is the ``samples_<task>_<date>`` part
of the file name, else the file name. Parquet rows are read like sample lines (``doc_id``, ``filter``, ``metrics``
and the metric columns); rows of the v1 leaderboard (lighteval details: a ``metrics`` column holding
``{name: value}``, no ``doc_id``) are read with their row number as the sample id (rows are in document order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from benchfill.errors import InputError, MissingExtra
from benchfill.importers import lm_eval
from benchfill.importers.base import ImportedLogs, Options, each_file, expand, jsonl_rows

NAME = "openllm"


def is_details_file(path: Path) -> bool:
    return lm_eval.is_samples_file(path) or path.name.endswith(".parquet")


def _parquet_rows(path: Path, batch: int = 2048) -> Iterator[tuple[int, dict[str, Any]]]:
    """A Parquet file's rows as sample lines, ``batch`` rows at a time (pyarrow reads the file by batches)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtra(str(path), "parquet", "pyarrow") from None
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=batch)
        k = 0
        for chunk in batches:
            for rec in chunk.to_pylist():
                k += 1
                rec = {key: _plain(v) for key, v in rec.items()}
                if "doc_id" not in rec and isinstance(rec.get("metrics"), dict):  # lighteval (v1) details
                    metrics = rec.pop("metrics")
                    rec.update({"doc_id": k - 1, "metrics": list(metrics), **metrics})
                elif isinstance(rec.get("metrics"), (list, tuple)):
                    rec["metrics"] = list(rec["metrics"])
                yield k + 1, rec  # row 1 is the header in our messages, as for CSV
    except Exception as exc:  # pyarrow raises many types for a bad file
        raise InputError(str(path), f"not a readable Parquet file ({str(exc).splitlines()[0]})") from None


def _plain(v: Any) -> Any:
    """Arrow values as plain Python (numpy scalars and arrays to numbers and lists)."""
    import numpy as np

    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def read(paths: list[str | Path], opts: Options) -> ImportedLogs:
    files = expand(paths, is_details_file)
    if not files:
        raise InputError(", ".join(map(str, paths)), "no Open LLM Leaderboard details (samples_*.jsonl or .parquet) "
                                                      "found")
    res = ImportedLogs(NAME, files=[str(f) for f in files])
    names = lm_eval.ModelNames()
    for f in each_file(files):
        rows = _parquet_rows(f) if f.name.endswith(".parquet") else jsonl_rows(f)
        lm_eval.read_rows(res, f, rows, names(f), lm_eval.task_of(f), opts)
    names.add_notes(res)
    lm_eval.check_used(res, opts, paths)
    return res
