"""``benchfill designers run``: the whole designer evaluation, stage by stage, resumable.

The stages are the nodes of a LangGraph graph (the fill's engine), run in order; what each leaves in the out folder
(every file written atomically):

1. ``plan``     -> ``plan.json``: the quota plan (target shares, largest-remainder counts, the slots).
2. ``generate`` -> ``suite.jsonl`` (one record per requested slot and round) and ``generation.json``.
3. ``seed``     -> ``seed.json``: answerers' accuracy on the seed benchmark (from ``--seed-responses``, or the
                   panel answers the seed items: ``seed_responses.csv``).
4. ``answer``   -> ``answers.jsonl``: every answerer's graded answers to every usable item.
5. ``judge``    -> ``verdicts.jsonl``: static / dynamic check results and judge verdicts; the core set.
6. ``report``   -> ``report.json``, ``matrix.csv``, ``heatmap.png``, ``core.jsonl``.

The graph's state (:class:`DesignersState`) holds each finished stage's record: a fingerprint of its inputs (the
config's relevant part, the prompts' texts, and the digests of the earlier stages' files it reads) and the files it
wrote. LangGraph's SQLite checkpointer (``checkpoints.sqlite``) saves it after every node; a rerun starts at the
first stage with the last checkpoint's records, reuses a stage whose fingerprint and files are unchanged, and
recomputes it otherwise (and with it every stage that reads what it wrote). Every model call goes through the call
cache (``calls.sqlite``), so a recomputed stage, a rerun or a resumed run pays for no call twice.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

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
from benchfill.io import atomic_write_json, atomic_write_text, file_digest, fingerprint

CALLS_DB = "calls.sqlite"
CHECKPOINTS_DB = "checkpoints.sqlite"
REPORT_VERSION = 5  # bump when build_report changes what it computes: a rerun then recomputes the report
GENERATE_VERSION = 2  # bump when a suite record gains a field the report needs (2: position in the reply)
Log = Callable[[str], None]


# ----------------------------------------------------------------------------------------------- files


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _model_fp(cfg: Any) -> dict[str, Any]:
    """What about a model changes its answers (never the endpoint or key)."""
    return {"model": cfg.model, "label": cfg.label, "params": cfg.sampling_params(), "seed": cfg.seed,
            "rollouts": cfg.rollouts}


# ----------------------------------------------------------------------------------------------- state, context


class StageRecord(BaseModel):
    """A finished stage: the fingerprint of its inputs and the files it wrote. A rerun reuses the stage only when
    both are as recorded (the fingerprint equal, every file present)."""

    fingerprint: str
    files: list[str]


class DesignersState(BaseModel):
    """What the graph checkpoints after each node: small and serialisable; the stages' outputs are the files in the
    run folder (the next stage reads them), and every model call is in the call cache."""

    stages: dict[str, StageRecord] = Field(default_factory=dict, description="every finished stage, this run's and "
                                           "earlier runs' (a stage recomputed this run replaces its record)")
    skipped: list[str] = Field(default_factory=list, description="the stages this run reused, in order")
    strong: list[str] = Field(default_factory=list, description="the strong answerers (the judge stage's input)")
    seed: dict[str, Any] | None = Field(default=None, description="seed.json's content (None: no seed benchmark)")


@dataclass(frozen=True)
class DesignersContext:
    """What a run's nodes share and never change: the checked inputs, the client stack and the log."""

    card: DomainCard
    card_path: Path
    quotas: QuotaSpec
    targets: dict[str, dict[str, float]]
    cfg: DesignersConfig
    out: Path
    lib: Any
    client: Any
    grader: Any
    seed_responses: Path | None
    seed_items: Path | None
    seed_limit: int | None
    irt_method: str
    log: Log

    @property
    def sim_fp(self) -> Any:
        return self.cfg.sim.model_dump(mode="json") if self.cfg.sim is not None else None

    def prompts_fp(self, *names: str) -> dict[str, str]:
        """The templates' texts (built-in or overridden): editing one is a different stage."""
        return {name: self.lib.text(name) for name in names}

    def answer_prompts_fp(self) -> dict[str, str]:
        from benchfill.models.prompts import ANSWER_TEMPLATE

        return self.prompts_fp(*sorted(set(ANSWER_TEMPLATE.values()) | {"grade_judge"}))

    def files_fp(self, *names: str) -> dict[str, str | None]:
        """The digests of earlier stages' files this stage reads: a stage recomputed with a different result makes
        every stage after it stale."""
        return {name: file_digest(self.out / name) for name in names}


