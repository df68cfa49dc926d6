"""The diagnosis of one benchmark: the documented JSON contract (``Diagnosis``) and the function that builds it.

``diagnose(responses, spec, settings)`` runs IRT, the seven checks and every metric of README: Reading the figures.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from pydantic import BaseModel, Field, PrivateAttr

from benchfill._version import __version__
from benchfill.data import ResponseMatrix
from benchfill.diagnostics import guessing as G
from benchfill.diagnostics import metrics as M
from benchfill.diagnostics.guessing import GuessingComparison
from benchfill.diagnostics.guidance import check_advice, guessing_advice, verdict_advice
from benchfill.diagnostics.null import (
    THRESHOLDS,
    attainable_b,
    design_null,
    gap_is_unfillable,
    key_floor,
    summarise_null,
)
from benchfill.forking import ForkedCall
from benchfill.irt.checks import Check, run_checks
from benchfill.irt.fast import reduce_items, unique_rows
from benchfill.irt.fit import fit_irt
from benchfill.irt.gibbs import GIBBS_MIN_MODELS
from benchfill.irt.model import IRTFit, IRTSpec, SamplerSettings, thin_draws
from benchfill.irt.placement import exact_item_moments
from benchfill.irt.prior import Population

if TYPE_CHECKING:
    from benchfill.diagnostics.picture import Painter, Picture

StageFn = Callable[[str], None]  # told the name of each stage of a diagnosis as it starts
PictureFn = Callable[["Picture"], None]  # given the diagnosis picture as soon as the metrics are known


def _no_stage(_: str) -> None:
    return None


# 6: the population's tails (population.tail_scale_easy, tail_scale_hard); 5: guessing_comparison; 4: advice; 3: the difficulty
# population (population, reach; gaps' beyond_reach)
SCHEMA_VERSION = 6
NULL_REPLICATES = 200
NULL_TOL = 1e-9  # the null reproduces a coarse design's plug-in exactly: only a real excess may flag
NAMES = {"ddm": "DDM", "max_gap": "max gap", "top5_sum": "Top-5 sum"}


class GapOut(BaseModel):
    lo: float
    hi: float
    mid: float
    width: float
    at_floor: bool = Field(False, description="no placement the benchmark's own design can give lies strictly "
                                              "inside: an item answered like the others cannot be seen to fill it")
    beyond_reach: bool = Field(False, description="the gap ends at items solved by no model or by every model "
                                                  "(b bounded on one side only): stronger or weaker models would "
                                                  "resolve it, more rollouts of these would not")


class PopulationOut(BaseModel):
    """The difficulty population g(b) the difficulties were given as their prior (README: IRT and checks)."""

    kind: str = Field(description="'spline' (learned log-spline, the default), 'normal' (learned N(mu, sigma)) or "
                                  "'paper' (the paper's fixed N(0, 1))")
    label: str
    mean: float = Field(description="mean of g, logits")
    sd: float = Field(description="SD of g, logits")
    q05: float
    q50: float
    q95: float
    mu: float = Field(description="the envelope's centre, logits")
    sigma: float = Field(description="the envelope's scale (the normal's SD), logits")
    tail_scale_easy: float | None = Field(None, description="scale (logits) of the exponential tail on the easy "
                                                            "side (low b), None for the normal's tail; learned from "
                                                            "the items the panel measures")
    tail_scale_hard: float | None = Field(None, description="the same on the hard side (high b): how far beyond the "
                                                            "panel's reach the items no model solves are placed")
    spline_coefficients: int = Field(0, description="coefficients of the spline correction (0: none)")
    penalty: float = Field(0.0, description="ridge penalty of the spline, chosen by BIC")
    curve: list[tuple[float, float]] = Field(default_factory=list, description="(b, density) for pictures")

    @classmethod
    def of(cls, prior: Population, points: int = 121) -> "PopulationOut":
        mean, sd = prior.moments()
        q = prior.quantiles([0.05, 0.5, 0.95])
        x, dens = prior.grid(points)
        return cls(kind=prior.kind, label=prior.label(), mean=mean, sd=sd, q05=float(q[0]), q50=float(q[1]),
                   q95=float(q[2]), mu=prior.mu, sigma=prior.sigma,
                   tail_scale_easy=prior.tail_scale("lo"), tail_scale_hard=prior.tail_scale("hi"),
                   spline_coefficients=int(prior.coef.size),
                   penalty=prior.penalty, curve=[(round(float(a), 4), float(f"{b:.5g}")) for a, b in zip(x, dens)])


class ReachOut(BaseModel):
    """Items beyond the panel's reach: solved by no model in any trial, or by every model in every trial. Their b
    is bounded on one side only (the population's tail places them), yet they set the axis' ends."""

    solved_by_none: int
    solved_by_all: int
    share: float = Field(description="share of items beyond reach")
    span_within_reach: float | None = Field(
        None, description="(max b - min b) of the items within reach, as a share of the whole axis' span: how "
                          "much of the axis the items beyond reach add (1 = none)")


class MetricPosterior(BaseModel):
    """A metric's posterior over the draws, each draw normalised by itself: the calibrated statement about the
    benchmark's true metric."""

    mean: float
    sd: float
    q05: float
    q95: float


class MetricNull(BaseModel):
    """The metric (plug-in, exact per-key means) of hole-free benchmarks under the same design."""

    median: float
    q95: float


class NullOut(BaseModel):
    ddm: MetricNull
    max_gap: MetricNull
    top5_sum: MetricNull
    replicates: int
    theta_draws: int = Field(description="ability draws behind each simulated key's exact posterior mean")


class ResolutionOut(BaseModel):
    distinct_keys: int = Field(description="distinct likelihood keys = distinct values d can take")
    max_gap_floor: float = Field(description="1 / (keys - 1): no benchmark can show a smaller max gap")
    top5_floor: float = Field(description="min(5, keys - 1) / (keys - 1): no benchmark can show a smaller Top-5")
    at_floor: bool = Field(description="the design alone reaches a flag threshold (key floor or null median)")


class CheckOut(BaseModel):
    name: str
    description: str
    passed: bool | None
    value: float | None
    threshold: float
    comparison: str
    details: dict[str, Any] = Field(default_factory=dict)


class ItemOut(BaseModel):
    item_id: str
    b: float
    b_sd: float
    d: float


class ModelOut(BaseModel):
    model: str
    theta: float
    theta_sd: float
    accuracy: float


class SamplerOut(BaseModel):
    method: str
    chains: int
    tune: int
    draws: int
    seed: int
    target_accept: float
    wall_time_s: float
    preview: bool = Field(description="True for a MAP point estimate: no posterior, no MCMC checks, and SDs are "
                                      "conditional Laplace approximations that understate (theta: median 0.79 of "
                                      "the posterior SD)")
    divergences: int


class Diagnosis(BaseModel):
    """What ``benchfill diagnose --json`` writes. Difficulties b are logits (larger = harder); d is b min-max
    normalised with the posterior-mean b of this benchmark; every ``*_sd`` is a posterior SD over draws, each draw
    normalised by itself (null for a MAP preview)."""

    def __repr__(self) -> str:
        """One line (the whole record is ``model_dump()``; the CLI's tables are ``diagnosis_tables``)."""
        def sd(x: float | None) -> str:
            return "" if x is None else f" ± {x:.3f}"

        flagged = [k for k, v in self.flags.items() if v]
        return (f"Diagnosis({self.source!r}: {self.n_models} models x {self.n_items} items, {self.irt_model}; "
                f"DDM {self.ddm:.3f}{sd(self.ddm_sd)}, max gap {self.max_gap:.3f}{sd(self.max_gap_sd)}, Top-5 "
                f"{self.top5_sum:.3f}{sd(self.top5_sum_sd)}; flags: {', '.join(flagged) or 'none'})")

    __str__ = __repr__

    schema_version: int = SCHEMA_VERSION
    benchfill_version: str = __version__
    created_at: str
    source: str
    n_models: int
    n_items: int
    irt_model: str
    guessing: float | None = Field(None, description="fixed guessing rate c = 1/k used for every item, if any")
    sampler: SamplerOut
    ddm: float = Field(description="the paper's plug-in figure: DDM of the posterior-mean b (exact per-key means)")
    ddm_sd: float | None = Field(description="posterior SD of DDM (pairs with posterior.ddm.mean, not with ddm)")
    w1_uniform: float = Field(description="W1 to the continuous U[0, 1] (plug-in)")
    w1_uniform_sd: float | None
    max_gap: float = Field(description="plug-in max gap (the paper's figure)")
    max_gap_sd: float | None
    top5_sum: float = Field(description="plug-in Top-5 gap sum (the paper's figure)")
    top5_sum_sd: float | None
    posterior: dict[str, MetricPosterior] | None = Field(
        None, description="ddm, w1_uniform, max_gap, top5_sum over posterior draws (null for a MAP preview)")
    null: NullOut | None = Field(None, description="design-aware null (README: Reading the figures); null where it does not "
                                                   "apply (2PL, estimated guessing)")
    resolution: ResolutionOut | None = None
    population: PopulationOut | None = Field(None, description="the difficulty population (the prior of every b)")
    reach: ReachOut | None = Field(None, description="items beyond the panel's reach and how the axis depends "
                                                     "on them")
    uniform_median_max_gap: float = Field(description="the paper's baseline: median max gap of n i.i.d. U(0, 1)")
    uniform_baseline_ratio: float = Field(description="the paper's ratio: plug-in max gap / that median")
    flags: dict[str, bool] = Field(description="fires when the posterior mean reaches the paper's threshold AND "
                                               "the plug-in exceeds the null's 95th percentile")
    verdicts: dict[str, str] = Field(default_factory=dict,
                                     description="per metric: 'flag', 'ok', or 'at floor' (reaches the threshold "
                                                 "but not the null's 95th percentile: the design, not the benchmark)")
    warnings: list[str] = Field(default_factory=list)
    advice: list[str] = Field(default_factory=list, description="what each verdict other than a plain ok and each "
                                                                "failed check means, and what to do next")
    guessing_comparison: GuessingComparison | None = Field(
        default=None, description="with a fixed guessing rate: the 1PL refitted with c = 0 and which of the two "
                                  "the counts favour (leave-one-item-out elpd), with the verdicts under c = 0")
    timings: dict[str, float] = Field(default_factory=dict, description="seconds per stage")
    gaps: list[GapOut] = Field(description="largest first")
    checks: list[CheckOut]
    items: list[ItemOut]
    models: list[ModelOut]
    theory: dict[str, Any] = Field(default_factory=dict)
    robustness: dict[str, Any] | None = None
    files: dict[str, str] = Field(default_factory=dict)

    _scale: Any = PrivateAttr(default=None)

    def attach_scale(self, fit: IRTFit) -> None:
        """Keep the fit's scale (thinned ability draws and the axis), so :meth:`save` can write it for placing new
        items later; the fit itself, with its difficulty draws, can then be freed."""
        from benchfill.irt.scale import Scale

        self._scale = Scale.from_fit(fit, source=self.source)

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)

    def plot(self, path: str | Path | None = None, n_gaps: int = 5):
        """The picture (ECDF of d against the uniform, items on the axis, largest gaps shaded): written to
        ``path`` as PNG, or returned as a matplotlib Figure."""
        from benchfill.diagnostics.render import diagnosis_figure, plot_diagnosis

        return plot_diagnosis(self, path, n_gaps) if path is not None else diagnosis_figure(self, n_gaps)

    def save(self, where: str | Path, png: str | Path | None = None, n_gaps: int = 5, write_json: bool = True,
             painter: Painter | None = None) -> Path:
        """Write ``diagnosis.json`` (``where`` is a folder, or the JSON path itself), the PNG and, when the fit
        is attached, the ``.scale.npz`` next to it, as ``benchfill diagnose`` does. Returns the JSON path
        (``write_json=False``: everything but the JSON, which the caller writes elsewhere). A ``painter``
        started earlier draws the PNG in its own process (see :class:`benchfill.diagnostics.picture.Painter`)."""
        from benchfill.diagnostics.picture import Painter
        from benchfill.diagnostics.render import picture_of
        from benchfill.io import atomic_write_text

        where = Path(where)
        json_path = where if where.suffix == ".json" else where / "diagnosis.json"
        png_path = Path(png) if png is not None else json_path.with_suffix(".png")
        files = {"json": str(json_path), "png": str(png_path)}
        painter = painter or Painter.here()
        if not painter.has_picture:  # a painter given the picture early (see build_diagnosis) has drawn it
            painter.draw(picture_of(self, n_gaps))
        clock = time.perf_counter()
        if self._scale is not None:
            files["scale"] = str(json_path.with_suffix(".scale.npz"))
            self._scale.save(files["scale"])
        self.timings["write_scale"] = round(time.perf_counter() - clock, 3)
        self.files = files
        clock = time.perf_counter()
        painter.write(png_path)
        self.timings["render"] = round(time.perf_counter() - clock, 3)  # the wait for the picture
        if write_json:
            atomic_write_text(json_path, self.model_dump_json(indent=2) + "\n")
        return json_path

    @property
    def checks_passed(self) -> int:
        return sum(1 for c in self.checks if c.passed)

    def d_values(self) -> np.ndarray:
        return np.array([it.d for it in self.items])


