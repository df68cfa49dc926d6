"""lm-evaluation-harness ``--log_samples`` output.

``lm_eval ... --output_path OUT --log_samples`` writes, per model, ``OUT/<model>/results_<date>.json`` and one
``samples_<task>_<date>.jsonl`` per task: one line per document and filter, with ``doc_id``, ``doc``, ``target``,
``filter``, ``metrics`` (the names of the metrics on that line) and each metric's value under its own name
(``"acc": 1.0``). The model is ``model_name`` of the results file of the same run (the same ``<date>``; else the
folder's only results file), else its ``config.model_args`` ``pretrained=``, else the folder name (``org__name`` ->
``org/name``, the Open LLM Leaderboard's layout).

Defaults (``--filter``, ``--metric`` override them): the filter ``none`` when a task has it, else the first filter
in the file; the metric is the first one listed in ``metrics``. lm-eval scores one filtered answer per document and
filter, so one run is one trial per document; repeated runs of a task (several samples files for the same model and
task) add trials.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from benchfill.data import jsonl_records
from benchfill.errors import InputError
from benchfill.importers.base import ImportedLogs, Options, as_binary, expand, read_json

NAME = "lm-eval"
SAMPLES_RE = re.compile(r"^samples_(?P<task>.+?)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-:]+)\.jsonl$")
_RESERVED = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics", "doc_hash",
             "prompt_hash", "target_hash"}


def is_samples_file(path: Path) -> bool:
    return bool(SAMPLES_RE.match(path.name))


def task_of(path: Path) -> str:
    m = SAMPLES_RE.match(path.name)
    if m:
        return m.group("task")
    stem = path.name
    for suffix in (".jsonl", ".parquet", ".json"):
        stem = stem.removesuffix(suffix)
    stem = re.sub(r"_\d{4}-\d{2}-\d{2}T[0-9.\-:]+$", "", stem)
    return stem.removeprefix("samples_").removeprefix("details_")


def model_of(path: Path, res: ImportedLogs) -> str:
    """The model of a samples file: the sibling results file of the same run, else the folder name."""
    m = SAMPLES_RE.match(path.name)
    results = sorted(path.parent.glob("results_*.json"))
    pick = None
    if m:
        same = [r for r in results if r.name == f"results_{m.group('date')}.json"]
        pick = same[0] if same else None
    if pick is None and len(results) == 1:
        pick = results[0]
    if pick is not None:
        data = read_json(pick)
        if not isinstance(data, dict):
            raise InputError(str(pick), "expected a JSON object (an lm-eval results file)")
        name = data.get("model_name")
        if isinstance(name, str) and name.strip():
            return name.strip()
        cfg = data.get("config") or {}
        args = cfg.get("model_args") if isinstance(cfg, dict) else None
        if isinstance(args, str):
            for part in args.split(","):
                k, _, v = part.partition("=")
                if k.strip() in ("pretrained", "model", "path") and v.strip():
                    return v.strip()
        if isinstance(args, dict):
            for k in ("pretrained", "model", "path"):
                if isinstance(args.get(k), str) and args[k].strip():
                    return args[k].strip()
        if isinstance(cfg, dict) and isinstance(cfg.get("model"), str) and cfg["model"]:
            return cfg["model"]
        raise InputError(str(pick), "no model_name or config.model_args in the results file")
    name = path.parent.name
    model = name.replace("__", "/", 1) if "__" in name else name
    note = f"{path.parent}: no results_*.json; model named after the folder: {model}"
    if note not in res.notes:
        res.notes.append(note)
    return model


def rows_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    from benchfill.data import _open_text

    yield from jsonl_records(path, _open_text(path))


def read_rows(res: ImportedLogs, path: Path, rows: Iterable[tuple[int, dict[str, Any]]], model: str, task: str,
              opts: Options) -> None:
    """Add one samples file's rows (``(line, record)``) for the chosen filter and metric."""
    rows = list(rows)
    if not rows:
        raise InputError(str(path), "no samples")
    filters = list(dict.fromkeys(str(r.get("filter", "none")) for _, r in rows))
    if opts.filter and opts.filter in filters:
        flt = opts.filter
    else:  # a task without the chosen filter keeps its default (a suite mixes multiple choice and generation)
        flt = "none" if "none" in filters else filters[0]
    first = next(r for _, r in rows if str(r.get("filter", "none")) == flt)
    listed = [str(m) for m in first.get("metrics") or []] or [x for x in first if x not in _RESERVED]
    metric = opts.metric if opts.metric and opts.metric in listed else None
    seen: dict[str, int] = {}
    metric_used = None
    for k, r in rows:
        if str(r.get("filter", "none")) != flt:
            continue
        if "doc_id" not in r:
            raise InputError(str(path), "missing field doc_id", row=k)
        doc_id = r["doc_id"]
        if str(doc_id) in seen:
            raise InputError(str(path), f"doc_id {doc_id} appears twice for filter {flt} "
                                        f"(first at row {seen[str(doc_id)]})", row=k)
        seen[str(doc_id)] = k
        name = metric or _first_metric(r, path, k)
        if name not in r:
            have = [m for m in (r.get("metrics") or []) if m in r] or [x for x in r if x not in _RESERVED]
            raise InputError(str(path), f"no metric {name!r} on this line (it has: {', '.join(map(str, have))})",
                             row=k)
        metric_used = name
        hit = as_binary(r[name], opts, str(path), k, name)
        item_id = res.add(model, task, doc_id, hit, str(path), k)
        doc: dict[str, Any] = r["doc"] if isinstance(r.get("doc"), dict) else {}
        question = next((doc[q] for q in ("question", "problem", "prompt", "query", "input", "text")
                         if isinstance(doc.get(q), str)), None)
        if question is None:
            question = _prompt(r.get("arguments"))
        choices = doc.get("choices") if isinstance(doc.get("choices"), list) else None
        res.add_item(item_id, question, r.get("target"), choices)
    if metric_used:
        used = res.chosen.get("filter/metric", "")
        entry = f"{task}: {flt}/{metric_used}"
        if entry not in used.split("; "):
            res.chosen["filter/metric"] = f"{used}; {entry}" if used else entry


