"""HELM run folders (``benchmark_output/runs/<suite>/<run name>/``).

Read: ``run_spec.json`` (``name``, ``adapter_spec.model``), ``per_instance_stats.json`` (a list of
``{instance_id, perturbation, train_trial_index, stats: [{name: {name, split, perturbation}, count, sum, mean,
...}]}``) and, for the item texts, ``instances.json`` (``{id, input: {text}, references: [{output: {text}, tags}],
split, perturbation}``). Only unperturbed instances are read (``perturbation`` absent or null, in the entry and in
the stat's name). Each ``train_trial_index`` of an instance is one trial.

The task is the run name without its ``model=`` / ``model_deployment=`` arguments, so the same scenario run for
several models gives the same item ids. The metric is ``--metric``, else the first of these the run has (HELM's
main metrics of its scenarios live in its schema, not in the run folder): exact_match, quasi_exact_match,
final_number_exact_match, math_equiv_chain_of_thought, math_equiv, prefix_exact_match, quasi_prefix_exact_match,
pass, equivalent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchfill.errors import InputError
from benchfill.importers.base import ImportedLogs, Options, as_binary, each_file, expand, read_json

NAME = "helm"
MAIN_METRICS = ("exact_match", "quasi_exact_match", "final_number_exact_match", "math_equiv_chain_of_thought",
                "math_equiv", "prefix_exact_match", "quasi_prefix_exact_match", "pass", "equivalent")


def is_run_spec(path: Path) -> bool:
    return path.name == "run_spec.json" and (path.parent / "per_instance_stats.json").exists()


def task_name(run_name: str) -> str:
    head, _, args = run_name.partition(":")
    keep = [a for a in args.split(",") if a and a.split("=", 1)[0].strip() not in ("model", "model_deployment")]
    return head + (":" + ",".join(keep) if keep else "")


def read(paths: list[str | Path], opts: Options) -> ImportedLogs:
    specs = expand(paths, is_run_spec)
    if not specs:
        raise InputError(", ".join(map(str, paths)), "no HELM run folders (run_spec.json with "
                                                      "per_instance_stats.json) found")
    res = ImportedLogs(NAME, files=[str(s.parent) for s in specs])
    metrics_used: set[str] = set()
    for spec_path in each_file(specs):
        run = spec_path.parent
        spec = read_json(spec_path)
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise InputError(str(spec_path), "no run name ('name') in run_spec.json")
        adapter = spec.get("adapter_spec") or {}
        model = adapter.get("model") if isinstance(adapter, dict) else None
        if not isinstance(model, str) or not model:
            raise InputError(str(spec_path), "adapter_spec.model is missing")
        task = task_name(spec["name"])
        stats_path = run / "per_instance_stats.json"
        entries = read_json(stats_path)
        if not isinstance(entries, list):
            raise InputError(str(stats_path), "expected a list of per-instance stats")
        metric = opts.metric or _main_metric(entries, stats_path)
        metrics_used.add(metric)
        texts = _instances(run / "instances.json") if opts.texts else {}
        seen: set[tuple[str, int]] = set()
        for k, e in enumerate(entries, start=1):
            if not isinstance(e, dict) or "instance_id" not in e:
                raise InputError(str(stats_path), "entry without instance_id", row=k)
            if e.get("perturbation"):
                continue
            iid, trial = str(e["instance_id"]), e.get("train_trial_index", 0)
            if (iid, trial) in seen:
                raise InputError(str(stats_path), f"instance {iid} trial {trial} appears twice", row=k)
            seen.add((iid, trial))
            stat = _stat(e.get("stats"), metric)
            if stat is None:
                raise InputError(str(stats_path), f"instance {iid}: no unperturbed stat {metric!r}", row=k)
            value = stat.get("mean")
            if value is None and stat.get("count"):
                value = stat.get("sum", 0) / stat["count"]
            hit = as_binary(value, opts, str(stats_path), k, f"{metric} of instance {iid}")
            item_id = res.add(model, task, iid, hit, str(stats_path), k)
            if iid in texts:
                q, a, choices = texts[iid]
                res.add_item(item_id, q, a, choices)
    res.chosen["metric"] = ", ".join(sorted(metrics_used))
    return res


def _stat(stats: Any, metric: str) -> dict | None:
    for s in stats or []:
        name = s.get("name") if isinstance(s, dict) else None
        if isinstance(name, dict) and name.get("name") == metric and not name.get("perturbation"):
            return s
    return None


def _main_metric(entries: list, path: Path) -> str:
    have: list[str] = []
    for e in entries[:50]:
        for s in (e.get("stats") or []) if isinstance(e, dict) else []:
            n = s.get("name", {}).get("name") if isinstance(s, dict) and isinstance(s.get("name"), dict) else None
            if n and n not in have:
                have.append(n)
    for m in MAIN_METRICS:
        if m in have:
            return m
    raise InputError(str(path), f"none of HELM's main metrics ({', '.join(MAIN_METRICS[:4])}, ...) here; "
                                f"choose one with --metric (it has: {', '.join(have[:8])})")


def _instances(path: Path) -> dict[str, tuple[str | None, str | None, list[str] | None]]:
    if not path.exists():
        return {}
    data = read_json(path)
    out: dict[str, tuple[str | None, str | None, list[str] | None]] = {}
    for inst in data if isinstance(data, list) else []:
        if not isinstance(inst, dict) or inst.get("perturbation") or inst.get("id") is None:
            continue
        q = (inst.get("input") or {}).get("text")
        refs = [r for r in inst.get("references") or [] if isinstance(r, dict)]
        correct = [(r.get("output") or {}).get("text") for r in refs if "correct" in (r.get("tags") or [])]
        options = [(r.get("output") or {}).get("text") for r in refs]
        choices = [str(o) for o in options] if len(refs) > 1 and len(correct) == 1 and all(
            isinstance(o, str) for o in options) else None
        out[str(inst["id"])] = (q, correct[0] if correct else None, choices)
    return out