def posterior_metric_draws(b_draws: np.ndarray, max_draws: int = 1000, chunk: int = 50) -> dict[str, np.ndarray]:
    """DDM, W1-to-uniform, max gap and Top-5 per posterior draw, each draw normalised by itself.

    b_draws: (S, I) logits. At most ``max_draws`` draws are used (evenly thinned) and processed in chunks so
    memory stays bounded for 40k-item suites.
    """
    draws = thin_draws(b_draws, max_draws)
    out: dict[str, list[np.ndarray]] = {"ddm": [], "w1_uniform": [], "max_gap": [], "top5_sum": []}
    for start in range(0, len(draws), chunk):
        for k, v in M.headline_metrics(M.normalise(draws[start : start + chunk]), w1=True).items():
            out[k].append(np.atleast_1d(v))
    return {k: np.concatenate(v) for k, v in out.items()}


def summarise_posterior(per_draw: dict[str, np.ndarray]) -> dict[str, MetricPosterior]:
    return {k: MetricPosterior(mean=float(v.mean()), sd=float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                               q05=float(np.quantile(v, 0.05)), q95=float(np.quantile(v, 0.95)))
            for k, v in per_draw.items()}


def theory_summary(d: np.ndarray, w1: float) -> dict[str, Any]:
    """``w1``: W1 between the benchmark's d and the continuous target U[0, 1] (Theorem 2.1's distance)."""
    """What Theorems 2.1 and 2.3 say about this benchmark (per unit Lipschitz constant of the performance gap)."""
    from benchfill.diagnostics import theory

    mg = float(M.max_gap(d))
    holes = theory.undetectable_intervals(d, 0.05)
    return {
        "theorem_2_1": {
            "w1": w1,
            "gap_error_bound_per_L": theory.gap_error_bound(1.0, w1),
            "statement": "|observed gap - target gap| <= L * W1: a ranking cannot flip when the target gap exceeds "
            "L * W1",
        },
        "theorem_2_3": {
            "max_gap": mg,
            "power_inside_max_gap": theory.worst_case_power(mg, mg).power,
            "statement": "an improvement confined to an interval narrower than the max gap is undetectable in the "
            "worst case (power = alpha), whatever the rollouts",
            "undetectable_intervals_wider_than_0.05": [g.model_dump() for g in holes[:10]],
        },
    }


