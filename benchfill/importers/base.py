"""What every importer shares: the counts' accumulator, score -> 0/1, reading files one at a time, the output.

An importer reads a harness's logs one file at a time (:func:`each_file`, which also drives the progress bar;
JSON lines one line at a time, :func:`jsonl_rows`) and hands each graded answer of one model to one item to
:class:`ImportedLogs`, which keeps only the sums: ``n_trials`` = the answers (epochs, repeats, rollouts, repeated
runs), ``n_correct`` = the correct ones. So the memory an import takes is that of the response matrix (and of the
largest single file where a format is one JSON document), not of the logs. Item ids are
``<task>/<the log's own sample id>``, so they are the same for every model and every run of a task. Anything
malformed is an :class:`InputError` naming the file, the row (line or sample) and the rule.
"""

from __future__ import annotations

import codecs
import gzip
import json
import math
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from benchfill import progress
from benchfill.data import Item, ResponseMatrix, jsonl_record
from benchfill.errors import InputError
from benchfill.io import atomic_writer


@dataclass
class Options:
    """What the user chose: the metric (or scorer) and filter to read, and how a non-binary score becomes 0/1."""

    metric: str | None = None
    filter: str | None = None
    threshold: float | None = None  # a score >= threshold is correct; None: scores must already be 0/1
    texts: bool = True  # keep the item texts (question, answer, choices): one record per item, the first seen


