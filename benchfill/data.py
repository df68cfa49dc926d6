"""The data model: benchmark items and LLM response counts, with loaders that validate as they read.

Response data (README: Data) is long format ``model, item_id, n_correct, n_trials`` (CSV, CSV.GZ or JSONL);
a wide 0/1 matrix (first column = model, one column per item) and py-irt's jsonlines
(``{"subject_id", "responses": {item: 0/1}}``) are read too (:func:`read_responses`); other harnesses' eval logs are
read one layer up, by :func:`benchfill.importers.load_responses`, the reader every command uses. Every rule broken raises
:class:`benchfill.errors.InputError` naming the file, row and rule.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from benchfill.errors import InputError

if TYPE_CHECKING:  # pandas is imported only where a DataFrame goes in or out (to_long, responses_from_frame)
    import pandas as pd

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

    @property
    def guessing_rate(self) -> float:
        """The IRT lower asymptote c of this item (:func:`guessing_rate`): multiple choice keying one option or
        several (a gold answer that lists letters), else 0. What ``diagnose``, ``fill``, ``designers run`` and the
        simulated world use."""
        k = len(self.choices or [])
        if not k or self.resolved_format != "mcq":
            return 0.0
        keyed = keyed_letters(self.answer, k)
        return guessing_rate(k, multi=keyed is not None and len(keyed) > 1)


def guessing_rate(n_choices: int, *, multi: bool = False) -> float:
    """The chance that a uniformly random answer is graded correct: 1/k for k-option multiple choice, 1/(2^k - 1)
    for a multi-answer one (a random non-empty set of the k options, graded as the exact set), 0 without options."""
    if n_choices <= 0:
        return 0.0
    return 1.0 / (2**n_choices - 1) if multi else 1.0 / n_choices


OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LETTER_LIST = re.compile(r"\(?([A-Za-z])\)?((?:\s*(?:,|and|&|/|;)\s*\(?[A-Za-z]\)?)*)\.?")


def letters_in(fragment: str) -> list[str]:
    """The letters of an option-letter list ("A, C", "B and D"), in order."""
    return re.findall(r"[A-Za-z]", re.sub(r"\band\b", ",", fragment))


def keyed_letters(answer: str, n_choices: int) -> set[str] | None:
    """The option letters a gold answer written as letters keys ("B", "(A), C", "A and D"), upper case; None when
    it is not a letter list within the ``n_choices`` options (0: any), e.g. an option's text or index."""
    gold = answer.strip()
    if _LETTER_LIST.fullmatch(gold) is None:
        return None
    letters = [c.upper() for c in letters_in(gold)]
    if n_choices and any(OPTION_LETTERS.index(c) >= n_choices for c in letters):
        return None
    return set(letters)


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


def text_key(text: str) -> str:
    """A stable key of an item text (whitespace-insensitive): two items with the same key are the same item."""
    import hashlib

    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:24]


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
        import pandas as pd

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


@dataclass
class LongRows:
    """Response rows in long format, as text: what every reader (long CSV, wide 0/1 CSV, JSONL, py-irt jsonlines, a
    DataFrame) hands to the one validation, :func:`_matrix_from_long`.

    Attributes:
        model, item_id, n_correct, n_trials: one entry per row, the text as read (a DataFrame's missing count is NaN,
            as pandas gives it).
        row: int array; the row number each row is reported under in messages (a CSV's header is row 1 and blank lines
            are not counted; a JSONL file's line number; a DataFrame's position + 1).
        task: the CSV's optional ``task`` column (written by ``benchfill import``), or None.
    """

    model: list[str]
    item_id: list[str]
    n_correct: list[Any]
    n_trials: list[Any]
    row: np.ndarray
    task: list[str] | None = None

    def __len__(self) -> int:
        return len(self.model)


