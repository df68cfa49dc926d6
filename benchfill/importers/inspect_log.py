"""inspect_ai eval logs: ``.eval`` (a zip archive) and ``.json``.

Read: ``eval.model`` (the model), ``eval.task`` (the task), and per sample ``id``, ``epoch``, ``scores`` (scorer name
-> ``{value, answer, ...}``) and ``error``. A ``.eval`` archive holds ``header.json`` (the log without samples) and
one ``samples/<id>_epoch_<n>.json`` per sample and epoch; a ``.json`` log holds everything in one object.

Scores become 0/1 with inspect's own ``value_to_float`` mapping: ``C`` (correct) 1, ``I`` (incorrect) 0, ``N`` (no
answer) 0, ``P`` (partial) 0.5; numbers and booleans as they are; the strings yes/true 1, no/false 0 and numeric
strings their number. The scorer read is ``--metric`` (``scorer`` or ``scorer/key`` for a scorer returning a dict
of values), else the log's first scorer (its headline result). Each epoch of a sample is one trial. An errored
sample (``error`` set) or one without the scorer's score is not a trial: it is left out and counted in the summary.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any

from benchfill.errors import InputError
from benchfill.importers.base import ImportedLogs, Options, as_binary, each_file, expand, read_json

NAME = "inspect"
_LETTERS = {"C": 1.0, "I": 0.0, "N": 0.0, "P": 0.5}


def value_to_float(value: Any) -> float | None:
    """inspect_ai's default mapping of a score value to a number (None where inspect could not convert it)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        if value in _LETTERS:
            return _LETTERS[value]
        low = value.lower()
        if low in ("yes", "true"):
            return 1.0
        if low in ("no", "false"):
            return 0.0
        try:
            num = float(low)
        except ValueError:
            return None
        return num if math.isfinite(num) else None
    return None


def is_log(path: Path) -> bool:
    """A ``.eval`` archive with a header, or a ``.json`` object with ``eval`` and ``version`` at the top."""
    name = path.name.lower()
    if name.endswith(".eval"):
        return True
    if not name.endswith(".json"):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", "ignore")
    except OSError:
        return False
    return (head.lstrip().startswith("{") and '"eval"' in head and '"version"' in head
            and ('"eval_id"' in head or '"run_id"' in head or '"task"' in head))


def _read_eval(path: Path) -> tuple[dict, list[tuple[str, dict]]]:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(str(path), f"not an inspect .eval archive ({exc})") from None
    with zf:
        names = zf.namelist()
        head_name = "header.json" if "header.json" in names else "_journal/start.json"
        if head_name not in names:
            raise InputError(str(path), "no header.json or _journal/start.json inside the .eval archive")
        header = _zip_json(zf, path, head_name)
        samples = []
        for n in sorted(x for x in names if x.startswith("samples/") and x.endswith(".json")):
            samples.append((f"{path}:{n}", _zip_json(zf, path, n)))
    return header, samples


_ZSTD = 93  # the zip method id of Zstandard, which inspect_ai >= 0.3.1xx writes (zipfile reads it from 3.14)


def _member(zf: zipfile.ZipFile, path: Path, name: str) -> bytes:
    """A member's bytes; Zstandard members are decompressed with the ``zstandard`` package where this Python's
    zipfile cannot (the raw data follows the member's local header)."""
    try:
        return zf.read(name)
    except NotImplementedError:
        info = zf.getinfo(name)
        if info.compress_type != _ZSTD:
            raise InputError(f"{path}:{name}", f"zip compression {info.compress_type} is not supported") from None
    try:
        import zstandard
    except ImportError:
        raise InputError(str(path), "this .eval archive is Zstandard-compressed: pip install zstandard") from None
    with path.open("rb") as fh:
        fh.seek(info.header_offset)
        local = fh.read(30)
        if local[:4] != b"PK\x03\x04":
            raise InputError(f"{path}:{name}", "corrupt zip member (bad local header)")
        skip = int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
        fh.seek(skip, 1)
        raw = fh.read(info.compress_size)
    try:
        return zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    except zstandard.ZstdError as exc:
        raise InputError(f"{path}:{name}", f"corrupt Zstandard data ({exc})") from None