class ImportedLogs:
    """Counts per (model, item), the item texts the logs carried, each item's task, and notes for the summary.

    The counts are kept compactly, whatever the size of the logs: one row of ints per model (``array('q')``,
    n_correct and n_trials, as long as the items seen so far) and an index per model and per item, so the memory is
    that of the response matrix, never of the rows read. :attr:`counts` is the same as a dict, built when asked (for
    small imports and tests).
    """

    def __init__(self, fmt: str, files: list[str] | None = None) -> None:
        self.fmt = fmt
        self.items: dict[str, dict[str, Any]] = {}  # item id -> {question, answer, choices, metadata}
        self.tasks: dict[str, str] = {}  # item id -> task, in the order the items were first seen
        self.notes: list[str] = []
        self.skipped: dict[str, int] = {}  # model -> samples that are not trials (errored)
        self.files: list[str] = list(files or [])
        self.chosen: dict[str, str] = {}  # what was read, e.g. {"metric": "acc", "filter": "none"}
        self._item_pos: dict[str, int] = {}
        self._rows: dict[str, tuple[array, array]] = {}  # model -> (n_correct, n_trials) per item position

    # ---- adding --------------------------------------------------------------------------------------------

    def check(self, model: Any, task: Any, native_id: Any, correct: int, where: str, row: int | None,
              trials: int = 1) -> tuple[str, str, str]:
        """The validated (model, task, item id) of one graded answer, or an InputError naming the file and row."""
        model, task, native = str(model).strip(), str(task).strip(), str(native_id).strip()
        if not model:
            raise InputError(where, "the model name is empty", row=row)
        if not task:
            raise InputError(where, "the task name is empty", row=row)
        if native == "" or native == "None":
            raise InputError(where, "the sample id is empty", row=row)
        if not 0 <= correct <= trials:
            raise InputError(where, f"{correct} correct out of {trials} trials", row=row)
        return model, task, f"{task}/{native}"

    def count(self, model: str, task: str, item_id: str, correct: int, trials: int = 1) -> None:
        """Add already validated counts (see :meth:`check`)."""
        pos = self._item_pos.get(item_id)
        if pos is None:
            pos = self._item_pos[item_id] = len(self._item_pos)
            self.tasks[item_id] = task
        cells = self._rows.get(model)
        if cells is None:
            cells = self._rows[model] = (array("q"), array("q"))
        c, n = cells
        if pos >= len(c):
            grow = max(pos + 1, 2 * len(c), 64) - len(c)
            c.frombytes(bytes(8 * grow))
            n.frombytes(bytes(8 * grow))
        c[pos] += correct
        n[pos] += trials

    def add(self, model: str, task: str, native_id: Any, correct: int, where: str, row: int | None,
            trials: int = 1) -> str:
        model, task, item_id = self.check(model, task, native_id, correct, where, row, trials)
        self.count(model, task, item_id, correct, trials)
        return item_id

    def add_item(self, item_id: str, question: Any, answer: Any, choices: Any = None, **metadata: Any) -> None:
        if item_id in self.items:
            return
        q = question if isinstance(question, str) else None
        a = answer if isinstance(answer, str) else (None if answer is None else json.dumps(answer, default=str)
                                                     if isinstance(answer, (list, dict)) else str(answer))
        rec: dict[str, Any] = {"question": q, "answer": a}
        if isinstance(choices, list) and len(choices) >= 2 and all(isinstance(c, (str, int, float)) for c in choices):
            rec["choices"] = [str(c) for c in choices]
        rec["metadata"] = {k: v for k, v in metadata.items() if v is not None}
        self.items[item_id] = rec

    def skip(self, model: str, n: int = 1) -> None:
        self.skipped[model] = self.skipped.get(model, 0) + n

    # ---- reading back --------------------------------------------------------------------------------------

    @property
    def models(self) -> list[str]:
        """The models with at least one graded answer, sorted."""
        return sorted(self._rows)

    @property
    def counts(self) -> dict[tuple[str, str], list[int]]:
        """``(model, item) -> [n_correct, n_trials]`` for every attempted pair (a dict of the whole matrix: for
        small imports and tests; :meth:`matrix` is the compact form)."""
        ids = list(self._item_pos)
        return {(m, ids[k]): [c[k], n[k]] for m, (c, n) in self._rows.items() for k in range(len(n)) if n[k]}

    def matrix(self, source: str, min_models: int = 2) -> ResponseMatrix:
        models = self.models
        if not models:
            raise InputError(source, f"no graded samples found in the {self.fmt} logs")
        if len(models) < min_models:
            if min_models == 2:
                raise InputError(source, f"only one model ({models[0]}): IRT needs responses from at least 2 models")
            raise InputError(source, f"only {len(models)} model(s): need responses from at least {min_models}")
        n_items = len(self._item_pos)
        correct = np.zeros((len(models), n_items), dtype=np.int64)
        trials = np.zeros_like(correct)
        for j, m in enumerate(models):
            c, n = self._rows[m]
            k = min(len(n), n_items)
            correct[j, :k] = np.frombuffer(c, dtype=np.int64, count=k)
            trials[j, :k] = np.frombuffer(n, dtype=np.int64, count=k)
        meta = {"format": self.fmt, "groups": {"task": dict(self.tasks)}, "skipped": dict(self.skipped),
                "notes": list(self.notes), "chosen": dict(self.chosen)}
        return ResponseMatrix(models, list(self._item_pos), correct, trials, source, meta)

    def item_list(self) -> list[Item]:
        """Items whose question and answer the logs carried (others are left out and counted in the notes)."""
        out = []
        for item_id, rec in self.items.items():
            if not rec.get("question") or not rec.get("answer"):
                continue
            out.append(Item(id=item_id, question=rec["question"], answer=rec["answer"], choices=rec.get("choices"),
                            metadata={"task": self.tasks.get(item_id), **rec.get("metadata", {})}))
        return out

    def summary_lines(self) -> list[str]:
        total = sum(sum(n) for _, n in self._rows.values())
        lines = [f"{self.fmt}: {len(self.files)} file(s), {len(self._rows)} model(s), {len(self._item_pos)} item(s) "
                 f"in {len(set(self.tasks.values()))} task(s), {total} trial(s)"]
        if self.chosen:
            lines.append("read " + ", ".join(f"{k} {v}" for k, v in self.chosen.items()))
        for m, n in sorted(self.skipped.items()):
            lines.append(f"{m}: {n} errored sample(s) are not trials (left out)")
        lines.extend(self.notes)
        return lines