def decide(plug_in: dict[str, float], posterior: dict[str, MetricPosterior] | None,
           null: dict[str, MetricNull] | None) -> tuple[dict[str, bool], dict[str, str]]:
    """Flags and verdicts (README: Reading the figures). A flag fires when the metric's posterior mean (the plug-in for a MAP
    preview) reaches the paper's threshold AND the plug-in exceeds the null's 95th percentile (the same estimator
    on hole-free benchmarks of the same design); 'at floor' when the threshold is reached but not the null."""
    flags, verdicts = {}, {}
    for k, threshold in THRESHOLDS.items():
        estimate = posterior[k].mean if posterior else plug_in[k]
        above_null = null is None or plug_in[k] > null[k].q95 + NULL_TOL
        flags[k] = bool(estimate >= threshold and above_null)
        reaches = estimate >= threshold or plug_in[k] >= threshold
        verdicts[k] = "flag" if flags[k] else ("at floor" if reaches and not above_null else "ok")
    return flags, verdicts


def resolution_of(responses: ResponseMatrix, guessing: np.ndarray | None,
                  null: dict[str, MetricNull] | None) -> ResolutionOut:
    keys = reduce_items(responses.n_correct, responses.n_trials, guessing).n_keys
    gap_floor, top5_floor = key_floor(keys)
    at_floor = gap_floor >= M.FLAG_MAX_GAP or top5_floor >= M.FLAG_TOP5 or (
        null is not None and (null["max_gap"].median >= M.FLAG_MAX_GAP or null["top5_sum"].median >= M.FLAG_TOP5))
    return ResolutionOut(distinct_keys=keys, max_gap_floor=gap_floor, top5_floor=top5_floor, at_floor=bool(at_floor))