def _reuse(state: DesignersState, ctx: DesignersContext, stage: str, fp: str) -> bool:
    rec = state.stages.get(stage)
    return bool(rec and rec.fingerprint == fp and all((ctx.out / f).is_file() for f in rec.files))


def _finished(state: DesignersState, stage: str, fp: str, files: Sequence[str], complete: bool = True
              ) -> dict[str, Any]:
    """The state update of a computed stage: recorded as finished only when ``complete`` (a stage with failed calls
    or unjudged items stays open, so the next run retries exactly those calls)."""
    stages = {k: v.model_dump() for k, v in state.stages.items() if k != stage}
    if complete:  # checkpointed as plain values (the checkpointer's serialiser needs no registered type)
        stages[stage] = StageRecord(fingerprint=fp, files=list(files)).model_dump()
    return {"stages": stages}


def _skipped(state: DesignersState, stage: str, **update: Any) -> dict[str, Any]:
    return {"skipped": [*state.skipped, stage], **update}


# ----------------------------------------------------------------------------------------------- the nodes


def _plan_fp(ctx: DesignersContext) -> str:
    return fingerprint("plan", ctx.card.model_dump(mode="json"), ctx.quotas.model_dump(mode="json"), ctx.cfg.seed)


async def plan_node(state: DesignersState, runtime: Runtime[DesignersContext]) -> dict[str, Any]:
    """The quota plan -> plan.json."""
    ctx = runtime.context
    fp = _plan_fp(ctx)
    if _reuse(state, ctx, "plan", fp):
        plan = _read_plan(ctx.out)
        update = _skipped(state, "plan")
    else:
        plan = make_plan(ctx.targets, ctx.quotas.total, seed=ctx.cfg.seed, card=ctx.card)
        atomic_write_json(ctx.out / "plan.json", plan.to_json())
        update = _finished(state, "plan", fp, ["plan.json"])
    ctx.log(f"plan: {plan.total} slots per designer, {len(ctx.cfg.designers)} designers")
    return update


def _read_plan(out: Path) -> Plan:
    return Plan.from_json(json.loads((out / "plan.json").read_text(encoding="utf-8")))


def _read_suite(out: Path) -> list[DesignedItem]:
    return [DesignedItem.model_validate(r) for r in read_jsonl(out / "suite.jsonl")]


async def generate_node(state: DesignersState, runtime: Runtime[DesignersContext]) -> dict[str, Any]:
    """Every designer's suite -> suite.jsonl (one record per slot and round) and generation.json."""
    ctx = runtime.context
    cfg, opts = ctx.cfg, ctx.cfg.run
    fp = fingerprint("generate", GENERATE_VERSION, ctx.files_fp("plan.json"), [_model_fp(d) for d in cfg.designers],
                     opts.model_dump(include={"batch_size", "max_topup_rounds", "n_options", "near_duplicate",
                                              "max_reasks"}),
                     ctx.prompts_fp("designer_generate"), ctx.sim_fp)
    if _reuse(state, ctx, "generate", fp):
        records = _read_suite(ctx.out)
        update = _skipped(state, "generate")
    else:
        plan = _read_plan(ctx.out)
        refs = [(ex.id, ex.question) for ex in ctx.card.examples]
        suites = await asyncio.gather(*(
            generate_suite(d, plan, ctx.card, ctx.client, batch_size=opts.batch_size,
                           max_topup_rounds=opts.max_topup_rounds, n_options=opts.n_options,
                           near_duplicate=opts.near_duplicate, max_reasks=opts.max_reasks, library=ctx.lib,
                           references=refs)
            for d in cfg.designers))
        records = [r for recs, _ in suites for r in recs]
        write_jsonl(ctx.out / "suite.jsonl", [r.model_dump(mode="json") for r in records])
        atomic_write_json(ctx.out / "generation.json",
                          {d.label: stats for d, (_, stats) in zip(cfg.designers, suites)})
        failed = sum(r.status == "failed" for r in records)
        if records and failed == len(records):
            stats = ctx.client.stats
            first = stats.first_errors[0] if stats.first_errors else "unknown error"
            raise InputError(cfg.source, f"every designer call failed (first: {first}); nothing to evaluate")
        if failed:
            ctx.log(f"generate: {failed} slots lost to failed calls; rerun to retry them")
        update = _finished(state, "generate", fp, ["suite.jsonl", "generation.json"], complete=not failed)
    ctx.log(f"generate: {len(records)} records, {sum(r.status == 'ok' for r in records)} usable")
    return update