def _zip_json(zf: zipfile.ZipFile, path: Path, name: str) -> dict:
    try:
        obj = json.loads(_member(zf, path, name).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, zipfile.BadZipFile, KeyError) as exc:
        raise InputError(f"{path}:{name}", f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise InputError(f"{path}:{name}", "expected a JSON object")
    return obj


def _read_json_log(path: Path) -> tuple[dict, list[tuple[str, dict]]]:
    log = read_json(path)
    if not isinstance(log, dict) or not isinstance(log.get("eval"), dict):
        raise InputError(str(path), "not an inspect log (no 'eval' object at the top)")
    samples = log.get("samples")
    if samples is None:
        raise InputError(str(path), "the log has no samples (written with --no-log-samples?)")
    if not isinstance(samples, list):
        raise InputError(str(path), "'samples' must be a list")
    return log, [(str(path), s) for s in samples]


def _text(content: Any) -> str | None:
    """A sample's input (a string or chat messages) as text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for msg in content:
            c = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts.extend(x.get("text", "") for x in c if isinstance(x, dict) and x.get("type") == "text")
        return "\n\n".join(p for p in parts if p) or None
    return None


def read(paths: list[str | Path], opts: Options) -> ImportedLogs:
    files = expand(paths, is_log)
    if not files:
        raise InputError(", ".join(map(str, paths)), "no inspect logs (.eval or .json) found")
    res = ImportedLogs(NAME, files=[str(f) for f in files])
    seen_evals: dict[str, str] = {}
    scorer_names: set[str] = set()
    for f in each_file(files):
        header, samples = _read_eval(f) if f.name.lower().endswith(".eval") else _read_json_log(f)
        ev = header.get("eval")
        if not isinstance(ev, dict):
            raise InputError(str(f), "no 'eval' object in the log header")
        model, task = ev.get("model"), ev.get("task")
        if not isinstance(model, str) or not model:
            raise InputError(str(f), "eval.model is missing")
        if not isinstance(task, str) or not task:
            raise InputError(str(f), "eval.task is missing")
        eval_id = str(ev.get("eval_id") or ev.get("run_id") or f)
        if eval_id in seen_evals:
            raise InputError(str(f), f"the same eval (eval_id {eval_id}) as {seen_evals[eval_id]}: "
                                     "import each log once (a .eval and its .json conversion are one run)")
        seen_evals[eval_id] = str(f)
        status = header.get("status")
        if status not in (None, "success"):
            res.notes.append(f"{f}: status {status!r}: only its completed samples are read")
        scorer, key = _scorer(header, samples, opts, f)
        scorer_names.add(scorer if key is None else f"{scorer}/{key}")
        seen: set[tuple[str, int]] = set()
        for k, (where, s) in enumerate(samples, start=1):
            sid, epoch = s.get("id"), s.get("epoch", 1)
            if sid is None or (isinstance(sid, str) and not sid.strip()):
                raise InputError(where, "sample without an id", row=k)
            if not isinstance(epoch, int):
                raise InputError(where, f"sample {sid}: epoch={epoch!r} is not an integer", row=k)
            if (str(sid), epoch) in seen:
                raise InputError(where, f"sample {sid} epoch {epoch} appears twice", row=k)
            seen.add((str(sid), epoch))
            if s.get("error"):
                res.skip(model)
                continue
            scores = s.get("scores") or {}
            if not isinstance(scores, dict):
                raise InputError(where, f"sample {sid}: 'scores' must be an object", row=k)
            if scorer not in scores:
                res.skip(model)
                continue
            score = scores[scorer]
            value = score.get("value") if isinstance(score, dict) else None
            if key is not None:
                if not isinstance(value, dict) or key not in value:
                    raise InputError(where, f"sample {sid}: scorer {scorer} has no value {key!r}", row=k)
                value = value[key]
            elif isinstance(value, (dict, list)):
                raise InputError(where, f"sample {sid}: scorer {scorer} returns several values; choose one "
                                        f"with --metric {scorer}/<key>", row=k)
            num = value_to_float(value)
            if num is None:
                raise InputError(where, f"sample {sid}: score value {value!r} of scorer {scorer} is not C/P/I/N, "
                                        "a number or a boolean", row=k)
            hit = as_binary(num, opts, where, k, f"score of {scorer} (value {value!r})")
            item_id = res.add(model, task, sid, hit, where, k)
            if opts.texts and item_id not in res.items:
                res.add_item(item_id, _text(s.get("input")), s.get("target"), s.get("choices"))
    res.chosen["scorer"] = ", ".join(sorted(scorer_names))
    return res


def _scorer(header: dict, samples: list[tuple[str, dict]], opts: Options, path: Path) -> tuple[str, str | None]:
    """The scorer (and value key) to read: --metric, else the first scorer of the log's results."""
    names: list[str] = []
    results = header.get("results") or {}
    for sc in results.get("scores") or []:
        if isinstance(sc, dict) and sc.get("name") and sc["name"] not in names:
            names.append(sc["name"])
    if not names:
        for _, s in samples:
            for n in (s.get("scores") or {}):
                if n not in names:
                    names.append(n)
    if opts.metric:
        scorer, _, key = opts.metric.partition("/")
        if names and scorer not in names:
            raise InputError(str(path), f"no scorer {scorer!r} in this log (it has: {', '.join(names)})")
        return scorer, key or None
    if not names:
        raise InputError(str(path), "no scores in this log (was it scored?)")
    return names[0], None
