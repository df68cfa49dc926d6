"""The data model: benchmark items and LLM response counts, with loaders that validate as they read.

Response data (SPEC section 1) is long format ``model, item_id, n_correct, n_trials`` (CSV, CSV.GZ or JSONL);
a wide 0/1 matrix (first column = model, one column per item) and py-irt's jsonlines
(``{"subject_id", "responses": {item: 0/1}}``) are read too, and so are other harnesses' eval logs (a log file or a
folder of them; :mod:`benchfill.importers`, detected when unambiguous). Every rule broken raises
:class:`benchfill.errors.InputError` naming the file, row and rule.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from benchfill.errors import InputError

ItemFormat = Literal["mcq", "numeric", "math", "short", "structured", "open"]
ITEM_FORMATS: tuple[str, ...] = ("mcq", "numeric", "math", "short", "structured", "open")
LONG_COLUMNS = ("model", "item_id", "n_correct", "n_trials")


class Item(BaseModel):
    """One benchmark item, the canonical form every loader produces."""

    model_config = ConfigDict(extra="forbid")

    id: str
    question: str
    answer: str
    choices: list[str] | None = None
    format: ItemFormat | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def resolved_format(self) -> ItemFormat:
        """The declared format, else one inferred from the choices and the gold answer."""
        return self.format or infer_format(self.answer, self.choices)


_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?$|^[+-]?\d+/\d+$")


def infer_format(answer: str, choices: Sequence[str] | None) -> ItemFormat:
    """Guess an item's grading route from its gold answer: choices -> mcq, a plain number -> numeric,
    LaTeX or symbols -> math, a few words -> short, else open."""
    if choices:
        return "mcq"
    text = answer.strip().strip("$")
    if _NUMBER.match(text):
        return "numeric"
    if re.search(r"[\\^_{}=()\[\]]|\d", text):
        return "math"
    return "short" if len(text.split()) <= 5 else "open"


@dataclass(frozen=True)
class ResponseMatrix:
    """Counts of correct answers per (model, item).

    Attributes:
        models: model names, length J.
        item_ids: item ids, length I.
        n_correct: int array (J, I); correct answers.
        n_trials: int array (J, I); sampled answers (rollouts); 0 where the model did not attempt the item.
        source: where the data came from (a path), used in messages.
    """

    models: list[str]
    item_ids: list[str]
    n_correct: np.ndarray
    n_trials: np.ndarray
    source: str = "<memory>"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_correct.shape  # type: ignore[return-value]

    def accuracy_by_model(self) -> np.ndarray:
        """(J,) share of correct answers over everything each model attempted."""
        return self.n_correct.sum(1) / np.maximum(self.n_trials.sum(1), 1)

    def accuracy_by_item(self) -> np.ndarray:
        """(I,) share of correct answers over every model's attempts."""
        return self.n_correct.sum(0) / np.maximum(self.n_trials.sum(0), 1)

    def subset(self, models: Sequence[str] | None = None, items: Sequence[str] | None = None) -> "ResponseMatrix":
        """The same data restricted to the named models and/or items, in the order given."""
        mi = [self.models.index(m) for m in models] if models is not None else list(range(len(self.models)))
        pos = {k: i for i, k in enumerate(self.item_ids)}
        ii = [pos[k] for k in items] if items is not None else list(range(len(self.item_ids)))
        return ResponseMatrix(
            [self.models[i] for i in mi],
            [self.item_ids[i] for i in ii],
            self.n_correct[np.ix_(mi, ii)],
            self.n_trials[np.ix_(mi, ii)],
            self.source,
            dict(self.meta),
        )

    def to_long(self) -> pd.DataFrame:
        """Long format, one row per attempted (model, item)."""
        j, i = np.nonzero(self.n_trials)
        return pd.DataFrame(
            {
                "model": np.asarray(self.models, dtype=object)[j],
                "item_id": np.asarray(self.item_ids, dtype=object)[i],
                "n_correct": self.n_correct[j, i],
                "n_trials": self.n_trials[j, i],
            }
        )


# ----------------------------------------------------------------------------------------------- responses


def _open_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except IsADirectoryError:
        raise InputError(str(path), "is a directory, expected a file") from None
    if raw[:2] == b"\x1f\x8b":
        import zlib

        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(str(path), f"corrupt gzip file ({exc})") from None
    elif path.name.lower().endswith(".gz"):
        raise InputError(str(path), "corrupt gzip file (the name ends in .gz but the data is not gzip)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text (byte {exc.start})") from None