async def seed_node(state: DesignersState, runtime: Runtime[DesignersContext]) -> dict[str, Any]:
    """Seed-benchmark accuracy per answerer -> seed.json: from a response file, else by the panel answering the
    seed items (+ seed_responses.csv); none when no seed items are found."""
    ctx = runtime.context
    cfg = ctx.cfg
    labels = [a.label for a in cfg.panel]
    if ctx.seed_responses is not None:
        path = ctx.seed_responses
        fp = fingerprint("seed", "file", file_digest(path), labels)
        if _reuse(state, ctx, "seed", fp):
            return _skipped(state, "seed", seed=_read_seed(ctx.out))
        matrix = load_responses(path, min_models=1)
        missing = [lab for lab in labels if lab not in matrix.models]
        if missing:
            raise InputError(str(path), f"no responses for answerer(s) {', '.join(missing[:5])} (names must match "
                                        f"the panel's names)")
        acc = matrix.accuracy_by_model()
        seed = {"source": str(path), "kind": "responses file", "n_items": len(matrix.item_ids),
                "accuracy": {lab: float(acc[matrix.models.index(lab)]) for lab in labels}}
        atomic_write_json(ctx.out / "seed.json", seed)
        return {**_finished(state, "seed", fp, ["seed.json"]), "seed": seed}
    found = _find_seed_items(ctx.seed_items, ctx.card, ctx.card_path)
    if found is None:
        ctx.log("seed: no seed items found (card source missing; pass --seed-items or --seed-responses): "
                "ranking preservation is skipped")
        return {"seed": None}
    items = load_items(found)
    limit = ctx.seed_limit if ctx.seed_limit is not None else cfg.run.seed_limit
    if limit is not None:
        items = items[:limit]
    fp = fingerprint("seed", "items", file_digest(found), len(items), [_model_fp(a) for a in cfg.panel],
                     _model_fp(cfg.grader) if cfg.grader else None, (ctx.sim_fp, ctx.answer_prompts_fp()))
    if _reuse(state, ctx, "seed", fp):
        return _skipped(state, "seed", seed=_read_seed(ctx.out))
    ctx.log(f"seed: {len(items)} seed items x {len(cfg.panel)} answerers")
    answers = await answer_items(items, cfg.panel, ctx.client, ctx.grader, ctx.lib)
    c, t = count_matrix(answers, labels, [it.id for it in items])
    rows = ["model,item_id,n_correct,n_trials"]
    for j, lab in enumerate(labels):
        for i, it in enumerate(items):
            if t[j, i]:
                rows.append(f"{_csv(lab)},{_csv(it.id)},{c[j, i]},{t[j, i]}")
    atomic_write_text(ctx.out / "seed_responses.csv", "\n".join(rows) + "\n")
    seed = {"source": str(found), "kind": "answered by the panel", "n_items": len(items),
            "accuracy": {lab: (float(c[j].sum() / t[j].sum()) if t[j].sum() else None) for j, lab in enumerate(labels)}}
    atomic_write_json(ctx.out / "seed.json", seed)
    return {**_finished(state, "seed", fp, ["seed.json", "seed_responses.csv"],
                        complete=not any(a.retryable for a in answers)), "seed": seed}


def _read_seed(out: Path) -> dict[str, Any]:
    return json.loads((out / "seed.json").read_text(encoding="utf-8"))


def _read_answers(out: Path) -> list[Answer]:
    return [Answer(**r) for r in read_jsonl(out / "answers.jsonl")]


async def answer_node(state: DesignersState, runtime: Runtime[DesignersContext]) -> dict[str, Any]:
    """Every answerer's graded answers to every usable item -> answers.jsonl."""
    ctx = runtime.context
    cfg = ctx.cfg
    fp = fingerprint("answer", ctx.files_fp("suite.jsonl"), [_model_fp(a) for a in cfg.panel],
                     _model_fp(cfg.grader) if cfg.grader else None, ctx.answer_prompts_fp(), ctx.sim_fp)
    if _reuse(state, ctx, "answer", fp):
        return _skipped(state, "answer")
    usable = [r for r in _read_suite(ctx.out) if r.status == "ok"]
    ctx.log(f"answer: {len(usable)} items x {len(cfg.panel)} answerers")
    answers = await answer_items([r.to_item() for r in usable], cfg.panel, ctx.client, ctx.grader, ctx.lib)
    write_jsonl(ctx.out / "answers.jsonl", [a.as_dict() for a in answers])
    return _finished(state, "answer", fp, ["answers.jsonl"], complete=not any(a.retryable for a in answers))


