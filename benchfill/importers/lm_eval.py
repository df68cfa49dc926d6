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

The files are read one at a time and each one line by line (a leaderboard's folder holds thousands, some of
hundreds of MB); what stays is the counts (:class:`~benchfill.importers.base.ImportedLogs`), one small entry per
document of the file being read, and each results file's model name.
"""

from __future__ import annotations

import re
from array import array
from pathlib import Path
from typing import Any, Iterable

from benchfill.errors import InputError
from benchfill.importers.base import ImportedLogs, Options, as_binary, each_file, expand, jsonl_rows, read_json

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


class ModelNames:
    """Which model each samples file belongs to, reading each folder's listing and each results file once (a
    leaderboard folder has thousands of samples files next to a few results files)."""

    def __init__(self) -> None:
        self._results: dict[Path, list[Path]] = {}
        self._names: dict[Path, str] = {}
        self.unnamed: dict[Path, str] = {}  # folder without a results file -> the model named after it

    def __call__(self, path: Path) -> str:
        """The model of a samples file: the sibling results file of the same run, else the folder name."""
        m = SAMPLES_RE.match(path.name)
        results = self._results.get(path.parent)
        if results is None:
            results = self._results[path.parent] = sorted(path.parent.glob("results_*.json"))
        pick = None
        if m:
            same = [r for r in results if r.name == f"results_{m.group('date')}.json"]
            pick = same[0] if same else None
        if pick is None and len(results) == 1:
            pick = results[0]
        if pick is not None:
            if pick not in self._names:
                self._names[pick] = _results_model(pick)
            return self._names[pick]
        name = path.parent.name
        model = name.replace("__", "/", 1) if "__" in name else name
        self.unnamed.setdefault(path.parent, model)
        return model

    def add_notes(self, res: ImportedLogs, shown: int = 3) -> None:
        """One note per folder named after itself (the first ``shown``; then how many more)."""
        folders = list(self.unnamed.items())
        for folder, model in folders[:shown]:
            res.notes.append(f"{folder}: no results_*.json; model named after the folder: {model}")
        if len(folders) > shown:
            res.notes.append(f"{len(folders) - shown} more folder(s) without results_*.json: each model named after "
                             "its folder (<org>__<name> -> <org>/<name>)")


def _results_model(pick: Path) -> str:
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


class _Docs:
    """The documents of one samples file: the same for each of its filters, so kept once (doc_id -> position, the
    item id, the texts of items not seen before)."""

    def __init__(self) -> None:
        self.pos: dict[str, int] = {}
        self.item_ids: list[str] = []
        self.texts: dict[int, tuple[Any, Any, Any]] = {}  # position -> (question, target, choices)

    def index(self, key: str, item_id: str, r: dict[str, Any], res: ImportedLogs, opts: Options) -> int:
        d = self.pos.get(key)
        if d is None:
            d = self.pos[key] = len(self.item_ids)
            self.item_ids.append(item_id)
            if opts.texts and item_id not in res.items:
                doc: dict[str, Any] = r["doc"] if isinstance(r.get("doc"), dict) else {}
                question = next((doc[q] for q in ("question", "problem", "prompt", "query", "input", "text")
                                 if isinstance(doc.get(q), str)), None)
                if question is None:
                    question = _prompt(r.get("arguments"))
                choices = doc.get("choices") if isinstance(doc.get("choices"), list) else None
                self.texts[d] = (question, r.get("target"), choices)
        return d


class _Filter:
    """The lines of one filter of a samples file, checked and graded as they are read. Which filter is kept is known
    only at the end of the file (``none`` may come after ``strict``), so each keeps, compactly, its documents'
    positions, lines and 0/1 answers (a few bytes a line) and its first error, raised only if it is the one kept."""

    def __init__(self, first: dict[str, Any], opts: Options) -> None:
        listed = [str(m) for m in first.get("metrics") or []] or [x for x in first if x not in _RESERVED]
        self.metric = opts.metric if opts.metric and opts.metric in listed else None
        self.docs = array("i")  # document positions (_Docs), in line order
        self.hits = bytearray()
        self.line = array("q")  # per document position: its line in this filter (0: not yet)
        self.used: str | None = None
        self.error: InputError | None = None

    def drop(self) -> None:
        """Forget the lines read: another filter is the one kept."""
        self.docs, self.hits, self.line = array("i"), bytearray(), array("q")

    def take(self, res: ImportedLogs, docs: _Docs, path: Path, k: int, r: dict[str, Any], flt: str, model: str,
             task: str, opts: Options) -> None:
        if "doc_id" not in r:
            raise InputError(str(path), "missing field doc_id", row=k)
        doc_id = r["doc_id"]
        key = str(doc_id)
        d = docs.pos.get(key)
        if d is not None and d < len(self.line) and self.line[d]:
            raise InputError(str(path), f"doc_id {doc_id} appears twice for filter {flt} "
                                        f"(first at row {self.line[d]})", row=k)
        name = self.metric or _first_metric(r, path, k)
        if name not in r:
            have = [m for m in (r.get("metrics") or []) if m in r] or [x for x in r if x not in _RESERVED]
            raise InputError(str(path), f"no metric {name!r} on this line (it has: {', '.join(map(str, have))})",
                             row=k)
        hit = as_binary(r[name], opts, str(path), k, name)
        _, _, item_id = res.check(model, task, doc_id, hit, str(path), k)
        self.used = name
        if d is None:
            d = docs.index(key, item_id, r, res, opts)
        if d >= len(self.line):
            self.line.frombytes(bytes(8 * (max(d + 1, 2 * len(self.line), 64) - len(self.line))))
        self.line[d] = k
        self.docs.append(d)
        self.hits.append(hit)


def read_rows(res: ImportedLogs, path: Path, rows: Iterable[tuple[int, dict[str, Any]]], model: str, task: str,
              opts: Options) -> None:
    """Add one samples file's rows (``(line, record)``, read one at a time) for the chosen filter and metric."""
    docs = _Docs()
    filters: dict[str, _Filter] = {}
    # the filter kept is --filter, else none, else the first in the file: only those are read, and once --filter
    # (or none) is seen, only it (or it and --filter)
    keep: set[str | None] | None = None
    for k, r in rows:
        flt_name = str(r.get("filter", "none"))
        st = filters.get(flt_name)
        if st is None:
            st = filters[flt_name] = _Filter(r, opts)
            if flt_name == opts.filter or (flt_name == "none" and keep is None):
                keep = {flt_name} if flt_name == opts.filter else {"none", opts.filter}
                for name, other in filters.items():
                    if name not in keep:
                        other.drop()
        if st.error is not None:
            continue
        if keep is not None:
            if flt_name not in keep:
                continue
        elif flt_name != next(iter(filters)):  # neither --filter nor none yet: only the first filter can be kept
            continue
        try:
            st.take(res, docs, path, k, r, flt_name, model, task, opts)
        except InputError as exc:
            st.error = exc
    if not filters:
        raise InputError(str(path), "no samples")
    if opts.filter and opts.filter in filters:
        flt = opts.filter
    else:  # a task without the chosen filter keeps its default (a suite mixes multiple choice and generation)
        flt = "none" if "none" in filters else next(iter(filters))
    st = filters[flt]
    if st.error is not None:
        raise st.error
    model, task = model.strip(), task.strip()
    item_ids = docs.item_ids
    for d, hit in zip(st.docs, st.hits):
        res.count(model, task, item_ids[d], hit)
    for d, (question, target, choices) in docs.texts.items():
        if d < len(st.line) and st.line[d]:  # a document of the filter kept
            res.add_item(item_ids[d], question, target, choices)
    if st.used:
        used = res.chosen.get("filter/metric", "")
        entry = f"{task}: {flt}/{st.used}"
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
    names = ModelNames()
    for f in each_file(files):
        read_rows(res, f, jsonl_rows(f), names(f), task_of(f), opts)
    names.add_notes(res)
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
