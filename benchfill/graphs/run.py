"""A BenchFill run end to end: diagnose the benchmark, build the context, run the search (and, with ``compare``,
the budget-matched baseline), and summarise it Table-2 style. Everything lives in one run folder:

    diagnosis.json / .png / .scale.npz   the benchmark's diagnosis and the scale new items are placed on
    memory.sqlite                         the memory bank: gaps, seeds, candidates, usage, reviews, every model call
    checkpoints.sqlite                    LangGraph's checkpoints (resume)
    labels/<method>-g<gap>-r<round>/      each labelling round's response file
    summary.json                          the Table-2 summary
    report.html                           the run in a browser, self-contained (benchfill.viewer)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import ValidationError

from benchfill.aio import run_sync
from benchfill.data import Item
from benchfill.diagnostics.report import Diagnosis, diagnose
from benchfill.errors import InputError
from benchfill.graphs import prescreen
from benchfill.graphs.fill import FillContext, FillState, Usage, search
from benchfill.graphs.policy import SearchParams, oracle_insertions, top_k_reduction
from benchfill.importers import load_panel
from benchfill.io import atomic_write_json, atomic_write_text, file_digest
from benchfill.irt.model import IRTSpec, SamplerSettings
from benchfill.irt.scale import Scale
from benchfill.memory.bank import MemoryBank
from benchfill.memory.record import CHOSEN_GAP_STATUSES, GapStatus
from benchfill.models.client import ModelClient
from benchfill.models.config import ModelConfig, RunConfig, load_config, validate_config
from benchfill.models.prompts import PromptLibrary
from benchfill.options import FillOptions

MEMORY_DB = "memory.sqlite"
CHECKPOINTS_DB = "checkpoints.sqlite"
SUMMARY = "summary.json"
SIM_BANNER = "SIMULATED: every model in this run is the offline simulated world, not a real LLM"


@dataclass(frozen=True)
class FillInputs:
    """A run's files and its options (:class:`benchfill.options.FillOptions`, the command's)."""

    items: Path
    responses: Path
    config: Path
    out: Path
    options: FillOptions

    def fingerprint(self, prompts: str | None = None) -> dict[str, Any]:
        """What must not change between a run and its resume (``prompts``: the config's override templates'
        digest, :meth:`PromptLibrary.overrides_digest`)."""
        o = self.options
        out = {"items": file_digest(self.items), "responses": file_digest(self.responses),
               "config": file_digest(self.config), "models": o.models,
               "models_file": file_digest(o.models_file), "n_gaps": o.gaps, "sampler": o.sampler, "seed": o.seed}
        if prompts is not None:  # only with overrides: a run on the built-in templates keeps its fingerprint
            out["prompts"] = prompts
        return out


def panel_attainable_d(scale: Scale, panel: list[ModelConfig]) -> np.ndarray | None:
    """Every d (sorted) a new item answered by the labelling panel can be placed at, under the scale's population
    (None where guessing makes them too many to enumerate)."""
    from benchfill.diagnostics.null import attainable_b

    by_model = {m.label: m.rollouts for m in panel}
    pattern = np.array([by_model.get(m, 0) for m in scale.models])
    values = attainable_b(scale.theta_draws, pattern, scale.guessing, scale.population)
    return None if values is None else scale.normalise(values)


def refuse_floor_gaps(dg: Diagnosis, panel: list[ModelConfig], n_gaps: int, where: str,
                      attainable: np.ndarray | None) -> list[tuple[float, float]]:
    """README: BenchFill: a gap at the design's resolution floor is not a target unless asked for. Here that is a gap
    with no placement the labelling panel can give strictly inside (``attainable``, :func:`panel_attainable_d`;
    None: anywhere): the panel cannot
    measure whether it was filled (a child lands on one of its likelihood keys, i.e. on or outside the gap's
    edges). Such gaps are passed over for the next largest while ``n_gaps`` fillable ones remain among the
    diagnosis' gaps (returned, to skip); otherwise the first one is refused with the reason."""
    from benchfill.diagnostics.null import gap_is_unfillable

    floor = [(g.lo, g.hi) for g in dg.gaps if gap_is_unfillable(g.lo, g.hi, attainable)]
    if len(dg.gaps) - len(floor) >= n_gaps:
        return floor
    for k, g in enumerate(dg.gaps[:n_gaps], start=1):
        if gap_is_unfillable(g.lo, g.hi, attainable):
            raise InputError(where, f"gap {k} [{g.lo:.3f}, {g.hi:.3f}] (width {g.width:.3f}) is at the design's "
                                    f"resolution floor: the panel ({len(panel)} models x {max(m.rollouts for m in panel)} "
                                    f"rollouts) can place no item strictly inside it, so it cannot tell whether the "
                                    f"gap was filled; ask for fewer --gaps, more rollouts or models, or pass "
                                    f"--allow-floor-gaps")
    return floor