# ---- helpers ----------------------------------------------------------------------------------------------


def as_binary(value: Any, opts: Options, where: str, row: int | None, what: str) -> int:
    """A numeric score as 0/1: 0 or 1 as they are (booleans too); anything else needs ``--threshold``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
        if not math.isfinite(v):
            raise InputError(where, f"{what}={value!r} is not a finite number", row=row)
        if opts.threshold is not None:
            return int(v >= opts.threshold)
        if v in (0.0, 1.0):
            return int(v)
        raise InputError(where, f"{what}={value!r} is not 0/1 (pass --threshold T to count a score >= T as "
                                "correct, or choose a 0/1 metric with --metric)", row=row)
    raise InputError(where, f"{what}={value!r} is not a number", row=row)


def read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"invalid JSON ({exc.msg})", row=exc.lineno) from None


def expand(paths: Iterable[str | Path], match) -> list[Path]:
    """Files among ``paths`` (folders searched recursively, sorted) that ``match(path)`` accepts; each file once."""
    out: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise InputError(str(p), "file or folder not found")
        cands = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
        for q in cands:
            r = q.resolve()
            if r in seen or not match(q):
                continue
            seen.add(r)
            out.append(q)
    return out


def each_file(files: Sequence[Path]) -> Iterator[Path]:
    """The files one at a time, telling :func:`benchfill.progress.step` how many are done (the progress bar)."""
    total = len(files)
    for k, f in enumerate(files):
        progress.step(k, total, f.name)
        yield f
    progress.step(total, total)


def jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON-lines file (gzip too), read one line at a time; a
    line that is not UTF-8 or not a JSON object is an InputError naming the file and the line. Lines end at
    ``\\n`` only (a raw U+2028 inside a JSON string, which ``ensure_ascii=False`` writers leave, is no line end)."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except IsADirectoryError:
        raise InputError(str(path), "is a directory, expected a file") from None
    with fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        if not gz and path.name.lower().endswith(".gz"):
            raise InputError(str(path), "corrupt gzip file (the name ends in .gz but the data is not gzip)")
        stream = gzip.GzipFile(fileobj=fh) if gz else fh
        offset, k = 0, 0
        try:
            for k, raw in enumerate(stream, start=1):
                if k == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw, offset = raw[3:], 3
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(str(path), f"not UTF-8 text (byte {offset + exc.start})", row=k) from None
                offset += len(raw)
                rec = jsonl_record(path, line, k)
                if rec is not None:
                    yield k, rec
        except (OSError, EOFError, zlib.error) as exc:
            if not gz:
                raise
            raise InputError(str(path), f"corrupt gzip file ({exc})", row=k + 1) from None


def _csv_field(text: str) -> str:
    """A field as the csv module (and pandas' to_csv) write it: quoted only when it holds , " or a line break."""
    if any(ch in text for ch in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def write_responses(path: str | Path, matrix: ResponseMatrix, tasks: dict[str, str]) -> int:
    """The long response file ``model,item_id,n_correct,n_trials,task`` (one row per attempted pair, models in the
    matrix's order), written one model at a time into a temporary file renamed at the end; returns the rows."""
    ids = [_csv_field(i) + "," for i in matrix.item_ids]
    task_of = ["," + _csv_field(tasks.get(i, "")) + "\n" for i in matrix.item_ids]
    rows = 0
    with atomic_writer(path) as fh:
        fh.write(b"model,item_id,n_correct,n_trials,task\n")
        for j, model in enumerate(matrix.models):
            head = _csv_field(model) + ","
            ks = np.flatnonzero(matrix.n_trials[j])
            chunk = "".join(f"{head}{ids[k]}{c},{n}{task_of[k]}" for k, c, n in
                            zip(ks.tolist(), matrix.n_correct[j, ks].tolist(), matrix.n_trials[j, ks].tolist()))
            fh.write(chunk.encode("utf-8"))
            rows += len(ks)
    return rows