def load_responses(path: str | Path, items: Sequence[Item] | None = None, *, min_models: int = 2) -> ResponseMatrix:
    """Read and validate a response file (long CSV/JSONL, wide 0/1 CSV, or py-irt jsonlines), or eval logs of
    lm-eval, inspect_ai, HELM, OpenCompass or the Open LLM Leaderboard (a file or folder; format detected).

    When ``items`` is given, every item id in the responses must be one of them and every item must have been
    attempted by some model; the matrix columns then follow the items' order. ``min_models`` is the fewest models
    the file must hold: 2 for IRT (the default), 1 for a single checkpoint's file (``benchfill detect``).
    """
    path = Path(path)
    from benchfill.importers import detect

    fmt = detect(path)
    if fmt is not None:
        return _from_logs(path, fmt, items, min_models)
    text = _open_text(path)
    if not text.strip():
        raise InputError(str(path), "empty file")
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        frame = _jsonl_frame(path, text)
    else:
        frame = _csv_frame(path, text)
    return _matrix_from_long(path, frame, items, min_models)


def responses_from_frame(frame: pd.DataFrame, items: Sequence[Item] | None = None, *, source: str = "<DataFrame>",
                         min_models: int = 2) -> ResponseMatrix:
    """A long-format DataFrame (``model, item_id, n_correct, n_trials``), validated like a file."""
    for col in ("model", "item_id", "n_correct", "n_trials"):
        if col not in frame.columns:
            raise InputError(source, f"missing column {col!r} (long format: model,item_id,n_correct,n_trials)")
    # the file readers hand over text columns and a row number; so does a frame ("row" = its position + 1)
    frame = frame[list(LONG_COLUMNS)].astype(str)
    frame["_row"] = np.arange(1, len(frame) + 1)
    return _matrix_from_long(Path(source), frame, items, min_models)


def _from_logs(path: Path, fmt: str, items: Sequence[Item] | None, min_models: int) -> ResponseMatrix:
    """Eval logs of another harness (a folder of them, or one log file), read with the format's defaults
    (``benchfill import`` chooses the metric, filter or threshold)."""
    from benchfill.importers import import_logs

    matrix = import_logs(fmt, [path]).matrix(str(path), min_models)
    if items is None:
        return matrix
    known = [it.id for it in items]
    unknown = [i for i in matrix.item_ids if i not in set(known)]
    if unknown:
        raise InputError(str(path), f"unknown item_id={unknown[0]} (not in the items file)")
    pos = {t: i for i, t in enumerate(matrix.item_ids)}
    missing = [t for t in known if t not in pos]
    if missing:
        raise InputError(str(path), f"item_id={missing[0]} was attempted by no model (n_trials is 0 everywhere)")
    return ResponseMatrix(matrix.models, known, matrix.n_correct[:, [pos[t] for t in known]],
                          matrix.n_trials[:, [pos[t] for t in known]], matrix.source, dict(matrix.meta))


def item_groups(responses: ResponseMatrix, by: str, items_table: str | Path | None) -> dict[str, list[str]]:
    """Item ids grouped by ``by``: a column of the items table when given, else the grouping the responses carry
    (imported logs carry ``task``; a long CSV may have a ``task`` column)."""
    if items_table is not None:
        return read_item_groups(items_table, by, responses.item_ids)
    groups = (responses.meta.get("groups") or {}).get(by)
    if not groups:
        have = ", ".join(responses.meta.get("groups") or {}) or "none"
        raise InputError(responses.source, f"no grouping {by!r} in the responses (they carry: {have}); "
                                           "give --items-table")
    out: dict[str, list[str]] = {}
    for item in responses.item_ids:
        out.setdefault(str(groups[item]), []).append(item)
    return out