MODAL_MIN_SHARE = 0.1  # a column of trials shared by fewer items than this is no design's typical item


def modal_pattern(n_trials: np.ndarray) -> np.ndarray:
    """(J,) how the benchmark's typical item was answered: the most common column of trials, where at least
    MODAL_MIN_SHARE of the items share it; in a sparse matrix, where nearly every item has its own panel, the
    column of an item answered by the median number of models (the most common column there would be an
    arbitrary one, often among the least answered)."""
    n = np.asarray(n_trials)
    patterns, _, _, counts = unique_rows(n.T)
    if counts.max() >= MODAL_MIN_SHARE * n.shape[1]:
        return patterns[int(np.argmax(counts))]
    answered = (n > 0).sum(0)
    median = np.sort(answered)[(answered.size - 1) // 2]
    return n[:, int(np.flatnonzero(answered == median)[0])]


def _common_guessing(guess: np.ndarray | None) -> bool:
    return guess is None or bool(np.all(guess == guess[0]))


def _design(responses: ResponseMatrix) -> str:
    n = responses.n_trials[responses.n_trials > 0]
    trials = f"{int(np.median(n))} trial" + ("s" if np.median(n) != 1 else "") + " per cell"
    return f"{responses.shape[0]} models x {trials}"


def design_warnings(responses: ResponseMatrix, resolution: ResolutionOut, verdicts: dict[str, str],
                    null: NullOut | None) -> list[str]:
    """Plain-language lines for the terminal and the JSON when the design, not the benchmark, sets the figures."""
    out = []
    if resolution.at_floor:
        line = (f"the design sets the gaps: {_design(responses)} give {resolution.distinct_keys} distinct "
                f"difficulty values, so max gap >= {resolution.max_gap_floor:.3f} and Top-5 >= "
                f"{resolution.top5_floor:.3f} for any benchmark")
        if null is not None:
            line += (f"; a benchmark without holes answered by this panel shows max gap {null.max_gap.median:.3f}"
                     f" and Top-5 {null.top5_sum.median:.3f} (null median)")
        out.append(line + ". More models or more rollouts per item would lift this floor.")
    floor = [NAMES[k] for k, v in verdicts.items() if v == "at floor"]
    if floor:
        out.append(f"{', '.join(floor)} reach the paper's threshold but not the design's null 95th percentile: "
                   "at the design's resolution floor, not flagged.")
    return out


def null_range(responses: ResponseMatrix, fit: IRTFit, seed: int = 0) -> tuple[float, float]:
    """Where the null's uniform difficulties lie: the range of the uniform population that best fits this benchmark
    (maximum marginal likelihood, abilities at their posterior mean), i.e. this benchmark were its difficulties
    spread evenly over their own range. (The range of the posterior-mean b instead depends on the prior's pull on
    the extreme keys: a wide learned population pushes them out, and a null over that range flagged a uniform
    benchmark's DDM on a binary 12-model design.)"""
    from benchfill.irt import population

    keys = reduce_items(responses.n_correct, responses.n_trials, fit.spec.guessing)
    theta = fit.flat("theta").mean(0)
    return population.uniform_range(population.fit_grid(keys, theta, seed))


def reach_of(responses: ResponseMatrix, b: np.ndarray, d: np.ndarray) -> tuple[ReachOut, np.ndarray]:
    """Items beyond the panel's reach and the d values they sit at (sorted, unique)."""
    asked = responses.n_trials.sum(0)
    right = responses.n_correct.sum(0)
    none, every = (right == 0) & (asked > 0), (right == asked) & (asked > 0)
    beyond = none | every
    span = float(b.max() - b.min())
    inside = b[~beyond]
    within = float(np.ptp(inside)) / span if inside.size >= 2 and span > 0 else None
    out = ReachOut(solved_by_none=int(none.sum()), solved_by_all=int(every.sum()),
                   share=float(beyond.mean()) if beyond.size else 0.0, span_within_reach=within)
    return out, np.unique(d[beyond])


def touches(lo: float, hi: float, beyond_d: np.ndarray) -> bool:
    """Whether a gap [lo, hi] ends at an item beyond the panel's reach."""
    return bool(beyond_d.size and np.min(np.abs(beyond_d[:, None] - np.array([lo, hi])[None, :])) <= 1e-12)


def reach_warnings(reach: ReachOut, top: list, beyond_d: np.ndarray) -> list[str]:
    """A line when items beyond reach stretch the axis or bound its largest gap."""
    out = []
    n = reach.solved_by_none + reach.solved_by_all
    if n and reach.span_within_reach is not None and reach.span_within_reach < 0.9:
        out.append(f"{n} item(s) are beyond the panel's reach ({reach.solved_by_none} solved by no model, "
                   f"{reach.solved_by_all} by every model): their difficulty is bounded on one side only and set by "
                   f"the population's tail, yet they stretch the axis (the items within reach span "
                   f"{reach.span_within_reach:.0%} of it). Stronger and weaker models would place them.")
    if top and touches(top[0].lo, top[0].hi, beyond_d):
        out.append(f"the largest gap [{top[0].lo:.3f}, {top[0].hi:.3f}] ends at items beyond the panel's reach: "
                   "its width depends on where the population's tail puts them.")
    return out


def build_diagnosis(
    responses: ResponseMatrix,
    fit: IRTFit,
    checks: list[Check],
    *,
    top_gaps: int = 10,
    baseline_sims: int = 2000,
    null_replicates: int = NULL_REPLICATES,
    seed: int = 0,
    timings: dict[str, float] | None = None,
    on_stage: StageFn | None = None,
    on_picture: PictureFn | None = None,
) -> Diagnosis:
    """Assemble the report from a fit: plug-in metrics from the (exact per-key) posterior-mean b, their posterior
    from per-draw metrics, the design's resolution and null, flags and verdicts. ``on_stage(text)`` is told
    each stage as it starts (for a progress display); ``on_picture(picture)`` gets the diagnosis picture as soon
    as the verdicts are known (a painter draws it while the report is assembled)."""
    stage = on_stage or _no_stage
    timings = dict(timings or {})
    stage("posterior metrics (DDM, gaps, Top-5 per draw)")
    clock = time.perf_counter()
    b = fit.b_mean
    d = M.normalise(b)
    plug_in = {k: float(v) for k, v in M.headline_metrics(d).items()}  # one benchmark: scalars
    w1 = float(M.w1_to_continuous_uniform(d))
    posterior = None if fit.is_map else summarise_posterior(posterior_metric_draws(fit.flat("b")))
    median_gap = M.uniform_max_gap_median(len(d), baseline_sims, seed)
    timings["metrics"] = time.perf_counter() - clock
    top = M.gaps(d, top=top_gaps)
    prior = fit.spec.population_prior
    population = PopulationOut.of(prior)
    stage("the design's null (benchmarks without holes, answered like this one)")
    clock = time.perf_counter()
    guess = fit.spec.guessing
    null_out = None
    if fit.spec.kind == "1pl" and fit.c is None:
        b_range = null_range(responses, fit, seed)
        # the replicates' exact means use the benchmark's own learned population: a population learned once
        # from pooled hole-free replicates lacks the noise of one benchmark's and flagged a uniform benchmark's
        # DDM on a binary 12-model design; the observed one keeps its features in both (conservative)
        sims = design_null(fit.flat("theta"), responses.n_trials, guess, b_range,
                           replicates=null_replicates, seed=seed, prior=prior)
        null_out = NullOut(**{k: MetricNull(**v) for k, v in summarise_null(sims).items()},
                           replicates=null_replicates, theta_draws=int(sims["theta_draws"]))
    guess_value = float(np.max(guess)) if guess is not None and np.any(guess > 0) else None
    attainable = None  # where a new item answered like the benchmark's typical item can land
    if fit.spec.kind == "1pl" and fit.c is None and _common_guessing(guess):
        values = attainable_b(fit.flat("theta"), modal_pattern(responses.n_trials), guess_value or 0.0, prior)
        attainable = None if values is None else M.normalise(values, b.min(), b.max())
    timings["null"] = time.perf_counter() - clock  # the null and the placements a new item can reach
    null_by_metric = None if null_out is None else {k: getattr(null_out, k) for k in THRESHOLDS}
    flags, verdicts = decide(plug_in, posterior, null_by_metric)
    if on_picture is not None:  # with its verdicts, so after the null; drawn while the rest is assembled
        from benchfill.diagnostics.picture import Picture, model_label, population_on_axis

        on_picture(Picture.of(responses.source, len(fit.models), d, top, posterior, plug_in, fit.is_map,
                              n_gaps=top_gaps, population=population_on_axis(population.curve, float(b.min()),
                                                                              float(b.max())),
                              population_label=population.kind, verdicts=verdicts, thresholds=THRESHOLDS,
                              model=model_label(fit.spec.kind, guess_value)))
    resolution = resolution_of(responses, guess, null_by_metric)
    reach, beyond_d = reach_of(responses, b, d)
    acc = responses.accuracy_by_model()
    s = fit.settings
    sd = {k: (posterior[k].sd if posterior else None) for k in ("ddm", "w1_uniform", "max_gap", "top5_sum")}
    return Diagnosis(
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        source=responses.source,
        n_models=len(fit.models),
        n_items=len(fit.item_ids),
        irt_model=fit.spec.kind + ("+guessing" if guess_value else ""),
        guessing=guess_value,
        sampler=SamplerOut(
            method=s.method, chains=s.chains, tune=s.tune, draws=s.draws, seed=s.seed, target_accept=s.target_accept,
            wall_time_s=round(fit.wall_time_s, 3), preview=fit.is_map, divergences=fit.divergences,
        ),
        ddm=plug_in["ddm"], ddm_sd=sd["ddm"], w1_uniform=w1, w1_uniform_sd=sd["w1_uniform"],
        max_gap=plug_in["max_gap"], max_gap_sd=sd["max_gap"], top5_sum=plug_in["top5_sum"],
        top5_sum_sd=sd["top5_sum"], posterior=posterior, null=null_out, resolution=resolution,
        uniform_median_max_gap=median_gap, uniform_baseline_ratio=plug_in["max_gap"] / median_gap,
        population=population, reach=reach,
        flags=flags, verdicts=verdicts,
        warnings=design_warnings(responses, resolution, verdicts, null_out) + reach_warnings(reach, top, beyond_d),
        advice=verdict_advice(verdicts, THRESHOLDS, {k: (p.q05, p.q95) for k, p in posterior.items()}
                              if posterior else None, bool(top) and touches(top[0].lo, top[0].hi, beyond_d))
        + check_advice([c.name for c in checks if c.passed is False]),
        gaps=[GapOut(**g.model_dump(), at_floor=gap_is_unfillable(g.lo, g.hi, attainable),
                     beyond_reach=touches(g.lo, g.hi, beyond_d)) for g in top],
        checks=[CheckOut(**c.model_dump()) for c in checks],
        items=[ItemOut(item_id=i, b=float(bb), b_sd=float(sd), d=float(dd))
               for i, bb, sd, dd in zip(fit.item_ids, b, fit.b_sd, d)],
        models=[ModelOut(model=m, theta=float(t), theta_sd=float(sd), accuracy=float(a))
                for m, t, sd, a in zip(fit.models, fit.theta_mean, fit.theta_sd, acc)],
        theory=theory_summary(d, w1),
        timings={k: round(v, 3) for k, v in timings.items()},
    )


def has_fixed_guessing(spec: IRTSpec) -> bool:
    """A 1PL with a fixed guessing rate on some item: the fits :func:`compare_with_no_guessing` compares."""
    return spec.kind == "1pl" and spec.has_guessing and not spec.estimate_guessing


@dataclass(frozen=True)
class NoGuessingSide:
    """What :func:`compare_with_no_guessing` needs of the 1PL refitted without guessing: it depends on the data and
    settings only, not on the fit with guessing, so it can be computed beside that fit (in a forked child: every
    field pickles).

    Attributes:
        elpd: (K,) leave-one-item-out elpd per key of :func:`benchfill.diagnostics.guessing.count_keys`, nats.
        pareto_k: the worst Pareto k-hat of its importance ratios (None with < 10 draws).
        loglik_at_mean: log-likelihood of the counts at the c = 0 fit's posterior means, nats.
        verdicts, posterior_means: the c = 0 fit's verdicts and metrics' posterior means (None for a MAP preview).
        wall_time_s: what computing all this took, seconds.
    """

    elpd: np.ndarray
    pareto_k: float | None
    loglik_at_mean: float
    verdicts: dict[str, str]
    posterior_means: dict[str, float] | None
    wall_time_s: float


def fit_without_guessing(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings,
                         top_gaps: int = 10) -> NoGuessingSide:
    """The c = 0 side of :func:`compare_with_no_guessing` for a fit of ``spec`` (a 1PL with fixed guessing) with
    ``settings``: the plain 1PL with the same population kind, sampler settings and seed (so its verdicts are those
    ``--guessing 0`` prints; a NUTS fit's comparison uses the fast engine), its diagnosis and its per-key LOO."""
    from dataclasses import replace

    clock = time.perf_counter()
    settings = settings if settings.method in ("fast", "map") else replace(settings, method="fast")
    plain = fit_irt(responses, IRTSpec(kind="1pl", population=spec.population), settings)
    exact_item_moments(plain, responses)
    plain_dg = build_diagnosis(responses, plain, [], top_gaps=top_gaps, seed=settings.seed)
    c = np.asarray(spec.guessing, dtype=float)
    y, n, key_c, _ = G.count_keys(responses.n_correct, responses.n_trials, c)
    ll_0 = G.item_log_marginals(thin_draws(plain.flat("theta"), G.LOO_DRAWS), y, n, np.zeros_like(key_c),
                                plain.spec.population_prior)
    return NoGuessingSide(
        elpd=G.loo_from_draws(ll_0), pareto_k=G.worst_pareto_k(ll_0),
        loglik_at_mean=G.loglik_at(plain.theta_mean, plain.b_mean, np.zeros_like(c), responses.n_correct,
                                   responses.n_trials),
        verdicts=dict(plain_dg.verdicts),
        posterior_means=None if plain_dg.posterior is None else {k: p.mean for k, p in plain_dg.posterior.items()},
        wall_time_s=time.perf_counter() - clock)


def compare_with_no_guessing(responses: ResponseMatrix, fit: IRTFit, top_gaps: int = 10,
                             plain: NoGuessingSide | None = None) -> GuessingComparison:
    """The 1PL refitted without guessing (:func:`fit_without_guessing`, or ``plain`` where it was computed
    already), and which of the two the counts favour by leave-one-item-out elpd
    (:mod:`benchfill.diagnostics.guessing`). ``fit``: the fit with guessing (its exact per-key difficulties
    computed). Costs one fast fit without guessing (cheaper than the one with it: fewer likelihood keys), its null
    and two lattice integrals per item and ability draw. ``wall_time_s``: the c = 0 side's own time plus this
    call's."""
    clock = time.perf_counter()
    plain = plain if plain is not None else fit_without_guessing(responses, fit.spec, fit.settings, top_gaps)
    c = fit.guessing_vector()
    y, n, key_c, item_key = G.count_keys(responses.n_correct, responses.n_trials, c)
    ll_c = G.item_log_marginals(thin_draws(fit.flat("theta"), G.LOO_DRAWS), y, n, key_c, fit.spec.population_prior)
    elpd_c = G.loo_from_draws(ll_c)  # (K,) per key, nats
    delta, se = G.elpd_difference(elpd_c, plain.elpd, item_key)
    mult = np.bincount(item_key, minlength=len(key_c))  # items per key
    ks = [k for k in (G.worst_pareto_k(ll_c), plain.pareto_k) if k is not None]
    return GuessingComparison(
        guessing=float(np.max(c)), n_items=len(item_key),
        elpd_guessing=float(mult @ elpd_c), elpd_no_guessing=float(mult @ plain.elpd),
        delta_elpd=delta, se_delta=se, preferred="guessing" if delta > 0 else "no guessing",
        clear=G.is_clear(delta, se), pareto_k_max=max(ks) if ks else None,
        loglik_at_mean_guessing=G.loglik_at(fit.theta_mean, fit.b_mean, c, responses.n_correct, responses.n_trials),
        loglik_at_mean_no_guessing=plain.loglik_at_mean,
        verdicts_no_guessing=dict(plain.verdicts), posterior_no_guessing=plain.posterior_means,
        wall_time_s=round(plain.wall_time_s + time.perf_counter() - clock, 3))


def diagnose(
    responses: ResponseMatrix,
    spec: IRTSpec | None = None,
    settings: SamplerSettings | None = None,
    *,
    top_gaps: int = 10,
    on_stage: StageFn | None = None,
    on_picture: PictureFn | None = None,
    compare_guessing: bool = True,
) -> tuple[Diagnosis, IRTFit]:
    """Fit IRT, run the seven checks and compute every metric. Returns the report and the fit (for the scale).

    Difficulties of a 1PL fit are the exact per-key posterior moments (README: Reading the figures), so items with the same
    counts get identical b and the gaps are not shrunk by Monte Carlo noise. With a fixed guessing rate (and
    ``compare_guessing``) the 1PL is also fitted without it and the report says which the counts favour
    (:func:`compare_with_no_guessing`: its ``guessing_comparison`` and the first ``advice`` line)."""
    settings = settings or SamplerSettings()
    stage = on_stage or _no_stage
    J, I = responses.shape
    plain: ForkedCall[NoGuessingSide] | None = None
    asked = spec or IRTSpec()
    if compare_guessing and has_fixed_guessing(asked) and overlaps_comparison(J, I):
        # the c = 0 side needs only the data: computed in a forked child beside the fit with guessing, whose
        # population and mode searches leave a core free (MMLU-Pro 29 x 12,032: ~5 s of one core)
        plain = ForkedCall(lambda: fit_without_guessing(responses, asked, settings, top_gaps))
    try:
        return _diagnose(responses, spec, settings, top_gaps, stage, on_picture, compare_guessing, plain)
    finally:
        if plain is not None:
            plain.close()


OVERLAP_MIN_CELLS = 100_000  # cells from which the c = 0 comparison is fitted in a child beside the main fit ...
OVERLAP_MAX_CELLS = 2_000_000  # ... up to this many (two fits' memory at once: ~1-2 GB each up to here)


def overlaps_comparison(n_models: int, n_items: int) -> bool:
    """Whether :func:`diagnose` fits the guessing comparison's c = 0 side in a child beside the main fit: where the
    main fit is the independence sampler's (fewer than GIBBS_MIN_MODELS models), whose single-core set-up leaves a
    core to the child, and the design is large enough to gain and small enough that two fits' memory is no concern
    (a leaderboard's Gibbs fit holds both cores for minutes and gigabytes: the comparison then runs after it)."""
    return n_models < GIBBS_MIN_MODELS and OVERLAP_MIN_CELLS <= n_models * n_items <= OVERLAP_MAX_CELLS


def _diagnose(responses: ResponseMatrix, spec: IRTSpec | None, settings: SamplerSettings, top_gaps: int,
              stage: StageFn, on_picture: PictureFn | None, compare_guessing: bool,
              plain: ForkedCall[NoGuessingSide] | None) -> tuple[Diagnosis, IRTFit]:
    J, I = responses.shape
    stage(f"fitting IRT ({settings.method}: {settings.chains} chains x {settings.draws:,} draws, {J} models x "
          f"{I:,} items)")
    clock = time.perf_counter()
    fit = fit_irt(responses, spec, settings)
    timings = {"fit": time.perf_counter() - clock}
    stage("exact per-key difficulties")
    clock = time.perf_counter()
    exact_item_moments(fit, responses)
    timings["exact_b"] = time.perf_counter() - clock
    # the report (metrics, null, verdicts) first, so that the painter draws the picture while the checks run
    dg = build_diagnosis(responses, fit, [], top_gaps=top_gaps, seed=settings.seed, timings=timings,
                         on_stage=stage, on_picture=on_picture)
    stage("checks R1-R4 (data, posterior predictive) and M1-M4 (convergence)")
    clock = time.perf_counter()
    check_times: dict[str, float] = {}
    checks = run_checks(responses, fit, seed=settings.seed, timings=check_times)
    dg.checks = [CheckOut(**c.model_dump()) for c in checks]
    dg.advice += check_advice([c.name for c in checks if c.passed is False])
    dg.timings["checks"] = round(time.perf_counter() - clock, 3)
    dg.timings.update({f"check_{k}": round(v, 3) for k, v in check_times.items()})
    if compare_guessing and has_fixed_guessing(fit.spec):
        stage("which fits the counts better: the 1PL refitted without guessing (c = 0)")
        clock = time.perf_counter()
        cmp = compare_with_no_guessing(responses, fit, top_gaps, None if plain is None else plain.result())
        dg.guessing_comparison = cmp
        dg.advice.insert(0, guessing_advice(cmp.guessing, cmp.delta_elpd, cmp.se_delta, cmp.n_items, cmp.clear,
                                            dg.verdicts, cmp.verdicts_no_guessing))
        # this stage's wait (the c = 0 side may have run beside the fit: its own time is cmp.wall_time_s)
        dg.timings["compare_guessing"] = round(time.perf_counter() - clock, 3)
    return dg, fit