async def judge_node(state: DesignersState, runtime: Runtime[DesignersContext]) -> dict[str, Any]:
    """Static and dynamic checks and the judge's verdicts; the core set -> verdicts.jsonl."""
    ctx = runtime.context
    cfg, opts = ctx.cfg, ctx.cfg.run
    records = _read_suite(ctx.out)
    answers = _read_answers(ctx.out)
    labels = [a.label for a in cfg.panel]
    c_all, t_all = count_matrix(answers, labels, [r.id for r in records if r.status == "ok"])
    overall = {lab: (float(c_all[j].sum() / t_all[j].sum()) if t_all[j].sum() else 0.0)
               for j, lab in enumerate(labels)}
    strong = choose_strong(overall, {a.label: a.strong for a in cfg.panel})
    fp = fingerprint("judge", ctx.files_fp("suite.jsonl", "answers.jsonl"), _model_fp(cfg.judge), strong,
                     opts.model_dump(include={"min_answers", "ceiling", "floor", "max_reasks"}),
                     ctx.prompts_fp("designer_item_judge"), ctx.sim_fp)
    if _reuse(state, ctx, "judge", fp):
        verdicts = [ItemVerdict(**r) for r in read_jsonl(ctx.out / "verdicts.jsonl")]
        update = _skipped(state, "judge", strong=list(strong))
    else:
        verdicts = await judge_items(records, answers, strong, cfg.judge, ctx.client, min_answers=opts.min_answers,
                                     ceiling=opts.ceiling, floor=opts.floor, max_reasks=opts.max_reasks,
                                     library=ctx.lib)
        write_jsonl(ctx.out / "verdicts.jsonl", [v.as_dict() for v in verdicts])
        update = {**_finished(state, "judge", fp, ["verdicts.jsonl"],
                              complete=not any(v.status == "unjudged" for v in verdicts)), "strong": list(strong)}
    ctx.log(f"judge: {sum(v.core for v in verdicts)} core items")
    return update


REPORT_FILES = ["report.json", "matrix.csv", "heatmap.png", "core.jsonl"]


async def report_node(state: DesignersState, runtime: Runtime[DesignersContext]) -> dict[str, Any]:
    """The joint IRT fit, every metric, the heatmap -> report.json, matrix.csv, heatmap.png, core.jsonl."""
    ctx = runtime.context
    cfg = ctx.cfg
    fp = fingerprint("report", ctx.files_fp("plan.json", "generation.json", "suite.jsonl", "answers.jsonl",
                                            "verdicts.jsonl"),
                     state.seed, state.strong, ctx.irt_method, cfg.run.bootstrap, cfg.run.alpha, cfg.seed,
                     [(d.label, d.family, (own.label if (own := cfg.answerer_of(d)) else None))
                      for d in cfg.designers], [(a.label, a.family) for a in cfg.panel], REPORT_VERSION)
    if _reuse(state, ctx, "report", fp):
        return _skipped(state, "report")
    ctx.log(f"report: IRT ({ctx.irt_method}) on the joint core set, metrics, heatmap")
    verdicts = [ItemVerdict(**r) for r in read_jsonl(ctx.out / "verdicts.jsonl")]
    gen_stats = json.loads((ctx.out / "generation.json").read_text(encoding="utf-8"))
    build_report(cfg, ctx.card, _read_plan(ctx.out), _read_suite(ctx.out), _read_answers(ctx.out), verdicts,
                 state.strong, state.seed, ctx.irt_method, ctx.out, gen_stats, card_path=ctx.card_path)
    return _finished(state, "report", fp, REPORT_FILES)


NODE_FUNCTIONS = {"plan": plan_node, "generate": generate_node, "seed": seed_node, "answer": answer_node,
                  "judge": judge_node, "report": report_node}
STAGES = tuple(NODE_FUNCTIONS)


