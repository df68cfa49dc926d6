"""What every importer shares: trial records, their aggregation into a ResponseMatrix, score -> 0/1.

An importer turns a harness's logs into :class:`Trial` rows (one graded answer of one model to one item) and
:class:`ImportedLogs` sums them: ``n_trials`` = the answers (epochs, repeats, rollouts, repeated runs),
``n_correct`` = the correct ones. Item ids are ``<task>/<the log's own sample id>``, so they are the same for every
model and every run of a task. Anything malformed is an :class:`InputError` naming the file, the row (line or
sample) and the rule.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from benchfill.data import Item, ResponseMatrix
from benchfill.errors import InputError


@dataclass
class Options:
    """What the user chose: the metric (or scorer) and filter to read, and how a non-binary score becomes 0/1."""

    metric: str | None = None
    filter: str | None = None
    threshold: float | None = None  # a score >= threshold is correct; None: scores must already be 0/1


@dataclass
class ImportedLogs:
    """Counts per (model, item), the item texts the logs carried, each item's task, and notes for the summary."""

    fmt: str
    counts: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (model, item) -> [correct, trials]
    items: dict[str, dict[str, Any]] = field(default_factory=dict)  # item id -> {question, answer, choices, task}
    tasks: dict[str, str] = field(default_factory=dict)  # item id -> task
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # model -> samples that are not trials (errored)
    files: list[str] = field(default_factory=list)
    chosen: dict[str, str] = field(default_factory=dict)  # what was read, e.g. {"metric": "acc", "filter": "none"}

    def add(self, model: str, task: str, native_id: Any, correct: int, where: str, row: int | None,
            trials: int = 1) -> str:
        model, task, native = str(model).strip(), str(task).strip(), str(native_id).strip()
        if not model:
            raise InputError(where, "the model name is empty", row=row)
        if not task:
            raise InputError(where, "the task name is empty", row=row)
        if native == "" or native == "None":
            raise InputError(where, "the sample id is empty", row=row)
        if not 0 <= correct <= trials:
            raise InputError(where, f"{correct} correct out of {trials} trials", row=row)
        item_id = f"{task}/{native}"
        cell = self.counts.setdefault((model, item_id), [0, 0])
        cell[0] += correct
        cell[1] += trials
        self.tasks[item_id] = task
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

    # ---- outputs -------------------------------------------------------------------------------------------

    def matrix(self, source: str, min_models: int = 2) -> ResponseMatrix:
        if not self.counts:
            raise InputError(source, f"no graded samples found in the {self.fmt} logs")
        models = sorted({m for m, _ in self.counts})
        item_ids = list(dict.fromkeys(i for _, i in self.counts))
        if len(models) < min_models:
            if min_models == 2:
                raise InputError(source, f"only one model ({models[0]}): IRT needs responses from at least 2 models")
            raise InputError(source, f"only {len(models)} model(s): need responses from at least {min_models}")
        mpos = {m: j for j, m in enumerate(models)}
        ipos = {t: i for i, t in enumerate(item_ids)}
        correct = np.zeros((len(models), len(item_ids)), dtype=np.int64)
        trials = np.zeros_like(correct)
        for (m, i), (c, n) in self.counts.items():
            correct[mpos[m], ipos[i]] = c
            trials[mpos[m], ipos[i]] = n
        meta = {"format": self.fmt, "groups": {"task": dict(self.tasks)}, "skipped": dict(self.skipped),
                "notes": list(self.notes), "chosen": dict(self.chosen)}
        return ResponseMatrix(models, item_ids, correct, trials, source, meta)

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
        models = {m for m, _ in self.counts}
        n_items = len({i for _, i in self.counts})
        total = sum(n for _, n in self.counts.values())
        lines = [f"{self.fmt}: {len(self.files)} file(s), {len(models)} model(s), {n_items} item(s) in "
                 f"{len(set(self.tasks.values()))} task(s), {total} trial(s)"]
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