def _first_metric(r: dict, path: Path, row: int) -> str:
    names = r.get("metrics")
    if isinstance(names, list) and names:
        return str(names[0])
    extra = [k for k, v in r.items() if k not in _RESERVED and isinstance(v, (int, float, bool))]
    if not extra:
        raise InputError(str(path), "no metric on this line", row=row)
    return extra[0]


def _prompt(arguments: Any) -> str | None:
    """The first request's context string (lm-eval logs ``arguments`` as a list or as ``gen_args_0``...)."""
    first = None
    if isinstance(arguments, list) and arguments:
        first = arguments[0]
    elif isinstance(arguments, dict) and arguments:
        first = next(iter(arguments.values()))
    if isinstance(first, (list, tuple)) and first and isinstance(first[0], str):
        return first[0]
    if isinstance(first, dict):
        v = first.get("arg_0")
        return v if isinstance(v, str) else None
    return None


def read(paths: list[str | Path], opts: Options) -> ImportedLogs:
    files = expand(paths, is_samples_file)
    if not files:
        raise InputError(", ".join(map(str, paths)), "no lm-eval samples_<task>_<date>.jsonl files found "
                                                      "(run lm_eval with --log_samples)")
    res = ImportedLogs(NAME, files=[str(f) for f in files])
    for f in files:
        read_rows(res, f, rows_jsonl(f), model_of(f, res), task_of(f), opts)
    check_used(res, opts, paths)
    return res


def check_used(res: ImportedLogs, opts: Options, paths: list) -> None:
    """A --filter or --metric that no task has is a typo, not a default: say so."""
    used = res.chosen.get("filter/metric", "")
    pairs = [e.split(": ", 1)[1].split("/", 1) for e in used.split("; ") if ": " in e]
    if opts.filter and all(f != opts.filter for f, _ in pairs):
        raise InputError(", ".join(map(str, paths)), f"--filter {opts.filter}: no task has this filter")
    if opts.metric and all(m != opts.metric for _, m in pairs):
        raise InputError(", ".join(map(str, paths)), f"--metric {opts.metric}: no task has this metric")