def read_responses(path: str | Path, items: Sequence[Item] | None = None, *, min_models: int = 2) -> ResponseMatrix:
    """Read and validate a response file in one of benchfill's own formats: long CSV/JSONL, wide 0/1 CSV, or py-irt
    jsonlines (eval logs of other harnesses: :func:`benchfill.importers.load_responses`, which reads both).

    When ``items`` is given, every item id in the responses must be one of them and every item must have been
    attempted by some model; the matrix columns then follow the items' order. ``min_models`` is the fewest models
    the file must hold: 2 for IRT (the default), 1 for a single checkpoint's file (``benchfill detect``).
    """
    path = Path(path)
    text = _open_text(path)
    if not text.strip():
        raise InputError(str(path), "empty file")
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        rows = _jsonl_rows(path, text)
    else:
        fast = _plain_long_csv(path, text, items, min_models)
        if fast is not None:
            return fast
        rows = _csv_rows(path, text)
    return _matrix_from_long(path, rows, items, min_models)


# the bytes a plain long CSV may hold for :func:`_plain_long_csv`: printable ASCII but the quote, the space, newlines
_PLAIN_BYTES = bytes(range(0x20, 0x7F)).replace(b'"', b"") + b"\n"
_HASH_MULT = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime
_BYTE_MASKS = np.array([(1 << 8 * k) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)  # the first k bytes


def _plain_long_csv(path: Path, text: str, items: Sequence[Item] | None, min_models: int) -> ResponseMatrix | None:
    """The matrix of a plain, valid long-format CSV read without a Python string per field; None for any other
    file, which the general reader then reads and, where a rule is broken, reports.

    Plain: ASCII without quotes, tabs or carriage returns, no blank lines, a header of distinct non-empty names
    without spaces that holds model, item_id, n_correct, n_trials (and no ``task``), every row with the header's
    number of fields, counts of 1 to 15 digits, model names and item ids not empty and neither opening nor ending
    with a space. Valid: every rule of :func:`_matrix_from_long` holds (any broken one: None, so the message is the
    general reader's). Fields are located by one scan for the commas and newlines; fields are read 8 bytes at a time (an overlapping
    integer view of the text); the counts are parsed digit by digit over all rows at once; names of up to 8 bytes
    are grouped by their bytes as one integer, longer ones by a 64-bit FNV-1a hash over their 8-byte chunks, and
    then every field is compared with its group's first, so a hash collision can only send the file to the general
    reader, never merge two names. The result equals the general reader's (models and items in order of first
    appearance)."""
    if not text.isascii() or "\n" not in text:
        return None
    data = text.encode("ascii")
    if data.translate(None, _PLAIN_BYTES) or data.startswith(b"\n") or b"\n\n" in data:
        return None  # a byte outside the plain set (quote, tab, CR, control) or a blank line
    if not data.endswith(b"\n"):
        data += b"\n"
    head_end = data.index(b"\n")
    header = data[:head_end].decode("ascii").split(",")
    if (len(set(header)) != len(header) or "" in header or any(" " in h for h in header)
            or not set(LONG_COLUMNS) <= set(header) or "task" in header):
        return None
    ncol = len(header)
    data += bytes(8)  # so that 8 bytes can be read from every position of the text
    arr = np.frombuffer(data, dtype=np.uint8)
    body = arr[head_end + 1 : len(data) - 8]
    if body.size == 0:
        return None
    # the 8 bytes from each position as one little-endian integer (an unaligned, overlapping view: no copy)
    words = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))[head_end + 1:]
    ends = np.flatnonzero(body <= 44)  # each field's end, its comma or newline, among the few bytes <= ","
    ends = ends[(body[ends] == 44) | (body[ends] == 10)]
    if ends.size % ncol:
        return None
    ends = ends.reshape(-1, ncol)
    if not (body[ends[:, -1]] == 10).all() or (ncol > 1 and (body[ends[:, :-1]] == 10).any()):
        return None  # some row has more or fewer fields than the header
    starts = np.empty_like(ends)
    starts.reshape(-1)[0] = 0
    starts.reshape(-1)[1:] = ends.reshape(-1)[:-1] + 1
    col = {name: k for k, name in enumerate(header)}

    def chunk(s: np.ndarray, width: np.ndarray, c: int) -> np.ndarray:
        """Bytes 8c .. 8c + 7 of each field (those past its end zeroed) as one integer."""
        left = np.clip(width - 8 * c, 0, 8)
        return words[np.where(left > 0, s + 8 * c, s)] & _BYTE_MASKS[left]

    def counts(name: str) -> np.ndarray | None:
        s, e = starts[:, col[name]], ends[:, col[name]]
        width = e - s
        if width.min() < 1 or width.max() > 15:
            return None
        value = np.zeros(len(s), dtype=np.int64)
        for c in range((int(width.max()) + 7) // 8):
            word = chunk(s, width, c)
            for k in range(min(8, int(width.max()) - 8 * c)):
                live = 8 * c + k < width
                digit = ((word >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.int64) - 48
                if ((digit < 0) | (digit > 9))[live].any():
                    return None
                value = np.where(live, value * 10 + digit, value)
        return value

    def codes(name: str) -> tuple[list[str], np.ndarray] | None:
        s, e = starts[:, col[name]], ends[:, col[name]]
        width = e - s
        if width.min() < 1 or (body[s] == 32).any() or (body[e - 1] == 32).any():
            return None  # empty, or spaces the general reader strips
        n_chunks = (int(width.max()) + 7) // 8
        if n_chunks == 1:  # up to 8 bytes: the bytes themselves are the key (no NUL in plain text)
            key = chunk(s, width, 0)
        else:
            key = np.full(len(s), 0xCBF29CE484222325, dtype=np.uint64)
            for c in range(n_chunks):
                key = (key ^ chunk(s, width, c)) * _HASH_MULT
            key ^= width.astype(np.uint64)
        # runs of equal keys (a long file lists a model's rows together) and the distinct keys: np.unique of the
        # values alone and a binary search are ~3x faster than np.unique(return_inverse=True)'s stable argsort
        run = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        run_key = key[run]
        distinct = np.unique(run_key)
        run_code = np.searchsorted(distinct, run_key)
        inverse = np.repeat(run_code, np.diff(np.append(run, len(key))))
        first = np.full(len(distinct), len(s), dtype=np.int64)
        np.minimum.at(first, run_code, run)  # each group's first row
        if n_chunks > 1:  # hashed: every field must equal its group's first, byte for byte
            rep = first[inverse]
            if (width[rep] != width).any():
                return None
            for c in range(n_chunks):
                if (chunk(s, width, c) != chunk(s[rep], width, c)).any():
                    return None  # a hash collision: let the general reader decide
        order = np.argsort(first)
        rank = np.empty(len(first), dtype=np.int64)
        rank[order] = np.arange(len(first))
        names = [bytes(body[s[i]:e[i]]).decode("ascii") for i in first[order]]
        return names, rank[inverse]

    n_correct, n_trials = counts("n_correct"), counts("n_trials")
    if n_correct is None or n_trials is None or (n_correct > n_trials).any():
        return None
    m, it = codes("model"), codes("item_id")
    if m is None or it is None:
        return None
    (models, jj), (seen, ii) = m, it
    if len(models) < min_models:
        return None
    if items is not None:
        ipos = {t.id: i for i, t in enumerate(items)}
        to_item = np.array([ipos.get(t, -1) for t in seen], dtype=np.int64)
        if (to_item < 0).any():
            return None
        ii = to_item[ii]
        item_ids = [t.id for t in items]
    else:
        item_ids = seen
    J, I = len(models), len(item_ids)
    pair = jj * I + ii
    if np.bincount(pair, minlength=J * I).max() > 1:
        return None  # a duplicate row
    correct = np.zeros((J, I), dtype=np.int64)
    trials = np.zeros_like(correct)
    correct.reshape(-1)[pair] = n_correct
    trials.reshape(-1)[pair] = n_trials
    if (trials.sum(0) == 0).any():
        return None
    return ResponseMatrix(models, item_ids, correct, trials, str(path), {})


def responses_from_frame(frame: pd.DataFrame, items: Sequence[Item] | None = None, *, source: str = "<DataFrame>",
                         min_models: int = 2) -> ResponseMatrix:
    """A DataFrame in long format (``model, item_id, n_correct, n_trials``) or wide 0/1 (one row per model, one
    column per item; the model names in the first column, or in the index when it is not a plain 0..n-1 range; a
    missing cell = not attempted), validated like a file."""
    if not set(LONG_COLUMNS) <= {str(c) for c in frame.columns}:
        if frame.shape[1] and not {"item_id", "n_correct", "n_trials"} & {str(c) for c in frame.columns}:
            return _wide_frame(frame, items, source, min_models)
        missing = next(col for col in LONG_COLUMNS if col not in frame.columns)
        raise InputError(source, f"missing column {missing!r} (long format: model,item_id,n_correct,n_trials)")
    # the file readers hand over text columns and a row number; so does a frame ("row" = its position + 1). A missing
    # count stays NaN ("n_correct=nan is missing, NaN or not a number"); a missing model or item_id reads as empty.
    text = frame[list(LONG_COLUMNS)].astype(str)
    model, item_id, n_correct, n_trials = (text[col].tolist() for col in LONG_COLUMNS)
    rows = LongRows(
        [m if isinstance(m, str) else "" for m in model], [t if isinstance(t, str) else "" for t in item_id],
        n_correct, n_trials, np.arange(1, len(frame) + 1),
    )
    return _matrix_from_long(Path(source), rows, items, min_models)



def _wide_frame(frame: pd.DataFrame, items: Sequence[Item] | None, source: str, min_models: int) -> ResponseMatrix:
    """A wide 0/1 frame read as the wide CSV reader reads its text (row numbers count a header as row 1)."""
    import pandas as pd

    wide = frame if isinstance(frame.index, pd.RangeIndex) else frame.rename_axis(frame.index.name or "model").reset_index()
    names = [str(c) for c in wide.columns]
    columns = [["" if pd.isna(v) else str(v) for v in wide[c].tolist()] for c in wide.columns]
    path = Path(source)
    return _matrix_from_long(path, _wide_to_long(path, names, columns), items, min_models)


def align_to_items(matrix: ResponseMatrix, items: Sequence[Item], path: str | Path) -> ResponseMatrix:
    """The matrix with its columns in the items' order; every response item must be one of them and every item
    attempted by some model (else one line naming ``path``)."""
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


def _csv_rows(path: Path, text: str) -> LongRows:
    names, columns = _csv_table(path, text, skipinitialspace=True)
    names = [name.strip() for name in names]
    if "item_id" in names or "n_correct" in names or "n_trials" in names:
        missing = [c for c in LONG_COLUMNS if c not in names]
        if missing:
            raise InputError(
                str(path), f"missing column(s) {', '.join(missing)}; long format needs {','.join(LONG_COLUMNS)}"
                           + (f"; misspelt? {near}" if (near := _misspelt(names, missing)) else ""), row=1
            )
        named: dict[str, list[str]] = {}
        for name, values in zip(names, columns):
            named.setdefault(name, values)
        return LongRows(named["model"], named["item_id"], named["n_correct"], named["n_trials"],
                        np.arange(2, len(columns[0]) + 2), named.get("task"))
    try:
        return _wide_to_long(path, names, columns)
    except InputError:
        # a long file whose column names are misspelt reads as a wide matrix with non-0/1 cells: say so
        near = _misspelt(names, LONG_COLUMNS)
        if near:
            raise InputError(str(path), f"not long format (model,item_id,n_correct,n_trials) and not a wide 0/1 "
                                        f"matrix: misspelt column name(s)? {near}", row=1) from None
        raise


def _csv_table(path: Path, text: str, *, skipinitialspace: bool) -> tuple[list[str], list[list[str]]]:
    """CSV text read the way ``pandas.read_csv(dtype=str, keep_default_na=False)`` read it (the loader used pandas
    before; its rules and messages are kept): the column names and the data rows as columns of text.

    Blank lines and lines of only spaces and tabs are skipped; the first line left is the header, where an empty name
    reads as ``Unnamed: <i>`` and a repeated one as ``<name>.1``, ``<name>.2``, ...; fields may be quoted (``""`` is
    a quote inside one); a row with fewer fields than the header is padded with ''; with ``skipinitialspace`` the
    spaces that open a field are dropped. A row with more fields than the header, or a quoted field that is never
    closed, is "not a valid CSV". Text without a quote character is split directly, the rest by the ``csv`` module.
    """
    if '"' in text:
        header, columns = _split_quoted(path, text, skipinitialspace)
    else:
        header, columns = _split_plain(path, text, skipinitialspace)
    return _column_names(header), columns


def _too_many_fields(path: Path, expected: int, line: int, saw: int) -> InputError:
    return InputError(str(path), f"not a valid CSV (expected {expected} fields in line {line}, saw {saw})")


def _split_plain(path: Path, text: str, skipinitialspace: bool) -> tuple[list[str], list[list[str]]]:
    """Header and columns of CSV text without quotes: lines split on commas, no per-field parsing."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    spaced = " " in text or "\t" in text
    if spaced:
        kept = [ln for ln in lines if ln.strip(" \t")]
    else:
        kept = [ln for ln in lines if ln] if "" in lines else lines
    if not kept:
        raise InputError(str(path), "empty file")
    header = kept[0].split(",")
    n = len(header)
    data = kept[1:]
    commas = set(map(str.count, data, repeat(",")))
    if commas and max(commas) > n - 1:
        start = lines.index(kept[0]) + 1
        line = next(k for k in range(start, len(lines)) if lines[k].count(",") > n - 1)
        raise _too_many_fields(path, n, line + 1, lines[line].count(",") + 1)
    if not data:
        flat: list[str] = []
    elif commas == {n - 1}:
        flat = ",".join(data).split(",")
    else:  # some rows are short: pad them with ''
        flat = []
        for ln in data:
            fields = ln.split(",")
            flat.extend(fields)
            if len(fields) < n:
                flat.extend([""] * (n - len(fields)))
    columns = [flat[j::n] for j in range(n)]
    if skipinitialspace and " " in text:
        header = [name.lstrip(" ") for name in header]
        columns = [[value.lstrip(" ") for value in values] for values in columns]
    return header, columns


# appended to quoted CSV text: read back as a row of its own unless a quoted field ran on to the end of the text
_CSV_END = "\ue000benchfill: end of text\ue000"


def _split_quoted(path: Path, text: str, skipinitialspace: bool) -> tuple[list[str], list[list[str]]]:
    """Header and columns of CSV text with quotes, read by the ``csv`` module: at once when every line is a row of
    the header's width, else line by line (blank lines, short or long rows, a quote never closed)."""
    end = "" if text.endswith(("\n", "\r")) else "\n"
    with _csv_module(path):
        records = list(csv.reader(io.StringIO(text + end + _CSV_END, newline=""), skipinitialspace=skipinitialspace))
    closed = bool(records) and records[-1] == [_CSV_END]
    if closed:
        records.pop()
    if not closed or not records or len(records[0]) < 2 or len(set(map(len, records))) > 1:
        header, data = _csv_by_line(path, text, skipinitialspace, closed)
    else:
        header, data = records[0], records[1:]
    n = len(header)
    flat = list(chain.from_iterable(data))
    return header, [flat[j::n] for j in range(n)]


@contextmanager
def _csv_module(path: Path) -> Iterator[None]:
    """Lets the ``csv`` module read a field as long as the file (pandas had no limit); its errors as InputError."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, 2**31 - 1))
    try:
        yield
    except csv.Error as exc:
        raise InputError(str(path), f"not a valid CSV ({exc})") from None
    finally:
        csv.field_size_limit(limit)


def _csv_by_line(path: Path, text: str, skipinitialspace: bool, closed: bool) -> tuple[list[str], list[list[str]]]:
    """The header and the data rows (padded to the header's width), knowing the lines each record spans."""
    lines = io.StringIO(text, newline="").readlines()
    header: list[str] | None = None
    data: list[list[str]] = []
    with _csv_module(path):
        reader = csv.reader(lines, skipinitialspace=skipinitialspace)
        last = 0
        for record in reader:
            first, last = last + 1, reader.line_num
            if not closed and last == len(lines):
                raise InputError(str(path), f"not a valid CSV (a quoted field in the row at line {first} is never "
                                            "closed)")
            if not "".join(lines[first - 1:last]).strip(" \t\r\n"):
                continue  # a blank line, or one of only spaces and tabs
            if header is None:
                header = record
            elif len(record) > len(header):
                raise _too_many_fields(path, len(header), first, len(record))
            else:
                data.append(record + [""] * (len(header) - len(record)))
    if header is None:
        raise InputError(str(path), "empty file")
    return header, data


def _column_names(header: list[str]) -> list[str]:
    """pandas' names for a header row: an empty one is ``Unnamed: <i>``, a repeat is ``<name>.1``, ``<name>.2``, ...
    (a suffixed name already in the header is skipped; named columns are numbered before unnamed ones)."""
    names = [name if name != "" else f"Unnamed: {i}" for i, name in enumerate(header)]
    if len(set(names)) == len(names):
        return names
    order = [i for i, name in enumerate(header) if name != ""] + [i for i, name in enumerate(header) if name == ""]
    counts: dict[str, int] = {}
    for i in order:
        col = old = names[i]
        cur = counts.get(col, 0)
        while cur > 0:
            counts[old] = cur + 1
            col = f"{old}.{cur}"
            cur = cur + 1 if col in names else counts.get(col, 0)
        names[i] = col
        counts[col] = cur + 1
    return names


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


_WIDE_CELLS = {"0": "0", "0.0": "0", "False": "0", "false": "0", "1": "1", "1.0": "1", "True": "1", "true": "1"}


def _wide_to_long(path: Path, names: list[str], columns: list[list[str]]) -> LongRows:
    """Wide 0/1 matrix: first column names the model, every other column is an item; blank = not attempted."""
    if len(names) < 2:
        raise InputError(
            str(path), f"missing columns: expected {','.join(LONG_COLUMNS)} (long) or model,<item>,... (wide)", row=1
        )
    model_col, items = names[0], names[1:]
    model: list[str] = []
    item_id: list[str] = []
    correct: list[str] = []
    row: list[int] = []
    for k, rec in enumerate(zip(*columns), start=2):
        name = rec[0].strip()
        for item, value in zip(items, rec[1:]):
            value = value.strip()
            if value == "":
                continue
            hit = _WIDE_CELLS.get(value)
            if hit is None:
                raise InputError(str(path), f"wide matrix cell {model_col}={name}, {item}={value!r} is not 0/1", row=k)
            model.append(name)
            item_id.append(item)
            correct.append(hit)
            row.append(k)
    return LongRows(model, item_id, correct, ["1"] * len(model), np.array(row, dtype=np.int64))


def jsonl_record(path: Path, line: str, k: int) -> dict[str, Any] | None:
    """Line ``k`` of a JSON-lines file as its object (None for a blank line); a line that is not a JSON object is
    an InputError naming the file and row."""
    if not line.strip():
        return None
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"invalid JSON ({exc.msg})", row=k) from None
    if not isinstance(rec, dict):
        raise InputError(str(path), "each line must be a JSON object", row=k)
    return rec


def jsonl_records(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of ``text`` (:func:`jsonl_record`)."""
    for k, line in enumerate(text.splitlines(), start=1):
        rec = jsonl_record(path, line, k)
        if rec is not None:
            yield k, rec


def _jsonl_rows(path: Path, text: str) -> LongRows:
    model: list[str] = []
    item_id: list[str] = []
    n_correct: list[str] = []
    n_trials: list[str] = []
    row: list[int] = []
    for k, rec in jsonl_records(path, text):
        if "responses" in rec and "subject_id" in rec:  # py-irt jsonlines
            if not isinstance(rec["responses"], dict):
                raise InputError(str(path), "'responses' must map item id -> 0/1", row=k)
            for item, value in rec["responses"].items():
                if value not in (0, 1, True, False):
                    raise InputError(str(path), f"response {item}={value!r} is not 0/1", row=k)
                model.append(str(rec["subject_id"]))
                item_id.append(str(item))
                n_correct.append(str(int(value)))
                n_trials.append("1")
                row.append(k)
            continue
        missing = [c for c in LONG_COLUMNS if c not in rec]
        if missing:
            raise InputError(str(path), f"missing field(s) {', '.join(missing)}", row=k)
        m, i, c, t = (str(rec[c]) if rec[c] is not None else "" for c in LONG_COLUMNS)
        model.append(m)
        item_id.append(i)
        n_correct.append(c)
        n_trials.append(t)
        row.append(k)
    return LongRows(model, item_id, n_correct, n_trials, np.array(row, dtype=np.int64))


# a count's text that pandas' to_numeric read as a number: ASCII decimal or scientific notation, inf, infinity or nan
_NUMBER_TEXT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)


def _count_value(text: Any) -> float:
    """A count's text as a number, as ``pd.to_numeric(errors="coerce")`` read it (after stripping whitespace):
    NaN for anything that is not a number (and for a DataFrame's missing value)."""
    if not isinstance(text, str):
        return math.nan
    text = text.strip()
    return float(text) if _NUMBER_TEXT.fullmatch(text) else math.nan


def _parse_counts(path: Path, rows: LongRows, column: str) -> np.ndarray:
    raw = getattr(rows, column)
    try:  # the usual column, plain digits: one conversion (a count past 2**53 goes the general way, as a float)
        if "" not in raw:
            digits = "".join(raw)
            if digits.isascii() and digits.isdigit():
                counts = np.array(raw, dtype=np.int64)
                if counts.max() < 2**53:
                    return counts
    except (TypeError, ValueError, OverflowError):
        pass
    values = np.array([_count_value(v) for v in raw], dtype=float)
    bad = ~np.isfinite(values)
    if bad.any():
        k = int(np.argmax(bad))
        raise InputError(str(path), f"{column}={raw[k]!r} is missing, NaN or not a number", row=int(rows.row[k]))
    frac = values != np.round(values)
    if frac.any():
        k = int(np.argmax(frac))
        raise InputError(str(path), f"{column}={values[k]:g} is not a whole number", row=int(rows.row[k]))
    neg = values < 0
    if neg.any():
        k = int(np.argmax(neg))
        raise InputError(str(path), f"{column}={int(values[k])} is negative", row=int(rows.row[k]))
    return values.astype(np.int64)


def _codes(values: list[str]) -> tuple[list[str], np.ndarray]:
    """The distinct values in order of first appearance, and each value's position among them."""
    distinct = list(dict.fromkeys(values))
    pos = {v: i for i, v in enumerate(distinct)}
    return distinct, np.fromiter(map(pos.__getitem__, values), dtype=np.int64, count=len(values))


def _matrix_from_long(path: Path, rows: LongRows, items: Sequence[Item] | None, min_models: int = 2) -> ResponseMatrix:
    if len(rows) == 0:
        raise InputError(str(path), "no response rows")
    model = list(map(str.strip, rows.model))
    item_id = list(map(str.strip, rows.item_id))
    for col, values in (("model", model), ("item_id", item_id)):
        if "" in values:
            raise InputError(str(path), f"{col} is empty", row=int(rows.row[values.index("")]))
    n_correct = _parse_counts(path, rows, "n_correct")
    n_trials = _parse_counts(path, rows, "n_trials")
    over = n_correct > n_trials
    if over.any():
        k = int(np.argmax(over))
        raise InputError(str(path), f"n_correct={n_correct[k]} > n_trials={n_trials[k]}", row=int(rows.row[k]))
    # models and items in order of first appearance; a (model, item) pair as one integer code
    models, jj = _codes(model)
    seen, ii = _codes(item_id)
    pair = jj * len(seen) + ii
    ordered = np.sort(pair)
    if (ordered[1:] == ordered[:-1]).any():
        first: dict[int, int] = {}
        for k, code in enumerate(pair.tolist()):
            if code in first:
                raise InputError(
                    str(path), f"duplicate row for model={model[k]}, item_id={item_id[k]} "
                               f"(first at row {int(rows.row[first[code]])})", row=int(rows.row[k]),
                )
            first[code] = k
    if len(models) < min_models:
        if min_models == 2:
            raise InputError(str(path), f"only one model ({models[0]}): IRT needs responses from at least 2 models")
        raise InputError(str(path), f"only {len(models)} model(s): need responses from at least {min_models}")
    if items is not None:
        item_ids = [it.id for it in items]
        ipos = {t: i for i, t in enumerate(item_ids)}
        ii = np.array([ipos.get(t, -1) for t in seen], dtype=np.int64)[ii]
        unknown = ii < 0
        if unknown.any():
            k = int(np.argmax(unknown))
            raise InputError(str(path), f"unknown item_id={item_id[k]} (not in the items file)", row=int(rows.row[k]))
    else:
        item_ids = seen
    correct = np.zeros((len(models), len(item_ids)), dtype=np.int64)
    trials = np.zeros_like(correct)
    correct[jj, ii] = n_correct
    trials[jj, ii] = n_trials
    unattempted = trials.sum(0) == 0
    if unattempted.any():
        i = int(np.argmax(unattempted))
        at = item_id.index(item_ids[i]) if item_ids[i] in seen else None
        raise InputError(
            str(path), f"item_id={item_ids[i]} was attempted by no model (n_trials is 0 everywhere)",
            row=int(rows.row[at]) if at is not None else None,
        )
    meta: dict[str, Any] = {}
    if rows.task is not None:  # written by `benchfill import`: the grouping `suite --by task` uses
        meta["groups"] = {"task": dict(zip(item_id, rows.task))}
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
        elif models > n_all:  # asked for more than there are: all are kept, and the user is told
            responses.meta["selection_note"] = (f"--models {models}: {responses.source} has {n_all} models; "
                                                f"all {n_all} are kept")
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
    names, columns = _csv_table(path, _open_text(path), skipinitialspace=False)
    table: dict[str, list[str]] = {}
    for name, values in zip(names, columns):
        table.setdefault(name, values)
    for col in ("item_id", column):
        if col not in table:
            raise InputError(str(path), f"missing column {col!r}", row=1)
    wanted = set(item_ids)
    groups: dict[str, list[str]] = {}
    for item, key in zip(table["item_id"], table[column]):
        if item in wanted:
            groups.setdefault(key, []).append(item)
    missing = wanted - {item for members in groups.values() for item in members}
    if missing:
        raise InputError(str(path), f"{len(missing)} item id(s) of the responses are not in the table, e.g. {sorted(missing)[0]}")
    return groups


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