def search_params(config: RunConfig) -> SearchParams:
    """The ``[fill]`` section of the config over the paper's defaults (typed and ranged when the config loaded)."""
    return config.fill


def simulated_panel(config: RunConfig, scale: Scale) -> list[ModelConfig]:
    """In the simulated world the panel is the scale's own models, answering with their fitted abilities."""
    rollouts = search_params(config).sim_panel_rollouts
    return [ModelConfig(model=f"sim/{m}", name=m, rollouts=rollouts) for m in scale.models]


def _check_panel(config: RunConfig, models: list[str], items: Path) -> list[ModelConfig]:
    """The panel that labels the children: the models of the scale (their answers place a child on it), checked
    before the run folder is made. A panel of other models needs their answers to the benchmark first; the error
    names the command that makes them."""
    labels = [m.label for m in config.panel]
    missing = [m for m in models if m not in labels]
    if missing:
        unknown = [lab for lab in labels if lab not in models]
        first = (f"benchfill evaluate {items} --config {config.source} --out runs/panel, then fill with "
                 f"--responses runs/panel/responses.csv")
        raise InputError(config.source, f"panel: the scale's models {', '.join(missing[:5])} have no panel entry "
                                        f"(each panel model's name must be a model of the response data)"
                         + (f"; this panel's {', '.join(unknown[:3])} answered none of it: run {first}"
                            if unknown else ""))
    return [m for m in config.panel if m.label in models]