def _csv_frame(path: Path, text: str) -> pd.DataFrame:
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.ParserError as exc:
        raise InputError(str(path), f"not a valid CSV ({str(exc).strip()})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    if "item_id" in frame.columns or "n_correct" in frame.columns or "n_trials" in frame.columns:
        missing = [c for c in LONG_COLUMNS if c not in frame.columns]
        if missing:
            raise InputError(
                str(path), f"missing column(s) {', '.join(missing)}; long format needs {','.join(LONG_COLUMNS)}"
                           + (f"; misspelt? {near}" if (near := _misspelt(frame.columns, missing)) else ""), row=1
            )
        frame["_row"] = np.arange(2, len(frame) + 2)
        return frame
    try:
        return _wide_to_long(path, frame)
    except InputError:
        # a long file whose column names are misspelt reads as a wide matrix with non-0/1 cells: say so
        near = _misspelt(frame.columns, LONG_COLUMNS)
        if near:
            raise InputError(str(path), f"not long format (model,item_id,n_correct,n_trials) and not a wide 0/1 "
                                        f"matrix: misspelt column name(s)? {near}", row=1) from None
        raise


def _misspelt(columns: Sequence[str], wanted: Sequence[str]) -> str:
    """' 'n_corect' (did you mean 'n_correct'?)' for each column that is a near miss of a wanted name."""
    import difflib

    hints = []
    for col in columns:
        if col in LONG_COLUMNS:
            continue
        close = difflib.get_close_matches(str(col), list(wanted), n=1, cutoff=0.7)
        if close:
            hints.append(f"{col!r} (did you mean {close[0]!r}?)")
    return "; ".join(hints)


def _wide_to_long(path: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """Wide 0/1 matrix: first column names the model, every other column is an item; blank = not attempted."""
    if frame.shape[1] < 2:
        raise InputError(
            str(path), f"missing columns: expected {','.join(LONG_COLUMNS)} (long) or model,<item>,... (wide)", row=1
        )
    model_col = frame.columns[0]
    rows = []
    for k, rec in enumerate(frame.itertuples(index=False), start=2):
        model = str(rec[0]).strip()
        for item, value in zip(frame.columns[1:], rec[1:]):
            value = str(value).strip()
            if value == "":
                continue
            if value not in {"0", "1", "0.0", "1.0", "True", "False", "true", "false"}:
                raise InputError(str(path), f"wide matrix cell {model_col}={model}, {item}={value!r} is not 0/1", row=k)
            hit = value in {"1", "1.0", "True", "true"}
            rows.append((model, item, str(int(hit)), "1", k))
    return pd.DataFrame(rows, columns=[*LONG_COLUMNS, "_row"])


def jsonl_records(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; a line that is not a JSON object is an InputError."""
    for k, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(str(path), f"invalid JSON ({exc.msg})", row=k) from None
        if not isinstance(rec, dict):
            raise InputError(str(path), "each line must be a JSON object", row=k)
        yield k, rec


def _jsonl_frame(path: Path, text: str) -> pd.DataFrame:
    rows = []
    for k, rec in jsonl_records(path, text):
        if "responses" in rec and "subject_id" in rec:  # py-irt jsonlines
            if not isinstance(rec["responses"], dict):
                raise InputError(str(path), "'responses' must map item id -> 0/1", row=k)
            for item, value in rec["responses"].items():
                if value not in (0, 1, True, False):
                    raise InputError(str(path), f"response {item}={value!r} is not 0/1", row=k)
                rows.append((str(rec["subject_id"]), str(item), str(int(value)), "1", k))
            continue
        missing = [c for c in LONG_COLUMNS if c not in rec]
        if missing:
            raise InputError(str(path), f"missing field(s) {', '.join(missing)}", row=k)
        rows.append((*(str(rec[c]) if rec[c] is not None else "" for c in LONG_COLUMNS), k))
    return pd.DataFrame(rows, columns=[*LONG_COLUMNS, "_row"])


def _parse_counts(path: Path, frame: pd.DataFrame, column: str) -> np.ndarray:
    values = pd.to_numeric(frame[column].str.strip(), errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    if bad.any():
        k = int(np.argmax(bad))
        raw = frame[column].iloc[k]
        raise InputError(str(path), f"{column}={raw!r} is missing, NaN or not a number", row=int(frame["_row"].iloc[k]))
    frac = values != np.round(values)
    if frac.any():
        k = int(np.argmax(frac))
        raise InputError(str(path), f"{column}={values[k]:g} is not a whole number", row=int(frame["_row"].iloc[k]))
    neg = values < 0
    if neg.any():
        k = int(np.argmax(neg))
        raise InputError(str(path), f"{column}={int(values[k])} is negative", row=int(frame["_row"].iloc[k]))
    return values.astype(np.int64)


def _matrix_from_long(
    path: Path, frame: pd.DataFrame, items: Sequence[Item] | None, min_models: int = 2
) -> ResponseMatrix:
    if frame.empty:
        raise InputError(str(path), "no response rows")
    for col in ("model", "item_id"):
        frame[col] = frame[col].astype(str).str.strip()
        empty = (frame[col] == "").to_numpy()
        if empty.any():
            raise InputError(str(path), f"{col} is empty", row=int(frame["_row"].iloc[int(np.argmax(empty))]))
    n_correct = _parse_counts(path, frame, "n_correct")
    n_trials = _parse_counts(path, frame, "n_trials")
    over = n_correct > n_trials
    if over.any():
        k = int(np.argmax(over))
        raise InputError(
            str(path), f"n_correct={n_correct[k]} > n_trials={n_trials[k]}", row=int(frame["_row"].iloc[k])
        )
    dup = frame.duplicated(subset=["model", "item_id"], keep="first").to_numpy()
    if dup.any():
        k = int(np.argmax(dup))
        rec = frame.iloc[k]
        first = frame[(frame.model == rec.model) & (frame.item_id == rec.item_id)]["_row"].iloc[0]
        raise InputError(
            str(path), f"duplicate row for model={rec.model}, item_id={rec.item_id} (first at row {first})",
            row=int(rec["_row"]),
        )
    # in order of first appearance (pandas' unique: iterating an Arrow-backed column in Python took 0.7 s on 350k rows)
    models = [str(m) for m in frame["model"].unique()]
    if len(models) < min_models:
        if min_models == 2:
            raise InputError(str(path), f"only one model ({models[0]}): IRT needs responses from at least 2 models")
        raise InputError(str(path), f"only {len(models)} model(s): need responses from at least {min_models}")
    seen = [str(t) for t in frame["item_id"].unique()]
    if items is not None:
        known = {it.id for it in items}
        unknown = ~frame["item_id"].isin(known).to_numpy()
        if unknown.any():
            k = int(np.argmax(unknown))
            raise InputError(
                str(path), f"unknown item_id={frame['item_id'].iloc[k]} (not in the items file)",
                row=int(frame["_row"].iloc[k]),
            )
        item_ids = [it.id for it in items]
    else:
        item_ids = seen
    mpos = {m: j for j, m in enumerate(models)}
    ipos = {t: i for i, t in enumerate(item_ids)}
    jj = frame["model"].map(mpos).to_numpy()
    ii = frame["item_id"].map(ipos).to_numpy()
    correct = np.zeros((len(models), len(item_ids)), dtype=np.int64)
    trials = np.zeros_like(correct)
    correct[jj, ii] = n_correct
    trials[jj, ii] = n_trials
    unattempted = trials.sum(0) == 0
    if unattempted.any():
        i = int(np.argmax(unattempted))
        rows = frame.loc[frame["item_id"] == item_ids[i], "_row"]
        raise InputError(
            str(path), f"item_id={item_ids[i]} was attempted by no model (n_trials is 0 everywhere)",
            row=int(rows.iloc[0]) if len(rows) else None,
        )
    meta: dict[str, Any] = {}
    if "task" in frame.columns:  # written by `benchfill import`: the grouping `suite --by task` uses
        meta["groups"] = {"task": dict(zip(frame["item_id"], frame["task"].astype(str)))}
    return ResponseMatrix(models, item_ids, correct, trials, str(path), meta)


def select_models(matrix: ResponseMatrix, k: int) -> list[str]:
    """``k`` models spread evenly by accuracy: sort by accuracy and take k evenly spaced ranks, weakest and
    strongest included (the paper's stratified panel of 12). Returned weakest first."""
    if k < 2:
        raise InputError(matrix.source, f"--models {k}: need at least 2 models")
    order = np.argsort(matrix.accuracy_by_model(), kind="stable")
    if k >= len(order):
        return [matrix.models[j] for j in order]
    ranks = np.unique(np.round(np.linspace(0, len(order) - 1, k)).astype(int))
    return [matrix.models[j] for j in order[ranks]]


def load_panel(
    responses_path: str | Path, items_path: str | Path | None = None, models: int | None = None,
    models_file: str | Path | None = None,
) -> tuple[ResponseMatrix, list[Item] | None]:
    """Load responses (validated against the items file when given) and keep the requested models: the names in
    ``models_file``, else ``models`` spread evenly by accuracy, else all."""
    items = load_items(items_path) if items_path else None
    return keep_models(load_responses(responses_path, items=items), models, models_file), items


def keep_models(responses: ResponseMatrix, models: int | None = None, models_file: str | Path | None = None
                ) -> ResponseMatrix:
    """The requested models of a response matrix: the names in ``models_file``, else ``models`` spread evenly by
    accuracy (:func:`select_models`), else all."""
    if models_file is not None:
        names = read_model_names(models_file)
        unknown = [m for m in names if m not in responses.models]
        if unknown:
            raise InputError(str(models_file), f"model(s) not in {responses.source}: {', '.join(unknown[:5])}")
        responses = responses.subset(models=names)
    elif models is not None:
        n_all = len(responses.models)
        responses = responses.subset(models=select_models(responses, models))
        if len(responses.models) < n_all:  # say which were kept (diagnose and fill print this line)
            responses.meta["selection"] = {"rule": "spread evenly by accuracy, weakest first", "of": n_all,
                                           "kept": list(responses.models)}
    return responses


def read_model_names(path: str | Path) -> list[str]:
    """One model name per line; blank lines and ``#`` comments ignored."""
    text = _open_text(Path(path))
    names = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    names = [n for n in names if n]
    if len(names) < 2:
        raise InputError(str(path), "need at least 2 model names, one per line")
    return names


def read_item_groups(path: str | Path, column: str, item_ids: Sequence[str]) -> dict[str, list[str]]:
    """Group item ids by a column of an items table (CSV with ``item_id``); groups keep the table's order.
    Every item of the responses must appear in the table."""
    path = Path(path)
    try:
        table = pd.read_csv(io.StringIO(_open_text(path)), dtype=str, keep_default_na=False)
    except pd.errors.ParserError as exc:
        raise InputError(str(path), f"not a valid CSV ({str(exc).strip()})") from None
    for col in ("item_id", column):
        if col not in table.columns:
            raise InputError(str(path), f"missing column {col!r}", row=1)
    wanted = set(item_ids)
    table = table[table["item_id"].isin(wanted)]
    missing = wanted - set(table["item_id"])
    if missing:
        raise InputError(str(path), f"{len(missing)} item id(s) of the responses are not in the table, e.g. {sorted(missing)[0]}")
    return {str(k): list(g["item_id"]) for k, g in table.groupby(column, sort=False)}


# ----------------------------------------------------------------------------------------------- items

_QUESTION_KEYS = ("question", "problem", "prompt", "input")
_ANSWER_KEYS = ("answer", "gold", "target", "reference_answer")


def load_items(path: str | Path) -> list[Item]:
    """Read items from JSONL. Canonical rows have ``id, question, answer`` (+ ``choices, format, metadata``);
    rows in the MATH/Qwen-Math style (``problem``, ``answer``, extra keys) are mapped, extra keys go to metadata,
    and a row without ``id`` gets its 0-based line index (the convention of the bundled MATH-500 files)."""
    path = Path(path)
    text = _open_text(path)
    items: list[Item] = []
    seen: dict[str, int] = {}
    index = 0
    for k, rec in jsonl_records(path, text):
        item = _item_from_record(path, rec, k, index)
        if item.id in seen:
            raise InputError(str(path), f"duplicate item id {item.id!r} (first at row {seen[item.id]})", row=k)
        seen[item.id] = k
        items.append(item)
        index += 1
    if not items:
        raise InputError(str(path), "no items")
    return items


def _item_from_record(path: Path, rec: dict[str, Any], row: int, index: int) -> Item:
    rec = dict(rec)
    question = next((rec.pop(key) for key in _QUESTION_KEYS if key in rec), None)
    answer = next((rec.pop(key) for key in _ANSWER_KEYS if key in rec), None)
    if not isinstance(question, str) or not question.strip():
        raise InputError(str(path), "missing or empty question (field 'question' or 'problem')", row=row)
    if answer is None or str(answer).strip() == "":
        raise InputError(str(path), "missing or empty answer (field 'answer')", row=row)
    item_id = str(rec.pop("id", index))
    choices = rec.pop("choices", None)
    if choices is not None and (not isinstance(choices, list) or len(choices) < 2):
        raise InputError(str(path), "'choices' must be a list of at least 2 options", row=row)
    fmt = rec.pop("format", None)
    if fmt is not None and fmt not in ITEM_FORMATS:
        raise InputError(str(path), f"format={fmt!r} is not one of {', '.join(ITEM_FORMATS)}", row=row)
    metadata = rec.pop("metadata", {}) or {}
    if not isinstance(metadata, dict):
        raise InputError(str(path), "'metadata' must be an object", row=row)
    metadata.update(rec)  # keep every other field (solution, subject, level, ...)
    return Item(
        id=item_id, question=question, answer=str(answer), choices=[str(c) for c in choices] if choices else None,
        format=fmt, metadata=metadata,
    )


def write_items(path: str | Path, items: Sequence[Item]) -> None:
    """Write items as canonical JSONL, atomically (a crash never leaves half a file)."""
    from benchfill.io import atomic_write_text

    atomic_write_text(path, "".join(it.model_dump_json(exclude_none=True) + "\n" for it in items))
