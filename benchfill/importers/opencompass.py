"""OpenCompass results with per-example ``details``.

OpenCompass writes ``<work_dir>/results/<model_abbr>/<dataset_abbr>.json``: the dataset's metrics and, when the
evaluator keeps them, ``details``. Since OpenCompass's repeated-runs support (``n`` replicas of a dataset) each
detail is one example, ``{"example_abbr": "<subdivision>_<idx>", "correct": [true, false, ...], "pred": [...],
...}``, its per-replica fields collected into lists; older versions write one detail per example with
``correct`` a boolean, as a list or as an object keyed by the example's index. ``is_correct`` and
``cascade_correct`` are read where ``correct`` is absent (as OpenCompass's own G-Pass@k does).

Model = the folder (``model_abbr``); task = the file name (``dataset_abbr``); the sample id = ``example_abbr``
(``<dataset_abbr>_<idx>`` becomes ``<idx>``, the id older versions key the detail by), else the detail's key or
position. Each entry of a ``correct`` list is one trial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchfill.errors import InputError
from benchfill.importers.base import ImportedLogs, Options, as_binary, each_file, expand, read_json

NAME = "opencompass"
_CORRECT_KEYS = ("correct", "is_correct", "cascade_correct")


def read(paths: list[str | Path], opts: Options) -> ImportedLogs:
    files = expand(paths, lambda p: p.name.endswith(".json") and _has_details(p))
    if not files:
        raise InputError(", ".join(map(str, paths)), "no OpenCompass results with 'details' found "
                                                      "(results/<model>/<dataset>.json)")
    res = ImportedLogs(NAME, files=[str(f) for f in files])
    for f in each_file(files):
        data = read_json(f)
        if not isinstance(data, dict) or "details" not in data:
            raise InputError(str(f), "no 'details' in this results file (the evaluator did not keep them)")
        details = data["details"]
        if isinstance(details, dict):
            entries = list(details.items())
        elif isinstance(details, list):
            entries = [(str(i), d) for i, d in enumerate(details)]
        else:
            raise InputError(str(f), "'details' must be a list or an object")
        model, task = f.parent.name, f.name.removesuffix(".json")
        seen: set[str] = set()
        for k, (key, d) in enumerate(entries, start=1):
            if not isinstance(d, dict):
                raise InputError(str(f), f"details entry {key} is not an object", row=k)
            sid = str(d.get("example_abbr", key))
            if sid.startswith(f"{task}_") and sid[len(task) + 1:].isdigit():
                sid = sid[len(task) + 1:]  # "<dataset>_<idx>" -> idx: the same id as a detail keyed by its index
            if sid in seen:
                raise InputError(str(f), f"example {sid} appears twice in details", row=k)
            seen.add(sid)
            field = next((c for c in _CORRECT_KEYS if d.get(c) is not None), None)
            if field is None:
                raise InputError(str(f), f"details entry {key} has no 'correct' (nor is_correct, cascade_correct): "
                                         "this evaluator does not grade per example", row=k)
            values = d[field] if isinstance(d[field], list) else [d[field]]
            if not values:
                raise InputError(str(f), f"details entry {key}: empty '{field}' list", row=k)
            hits = sum(as_binary(_num(v), opts, str(f), k, f"{field} of example {sid}") for v in values)
            item_id = res.add(model, task, sid, hits, str(f), k, trials=len(values))
            if opts.texts and item_id not in res.items:
                question = _first(d.get("origin_prompt") or d.get("prompt") or d.get("question"))
                answer = _first(d.get("answer") if d.get("answer") is not None else d.get("gold", d.get("references")))
                res.add_item(item_id, question if isinstance(question, str) else None, answer)
    res.chosen["field"] = "correct"
    return res


def _num(v: Any) -> Any:
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return v


def _first(v: Any) -> Any:
    """Per-replica lists hold the same gold / prompt in every replica: keep the first."""
    if isinstance(v, list) and v and all(x == v[0] for x in v):
        return v[0]
    return v


def _has_details(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(1 << 16).decode("utf-8", "ignore")
    except OSError:
        return False
    return head.lstrip().startswith("{") and '"details"' in head