class FillRun:
    """Set up (or reopen) a run folder; ``run()`` executes the searches; ``summary()`` reports them; ``close()``
    releases the memory bank."""

    def __init__(self, inputs: FillInputs, on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.inputs = inputs
        opts = self.opts = inputs.options
        self.out = inputs.out
        self.on_event = on_event  # the nodes' progress events (LangGraph's custom stream), e.g. the CLI's display
        config = load_config(inputs.config)
        need = ("rewriter", "judge") if config.simulated else ("rewriter", "judge", "panel")
        validate_config(config, need=need)
        self.config = config
        self.params = search_params(config)
        prescreen.require(self.params.prescreen, str(config.source or inputs.config))
        prompt_library = PromptLibrary.from_config(config)
        if opts.gaps < 1:
            raise InputError(str(inputs.config), f"--gaps {opts.gaps}: must be at least 1")
        memory_path = self.out / MEMORY_DB
        if memory_path.exists() and not opts.resume:
            raise InputError(str(self.out), "a run already exists in this folder: add --resume to continue it, "
                                            "or choose another --out")
        if opts.resume and not memory_path.exists():
            opts = self.opts = opts.model_copy(update={"resume": False})  # nothing to continue: --resume starts the run
        responses, items = load_panel(inputs.responses, inputs.items, opts.models, opts.models_file)
        assert items is not None
        all_items = items
        self.replay = None
        if config.simulated and config.sim is not None and config.sim.world == "replay":
            from benchfill.models.replay import split_for_replay

            # the benchmark is the held-in items, thinned; the pool and the full pass rates drive the replay world
            self.replay = split_for_replay(responses, config.sim.holdout, config.sim.rollouts,
                                           seed=config.sim.seed + opts.seed)
            pool = set(self.replay.pool_ids)
            responses, items = self.replay.benchmark, [it for it in items if it.id not in pool]
        self.model_selection = responses.meta.get("selection")  # which models were kept (the CLI says so)
        # the labelling panel, checked before the run folder is made (the simulated one is built from the scale)
        checked_panel = None if config.simulated else _check_panel(config, list(responses.models), inputs.items)
        fingerprint = inputs.fingerprint(prompt_library.overrides_digest())
        if opts.resume:
            self.bank = MemoryBank(memory_path)
            if self.bank.meta("fingerprint") != fingerprint:
                raise InputError(str(self.out), "--resume: the items, responses, config, prompt templates or options "
                                                "differ from the run in this folder")
        else:
            # the bank and its fingerprint come into being together (an atomic rename), before the diagnosis:
            # a kill at any instant of the start leaves either no run or a run that --resume continues
            self.bank = MemoryBank.create(
                memory_path, fingerprint=fingerprint, simulated=config.simulated,
                config=config.model_dump(mode="json", exclude={"source"}), rewriter=config.role("rewriter").label,
                judge=config.role("judge").label, params=self.params.model_dump(), n_gaps=opts.gaps,
                items=str(inputs.items), responses=str(inputs.responses))
        self.diagnosis, self.scale = self._diagnosis(responses, items)
        by_id = {it.id: it for it in items}
        self.items: list[Item] = [by_id[i] for i in self.scale.item_ids]
        self.d = np.array([it.d for it in self.diagnosis.items])
        self.panel = checked_panel if checked_panel is not None else simulated_panel(config, self.scale)
        self.floor_gaps: list[tuple[float, float]] = []  # the diagnosis' gaps the panel cannot measure: passed over
        # where the panel can place a child (None: too many keys to enumerate): the floor test and each gap's
        # resolution read the same placements
        self.attainable = panel_attainable_d(self.scale, self.panel)
        if not opts.allow_floor_gaps:
            self.floor_gaps = refuse_floor_gaps(self.diagnosis, self.panel, opts.gaps, str(inputs.responses),
                                                self.attainable)
        sim: Any = None  # the replay world or the simulated one
        if self.replay is not None:
            from benchfill.models.replay import TRUTH_FILE, build_world

            s = config.sim
            sim, truth = build_world(self.replay.full, {it.id: it for it in all_items}, self.replay.pool_ids,
                                     self.scale, s, (s.seed if s else 0) + opts.seed)
            atomic_write_json(self.out / TRUTH_FILE, truth)
        elif config.simulated:
            from benchfill.models.sim import SimWorld

            s = config.sim
            kwargs = {} if s is None else dict(step=s.step, noise=s.noise, scatter=s.scatter,
                                                   invalid_rate=s.invalid_rate,
                                                   format_failure_rate=s.format_failure_rate)
            sim = SimWorld.from_abilities(
                {m.model: m.theta for m in self.diagnosis.models},
                {it.item_id: it.b for it in self.diagnosis.items}, seed=(s.seed if s else 0) + opts.seed,
                b_range=(self.scale.b_min, self.scale.b_max), **kwargs,
            )
        self.sim = sim
        self.prompts = prompt_library
        self.text_prior = prescreen.for_run(self.params.prescreen, self.items, self.scale.b_mean, opts.seed)
        self.bank.set_meta(panel=[m.label for m in self.panel])  # an upsert: the same on every start
        if self.text_prior is not None:
            self.bank.set_meta(prescreen=prescreen.record(self.text_prior).model_dump())

    @property
    def simulated(self) -> bool:
        return self.config.simulated

    @property
    def banner(self) -> str:
        """What answers this run: the replay world, the simulated one, or "" for real models."""
        from benchfill.models.replay import REPLAY_BANNER

        return REPLAY_BANNER if self.replay is not None else SIM_BANNER if self.simulated else ""

    def diagnosis_line(self) -> str:
        """The diagnosis the search acts on, in one line: its largest gaps and which of them the panel cannot
        measure (passed over: the same floor test as the search's own)."""
        dg = self.diagnosis
        shown = ", ".join(f"[{g.lo:.3f}, {g.hi:.3f}]" + (" (at the panel's floor: passed over)"
                                                        if (g.lo, g.hi) in self.floor_gaps else "")
                          for g in dg.gaps[: self.opts.gaps + len(self.floor_gaps)])
        return (f"diagnosis ({len(dg.items)} items, {len(self.scale.models)} models; {self.out / 'diagnosis.json'}): "
                f"largest gaps {shown}; the search re-ranks the gaps after each insertion")

    def _diagnosis(self, responses, items) -> tuple[Diagnosis, Scale]:
        json_path, scale_path = self.out / "diagnosis.json", self.out / "diagnosis.scale.npz"
        if self.opts.resume and json_path.exists() and scale_path.exists():
            try:
                return Diagnosis.model_validate_json(json_path.read_text()), Scale.load(scale_path)
            except ValidationError:
                raise InputError(str(json_path), "not a benchfill diagnosis JSON") from None
        from benchfill.diagnostics.render import plot_diagnosis

        method = self.opts.sampler or SamplerSettings().method  # "" (the default) = the library default, fast
        spec = IRTSpec.for_items(responses.item_ids, items)
        dg, fit = diagnose(responses, spec, SamplerSettings(method=method, seed=self.opts.seed))
        scale = Scale.from_fit(fit, source=str(self.inputs.responses))
        dg.files = {"json": str(json_path), "png": str(self.out / "diagnosis.png"), "scale": str(scale_path)}
        scale.save(scale_path)
        plot_diagnosis(dg, self.out / "diagnosis.png")
        atomic_write_text(json_path, dg.model_dump_json(indent=2) + "\n")
        return dg, scale

    def run(self) -> dict[str, Any]:
        """Run the searches to their end (BenchFill's; with ``compare`` then the baseline's), write the summary and
        report.html; returns the summary. Synchronous: the graphs run on an event loop of their own
        (:func:`benchfill.aio.run_sync`, also where one is running already)."""
        targets = [(g.lo, g.hi) for g in self.diagnosis.gaps if (g.lo, g.hi) not in self.floor_gaps]
        fixed = [] if self.params.sequential else targets[: self.opts.gaps]
        if not self.params.sequential and len(fixed) < self.opts.gaps:
            raise InputError(str(self.inputs.responses), f"--gaps {self.opts.gaps}: the diagnosis lists only "
                                                       f"{len(fixed)} gaps")
        bf = run_sync(self._searches(fixed))
        summary = self.summary(final_state=bf)
        atomic_write_json(self.out / SUMMARY, summary)
        from benchfill.viewer import write_report

        write_report(self.out, bank=self.bank)  # report.html: the run in a browser (benchfill view serves it)
        return summary

    async def _searches(self, fixed: list[tuple[float, float]]) -> FillState:
        """The searches with the run's model client, opened and closed on the loop they run on; returns BenchFill's
        final state."""
        usage = Usage()
        client = ModelClient(self.out / MEMORY_DB, sim=self.sim, on_result=usage.add)
        ctx = FillContext(
            items=self.items, d=self.d, scale=self.scale, config=self.config, panel=self.panel, params=self.params,
            bank=self.bank, client=client, usage=usage, prompts=self.prompts, label_dir=self.out / "labels",
            prescreen=self.text_prior, attainable_d=self.attainable, skip_floor_gaps=not self.opts.allow_floor_gaps)
        ckpt = self.out / CHECKPOINTS_DB
        try:
            bf = await search(ctx, ckpt, FillState(method="benchfill", n_gaps=self.opts.gaps, fixed_gaps=fixed),
                              resume=self.opts.resume, on_event=self.on_event)
            if self.opts.compare:
                rounds = [g.rounds or 0 for g in self.bank.gaps("benchfill")]
                await search(ctx, ckpt, FillState(method="baseline", n_gaps=self.opts.gaps, fixed_gaps=fixed,
                                                  budget_rounds=rounds), resume=self.opts.resume,
                             on_event=self.on_event)
            return bf
        finally:
            await client.aclose()

    def close(self) -> None:
        self.bank.close()

    def summary(self, final_state: FillState | None = None) -> dict[str, Any]:
        return summarise(self.bank, self.d, self.opts.gaps, self.simulated, self.diagnosis,
                         replay=self.replay is not None)


def summarise(bank: MemoryBank, d: np.ndarray, n_gaps: int, simulated: bool, diagnosis: Diagnosis | None = None,
              replay: bool = False) -> dict[str, Any]:
    """Table 2: per gap the target, chosen d, |d - t| with posterior SD, rounds, candidates, cost; and the relative
    reduction of the Top-3 gap sum after the insertions for BenchFill, the baseline (if run) and the oracle."""
    methods: dict[str, Any] = {}
    for method in ("benchfill", "baseline"):
        gaps = bank.gaps(method)
        if not gaps:
            continue
        chosen = [g for g in gaps if g.status in CHOSEN]
        inserted = [g.chosen_d for g in chosen if g.chosen_d is not None]
        devs = [g.deviation for g in chosen if g.deviation is not None]
        methods[method] = {
            "gaps": [{**{k: getattr(g, k) for k in GAP_FIELDS}, **_gap_calls(bank, method, g.gap)} for g in gaps],
            "filled": sum(g.status == GapStatus.FILLED for g in gaps),
            "chosen": len(chosen),
            "top3_reduction": top_k_reduction(d, inserted, 3),
            "mean_deviation": float(np.mean(devs)) if devs else None,
            "candidates": int(sum(g.n_candidates or 0 for g in gaps)),
            "cost": float(sum(g.cost or 0.0 for g in gaps)),
        }
    oracle = oracle_insertions(d, n_gaps)
    out = {
        "simulated": simulated,
        "n_items": int(len(d)),
        "top3_before": float(np.sort(np.diff(np.concatenate([[0], np.sort(np.clip(d, 0, 1)), [1]])))[::-1][:3].sum()),
        "methods": methods,
        "oracle": {"inserted": oracle, "top3_reduction": top_k_reduction(d, oracle, 3)},
    }
    if replay:
        from benchfill.models.replay import REPLAY_BANNER

        out = {"label": REPLAY_BANNER, "world": "replay", **out}
    elif simulated:
        out = {"label": SIM_BANNER, "world": "irt", **out}
    return out


CHOSEN = CHOSEN_GAP_STATUSES  # a child was chosen: "filled" at P(inside) >= fill_level, else "near"
GAP_FIELDS = ("gap", "lo", "hi", "target", "status", "chosen", "chosen_d", "chosen_d_sd", "chosen_gap_sd", "deviation", "p_inside",
              "p_within", "tolerance", "resolution", "children_mu", "children_sigma", "rounds", "n_candidates", "cost", "stop_reason", "note")


def _gap_calls(bank: MemoryBank, method: str, gap: int) -> dict[str, int]:
    """Panel calls of one gap: the search's labelling and the chosen child's confirmation."""
    by = bank.calls_by_node(method, gap)
    return {"search_calls": int(by.get("label", 0)), "confirm_calls": int(by.get("confirm", 0))}


def true_gap_figures(out: str | Path, method: str = "benchfill") -> list[dict[str, Any]]:
    """Per gap with a chosen child (filled or near) of a SIMULATED or REPLAY run folder: the chosen child's TRUE d
    (simulated world: its latent b; replay world: its placement under unlimited equal labelling at the real pass
    rates, ``replay_truth.json``;
    both on the benchmark's scale), whether it truly lies inside the gap, its true and estimated |d - t|, its
    posterior SD of d, P(inside), P(within tolerance), the status, the rounds and the panel calls of the search and
    of the confirmation. For benchmarks of the search itself (the truth is known only there)."""
    from benchfill.models.replay import load_truth
    from benchfill.models.sim import latent_from_text, text_key

    out = Path(out)
    sc = Scale.load(out / "diagnosis.scale.npz")
    truth = load_truth(out)
    bank = MemoryBank(out / MEMORY_DB)
    try:
        rows = []
        for g in bank.gaps(method):
            if g.status not in CHOSEN:
                continue
            assert g.chosen is not None and g.target is not None and g.lo is not None and g.hi is not None, g.gap
            chosen = bank.candidate(g.chosen)
            assert chosen is not None and chosen.question is not None, g.chosen  # one of the gap's candidates
            q = chosen.question
            if truth is not None:
                true_d = truth[text_key(q)]
            else:
                true_d = float(sc.normalise(np.array([latent_from_text(q)]))[0])
            calls = _gap_calls(bank, method, g.gap)
            rows.append({"gap": g.gap, "calls": calls["search_calls"], "confirm_calls": calls["confirm_calls"],
                         "true_d": true_d, "true_dev": abs(true_d - g.target),
                         "truly_inside": bool(g.lo < true_d < g.hi), "dev": g.deviation,
                         "sd": g.chosen_d_sd, "p_inside": g.p_inside, "p_within": g.p_within,
                         "status": g.status, "rounds": g.rounds, "lo": g.lo, "hi": g.hi,
                         "target": g.target})
        return rows
    finally:
        bank.close()
