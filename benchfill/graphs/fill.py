"""BenchFill as a LangGraph state machine (README: BenchFill): a graph over the gaps whose node ``gap`` is the search
of one gap, a compiled subgraph.

    propose_gaps --a gap--> gap -> propose_gaps          propose_gaps --all gaps done--> END
    gap:  seed_memory -> select_parents -> rewrite -> validate -> label -> place -> stop?
              stop? --continue--> select_parents          stop? --done--> confirm -> finalize -> END

Decisions are posterior probabilities: each placed child carries P(d inside the gap) and
P(|d - t| <= tolerance); the best child is the one most likely within tolerance; ``confirm`` gives the chosen child
more rollouts until P(inside) reaches ``fill_level`` (or a cap); the gap is "filled" only at that level, else
"near" with the probability reached.

The state (:class:`FillState`, pydantic) holds only small, serialisable progress; everything heavy lives in the
memory bank (SQLite, :class:`benchfill.memory.bank.MemoryBank`) under deterministic ids, and every model call goes
through the call cache. LangGraph's async SQLite checkpointer saves the state after each node (the subgraph's
under its own namespace); a node interrupted by a crash is re-run from its start on resume (the gap's subgraph
continues from its own last checkpoint), and since its model calls come from the cache and its writes are upserts,
the resumed run ends exactly where an unbroken one would.

The nodes are module-level coroutine functions of the state and LangGraph's runtime, run by the graph's async API
(:func:`search`) on one event loop: a node that calls models awaits them, the independent calls of a step at once
(a round's rewrites, its children's verdicts, the panel's answers). What is not state (the benchmark, its scale,
the models, the bank) is the run's :class:`FillContext`, the graph's ``context_schema``, passed as ``context=`` when
the graph runs; no node changes it. Progress events go out on LangGraph's custom stream (``stream_mode="custom"``).
:func:`studio_graph` (``langgraph.json``) is the same graph compiled without a checkpointer, for LangGraph's tools.

The same graph runs the budget-matched baseline (``method="baseline"``): parents are always the existing items
nearest the target, the rewriter gets no target and no references (no difficulty feedback), and it runs exactly the
rounds BenchFill used on that gap.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, NamedTuple

import numpy as np
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, create_model, model_validator

from benchfill.data import Item, text_key
from benchfill.diagnostics.null import gap_is_unfillable
from benchfill.graphs.adaptive import adaptive_schedule
from benchfill.graphs.policy import (
    CallBudget,
    SearchParams,
    gap_call_budget,
    gap_design,
    propose_gaps,
    select_parents,
    select_references,
    should_stop,
    to_display,
)
from benchfill.graphs.prescreen import TextPrior
from benchfill.irt.placement import place_children
from benchfill.irt.scale import Scale
from benchfill.memory.bank import MemoryBank, MemoryItem
from benchfill.memory.record import PLACED_STATUSES, CandidateRecord, CandidateStatus, GapStatus
from benchfill.models.client import CallResult, ModelClient
from benchfill.models.config import ModelConfig, RunConfig
from benchfill.models.evaluate import Progress, run_evaluation
from benchfill.models.failures import CallsFailed
from benchfill.models.panel import PanelEngine, PanelJob
from benchfill.models.prompts import PromptLibrary
from benchfill.models.requests import RewriteRequest, ValidityRequest

Method = Literal["benchfill", "baseline"]
GAP = "gap"  # the outer graph's node that runs one gap's search (the subgraph of GAP_NODES)
GAP_NODES = ("seed_memory", "select_parents", "rewrite", "validate", "label", "place", "stop", "confirm", "finalize")
NODES = ("propose_gaps", *GAP_NODES)


class OpenGap(NamedTuple):
    """The gap being filled: its ends and target on the normalised scale d."""

    lo: float
    hi: float
    target: float


class FillState(BaseModel):
    """Progress of one search (one method) over all its gaps."""

    method: Method = "benchfill"
    n_gaps: int = 3
    gap_index: int = 0  # 1-based index of the gap being filled (0 before the first)
    lo: float | None = None
    hi: float | None = None
    target: float | None = None
    round: int = 0
    parents: list[str] = Field(default_factory=list)
    children: list[str] = Field(default_factory=list)
    best_id: str | None = None
    best_deviation: float | None = None
    best_p: float | None = None  # the best child's P(|d - t| <= tolerance)
    best_p_record: float | None = None  # the highest best_p of the gap's rounds so far (re-placing the children
    # together moves every probability a little each round: only a gain over the record counts as one)
    stale_rounds: int = 0  # rounds in a row that did not raise best_p
    tolerance: float | None = None  # the gap's tolerance: the configured one or the panel's resolution
    stop_reason: str = ""
    stop: bool = False
    inserted: list[float] = Field(default_factory=list)  # d of the items chosen so far, in order
    skipped: list[tuple[float, float]] = Field(default_factory=list)  # gaps that ended unfilled
    fixed_gaps: list[tuple[float, float]] = Field(default_factory=list)  # when not sequential
    budget_rounds: list[int] = Field(default_factory=list)  # baseline: BenchFill's rounds per gap
    finished: bool = False

    @property
    def gap(self) -> OpenGap:
        """The open gap (set by ``propose_gaps``; every later node runs inside one)."""
        if self.lo is None or self.hi is None or self.target is None:
            raise RuntimeError(f"{self.method}: no gap is open (gap index {self.gap_index})")
        return OpenGap(self.lo, self.hi, self.target)


@dataclass
class Usage:
    """The run's model usage so far, counted as each call's result arrives (the client's ``on_result``): a cached
    call counts with the tokens and cost it had when it was made."""

    calls: int = 0
    cached: int = 0
    tokens: int = 0
    cost: float = 0.0

    def add(self, result: CallResult) -> None:
        self.calls += 1
        self.cached += int(result.cached)
        self.tokens += result.tokens_in + result.tokens_out
        self.cost += result.cost or 0.0

    def totals(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True, eq=False)
class FillContext:
    """Everything the nodes need that is not state: the benchmark, its scale, the models and the bank. The graph's
    ``context_schema``: a node receives it as ``runtime.context``; it is never checkpointed and never changed (what
    a run changes is the bank, the call cache and ``usage``, the meter the client feeds: built with
    ``ModelClient(..., on_result=usage.add)``)."""

    items: list[Item]  # the benchmark's items, in the scale's item order
    d: np.ndarray  # (I,) their normalised difficulties
    scale: Scale
    config: RunConfig
    panel: list[ModelConfig]
    params: SearchParams
    bank: MemoryBank
    client: ModelClient
    usage: Usage
    prompts: PromptLibrary
    label_dir: Path
    prescreen: TextPrior | None = None  # [fill] prescreen: predicted b of a child's text (orders adaptive labelling)
    attainable_d: np.ndarray | None = None  # where the panel can place a child (None: too many to enumerate)
    skip_floor_gaps: bool = True  # gaps with no attainable placement inside are passed over (not: --allow-floor-gaps)

    @functools.cached_property
    def by_id(self) -> dict[str, Item]:
        return {it.id: it for it in self.items}

    @functools.cached_property
    def text_keys(self) -> dict[str, str]:
        """The benchmark's own texts (:func:`benchfill.data.text_key`) -> item id."""
        return {text_key(it.question): it.id for it in self.items}


def candidate_id(method: str, gap: int, round_: int, parent: int, child: int) -> str:
    """Deterministic id: a re-run node rewrites the same rows."""
    return f"{method[:2]}-g{gap}-r{round_}-p{parent}-c{child}"


PLACEHOLDER = re.compile(r"\s*[{\[]?\s*<\s*[A-Za-z][^<>]*\s[^<>]*>?\s*[}\]]?\s*")


class Children(BaseModel):
    """The rewriter's reply (prompts/rewrite.txt). Children that only copy the template's placeholders (small
    models write ``{"question": "<the new item>", ...}``) are left out; a reply with nothing else is rejected, so
    the rewriter is asked again."""

    class Child(BaseModel):
        question: str = Field(min_length=1)
        answer: str = Field(min_length=1)
        rationale: str = ""

    children: list[Child] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _drop_placeholders(cls, data: Any) -> Any:
        kids = data.get("children") if isinstance(data, dict) else None
        if not isinstance(kids, list) or not kids:
            return data
        real = [k for k in kids if not (isinstance(k, dict) and any(
            isinstance(k.get(f), str) and PLACEHOLDER.fullmatch(k[f]) for f in ("question", "answer")))]
        if not real:
            raise ValueError("every child copies the template's placeholders (\"<the new item>\"): write the items "
                             "themselves")
        return {**data, "children": real}


@functools.lru_cache(maxsize=64)
def children_schema(n: int) -> type[Children]:
    """The rewriter's ``response_format`` schema: :class:`Children` with at most ``n`` children (a constrained
    decoder stops after them instead of writing more until the token limit cuts the JSON)."""
    return create_model("Children", __base__=Children,
                        children=(list[Children.Child], Field(min_length=1, max_length=n)))


class Verdict(BaseModel):
    """The validity judge's reply (prompts/validity_judge.txt)."""

    well_posed: bool
    answer_correct: bool
    reason: str = ""


# ------------------------------------------------------------------------------------------------- nodes
#
# Module-level coroutine functions of the state and LangGraph's runtime (``Runtime[FillContext]``: the run's context
# comes in as ``runtime.context``, LangGraph's ``context_schema``). Each returns the state fields it changes and
# reports its progress through LangGraph's stream writer (``stream_mode="custom"``). The nodes that call no model are
# coroutines too: under the async API LangGraph runs a plain function in a worker thread, where a Ctrl-C or SIGTERM
# would not stop it and the bank would be written from two threads.


def _emit(runtime: Runtime[FillContext], **event: Any) -> None:
    """A progress event (with the run's usage so far) on LangGraph's custom stream."""
    runtime.stream_writer({**event, **runtime.context.usage.totals()})


def _memory_for(ctx: FillContext, state: FillState) -> list[MemoryItem]:
    seeds = [s for s in ctx.bank.seeds_for(state.method, state.gap_index)]
    if state.method == "baseline":
        return seeds  # no difficulty feedback: the baseline never learns where its children landed
    return seeds + ctx.bank.placed(state.method, state.gap_index)


async def propose(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    ctx = runtime.context
    index = state.gap_index + 1
    if index > state.n_gaps:
        return {"finished": True}
    if state.fixed_gaps:
        lo, hi = state.fixed_gaps[index - 1]
    else:
        skipped = {(round(a, 12), round(b, 12)) for a, b in state.skipped}
        ranked = propose_gaps(ctx.d, state.inserted, len(ctx.d) + len(state.inserted) + 1)  # every gap, largest first
        gap = next((g for g in ranked if (round(g.lo, 12), round(g.hi, 12)) not in skipped
                    and not (ctx.skip_floor_gaps and gap_is_unfillable(g.lo, g.hi, ctx.attainable_d))), None)
        if gap is None:  # no gap left that this panel can see filled
            return {"finished": True}
        lo, hi = gap.lo, gap.hi
    target = (lo + hi) / 2
    design = gap_design(ctx.attainable_d, target, ctx.params.tolerance)
    ctx.bank.upsert_gap(state.method, index, lo=lo, hi=hi, target=target, status=GapStatus.SEARCHING, rounds=0,
                        n_candidates=0, note=design.note, tolerance=design.tolerance, resolution=design.resolution)
    _emit(runtime, node="propose_gaps", method=state.method, gap=index, target=target, note=design.note)
    return {"gap_index": index, "lo": lo, "hi": hi, "target": target, "round": 0, "parents": [],
            "children": [], "best_id": None, "best_deviation": None, "best_p": None, "best_p_record": None, "stale_rounds": 0,
            "tolerance": design.tolerance, "stop_reason": "", "stop": False}


async def seed_memory(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    ctx = runtime.context
    t = state.gap.target
    nearest_items = sorted(range(len(ctx.items)), key=lambda i: (abs(ctx.d[i] - t), ctx.items[i].id))
    rows = []
    for i in nearest_items[: ctx.params.seed_items]:
        it = ctx.items[i]
        rows.append({"id": it.id, "question": it.question, "answer": it.answer,
                     "b": float(ctx.scale.b_mean[i]), "b_sd": None, "d": float(ctx.d[i]),
                     "format": it.resolved_format})
    ctx.bank.set_seeds(state.method, state.gap_index, rows)
    _emit(runtime, node="seed_memory", method=state.method, gap=state.gap_index, seeds=len(rows))
    return {}


async def choose_parents(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    ctx = runtime.context
    parents = select_parents(_memory_for(ctx, state), state.gap.target, ctx.params.parents)
    return {"parents": [m.id for m in parents], "round": state.round + 1, "children": []}


async def rewrite(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    ctx = runtime.context
    p = ctx.params
    memory = {m.id: m for m in _memory_for(ctx, state)}
    blind = state.method == "baseline"
    rewriter = ctx.config.role("rewriter")
    t = state.gap.target

    async def one(pi: int, parent: MemoryItem):
        refs = [] if blind else select_references(list(memory.values()), t, parent.id, p.references)
        request = RewriteRequest.build(
            _as_item(ctx, parent), target=None if blind else to_display(t, p.display_scale),
            parent_difficulty=None if blind else to_display(parent.d, p.display_scale),
            references=[(r.question, to_display(r.d, p.display_scale)) for r in refs],
            n_children=p.children_per_parent,
        )
        # the round and gap enter the sample index so every round asks afresh (a new cache key)
        res = await ctx.client.complete_json(
            rewriter, request.messages(ctx.prompts), Children, role="rewriter",
            sample_index=_sample(state, pi), request=request, schema=children_schema(p.children_per_parent),
        )
        return pi, parent, res

    results = await asyncio.gather(*(one(pi, memory[pid]) for pi, pid in enumerate(state.parents)))
    _stop_on_failed_calls(r for _, _, r in results)
    # a child that repeats a benchmark item or an earlier child of this gap is that item, not a new one: it is
    # recorded and left out (labelling it again would count the same item's answers twice)
    seen = dict(ctx.text_keys)
    for c in ctx.bank.candidates(state.method, state.gap_index):
        if c.question and c.round < state.round:
            seen.setdefault(text_key(c.question), c.id)
    rows: list[CandidateRecord] = []
    ids: list[str] = []
    for pi, parent, res in results:
        kids = res.parsed.children[: p.children_per_parent] if res.parsed is not None else []
        if not kids:  # malformed after the bounded re-asks: dropped, and recorded
            cid = candidate_id(state.method, state.gap_index, state.round, pi, 0)
            rows.append(_candidate_row(state, cid, parent.id, "", "", rewriter,
                                       status=CandidateStatus.REWRITE_FAILED,
                                       error=res.error or "no children"))
            continue
        for ci, kid in enumerate(kids):
            cid = candidate_id(state.method, state.gap_index, state.round, pi, ci)
            key = text_key(kid.question)
            if key in seen:
                rows.append(_candidate_row(state, cid, parent.id, kid.question, kid.answer, rewriter,
                                           status=CandidateStatus.DUPLICATE, error=f"repeats {seen[key]}",
                                           format=_as_item(ctx, parent).format))
                continue
            seen[key] = cid
            rows.append(_candidate_row(state, cid, parent.id, kid.question, kid.answer, rewriter,
                                       status=CandidateStatus.PROPOSED, format=_as_item(ctx, parent).format))
            ids.append(cid)
    ctx.bank.upsert_candidates(rows)
    _emit(runtime, node="rewrite", method=state.method, gap=state.gap_index, round=state.round, children=len(ids))
    return {"children": ids}


async def validate(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    ctx = runtime.context
    judge = ctx.config.role("judge")
    cands = _children(ctx, state)

    async def one(cand: CandidateRecord):
        request = ValidityRequest(cand.question or "", cand.answer or "")
        return cand, await ctx.client.complete_json(judge, request.messages(ctx.prompts), Verdict, role="judge",
                                                    request=request)

    results = await asyncio.gather(*(one(c) for c in cands))
    _stop_on_failed_calls(r for _, r in results)
    for cand, res in results:
        fields: dict[str, Any]
        if res.parsed is None:
            fields = {"valid": False, "verdict": None, "status": CandidateStatus.INVALID,
                      "error": f"judge: {res.error}"}
        else:
            ok = res.parsed.well_posed and res.parsed.answer_correct
            fields = {"valid": ok, "verdict": res.parsed.model_dump(), "judge": judge.label,
                      "status": CandidateStatus.VALID if ok else CandidateStatus.INVALID, "error": ""}
        ctx.bank.update_candidate(cand.id, **fields)
    n_valid = sum(1 for _, r in results if r.parsed is not None and r.parsed.well_posed and r.parsed.answer_correct)
    _emit(runtime, node="validate", method=state.method, gap=state.gap_index, round=state.round, valid=n_valid)
    return {}


async def label(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    ctx = runtime.context
    cands = [c for c in _children(ctx, state)
             if c.status in (CandidateStatus.VALID, CandidateStatus.LABELLED, CandidateStatus.PLACED)]
    if cands and ctx.params.labelling == "adaptive":
        await _label_adaptive(ctx, state, cands)
    elif cands:
        items = [_candidate_item(c) for c in cands]
        run_cfg = ctx.config.model_copy(update={"panel": ctx.panel})
        out = ctx.label_dir / f"{state.method}-g{state.gap_index}-r{state.round}"
        result = await run_evaluation(items, run_cfg, out, client=ctx.client, progress=Progress())
        if result.failed_calls:  # holes in the counts are no placement: stop, the resume asks again
            raise CallsFailed(result.failures)
        counts = _read_counts(Path(result.responses_path))
        for c in cands:
            ctx.bank.update_candidate(c.id, counts=counts.get(c.id, {}), status=CandidateStatus.LABELLED)
    _emit(runtime, node="label", method=state.method, gap=state.gap_index, round=state.round, labelled=len(cands))
    return {}


async def place(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    ctx = runtime.context
    fresh = {c.id for c in _children(ctx, state) if c.status == CandidateStatus.LABELLED}
    if fresh:
        place_gap(ctx, state)
    best = ctx.bank.best_candidate(state.method, state.gap_index, state.gap.target)
    best_p = None if best is None else best.p_within
    record = state.best_p_record
    improved = best_p is not None and (record is None or best_p >= record + ctx.params.min_gain)
    _emit(runtime, node="place", method=state.method, gap=state.gap_index, round=state.round,
          best_deviation=None if best is None else best.deviation, best_p=best_p,
          best_p_inside=None if best is None else best.p_inside)
    return {"best_id": None if best is None else best.id,
            "best_deviation": None if best is None else best.deviation, "best_p": best_p,
            "best_p_record": max(x for x in (record, best_p, -1.0) if x is not None),
            "stale_rounds": 0 if improved else state.stale_rounds + 1}


def place_gap(ctx: FillContext, state: FillState, counts: dict[str, dict[str, list[int]]] | None = None
              ) -> dict[str, dict[str, Any]]:
    """Place every labelled child of the gap's search together (:func:`benchfill.irt.placement.place_children`:
    they share a population, learned from all of them) and store each one's b, d, their SDs, P(d inside the gap)
    and P(|d - t| <= the gap's tolerance). ``counts``: answers to use instead of the stored ones (the confirmation's);
    returns the fields by child id."""
    cands = [c for c in ctx.bank.candidates(state.method, state.gap_index)
             if c.status in (CandidateStatus.LABELLED, *PLACED_STATUSES)]
    if not cands:
        return {}
    models = ctx.scale.models
    counts = counts or {}
    rows = [counts.get(c.id, c.counts or {}) for c in cands]
    k = np.array([[r.get(m, [0, 0])[0] for m in models] for r in rows], dtype=np.int64)
    n = np.array([[r.get(m, [0, 0])[1] for m in models] for r in rows], dtype=np.int64)
    tol = state.tolerance if state.tolerance is not None else ctx.params.tolerance
    lo, hi, t = state.gap
    placed = place_children(ctx.scale, k, n, np.array([[lo, hi], [t - tol, t + tol]]))
    out: dict[str, dict[str, Any]] = {}
    for i, c in enumerate(cands):
        fields: dict[str, Any] = {
            "b": float(placed.b_mean[i]), "b_sd": float(placed.b_sd[i]), "d": float(placed.d[i]),
            "d_sd": float(placed.d_sd[i]), "deviation": float(abs(placed.d[i] - t)),
            "p_inside": float(placed.probabilities[i, 0]), "p_within": float(placed.probabilities[i, 1])}
        status = CandidateStatus.PLACED if c.status == CandidateStatus.LABELLED else c.status
        ctx.bank.update_candidate(c.id, status=status, **({"counts": counts[c.id]} if c.id in counts
                                                          else {}), **fields)
        out[c.id] = fields
    ctx.bank.upsert_gap(state.method, state.gap_index, children_mu=placed.population_mu,
                        children_sigma=placed.population_sigma)
    return out


async def stop(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    ctx = runtime.context
    p = ctx.params
    if state.method == "baseline":
        budget = state.budget_rounds[state.gap_index - 1] if state.gap_index <= len(state.budget_rounds) else p.max_rounds
        reason = f"BenchFill's {budget} round(s) on this gap (budget-matched)" if state.round >= budget else None
    else:
        reason = should_stop(state.best_p, state.round, p, stale_rounds=state.stale_rounds)
    ctx.bank.upsert_gap(state.method, state.gap_index, rounds=state.round, stop_reason=reason or "")
    return {"stop": reason is not None, "stop_reason": reason or ""}


def _finalists_file(ctx: FillContext, state: FillState) -> Path:
    """Where the confirmation writes down its finalists (before its first call)."""
    return ctx.label_dir / f"{state.method}-g{state.gap_index}-confirm" / "finalists.json"


def _finalists(ctx: FillContext, state: FillState) -> list[str] | None:
    """The ids the gap's confirmation raced, or None where it has not started."""
    path = _finalists_file(ctx, state)
    return json.loads(path.read_text())["finalists"] if path.exists() else None


def _chosen(ctx: FillContext, state: FillState) -> CandidateRecord | None:
    """The gap's choice: the best of the confirmed finalists where confirmation ran (fresh answers undo the
    selection's optimism only for them), else the best placed child (:meth:`MemoryBank.best_candidate`)."""
    finalists = _finalists(ctx, state)
    if finalists:
        top = ctx.bank.top_candidates(state.method, state.gap_index, state.gap.target, 1, finalists)
        if top:
            return top[0]
    return ctx.bank.best_candidate(state.method, state.gap_index, state.gap.target)


async def confirm(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    """Confirmation: the ``confirm_finalists`` children most likely within tolerance (full labelling: the chosen one
    alone; adaptive: four; :attr:`FillParams.confirmation`) are answered ``confirm_step`` more times by every panel
    model, step by step; after each step all of the gap's children are placed again and the weaker half of the finalists is dropped (successive halving, ordered as
    :meth:`~benchfill.memory.bank.MemoryBank.best_candidate`). It ends when the leading finalist's P(d inside the
    gap) reaches ``fill_level``, when each model has answered the finalists ``confirm_max_rollouts`` times, or before
    a step that would take the gap past its call budget (search + confirmation; :func:`_call_budget`, logged in
    ``finalists.json`` and ``confirm.json``). ``finalize`` then
    chooses among the re-placed finalists; ``confirm.json``'s ``child`` is that choice.

    Resumable: every answer goes through the call cache (rollout indices after the ones a child has), the finalists
    are written down before the first call, and which of them are still racing follows from their rollouts (the
    survivors of s steps are the ones at the highest level, and the rule keeps ceil(m / 2^s) of them), so a re-run of
    this node continues the same steps from the cache."""
    ctx = runtime.context
    p = ctx.params
    conf = p.confirmation
    if not conf.max_rollouts:
        return {}
    budget = _call_budget(ctx, state)
    models = list(ctx.scale.models)
    out = _finalists_file(ctx, state).parent
    finalist_ids = _finalists(ctx, state)
    if finalist_ids is None:
        finalist_ids = [c.id for c in ctx.bank.top_candidates(state.method, state.gap_index, state.gap.target,
                                                              conf.finalists)]
        if not finalist_ids:
            return {}
        from benchfill.io import atomic_write_json

        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(_finalists_file(ctx, state), {"finalists": finalist_ids, "budget": asdict(budget)})
    records = {cid: ctx.bank.candidate(cid) for cid in finalist_ids}
    finalists = {cid: c for cid, c in records.items() if c is not None}
    before = {cid: {"p_inside": c.p_inside, "p_within": c.p_within, "d": c.d, "d_sd": c.d_sd}
              for cid, c in finalists.items()}
    counts = {cid: {m: list((c.counts or {}).get(m, [0, 0])) for m in models} for cid, c in finalists.items()}
    # rollout indices below these were asked in the search (full labelling: 0..rollouts - 1; adaptive: at most
    # adaptive_rollout_factor x rollouts): confirmation asks only new ones, so no answer is counted twice
    factor = p.adaptive_rollout_factor if p.labelling == "adaptive" else 1
    by_label = {m.label: m.rollouts for m in ctx.panel}
    base = {m: by_label[m] * factor for m in models}
    next_index = {cid: {m: max(counts[cid][m][1], base[m]) for m in models} for cid in finalists}
    search_calls = ctx.bank.calls_by_node(state.method, state.gap_index).get("label", 0)

    def level(cid: str) -> int:
        return min(next_index[cid].values())

    def confirm_calls() -> int:
        return sum(max(0, next_index[cid][m] - base[m]) for cid in finalists for m in models)

    def ranked(ids: list[str]) -> list[CandidateRecord]:  # best_candidate's order, on the current placements
        return ctx.bank.top_candidates(state.method, state.gap_index, state.gap.target, len(ids), ids)

    steps: list[dict[str, Any]] = []
    first_level = min(base.values())
    lead: CandidateRecord | None = None
    while finalists:
        top = max(level(cid) for cid in finalists)
        keep = max(1, -(-len(finalists) // 2 ** ((top - first_level) // p.confirm_step)))  # ceil(m / 2^steps)
        order = ranked([cid for cid in finalists if level(cid) == top])[:keep]
        racing, lead = [c.id for c in order], order[0]
        if (lead.p_inside or 0.0) >= p.fill_level:
            break
        target_level = min(top + p.confirm_step, conf.max_rollouts)
        plan = [(i, j, r) for i, cid in enumerate(racing) for j, m in enumerate(models)
                for r in range(next_index[cid][m], target_level)]
        if not plan:
            break  # every model has answered them confirm_max_rollouts times
        if budget.calls and search_calls + confirm_calls() + len(plan) > budget.calls:
            break  # the next step would pass the gap's budget
        items = [_candidate_item(finalists[cid]) for cid in racing]
        for (i, j, r), a in zip(plan, await _ask_panel(ctx, items, plan)):
            cid, m = racing[i], models[j]
            next_index[cid][m] = max(next_index[cid][m], r + 1)
            if a is not None:  # None: the answer was not a trial (logged by the grader)
                counts[cid][m] = [counts[cid][m][0] + a, counts[cid][m][1] + 1]
        placed = place_gap(ctx, state, {cid: counts[cid] for cid in finalists})
        steps.append({"rollouts": target_level, "asked": len(plan), "racing": racing,
                      **{k: placed[racing[0]][k] for k in ("p_inside", "p_within", "d", "d_sd")},
                      "finalists": {cid: placed[cid] for cid in racing}})
    # the gap's choice, as finalize makes it: the best finalist on its placement after the race, which can be one
    # dropped before the last step (the survivor's fresh answers can place it worse); confirm.json names that one, so
    # the files and the trace agree on the choice
    best = _chosen(ctx, state) if lead is not None else None
    leader = None if best is None else best.id
    if steps:
        for cid in finalists:
            if level(cid) > first_level:  # its steps, from its rollouts (so a re-run of the node counts them too)
                ctx.bank.update_candidate(cid, confirm_steps=-(-(level(cid) - first_level) // p.confirm_step))
        from benchfill.io import atomic_write_json

        out.mkdir(parents=True, exist_ok=True)
        first = finalist_ids[0]
        atomic_write_json(out / "confirm.json", {"child": leader, "finalists": finalist_ids, "models": models,
                                                 "before": before.get(first, {}), "before_finalists": before,
                                                 "steps": steps, "counts": counts.get(leader, {}) if leader else {},
                                                 "counts_finalists": counts, "budget": asdict(budget)})
    _emit(runtime, node="confirm", method=state.method, gap=state.gap_index, steps=len(steps),
          p_inside=None if best is None else best.p_inside)
    return {}


async def finalize(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
    ctx = runtime.context
    best = _chosen(ctx, state)
    all_cands = ctx.bank.candidates(state.method, state.gap_index)
    usage = ctx.bank.gap_usage(state.method, state.gap_index)
    common = {"rounds": state.round, "n_candidates": sum(1 for c in all_cands if c.question),
              "cost": usage.cost}
    if best is None:
        ctx.bank.upsert_gap(state.method, state.gap_index, status=GapStatus.UNFILLED, chosen=None, chosen_d=None,
                            chosen_d_sd=None, chosen_gap_sd=None, deviation=None, p_inside=None, p_within=None,
                            note=f"no valid, placed child after {state.round} rounds", **common)
        _emit(runtime, node="finalize", method=state.method, gap=state.gap_index, filled=False)
        return {"skipped": state.skipped + [(state.gap.lo, state.gap.hi)]}
    level = ctx.params.fill_level
    assert best.p_inside is not None and best.d is not None and best.b_sd is not None, best.id  # it is placed
    filled = best.p_inside >= level
    note = "" if filled else (f"placed near, P(inside) = {best.p_inside:.2f} (below the level {level:g})")
    design = ctx.bank.gap(state.method, state.gap_index)
    if design is not None and design.note and design.note not in note:
        note = "; ".join(x for x in (note, design.note) if x)
    ctx.bank.upsert_gap(state.method, state.gap_index, status=GapStatus.FILLED if filled else GapStatus.NEAR,
                        chosen=best.id, chosen_d=best.d, chosen_d_sd=best.d_sd,
                        chosen_gap_sd=best.b_sd / ctx.scale.span, deviation=best.deviation, p_inside=best.p_inside,
                        p_within=best.p_within, note=note, **common)
    ctx.bank.update_candidate(best.id, status=CandidateStatus.CHOSEN)
    _emit(runtime, node="finalize", method=state.method, gap=state.gap_index, filled=filled,
          deviation=best.deviation, p_inside=best.p_inside)
    update: dict[str, Any] = {"inserted": state.inserted + [float(best.d)]}
    lo, hi, _ = state.gap
    if not lo < best.d < hi:  # it landed outside: do not propose the same gap again
        update["skipped"] = state.skipped + [(lo, hi)]
    return update


def _call_budget(ctx: FillContext, state: FillState) -> CallBudget:
    """The gap's panel-call budget, search + confirmation (:func:`~benchfill.graphs.policy.gap_call_budget`): its
    search's valid children are the ones full labelling would have answered on the rounds it ran."""
    valid = sum(1 for c in ctx.bank.candidates(state.method, state.gap_index) if c.valid)
    return gap_call_budget(ctx.params, [m.rollouts for m in ctx.panel], valid)


# node name -> function; the graph is assembled from this table when it is built (a test may wrap an entry)
NODE_FUNCTIONS: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
    "propose_gaps": propose, "seed_memory": seed_memory, "select_parents": choose_parents, "rewrite": rewrite,
    "validate": validate, "label": label, "place": place, "stop": stop, "confirm": confirm, "finalize": finalize,
}


async def _label_adaptive(ctx: FillContext, state: FillState, cands: list[CandidateRecord]) -> None:
    """``labelling = "adaptive"``: the round's valid children answered step by step by the most informative panel
    models until each is decided (:mod:`benchfill.graphs.adaptive`). Every answer goes through the call cache
    under the same key full labelling would use (model, messages, rollout index), and the schedule depends only on
    the answers, so a re-run of this node repeats the same steps from the cache and pays for no call twice."""
    by_label = {m.label: m for m in ctx.panel}
    models = [by_label[m] for m in ctx.scale.models]
    items = [_candidate_item(c) for c in cands]
    # the gap's children placed in earlier rounds bound the window that could win
    incumbent = np.inf
    z = ctx.params.adaptive_z
    for c in ctx.bank.candidates(state.method, state.gap_index):
        if c.round < state.round and c.placed and c.d is not None:
            incumbent = min(incumbent, abs(c.d - state.gap.target) + z * (c.d_sd or 0.0))
    predicted = None if ctx.prescreen is None else ctx.prescreen.predict_items(items)
    schedule = adaptive_schedule(ctx.scale, state.gap.target, [m.rollouts for m in models], len(items), ctx.params,
                                 incumbent_u=incumbent, predicted_b=predicted,
                                 predicted_sd=1.0 if ctx.prescreen is None else ctx.prescreen.loo_rmse)
    try:
        batch = next(schedule)
        while True:
            batch = schedule.send(await _ask_panel(ctx, items, batch))
    except StopIteration as done:
        result = done.value
    from benchfill.io import atomic_write_json

    out = ctx.label_dir / f"{state.method}-g{state.gap_index}-r{state.round}"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "adaptive.json", {
        "children": [it.id for it in items], "models": list(ctx.scale.models), "status": result.status,
        "notes": result.notes, "answers": [int(a) for a in result.answers],
        "prescreen_d": None if predicted is None else [float(x) for x in ctx.scale.normalise(predicted)],
        "steps": [{"open": s["open"], "window": s["window"], "batch": [list(x) for x in s["batch"]]}
                  for s in result.steps]})
    for i, c in enumerate(cands):
        counts = {m: [int(result.n_correct[i, j]), int(result.n_trials[i, j])]
                  for j, m in enumerate(ctx.scale.models) if result.asked[i, j] > 0}
        ctx.bank.update_candidate(c.id, counts=counts, status=CandidateStatus.LABELLED,
                                  answers=int(result.answers[i]), labelling=result.status[i],
                                  label_note=result.notes[i],
                                  prescreen_d=None if predicted is None else float(ctx.scale.normalise(predicted[i])))


async def _ask_panel(ctx: FillContext, items: list[Item], plan: list[tuple[int, int, int]]) -> list[int | None]:
    """Answers of the panel for a batch of (item index, model index in the scale's order, rollout index): 1
    correct, 0 wrong, None not a trial. Rollout r is sample index r under the same cache key full labelling uses,
    so no (item, model, rollout) is ever paid for twice. Calls that failed stop the node (the resume asks again)."""
    from benchfill.models.grading import Grader

    by_label = {m.label: m for m in ctx.panel}
    models = [by_label[m] for m in ctx.scale.models]
    engine = PanelEngine(ctx.client, Grader(ctx.client, ctx.config.grader, ctx.prompts), items, ctx.prompts)
    answers = await engine.answer([PanelJob(models[j], i, r) for i, j, r in plan])
    failed = [a.failure() for a in answers if a.retryable]
    if failed:
        raise CallsFailed(failed)
    return [None if a.grade.label == "skip" else int(a.grade.label == "correct") for a in answers]


def _tracked(name: str, fn: Callable[..., Awaitable[dict[str, Any]]]) -> Callable[..., Awaitable[dict[str, Any]]]:
    """Record each node's model usage under (method, gap, round, node): an upsert, so a re-run node replaces
    rather than adds its figures (cached calls report the cost they had when they were made). The graph runs one
    node at a time, so the run's meter moves by this node's calls alone while it runs."""

    @functools.wraps(fn)
    async def run(state: FillState, runtime: Runtime[FillContext]) -> dict[str, Any]:
        ctx = runtime.context
        before = ctx.usage.totals()
        out = await fn(state, runtime)
        after = ctx.usage.totals()
        spent = {k: after[k] - before[k] for k in after}
        if spent["calls"] and state.gap_index:
            ctx.bank.record_usage(state.method, out.get("gap_index", state.gap_index),
                                  out.get("round", state.round), name, spent)
        return out

    return run


def _stop_on_failed_calls(results) -> None:
    """Calls that failed for infrastructure reasons are never the search's outcome: the node stops before it
    writes anything (its successful calls are cached) and the resumed run re-runs it."""
    failed = [r.failure() for r in results if r.failed]
    if failed:
        raise CallsFailed(failed)


def _sample(state: FillState, parent_index: int) -> int:
    """A distinct sample index per (gap, round, parent): the same parent asked again in a later round is a new
    draw from the rewriter, not a cache hit."""
    return state.gap_index * 10_000 + state.round * 100 + parent_index


def _as_item(ctx: FillContext, m: MemoryItem) -> Item:
    if m.id in ctx.by_id:
        return ctx.by_id[m.id]
    cand = ctx.bank.candidate(m.id)
    return Item.model_validate({"id": m.id, "question": m.question, "answer": m.answer,
                                "format": (cand.format if cand else None) or None})


def _children(ctx: FillContext, state: FillState) -> list[CandidateRecord]:
    """The round's children (``state.children``), as the bank holds them."""
    out = [ctx.bank.candidate(cid) for cid in state.children]
    assert all(c is not None for c in out), state.children  # the rewrite step wrote each one
    return [c for c in out if c is not None]


def _candidate_item(c: CandidateRecord) -> Item:
    """A child as an item to answer (the panel) or to rewrite (a parent)."""
    return Item.model_validate({"id": c.id, "question": c.question, "answer": c.answer, "format": c.format or None})


def _candidate_row(state: FillState, cid: str, parent: str, question: str, answer: str, rewriter: ModelConfig,
                   *, status: CandidateStatus, error: str = "", format: str | None = None) -> CandidateRecord:
    return CandidateRecord(id=cid, method=state.method, gap=state.gap_index, round=state.round, parent=parent,
                           question=question, answer=answer, rewriter=rewriter.label, judge="", valid=False,
                           verdict=None, counts={}, b=None, b_sd=None, d=None, d_sd=None, deviation=None,
                           status=status, error=error, format=format or "")


def _read_counts(path: Path) -> dict[str, dict[str, list[int]]]:
    """responses.csv of a labelling round -> {item_id: {model: [n_correct, n_trials]}}."""
    import csv

    out: dict[str, dict[str, list[int]]] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            out.setdefault(row["item_id"], {})[row["model"]] = [int(row["n_correct"]), int(row["n_trials"])]
    return out


# ------------------------------------------------------------------------------------------------- the graph


def _gap_search():
    """The search of one gap, the outer graph's node ``gap``: one node per step (:data:`NODE_FUNCTIONS`), a
    conditional loop back from stop? to select_parents. Compiled without a checkpointer of its own, it saves its
    checkpoints with the outer graph's, under its own namespace: a run stopped inside it resumes at its node."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(FillState, context_schema=FillContext)
    for name in GAP_NODES:
        graph.add_node(name, _tracked(name, NODE_FUNCTIONS[name]))
    graph.add_edge(START, GAP_NODES[0])
    for a, b in zip(GAP_NODES[:6], GAP_NODES[1:7]):  # seed_memory -> select_parents -> ... -> place -> stop
        graph.add_edge(a, b)
    graph.add_conditional_edges("stop", lambda s: "done" if s.stop else "again",
                                {"done": "confirm", "again": "select_parents"})
    graph.add_edge("confirm", "finalize")
    graph.add_edge("finalize", END)
    return graph.compile(name=GAP)


def _assemble():
    """The state machine's wiring: propose_gaps, then the search of the gap it proposed (:func:`_gap_search`), until
    no gap is left; the run's :class:`FillContext` is the graphs' ``context_schema``."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(FillState, context_schema=FillContext)
    graph.add_node("propose_gaps", _tracked("propose_gaps", NODE_FUNCTIONS["propose_gaps"]))
    graph.add_node(GAP, _gap_search())
    graph.add_edge(START, "propose_gaps")
    graph.add_conditional_edges("propose_gaps", lambda s: "end" if s.finished else "gap", {"end": END, "gap": GAP})
    graph.add_edge(GAP, "propose_gaps")
    return graph


def studio_graph():
    """The graph for LangGraph's tools (``langgraph.json``, ``langgraph dev``, Studio): the same nodes and edges,
    compiled without a checkpointer (the server brings its own persistence and refuses a custom one). Running it
    needs a :class:`FillContext` as the run's ``context``; ``benchfill fill`` builds one (:class:`FillRun`)."""
    return _assemble().compile(name="benchfill")


async def search(ctx: FillContext, checkpoint_path: str | Path, initial: FillState, *, resume: bool,
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> FillState:
    """Run (or resume) one method's search to the end with LangGraph's async API and its async SQLite checkpointer
    (a file in the run folder); returns the final state. The nodes' progress events (the custom stream, the gap
    subgraph's included) go to ``on_event``."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    config: Any = {"configurable": {"thread_id": initial.method}, "recursion_limit": 10_000}
    async with AsyncSqliteSaver.from_conn_string(str(checkpoint_path)) as saver:
        graph = _assemble().compile(checkpointer=saver, name="benchfill")
        snapshot = await graph.aget_state(config)
        if snapshot.values and FillState(**snapshot.values).finished:  # finished before
            return FillState(**snapshot.values)
        start = config
        if resume and snapshot.values and not snapshot.next:
            # stopped inside a node by a signal (Ctrl-C, SIGTERM): LangGraph may record the node as done with no
            # next step; resume from the last checkpoint that has one (that node re-runs, served by the call cache)
            start = await _last_with_next(graph.aget_state_history(config), config)
        # durability="sync": each checkpoint is on disk before the next node starts, so a kill -9 loses at most the
        # node that was running (which then re-runs from its start, served by the call cache).
        async for _, event in graph.astream(None if (resume and snapshot.values) else initial, start, context=ctx,
                                            stream_mode="custom", subgraphs=True, durability="sync"):
            if on_event is not None:
                on_event(event)
        return FillState(**(await graph.aget_state(config)).values)


async def _last_with_next(history: AsyncIterator[Any], default: Any) -> Any:
    """The config of the newest checkpoint in ``history`` (newest first) that has a next step, else ``default``."""
    async for snapshot in history:
        if snapshot.next:
            return snapshot.config
    return default


def graph_structure() -> dict[str, Any]:
    """Nodes and edges of the compiled graph, the gap's subgraph drawn inside it (its nodes named ``gap:<node>``),
    for tests and docs, without a run context."""
    drawn = studio_graph().get_graph(xray=True)
    return {"nodes": sorted(n for n in drawn.nodes if not n.startswith("__")),
            "edges": sorted((e.source, e.target, bool(e.conditional)) for e in drawn.edges)}