def _assemble() -> Any:
    """The pipeline's wiring: the stages in order, the run's :class:`DesignersContext` as ``context_schema``."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(DesignersState, context_schema=DesignersContext)
    for name, fn in NODE_FUNCTIONS.items():
        graph.add_node(name, fn)
    graph.add_edge(START, STAGES[0])
    for a, b in zip(STAGES, STAGES[1:]):
        graph.add_edge(a, b)
    graph.add_edge(STAGES[-1], END)
    return graph


THREAD = {"configurable": {"thread_id": "designers"}}


async def _previous_stages(graph: Any) -> dict[str, StageRecord]:
    snapshot = await graph.aget_state(THREAD)
    return DesignersState.model_validate(snapshot.values).stages if snapshot.values else {}


def stage_records(out: str | Path) -> dict[str, StageRecord]:
    """The finished stages recorded in a run folder's checkpoints (``{}`` for a folder with none)."""
    path = Path(out) / CHECKPOINTS_DB
    if not path.is_file():
        return {}

    async def read() -> dict[str, StageRecord]:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            return await _previous_stages(_assemble().compile(checkpointer=saver))

    return run_sync(read())


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
    return await _run(card, Path(card_path), quotas, targets, cfg, Path(out), lib,
                      seed_responses=Path(seed_responses) if seed_responses is not None else None,
                      seed_items=Path(seed_items) if seed_items is not None else None, seed_limit=seed_limit,
                      irt_method=method, log=log or (lambda _m: None))


async def _run(card: DomainCard, card_path: Path, quotas: QuotaSpec, targets: dict[str, dict[str, float]],
               cfg: DesignersConfig, out: Path, lib: Any, *, seed_responses: Path | None, seed_items: Path | None,
               seed_limit: int | None, irt_method: str, log: Log) -> DesignersRun:
    """The stages as a LangGraph graph with its SQLite checkpointer (``checkpoints.sqlite``): every run starts at
    the first stage with the finished stages of the last checkpoint, and each node reuses its stage when the
    stage's inputs and files are as recorded."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from benchfill.models.cache import CallCache
    from benchfill.models.client import ModelClient
    from benchfill.models.grading import Grader

    out.mkdir(parents=True, exist_ok=True)
    sim = None
    if cfg.simulated:
        from benchfill.designers.sim import DesignerSimWorld

        sim = DesignerSimWorld.from_designers_config(cfg)
    client = ModelClient(CallCache(out / CALLS_DB), sim=sim)
    if cfg.simulated:
        client.cache.set_meta("simulated", True)
    ctx = DesignersContext(card=card, card_path=card_path, quotas=quotas, targets=targets, cfg=cfg, out=out, lib=lib,
                           client=client, grader=Grader(client, cfg.grader, lib), seed_responses=seed_responses,
                           seed_items=seed_items, seed_limit=seed_limit, irt_method=irt_method, log=log)
    final = DesignersState()
    try:
        async with AsyncSqliteSaver.from_conn_string(str(out / CHECKPOINTS_DB)) as saver:
            graph = _assemble().compile(checkpointer=saver, name="benchfill-designers")
            # every key given: a new run of the thread starts from the first stage with only the stage records
            start = DesignersState(stages=await _previous_stages(graph)).model_dump()
            # durability="sync": each stage's record is on disk before the next stage starts
            async for _ in graph.astream(start, THREAD, context=ctx, durability="sync"):
                pass
            final = DesignersState.model_validate((await graph.aget_state(THREAD)).values)
        report = DesignersReport.from_json_file(out / "report.json")
    finally:
        stats = client.stats
        usage = CallUsage(calls_made=stats.calls, cached=stats.cached, errors=stats.errors, retries=stats.retries,
                          malformed_replies=stats.malformed, tokens_in=stats.tokens_in, tokens_out=stats.tokens_out,
                          cost=round(stats.cost, 6))
        await client.aclose()
    atomic_write_json(out / "last_run.json", {"skipped_stages": final.skipped, "usage": usage.model_dump(),
                                              **({"label": SIM_NOTE} if cfg.simulated else {})})
    return DesignersRun(out=str(out), report=report, skipped_stages=final.skipped, usage=usage)


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


__all__ = ["STAGES", "DesignersContext", "DesignersRun", "DesignersState", "StageRecord", "build_report", "read_jsonl",
           "run_designers", "run_designers_async", "stage_records", "write_jsonl"]
