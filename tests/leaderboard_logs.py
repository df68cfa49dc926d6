"""Leaderboard-sized lm-evaluation-harness / Open LLM Leaderboard logs, written fast (tests/test_import_scale.py and
bench/import_scale.py).

The files copy the structure of the real fixtures in tests/fixtures/importers (lmeval/ is lm_eval 0.4.13's own
``--log_samples`` output): one folder per model ``<org>__<model>/`` holding ``samples_<task>_<date>.jsonl`` per
task and, in the ``lm-eval`` layout, the run's ``results_<date>.json`` (its ``model_name`` names the model); the
``openllm`` layout (the leaderboard's details datasets) has no results file, so the model is the folder name.
Tasks cycle through the fixtures' two kinds (``kinds``; by default they alternate):

* multiple choice (``toy_mc``): one line per document, filter ``none``, metrics ``acc`` and ``acc_norm``, the
  fields ``doc_id, doc{question, choices, label}, target, arguments{gen_args_k}, resps, filtered_resps, filter,
  metrics, doc_hash, prompt_hash, target_hash, acc, acc_norm``;
* generation (``toy_gen``): ``gen_filters`` lines per document (by default 2: filter ``strict``, all documents
  first, then ``none``), metric ``exact_match``.

Who answers what correctly is drawn from a 1PL model (abilities and difficulties ~ N(0, 1)); the importer's
default reads ``acc`` (filter ``none``) and ``exact_match`` of filter ``none``, so :func:`write_leaderboard`
returns that truth. The ``strict`` lines carry a different answer (the opposite outcome on every third document),
so reading the wrong filter shows.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LAYOUTS = ("lm-eval", "openllm")
_WORDS = ("red", "seven", "chair", "run", "blue", "table", "jump", "apple", "car", "pen", "sky", "river")


@dataclass
class Written:
    """What was written: the truth the importer must give back (filter none, first metric)."""

    root: Path
    models: list[str]  # the model names as the importer will name them
    item_ids: list[str]  # <task>/<doc_id>, in file order (task by task)
    correct: np.ndarray  # (models, items) int: 0/1
    files: int  # samples files
    bytes: int  # bytes written (samples + results files)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _mc_doc_parts(task: str, d: int) -> tuple[str, int]:
    """The model-independent middle of a multiple-choice line (doc, target, arguments), and its gold index."""
    choices = [_WORDS[(d + k) % len(_WORDS)] for k in range(4)]
    label = d % 4
    q = f"{task} question {d}: which word is number {label + 1}?"
    prompt = f"Question: {q}\nAnswer:"
    doc = json.dumps({"question": q, "choices": choices, "label": label})
    args = json.dumps({f"gen_args_{k}": {"arg_0": prompt, "arg_1": f" {c}"} for k, c in enumerate(choices)})
    return f'"doc": {doc}, "target": "{label}", "arguments": {args}', label


def _gen_doc_parts(task: str, d: int) -> str:
    q = f"{task}: say word {d}."
    gold = _WORDS[d % len(_WORDS)]
    doc = json.dumps({"question": q, "answer": gold})
    args = json.dumps({"gen_args_0": {"arg_0": f"Q: {q}\nA:", "arg_1": {"until": ["\n"]}}})
    return f'"doc": {doc}, "target": "{gold}", "arguments": {args}'


def _resps_pool(rng: np.random.Generator, n: int = 16) -> dict[int, list[str]]:
    """Loglikelihood resps / filtered_resps fragments whose argmax is each choice (0..3)."""
    pool: dict[int, list[str]] = {k: [] for k in range(4)}
    while min(len(v) for v in pool.values()) < n:
        ll = -rng.random(4) * 2
        best = int(np.argmax(ll))
        if len(pool[best]) >= n:
            continue
        pairs = [[repr(float(x)), "False"] for x in ll]
        frag = (f'"resps": {json.dumps([[p] for p in pairs])}, "filtered_resps": {json.dumps(pairs)}')
        pool[best].append(frag)
    return pool


def _results(model: str, tasks: list[str], kinds: list[str], acc: list[float], date: str, seed: int) -> str:
    res = {}
    for t, kind, a in zip(tasks, kinds, acc):
        if kind == "mc":
            res[t] = {"name": t, "alias": t, "acc,none": a, "acc_stderr,none": 0.01, "acc_norm,none": a,
                      "acc_norm_stderr,none": 0.01}
        else:
            res[t] = {"name": t, "alias": t, "exact_match,strict": a, "exact_match_stderr,strict": 0.01,
                      "exact_match,none": a, "exact_match_stderr,none": 0.01}
    obj = {
        "results": res, "group_subtasks": {},
        "configs": {t: {"task": t, "dataset_path": "json", "test_split": "test", "num_fewshot": 0,
                        "output_type": "multiple_choice" if k == "mc" else "generate_until",
                        "metadata": {"pretrained": model}} for t, k in zip(tasks, kinds)},
        "versions": {t: "Yaml" for t in tasks}, "n-shot": {t: 0 for t in tasks},
        "higher_is_better": {t: ({"acc": True, "acc_norm": True} if k == "mc" else {"exact_match": True})
                             for t, k in zip(tasks, kinds)},
        "config": {"model": "hf", "model_args": {"pretrained": model}, "batch_size": 1, "random_seed": seed},
        "git_hash": "ffa5ae4", "lm_eval_version": "0.4.13", "model_source": "hf", "model_name": model,
        "model_name_sanitized": model.replace("/", "__"), "total_evaluation_time_seconds": "13.6",
    }
    return json.dumps(obj, indent=2)


def write_leaderboard(root: str | Path, models: int, items: int, tasks: int = 10, layout: str = "lm-eval",
                      seed: int = 0, only_models: range | None = None, kinds: tuple[str, ...] = ("mc", "gen"),
                      gen_filters: int = 2) -> Written:
    """Write ``models`` x ``items`` (split over ``tasks`` whose kinds cycle through ``kinds``) under ``root``;
    ``only_models`` writes just those model folders (the truth still covers all). A generation task has
    ``gen_filters`` filters: ``strict``, ``strict-2``, ... (a different answer on every third document), then
    ``none`` (the truth)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: one of {LAYOUTS}")
    root = Path(root)
    rng = np.random.default_rng(seed)
    sizes = [items // tasks + (1 if t < items % tasks else 0) for t in range(tasks)]
    prefix = "leaderboard_" if layout == "openllm" else ""
    task_kinds = [kinds[t % len(kinds)] for t in range(tasks)]
    task_names = [f"{prefix}{kind}{t:02d}" for t, kind in enumerate(task_kinds)]
    gen_flts = ["strict", *(f"strict-{k}" for k in range(2, gen_filters))][:gen_filters - 1] + ["none"]
    theta = np.sort(rng.normal(size=models))
    b = rng.normal(size=items)
    correct = (rng.random((models, items)) < 1 / (1 + np.exp(-(theta[:, None] - b[None, :])))).astype(np.int8)
    pool = _resps_pool(rng)
    starts = np.cumsum([0, *sizes])
    mc_parts: dict[int, list[tuple[str, int]]] = {}
    gen_parts: dict[int, list[str]] = {}
    hashes: dict[int, list[str]] = {}
    item_ids: list[str] = []
    for t, (name, kind, n) in enumerate(zip(task_names, task_kinds, sizes)):
        if kind == "mc":
            mc_parts[t] = [_mc_doc_parts(name, d) for d in range(n)]
        else:
            gen_parts[t] = [_gen_doc_parts(name, d) for d in range(n)]
        hashes[t] = [f'"doc_hash": "{_hash(f"{name}{d}")}", "prompt_hash": "{_hash(f"p{name}{d}")}", '
                     f'"target_hash": "{_hash(f"t{name}{d}")}"' for d in range(n)]
        item_ids += [f"{name}/{d}" for d in range(n)]
    names = [f"org{j % 17}/model-{j:05d}" for j in range(models)]
    total, files = 0, 0
    for j in (only_models if only_models is not None else range(models)):
        folder = root / names[j].replace("/", "__")
        folder.mkdir(parents=True, exist_ok=True)
        date = f"2026-11-{1 + j % 28:02d}T{j % 24:02d}-18-10.{j:06d}"
        accs = []
        for t, (name, kind, n) in enumerate(zip(task_names, task_kinds, sizes)):
            y = correct[j, starts[t]:starts[t + 1]]
            accs.append(float(y.mean()) if n else 0.0)
            lines = []
            if kind == "mc":
                for d in range(n):
                    mid, label = mc_parts[t][d]
                    hit = int(y[d])
                    # acc is the argmax of the loglikelihoods, as lm-eval computes it
                    best = label if hit else (label + 1 + d % 3) % 4
                    frag = pool[best][d % len(pool[best])]
                    lines.append(f'{{"doc_id": {d}, {mid}, {frag}, "filter": "none", "metrics": ["acc", "acc_norm"],'
                                 f' {hashes[t][d]}, "acc": {float(hit)}, "acc_norm": {float(hit ^ (d % 2))}}}\n')
            else:
                for flt in gen_flts:
                    for d in range(n):
                        hit = int(y[d]) if flt == "none" or d % 3 else 1 - int(y[d])
                        said = json.dumps(_WORDS[d % len(_WORDS)] if hit else "lol")
                        lines.append(f'{{"doc_id": {d}, {gen_parts[t][d]}, "resps": [[{said}]], "filtered_resps": '
                                     f'[{said}], "filter": "{flt}", "metrics": ["exact_match"], {hashes[t][d]}, '
                                     f'"exact_match": {float(hit)}}}\n')
            text = "".join(lines).encode()
            (folder / f"samples_{name}_{date}.jsonl").write_bytes(text)
            total += len(text)
            files += 1
        if layout == "lm-eval":
            text = _results(names[j], task_names, task_kinds, accs, date, j).encode()
            (folder / f"results_{date}.json").write_bytes(text)
            total += len(text)
    return Written(root, names, item_ids, correct.astype(np.int64), files, total)
