"""``benchfill designers run``: the whole designer evaluation, stage by stage, resumable.

Stages and what each leaves in the out folder (every file written atomically):

1. ``plan``     -> ``plan.json``: the quota plan (target shares, largest-remainder counts, the slots).
2. ``generate`` -> ``suite.jsonl`` (one record per requested slot and round) and ``generation.json``.
3. ``seed``     -> ``seed.json``: answerers' accuracy on the seed benchmark (from ``--seed-responses``, or the
                   panel answers the seed items: ``seed_responses.csv``).
4. ``answer``   -> ``answers.jsonl``: every answerer's graded answers to every usable item.
5. ``judge``    -> ``verdicts.jsonl``: static / dynamic check results and judge verdicts; the core set.
6. ``report``   -> ``report.json``, ``matrix.csv``, ``heatmap.png``, ``core.jsonl``.

``state.json`` records a fingerprint of each finished stage's inputs; a rerun skips a stage whose fingerprint and
files are unchanged, and recomputes it otherwise. Every model call goes through the call cache
(``calls.sqlite``), so a recomputed stage, a rerun or a resumed run pays for no call twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from benchfill.aio import run_sync
from benchfill.data import ResponseMatrix, guessing_rate, load_items
from benchfill.designers import metrics as M
from benchfill.designers.card import DomainCard, load_card
from benchfill.designers.config import DesignersConfig, load_designers_config, validate_designers_config
from benchfill.designers.generate import DesignedItem, generate_suite
from benchfill.designers.quotas import AXES, Plan, QuotaSpec, axis_targets, load_quotas, make_plan
from benchfill.designers.results import SIM_NOTE, CallUsage, DesignersReport, DesignersRun
from benchfill.designers.validate import Answer, ItemVerdict, answer_items, choose_strong, count_matrix, judge_items
from benchfill.errors import InputError, require_extra, require_sampler
from benchfill.importers import load_responses
from benchfill.io import atomic_write_json, atomic_write_text

CALLS_DB = "calls.sqlite"
REPORT_VERSION = 5  # bump when build_report changes what it computes: a rerun then recomputes the report
GENERATE_VERSION = 2  # bump when a suite record gains a field the report needs (2: position in the reply)
Log = Callable[[str], None]


# ----------------------------------------------------------------------------------------------- stage store


def fingerprint(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


class StageStore:
    """Which stages are done, with which inputs (``state.json``)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = out / "state.json"
        self.state: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            try:
                self.state = json.loads(self.path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                self.state = {}

    def fresh(self, stage: str, fp: str) -> bool:
        entry = self.state.get(stage)
        return bool(entry and entry.get("fingerprint") == fp
                    and all((self.out / f).is_file() for f in entry.get("files", [])))

    def done(self, stage: str, fp: str, files: Sequence[str]) -> None:
        self.state[stage] = {"fingerprint": fp, "files": list(files)}
        atomic_write_json(self.path, self.state)


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _model_fp(cfg: Any) -> dict[str, Any]:
    """What about a model changes its answers (never the endpoint or key)."""
    return {"model": cfg.model, "label": cfg.label, "params": cfg.sampling_params(), "seed": cfg.seed,
            "rollouts": cfg.rollouts}


# ----------------------------------------------------------------------------------------------- the run


def run_designers(
    card_path: str | Path, quotas_path: str | Path, config_path: str | Path, out: str | Path, *,
    seed_responses: str | Path | None = None, seed_items: str | Path | None = None, seed_limit: int | None = None,
    irt: str | None = None, log: Log | None = None,
) -> DesignersRun:
    """Load and check every input (no call is made before the config, card and quotas check out), then run.
    Synchronous (:func:`benchfill.aio.run_sync`, also inside a running event loop)."""
    return run_sync(run_designers_async(card_path, quotas_path, config_path, out, seed_responses=seed_responses,
                                           seed_items=seed_items, seed_limit=seed_limit, irt=irt, log=log))


async def run_designers_async(
    card_path: str | Path, quotas_path: str | Path, config_path: str | Path, out: str | Path, *,
    seed_responses: str | Path | None = None, seed_items: str | Path | None = None, seed_limit: int | None = None,
    irt: str | None = None, log: Log | None = None,
) -> DesignersRun:
    """:func:`run_designers`, awaitable (on the caller's event loop)."""
    card = load_card(card_path)
    quotas = load_quotas(quotas_path)
    cfg = load_designers_config(config_path)
    validate_designers_config(cfg)
    require_extra("llm", "benchfill designers run")
    method = irt or cfg.run.irt
    # the report's joint IRT fit comes last: a missing extra is said before any call
    require_sampler(method, what=f"--irt {method}" if irt else f"{config_path}: run.irt = {method!r}")
    lib = cfg.prompt_library()
    if seed_responses is not None and not Path(seed_responses).is_file():
        raise InputError(str(seed_responses), "seed responses file not found")
    try:
        targets = axis_targets(quotas, card)
    except InputError as exc:
        raise InputError(str(quotas_path), exc.rule) from None
    return await _run(card, Path(card_path), quotas, targets, cfg, Path(out), lib, seed_responses=seed_responses,
                      seed_items=seed_items, seed_limit=seed_limit, irt=irt, log=log or (lambda _m: None))


async def _run(card: DomainCard, card_path: Path, quotas: QuotaSpec, targets: dict[str, dict[str, float]],
               cfg: DesignersConfig, out: Path, lib: Any, *,
               seed_responses: str | Path | None, seed_items: str | Path | None, seed_limit: int | None,
               irt: str | None, log: Log) -> DesignersRun:
    from benchfill.models.cache import CallCache
    from benchfill.models.client import ModelClient
    from benchfill.models.grading import Grader

    out.mkdir(parents=True, exist_ok=True)
    store = StageStore(out)
    sim = None
    if cfg.simulated:
        from benchfill.designers.sim import DesignerSimWorld

        sim = DesignerSimWorld.from_designers_config(cfg)
    client = ModelClient(CallCache(out / CALLS_DB), sim=sim)
    if cfg.simulated:
        client.cache.set_meta("simulated", True)
    grader = Grader(client, cfg.grader, lib)
    opts = cfg.run
    sim_fp = cfg.sim.model_dump(mode="json") if cfg.sim is not None else None
    from benchfill.models.prompts import ANSWER_TEMPLATE

    prompts_fp = {name: lib.text(name) for name in ("designer_generate", "designer_item_judge")}
    answer_fp = {name: lib.text(name) for name in sorted(set(ANSWER_TEMPLATE.values()) | {"grade_judge"})}
    skipped: list[str] = []
    result_report: DesignersReport
    try:
        # 1. plan
        fp_plan = fingerprint("plan", card.model_dump(mode="json"), quotas.model_dump(mode="json"), cfg.seed)
        if store.fresh("plan", fp_plan):
            plan = Plan.from_json(json.loads((out / "plan.json").read_text(encoding="utf-8")))
            skipped.append("plan")
        else:
            plan = make_plan(targets, quotas.total, seed=cfg.seed, card=card)
            atomic_write_json(out / "plan.json", plan.to_json())
            store.done("plan", fp_plan, ["plan.json"])
        log(f"plan: {plan.total} slots per designer, {len(cfg.designers)} designers")

        # 2. generate
        fp_gen = fingerprint("generate", GENERATE_VERSION, fp_plan, [_model_fp(d) for d in cfg.designers],
                             opts.model_dump(include={"batch_size", "max_topup_rounds", "n_options", "near_duplicate",
                                                      "max_reasks"}),
                             prompts_fp["designer_generate"], sim_fp)
        if store.fresh("generate", fp_gen):
            records = [DesignedItem.model_validate(r) for r in read_jsonl(out / "suite.jsonl")]
            gen_stats = json.loads((out / "generation.json").read_text(encoding="utf-8"))
            skipped.append("generate")
        else:
            refs = [(ex.id, ex.question) for ex in card.examples]
            suites = await asyncio.gather(*(
                generate_suite(d, plan, card, client, batch_size=opts.batch_size,
                               max_topup_rounds=opts.max_topup_rounds, n_options=opts.n_options,
                               near_duplicate=opts.near_duplicate, max_reasks=opts.max_reasks, library=lib,
                               references=refs)
                for d in cfg.designers))
            records = [r for recs, _ in suites for r in recs]
            gen_stats = {d.label: stats for d, (_, stats) in zip(cfg.designers, suites)}
            write_jsonl(out / "suite.jsonl", [r.model_dump(mode="json") for r in records])
            atomic_write_json(out / "generation.json", gen_stats)
            failed = sum(r.status == "failed" for r in records)
            if records and failed == len(records):
                first = client.stats.first_errors[0] if client.stats.first_errors else "unknown error"
                raise InputError(cfg.source, f"every designer call failed (first: {first}); nothing to evaluate")
            # a stage with failed calls is not done: the next run retries them (successes come from the cache)
            if not failed:
                store.done("generate", fp_gen, ["suite.jsonl", "generation.json"])
            else:
                log(f"generate: {failed} slots lost to failed calls; rerun to retry them")
        log(f"generate: {len(records)} records, {sum(r.status == 'ok' for r in records)} usable")

        # 3. seed accuracies
        seed = await _seed_stage(store, out, cfg, card, card_path, client, grader, lib, seed_responses, seed_items,
                                 seed_limit if seed_limit is not None else opts.seed_limit, (sim_fp, answer_fp),
                                 skipped, log)

        # 4. answer
        usable = [r for r in records if r.status == "ok"]
        fp_ans = fingerprint("answer", fp_gen, [_model_fp(a) for a in cfg.panel],
                             _model_fp(cfg.grader) if cfg.grader else None, answer_fp, sim_fp)
        if store.fresh("answer", fp_ans):
            answers = [Answer(**r) for r in read_jsonl(out / "answers.jsonl")]
            skipped.append("answer")
        else:
            log(f"answer: {len(usable)} items x {len(cfg.panel)} answerers")
            answers = await answer_items([r.to_item() for r in usable], cfg.panel, client, grader, lib)
            write_jsonl(out / "answers.jsonl", [a.as_dict() for a in answers])
            if not any(a.retryable for a in answers):
                store.done("answer", fp_ans, ["answers.jsonl"])

        # 5. judge
        labels = [a.label for a in cfg.panel]
        ids = [r.id for r in usable]
        c_all, t_all = count_matrix(answers, labels, ids)
        overall = {lab: (float(c_all[j].sum() / t_all[j].sum()) if t_all[j].sum() else 0.0)
                   for j, lab in enumerate(labels)}
        strong = choose_strong(overall, {a.label: a.strong for a in cfg.panel})
        fp_judge = fingerprint("judge", fp_ans, _model_fp(cfg.judge), strong,
                               opts.model_dump(include={"min_answers", "ceiling", "floor", "max_reasks"}),
                               prompts_fp["designer_item_judge"], sim_fp)
        if store.fresh("judge", fp_judge):
            verdicts = [ItemVerdict(**r) for r in read_jsonl(out / "verdicts.jsonl")]
            skipped.append("judge")
        else:
            verdicts = await judge_items(records, answers, strong, cfg.judge, client, min_answers=opts.min_answers,
                                         ceiling=opts.ceiling, floor=opts.floor, max_reasks=opts.max_reasks,
                                         library=lib)
            write_jsonl(out / "verdicts.jsonl", [v.as_dict() for v in verdicts])
            if not any(v.status == "unjudged" for v in verdicts):
                store.done("judge", fp_judge, ["verdicts.jsonl"])
        log(f"judge: {sum(v.core for v in verdicts)} core items")

        # 6. report
        method = irt or opts.irt
        fp_rep = fingerprint("report", fp_judge, seed, method, opts.bootstrap, opts.alpha, cfg.seed,
                             [(d.label, d.family, (own.label if (own := cfg.answerer_of(d)) else None))
                              for d in cfg.designers], [(a.label, a.family) for a in cfg.panel], REPORT_VERSION)
        if store.fresh("report", fp_rep):
            result_report = DesignersReport.from_json_file(out / "report.json")
            skipped.append("report")
        else:
            log(f"report: IRT ({method}) on the joint core set, metrics, heatmap")
            result_report = build_report(cfg, card, plan, records, answers, verdicts, strong, seed, method, out,
                                         gen_stats, card_path=card_path)
            store.done("report", fp_rep, ["report.json", "matrix.csv", "heatmap.png", "core.jsonl"])
    finally:
        stats = client.stats
        usage = CallUsage(calls_made=stats.calls, cached=stats.cached, errors=stats.errors, retries=stats.retries,
                          malformed_replies=stats.malformed, tokens_in=stats.tokens_in, tokens_out=stats.tokens_out,
                          cost=round(stats.cost, 6))
        await client.aclose()
    atomic_write_json(out / "last_run.json", {"skipped_stages": skipped, "usage": usage.model_dump(),
                                              **({"label": SIM_NOTE} if cfg.simulated else {})})
    return DesignersRun(out=str(out), report=result_report, skipped_stages=skipped, usage=usage)


async def _seed_stage(store: StageStore, out: Path, cfg: DesignersConfig, card: DomainCard, card_path: Path,
                      client: Any, grader: Any, lib: Any, seed_responses: str | Path | None,
                      seed_items: str | Path | None, limit: int | None, sim_fp: Any, skipped: list[str],
                      log: Log) -> dict[str, Any] | None:
    """Seed-benchmark accuracy per answerer: from a response file, else by answering the seed items."""
    labels = [a.label for a in cfg.panel]
    if seed_responses is not None:
        path = Path(seed_responses)
        fp = fingerprint("seed", "file", hashlib.sha256(path.read_bytes()).hexdigest(), labels)
        if store.fresh("seed", fp):
            skipped.append("seed")
            return json.loads((out / "seed.json").read_text(encoding="utf-8"))
        matrix = load_responses(path, min_models=1)
        missing = [lab for lab in labels if lab not in matrix.models]
        if missing:
            raise InputError(str(path), f"no responses for answerer(s) {', '.join(missing[:5])} (names must match "
                                        f"the panel's names)")
        acc = matrix.accuracy_by_model()
        seed = {"source": str(path), "kind": "responses file", "n_items": len(matrix.item_ids),
                "accuracy": {lab: float(acc[matrix.models.index(lab)]) for lab in labels}}
        atomic_write_json(out / "seed.json", seed)
        store.done("seed", fp, ["seed.json"])
        return seed
    found = _find_seed_items(seed_items, card, card_path)
    if found is None:
        log("seed: no seed items found (card source missing; pass --seed-items or --seed-responses): "
            "ranking preservation is skipped")
        return None
    path = found
    items = load_items(path)
    if limit is not None:
        items = items[:limit]
    fp = fingerprint("seed", "items", hashlib.sha256(path.read_bytes()).hexdigest(), len(items),
                     [_model_fp(a) for a in cfg.panel], _model_fp(cfg.grader) if cfg.grader else None, sim_fp)
    if store.fresh("seed", fp):
        skipped.append("seed")
        return json.loads((out / "seed.json").read_text(encoding="utf-8"))
    log(f"seed: {len(items)} seed items x {len(cfg.panel)} answerers")
    answers = await answer_items(items, cfg.panel, client, grader, lib)
    c, t = count_matrix(answers, labels, [it.id for it in items])
    rows = ["model,item_id,n_correct,n_trials"]
    for j, lab in enumerate(labels):
        for i, it in enumerate(items):
            if t[j, i]:
                rows.append(f"{_csv(lab)},{_csv(it.id)},{c[j, i]},{t[j, i]}")
    atomic_write_text(out / "seed_responses.csv", "\n".join(rows) + "\n")
    seed = {"source": str(path), "kind": "answered by the panel", "n_items": len(items),
            "accuracy": {lab: (float(c[j].sum() / t[j].sum()) if t[j].sum() else None) for j, lab in enumerate(labels)}}
    atomic_write_json(out / "seed.json", seed)
    if not any(a.retryable for a in answers):
        store.done("seed", fp, ["seed.json", "seed_responses.csv"])
    return seed




def _csv(text: str) -> str:
    return f'"{text}"' if ("," in text or '"' in text) else text


def _find_seed_items(seed_items: str | Path | None, card: DomainCard, card_path: Path) -> Path | None:
    if seed_items is not None:
        p = Path(seed_items)
        if not p.is_file():
            raise InputError(str(p), "seed items file not found")
        return p
    for cand in (Path(card.source), card_path.parent / card.source):
        if cand.is_file():
            return cand
    return None


# ----------------------------------------------------------------------------------------------- the report


def guessing(rec: DesignedItem) -> float:
    """The IRT lower asymptote c of a designed item (:func:`benchfill.data.guessing_rate` of its declared
    format: ``mcq`` or ``mcq_multi``; 0 otherwise)."""
    if rec.format not in ("mcq", "mcq_multi"):
        return 0.0
    return guessing_rate(len(rec.choices or []), multi=rec.format == "mcq_multi")


def _irt_difficulties(cfg: DesignersConfig, core: Sequence[DesignedItem], c: np.ndarray, t: np.ndarray,
                      method: str) -> tuple[np.ndarray, dict[str, Any]]:
    """b (I,) of every core item on one joint scale (1PL, c = 1/k for multiple choice)."""
    from benchfill.irt.fit import fit_irt
    from benchfill.irt.model import IRTSpec, SamplerSettings

    if method == "fast":
        try:
            import benchfill.irt.fast  # noqa: F401  (registers the "fast" sampler)
        except ImportError:
            raise InputError("--irt", "the 'fast' sampler is not available in this installation") from None
    keep = t.sum(0) > 0
    b = np.full(len(core), np.nan)
    info: dict[str, Any] = {"method": method, "n_items": int(keep.sum()), "n_answerers": int(t.shape[0])}
    if keep.sum() < 2 or t.shape[0] < 2:
        info["note"] = "too few core items or answerers for an IRT fit"
        return b, info
    guess = np.array([guessing(r) for r in core])[keep]
    rm = ResponseMatrix([a.label for a in cfg.panel], [r.id for r, k in zip(core, keep) if k], c[:, keep], t[:, keep])
    settings = SamplerSettings(method=method, seed=cfg.seed)
    try:
        fit = fit_irt(rm, IRTSpec(guessing=guess if guess.any() else None), settings)
    except ValueError as exc:
        raise InputError("--irt", str(exc)) from None
    b[keep] = fit.b_mean
    info.update({"is_map": fit.is_map, "wall_time_s": round(fit.wall_time_s, 3),
                 "theta": {m: float(v) for m, v in zip(fit.models, fit.theta_mean)}})
    return b, info


def _seed_matrix(out: Path, seed: Mapping[str, Any] | None, card: DomainCard, card_path: Path,
                 answerers: Sequence[str], limit: int = 3000
                 ) -> tuple[tuple[np.ndarray, np.ndarray], list[float | None], np.ndarray] | None:
    """The seed benchmark's (J, I) counts for the panel, the items' levels (1-5 or None) and guessing c, to put the
    seed items on the joint scale (the per-level reference of calibration). None when unavailable."""
    from benchfill.designers.card import _level_of

    if seed is None:
        return None
    path = out / "seed_responses.csv" if (out / "seed_responses.csv").is_file() else (
        Path(seed["source"]) if seed.get("kind") == "responses file" else None)
    if path is None or not path.is_file():
        return None
    try:
        matrix = load_responses(path, min_models=1)
    except InputError:
        return None
    if any(a not in matrix.models for a in answerers):
        return None
    rows = [matrix.models.index(a) for a in answerers]
    c, t = matrix.n_correct[rows], matrix.n_trials[rows]
    keep = np.flatnonzero(t.sum(0) > 0)[:limit]
    ids = [matrix.item_ids[i] for i in keep]
    items: dict[str, Any] = {}
    for cand in ([Path(seed["source"])] if seed.get("kind") != "responses file" else []) + \
            [Path(card.source), card_path.parent / card.source]:
        if cand.is_file():
            try:
                items = {it.id: it for it in load_items(cand)}
            except InputError:
                items = {}
            if items:
                break
    levels: list[float | None] = []
    guess = []
    for i in ids:
        it = items.get(i)
        lv = _level_of(it) if it is not None else None
        levels.append(float(lv[1]) if lv else None)
        guess.append(it.guessing_rate if it is not None else 0.0)
    return (c[:, keep], t[:, keep]), levels, np.array(guess)


def _designer_intervals(recs: Sequence[DesignedItem], d_core: Sequence[DesignedItem], status: Mapping[str, str],
                        c: np.ndarray, t: np.ndarray, targets: Mapping[str, Mapping[str, float]],
                        answerers: Sequence[str], seed_acc: Mapping[str, Any] | None, b: np.ndarray | None,
                        B: int, seed: int) -> dict[str, list[float | None]]:
    """Seeded bootstrap-over-items 95 % intervals of one designer's metrics: broken rate (suite records resampled);
    error rate, mean item discrimination, Kendall tau, mean TVD and the level Spearman (core items resampled)."""
    out: dict[str, list[float | None]] = {}
    suite = [status.get(r.id, r.status) for r in recs if status.get(r.id, r.status) not in M.OUTSIDE_SUITE]
    clean = np.array([s == "clean" for s in suite], float)
    out["broken_rate"] = list(M.bootstrap_interval(len(clean), lambda i: 1 - clean[i].mean(), B=B, seed=seed))
    n = c.shape[1]
    tot_t = t.sum(0)
    tot_c = c.sum(0)
    out["error_rate"] = list(M.bootstrap_interval(n, lambda i: 1 - tot_c[i].sum() / max(tot_t[i].sum(), 1),
                                                  B=B, seed=seed + 1))
    r = M.item_discrimination(c, t)
    out["discrimination"] = list(M.bootstrap_interval(
        n, lambda i: np.nanmean(r[i]) if np.isfinite(r[i]).any() else np.nan, B=B, seed=seed + 2))
    if seed_acc:
        sa = np.array([_num(seed_acc.get(a)) for a in answerers])

        def tau(i: np.ndarray) -> float:
            ts = t[:, i].sum(1)
            acc = np.where(ts > 0, c[:, i].sum(1) / np.maximum(ts, 1), np.nan)
            return M.kendall_tau(acc, sa).r

        out["kendall_tau"] = list(M.bootstrap_interval(n, tau, B=min(B, 500), seed=seed + 3))
    codes = {}
    for axis, target in targets.items():
        labels = [r.declared.get(axis, "unknown") for r in d_core]
        names = sorted(set(labels) | set(target))
        code = np.array([names.index(x) for x in labels], int)
        tv = np.array([target.get(x, 0.0) for x in names]) / max(sum(target.values()), 1e-12)
        codes[axis] = (code, tv, len(names))

    def tvd(i: np.ndarray) -> float:
        vals = [0.5 * np.abs(np.bincount(code[i], minlength=k) / len(i) - tv).sum() for code, tv, k in codes.values()]
        return float(np.mean(vals))

    # the TVD of a resample sits above the TVD of the sample (sampling noise only adds distance): the percentile
    # interval is shifted by that bias (replicate mean - estimate) and clipped to [0, 1]
    reps = M.bootstrap_replicates(n, tvd, B=B, seed=seed + 4)
    if len(reps) >= max(10, B // 10):
        bias = float(reps.mean()) - tvd(np.arange(n))
        out["mean_tvd"] = [max(0.0, float(np.quantile(reps, 0.025)) - bias),
                           min(1.0, float(np.quantile(reps, 0.975)) - bias)]
    else:
        out["mean_tvd"] = [None, None]
    if b is not None:
        lv = np.array([_num(M._level_num(r.declared.get("difficulty"))) for r in d_core])
        out["level_spearman"] = list(M.bootstrap_interval(
            n, lambda i: M.correlation(lv[i], b[i], "spearman").r, B=min(B, 500), seed=seed + 5))
    return out


def _breakdown(recs: Sequence[DesignedItem], status: Mapping[str, str], core_pos: Mapping[str, int], c: np.ndarray,
               t: np.ndarray, b: np.ndarray | None) -> dict[str, dict[str, dict[str, Any]]]:
    """Per requested level, intent and format (the slot's, i.e. what was asked), and per third of the designer's
    replies the item was written in (``position``: first / middle / last; "unknown" for one-item replies): suite
    items, broken rate, core items, error rate (1 - mean correct) and mean b of the core items on the joint scale."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    suite = [r for r in recs if status.get(r.id, r.status) not in M.OUTSIDE_SUITE]

    def third(r: DesignedItem) -> str:
        x = r.relative_position
        return "unknown" if x is None else "first" if x < 1 / 3 else "middle" if x <= 2 / 3 else "last"

    rank = {"first": 0, "middle": 1, "last": 2, "unknown": 3}

    for axis in ("difficulty", "intent", "format", "position"):
        groups: dict[str, list[DesignedItem]] = {}
        for r in suite:
            key = third(r) if axis == "position" else str((r.spec or {}).get(axis) or r.declared.get(axis, "unknown"))
            groups.setdefault(key, []).append(r)
        rows = {}
        for value, members in sorted(groups.items(), key=lambda kv: (rank.get(kv[0], 0) if axis == "position" else 0,
                                                                     kv[0])):
            idx = [core_pos[r.id] for r in members if r.id in core_pos]
            tt = t[:, idx].sum() if idx else 0
            rows[value] = {"n_suite": len(members), "n_core": len(idx),
                           "broken_rate": M._f(1 - len(idx) / len(members)),
                           "error_rate": M._f(1 - c[:, idx].sum() / tt) if tt else None,
                           "mean_b": M._f(float(np.mean(b[idx]))) if b is not None and idx else None}
        out[axis] = rows
    return out


def build_report(cfg: DesignersConfig, card: DomainCard, plan: Plan, records: Sequence[DesignedItem],
                 answers: Sequence[Answer], verdicts: Sequence[ItemVerdict], strong: Sequence[str],
                 seed: dict[str, Any] | None, irt_method: str, out: Path,
                 generation: Mapping[str, Any] | None = None, card_path: Path | None = None) -> DesignersReport:
    """Every metric of benchfill/designers/README.md from the stage outputs; writes report.json, matrix.csv, heatmap.png and
    core.jsonl and returns the report."""
    from benchfill.designers.report import plot_heatmap

    answerers = [a.label for a in cfg.panel]
    own_answerer = {d.label: cfg.answerer_of(d) for d in cfg.designers}  # None: the designer is not on the panel
    by_id = {r.id: r for r in records}
    status = {v.id: v.status for v in verdicts}
    core = [by_id[v.id] for v in verdicts if v.core]
    c_core, t_core = count_matrix(answers, answerers, [r.id for r in core])
    b_core, irt_info = _irt_difficulties(cfg, core, c_core, t_core, irt_method)
    pos = {r.id: i for i, r in enumerate(core)}
    seed_acc = seed["accuracy"] if seed else None
    B, rseed = cfg.run.bootstrap, cfg.seed

    # the joint item-level fit: designer-level difficulty and calibration slope, self / family interactions
    cores = {d.label: [r for r in records if r.designer == d.label and status.get(r.id) == "clean"]
             for d in cfg.designers}
    counts_by_designer = []
    for d in cfg.designers:
        idx = [pos[r.id] for r in cores[d.label]]
        counts_by_designer.append((c_core[:, idx], t_core[:, idx]))
    seed_m = _seed_matrix(out, seed, card, card_path or Path("."), answerers)
    jinp = M.JointInputs(
        designers=[d.label for d in cfg.designers], answerers=answerers, counts=counts_by_designer,
        levels=[[M._level_num(r.declared.get("difficulty")) for r in cores[d.label]] for d in cfg.designers],
        guessing=[np.array([guessing(r) for r in cores[d.label]]) for d in cfg.designers],
        designer_family={d.label: d.family for d in cfg.designers},
        answerer_family={a.label: a.family for a in cfg.panel},
        self_answerer={d.label: (a.label if (a := own_answerer[d.label]) else None) for d in cfg.designers},
        seed_counts=seed_m[0] if seed_m else None, seed_levels=seed_m[1] if seed_m else None,
        seed_guessing=seed_m[2] if seed_m else None)
    joint = M.joint_fit(jinp) if c_core.shape[1] >= 2 and len(answerers) >= 2 else None
    offsets = np.r_[0, np.cumsum([c.shape[1] for c, _ in counts_by_designer])]
    seed_by_level: dict[str, float] = {}
    if joint is not None and seed_m is not None:
        sb = joint.b[offsets[-1]:]
        for L in range(1, 6):
            sel = np.array([lv == L for lv in seed_m[1]], bool)
            if sel.sum() >= 3:
                seed_by_level[f"L{L}"] = float(sb[sel].mean())

    designers_out: list[dict[str, Any]] = []
    for k_d, d in enumerate(cfg.designers):
        recs = [r for r in records if r.designer == d.label]
        d_core = cores[d.label]
        idx = [pos[r.id] for r in d_core]
        c, t = counts_by_designer[k_d]
        br = M.broken_rate(status.get(r.id, r.status) for r in recs)
        reasons: Counter[str] = Counter()
        for r in recs:
            s = status.get(r.id, r.status)
            if s == "broken":
                for p in r.problems or ["broken"]:
                    reasons[p.split(" (")[0].split(":")[0]] += 1
            elif s not in ("clean", "duplicate", "failed"):
                reasons[s] += 1
        labels = {axis: [r.declared.get(axis, "unknown") for r in d_core] for axis in AXES}
        align = M.spec_alignment(plan.targets, labels)
        tvds = [a.tvd for a in align.values() if math.isfinite(a.tvd)]
        diff = M.difficulty_summary(b_core[idx] if idx else np.array([]), c, t,
                                    [r.declared.get("difficulty", "unknown") for r in d_core])
        disc = M.discrimination(c, t)
        acc = {lab: (float(c[j].sum() / t[j].sum()) if t[j].sum() else None) for j, lab in enumerate(answerers)}
        tau = M.kendall_tau([v if (v := acc[a]) is not None else np.nan for a in answerers],
                            [seed_acc.get(a) if seed_acc and seed_acc.get(a) is not None else np.nan
                             for a in answerers]) if seed_acc else M.Correlation("kendall", float("nan"),
                                                                                 float("nan"), 0)
        # the designer-level effect and calibration from the joint fit
        effect = calib = None
        if joint is not None:
            g = joint.groups.get(d.label)
            effect = g.as_dict() if g is not None else None
            jb = joint.b[offsets[k_d]:offsets[k_d + 1]]
            calib = M.calibration(jb, [r.declared.get("difficulty") for r in d_core], seed_by_level or None,
                                  slope=g.beta if g is not None else None,
                                  slope_se=g.beta_se if g is not None else None).as_dict()
        intervals = _designer_intervals(recs, d_core, status, c, t, plan.targets, answerers, seed_acc,
                                        joint.b[offsets[k_d]:offsets[k_d + 1]] if joint is not None else None,
                                        B, rseed + k_d)
        breakdown = _breakdown(recs, status, {r.id: k for k, r in enumerate(d_core)}, c, t,
                               joint.b[offsets[k_d]:offsets[k_d + 1]] if joint is not None else None)
        in_suite = [r for r in recs if status.get(r.id, r.status) not in M.OUTSIDE_SUITE]
        order = M.order_effect([_num(r.relative_position) for r in in_suite],
                               [status.get(r.id, r.status) != "clean" for r in in_suite],
                               B=B, seed=rseed + 7919 + k_d, alpha=cfg.run.alpha)
        own = own_answerer[d.label]
        n_dup = sum(status.get(r.id, r.status) == "duplicate" for r in recs)
        filled = {r.slot for r in recs if r.status == "ok"}
        designers_out.append({
            "designer": d.label, "model": d.model, "family": d.family, "answerer": own.label if own else None,
            "n_records": len(recs), "n_suite": br.n_suite, "n_core": br.n_core, "broken_rate": M._f(br.rate),
            "by_status": br.by_status, "broken_reasons": dict(reasons.most_common()),
            "duplicate_rate": M._f(n_dup / len(recs)) if recs else None,
            "slot_coverage": len(filled) / plan.total if plan.total else None,
            "core_coverage": len(d_core) / plan.total if plan.total else None,
            "spec_alignment": {a: v.as_dict() for a, v in align.items()},
            "mean_tvd": M._f(float(np.mean(tvds))) if tvds else None,
            "difficulty": {**diff.as_dict(), "designer_effect": effect},
            "calibration": calib, "intervals": intervals, "breakdown": breakdown,
            "generation_order": order.as_dict(),
            "discrimination": disc.as_dict(), "ranking": tau.as_dict(),
            "accuracy_by_answerer": acc,
            "generation": dict((generation or {}).get(d.label, {})),
        })

    # generation order: one test per designer, Bonferroni over the run's designers (as the preference tests)
    n_order = sum(r["generation_order"]["p_value"] is not None for r in designers_out)
    for row in designers_out:
        go = row["generation_order"]
        go["n_tests"] = max(n_order, 1)
        go["detected"] = bool(go["p_value"] is not None and go["p_value"] < cfg.run.alpha / max(n_order, 1))

    A = M.accuracy_matrix(counts_by_designer)
    # answering ability of each designer's own model: seed accuracy, else accuracy on the OTHER designers' items
    for k, row in enumerate(designers_out):
        own = row["answerer"]
        ability = None
        if own is not None:
            if seed_acc and seed_acc.get(own) is not None:
                ability, basis = float(seed_acc[own]), "seed benchmark accuracy"
            else:
                j = answerers.index(own)
                cs = sum(counts_by_designer[o][0][j].sum() for o in range(len(designers_out)) if o != k)
                ts = sum(counts_by_designer[o][1][j].sum() for o in range(len(designers_out)) if o != k)
                ability, basis = (float(cs / ts) if ts else None), "accuracy on other designers' core items"
            row["answering_ability"] = {"value": ability, "basis": basis}
        else:
            row["answering_ability"] = {"value": None, "basis": "designer is not on the panel"}
    comp = {
        "1 - broken_rate": M.percentile_ranks([1 - r["broken_rate"] if r["broken_rate"] is not None else np.nan
                                               for r in designers_out]),
        "discrimination": M.percentile_ranks([_num(r["discrimination"]["mean"]) for r in designers_out]),
        "kendall_tau": M.percentile_ranks([_num(r["ranking"]["r"]) for r in designers_out]),
        "1 - mean_tvd": M.percentile_ranks([1 - r["mean_tvd"] if r["mean_tvd"] is not None else np.nan
                                            for r in designers_out]),
    }
    # calibration: the mean absolute per-level shift against the seed benchmark where every designer has one,
    # else the Spearman of requested level vs difficulty
    cal_err = [_num((r["calibration"] or {}).get("error")) for r in designers_out]
    if designers_out and all(np.isfinite(cal_err)):
        comp["calibration"] = M.percentile_ranks(cal_err, higher_is_better=False)
        cal_basis = "calibration error (mean |shift| per level vs the seed benchmark, lower is better)"
    else:
        comp["calibration"] = M.percentile_ranks([_num((r["calibration"] or {}).get("spearman"))
                                                  for r in designers_out])
        cal_basis = "calibration Spearman (requested level vs difficulty)"
    stacked = np.vstack(list(comp.values()))  # (components, D)
    score = np.array([float(np.nanmean(col)) if np.isfinite(col).any() else np.nan for col in stacked.T])
    for k, row in enumerate(designers_out):
        row["design_score"] = M._f(float(score[k]))
    abilities = [_num(r["answering_ability"]["value"]) for r in designers_out]
    across = {
        "design_vs_answering": M.correlation(score, abilities, "spearman").as_dict(),
        "components_vs_answering": {
            "1 - broken_rate": M.correlation([1 - _num(r["broken_rate"]) for r in designers_out], abilities).as_dict(),
            "discrimination": M.correlation([_num(r["discrimination"]["mean"]) for r in designers_out],
                                            abilities).as_dict(),
            "kendall_tau": M.correlation([_num(r["ranking"]["r"]) for r in designers_out], abilities).as_dict(),
        },
        "broken_vs_discrimination": M.correlation([_num(r["broken_rate"]) for r in designers_out],
                                                  [_num(r["discrimination"]["mean"]) for r in designers_out],
                                                  "pearson").as_dict(),
        "design_score": "mean percentile rank across designers of 1 - broken rate, discrimination, Kendall tau, "
                        f"1 - mean TVD and {cal_basis} (components that are undefined are skipped)",
    }
    prefs = M.preference_tests_logit(jinp, joint, alpha=cfg.run.alpha) if joint is not None else []
    pinp = M.PreferenceInputs(designers=jinp.designers, answerers=answerers, counts=counts_by_designer,
                              designer_family=jinp.designer_family, answerer_family=jinp.answerer_family,
                              self_answerer=jinp.self_answerer)
    # the accuracy-scale difference in differences, for reference (biased by designer difficulty and answerer
    # ability: not the test)
    did = {(p.kind, p.designer): p for p in M.preference_tests(pinp, B=cfg.run.bootstrap, alpha=cfg.run.alpha,
                                                                seed=cfg.seed)}
    ranking = {r.designer: r.as_dict() for r in M.self_ranking(
        pinp, seed_acc, dict(zip(joint.answerers, joint.theta.tolist())) if joint is not None else None,
        B=cfg.run.bootstrap, seed=cfg.seed + 104729, alpha=cfg.run.alpha)}
    pref_dicts = []
    for pref in prefs:
        ref = did.get((pref.kind, pref.designer))
        pref_dicts.append({**pref.as_dict(), "scale": "logit",
                           "accuracy_did": ({"estimate": M._f(ref.estimate), "ci_low": M._f(ref.ci_low),
                                             "ci_high": M._f(ref.ci_high)} if ref is not None else None)})
    for row in designers_out:
        for kind in ("self", "family", "family_incl_self"):
            row[f"{kind}_preference"] = next((p for p in pref_dicts if p["kind"] == kind
                                              and p["designer"] == row["designer"]), None)
        row["self_ranking"] = ranking.get(row["designer"])

    files = {"report": "report.json", "matrix": "matrix.csv", "heatmap": "heatmap.png", "core": "core.jsonl",
             "suite": "suite.jsonl", "answers": "answers.jsonl", "verdicts": "verdicts.jsonl"}
    report: dict[str, Any] = {
        "simulated": cfg.simulated,
        "card": {"name": card.name, "source": card.source, "n_items": card.n_items, "language": card.language,
                 "modality": card.modality},
        "plan": {"total": plan.total, "targets": plan.targets, "counts": plan.counts},
        "config": {
            "source": cfg.source,
            "designers": [{"name": d.label, "model": d.model, "family": d.family} for d in cfg.designers],
            "panel": [{"name": a.label, "model": a.model, "family": a.family, "strong": a.label in strong}
                      for a in cfg.panel],
            "judge": cfg.judge.label,
        },
        "strong_answerers": list(strong),
        "seed": seed,
        "irt": irt_info,
        "designers": designers_out,
        "matrix": {"designers": [d.label for d in cfg.designers], "answerers": answerers,
                   "accuracy": [[M._f(v) for v in row] for row in A],
                   "n_items": [int(c.shape[1]) for c, _ in counts_by_designer]},
        "preferences": pref_dicts,
        "joint_fit": ({**joint.info(), "seed_items": int(seed_m[0][0].shape[1]) if seed_m else 0,
                       "seed_by_level": seed_by_level} if joint is not None else None),
        "across_designers": across,
        "files": files,
    }
    lines = ["designer," + ",".join(_csv(a) for a in answerers)]
    for d, row in zip(cfg.designers, A):
        lines.append(_csv(d.label) + "," + ",".join("" if not np.isfinite(v) else f"{v:.6f}" for v in row))
    atomic_write_text(out / "matrix.csv", "\n".join(lines) + "\n")
    write_jsonl(out / "core.jsonl", [r.to_item().model_dump(mode="json", exclude_none=True) for r in core])
    resid = None
    if joint is not None:
        resid = np.full(A.shape, np.nan)
        for k_d, (c, t) in enumerate(counts_by_designer):
            pm = joint.p_main[:, offsets[k_d]:offsets[k_d + 1]]
            tot = t.sum(1)
            with np.errstate(invalid="ignore", divide="ignore"):
                resid[k_d] = np.where(tot > 0, (c.sum(1) - (pm * t).sum(1)) / np.maximum(tot, 1), np.nan)
        report["matrix"]["residual"] = [[M._f(v) for v in row] for row in resid]
    marks = [[("self" if (o := own_answerer[d.label]) is not None and o.label == a.label
               else "family" if a.family == d.family else "") for a in cfg.panel] for d in cfg.designers]
    report["matrix"]["cells"] = marks
    plot_heatmap(A, [d.label for d in cfg.designers], answerers, out / "heatmap.png",
                 designer_family=[d.family for d in cfg.designers], answerer_family=[a.family for a in cfg.panel],
                 n_items=[int(c.shape[1]) for c, _ in counts_by_designer], simulated=cfg.simulated,
                 title=f"{card.name}: designer x answerer accuracy on core items", residual=resid, marks=marks)
    result = DesignersReport.model_validate(report)
    atomic_write_text(out / "report.json", result.model_dump_json(indent=2) + "\n")
    return result


def _num(x: Any) -> float:
    return float(x) if x is not None else float("nan")


__all__ = ["DesignersRun", "StageStore", "build_report", "fingerprint", "run_designers", "run_designers_async",
           "read_jsonl", "write_jsonl"]
