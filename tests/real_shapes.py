"""Truths from real benchmark shapes: an independent check of the diagnosis' statistics.

The full-rollout (~1,100 per cell) 12-model matrices of MATH-500, HumanEval+ and AIME 2024 (../shared/data/real)
are fitted here by a joint MAP of the 1PL model written with numpy and scipy only (nothing of benchfill's IRT
engine), with weak priors theta ~ N(0, 3^2), b ~ N(0, 10^2) and the location fixed by centring theta. The fitted
theta (12,) and b (I',) are the TRUTH of a shape; items every model solved in every rollout, or none did, have no
finite MLE and are left out of it. Benchmarks drawn from a truth at the paper's rollouts then test whether
``benchfill.api.diagnose`` covers the true DDM, max gap and Top-5 sum and raises the flags they call for
(:func:`coverage`), and whether real data thinned to 4 rollouts agree with the full data (:func:`thin_check`).

This is a helper module for ``tests/test_real_shapes.py`` and ``bench/real_shapes.py``, not a test file.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field
from scipy.optimize import minimize
from scipy.special import expit, log_expit
from threadpoolctl import threadpool_limits

from benchfill.data import ResponseMatrix

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("BENCHFILL_SHARED", REPO.parent / "shared")) / "data"  # as tests/conftest.py
METRICS = ("ddm", "max_gap", "top5_sum")
N_MODELS = 12  # the paper's panel, spread evenly by accuracy
THETA_PRIOR_SD = 3.0
B_PRIOR_SD = 10.0
FAST_DIAGNOSE: dict[str, Any] = {"chains": 4, "tune": 300, "draws": 300}  # coverage's defaults (speed)


@dataclass(frozen=True)
class ShapeSpec:
    """A real benchmark: its response file under ``real/`` and the paper's rollouts per cell."""

    name: str
    file: str
    rollouts: int
    label: str


SHAPES: dict[str, ShapeSpec] = {
    "math500": ShapeSpec("math500", "math500.csv.gz", 8, "MATH-500"),
    "humaneval": ShapeSpec("humaneval", "humaneval_plus.csv.gz", 4, "HumanEval+"),
    "aime24": ShapeSpec("aime24", "aime2024.csv.gz", 32, "AIME 2024"),
}


# ---------------------------------------------------------------------------------------------- independent MAP


@dataclass(frozen=True)
class MapFit:
    """A joint 1PL MAP: theta (J,) centred to mean 0, b (I,) shifted with it; the optimiser's report."""

    theta: np.ndarray
    b: np.ndarray
    converged: bool
    grad_norm: float
    iterations: int


def _neg_log_posterior(x: np.ndarray, k: np.ndarray, n: np.ndarray, J: int, theta_sd: float, b_sd: float
                       ) -> tuple[float, np.ndarray]:
    """-log posterior of the 1PL (Binomial counts, up to a constant) and its gradient in (theta, b)."""
    theta, b = x[:J], x[J:]
    eta = theta[:, None] - b[None, :]
    loglik = k * log_expit(eta) + (n - k) * log_expit(-eta)
    value = -loglik.sum() + 0.5 * (theta @ theta) / theta_sd**2 + 0.5 * (b @ b) / b_sd**2
    resid = k - n * expit(eta)  # d loglik / d eta
    grad = np.concatenate([-resid.sum(1) + theta / theta_sd**2, resid.sum(0) + b / b_sd**2])
    return float(value), grad


def fit_map_1pl(n_correct: np.ndarray, n_trials: np.ndarray, *, theta_sd: float = THETA_PRIOR_SD,
                b_sd: float = B_PRIOR_SD, gtol: float = 1e-6) -> MapFit:
    """Joint MAP of P(correct) = sigmoid(theta_j - b_i) on counts (J, I) by L-BFGS on all J + I parameters with an
    analytic gradient; theta ~ N(0, theta_sd^2), b ~ N(0, b_sd^2) (default 3 and 10: weak); then theta is centred
    to mean 0 and b shifted alike. Cells with n_trials = 0 contribute nothing."""
    k, n = np.asarray(n_correct, float), np.asarray(n_trials, float)
    J, I = k.shape
    eps = 0.5  # a continuity-corrected logit start
    theta0 = np.log((k.sum(1) + eps) / (n.sum(1) - k.sum(1) + eps))
    b0 = -np.log((k.sum(0) + eps) / (n.sum(0) - k.sum(0) + eps))
    with threadpool_limits(1):  # small dense products: BLAS threads only contend (10x slower on a busy 2-core box)
        res = minimize(_neg_log_posterior, np.concatenate([theta0 - theta0.mean(), b0 - theta0.mean()]),
                       args=(k, n, J, theta_sd, b_sd), jac=True, method="L-BFGS-B",
                       options={"maxiter": 20_000, "maxcor": 30, "gtol": gtol, "ftol": 1e-15})
    theta, b = res.x[:J], res.x[J:]
    shift = theta.mean()
    return MapFit(theta - shift, b - shift, bool(res.success), float(np.abs(res.jac).max()), int(res.nit))


# ---------------------------------------------------------------------------------------------- truths


@dataclass(frozen=True)
class Truth:
    """The truth of a real shape: the MAP theta (J,) and b (I',) of the kept items; ``dropped`` items had no
    finite MLE (solved in every rollout by every model, or by none)."""

    shape: str
    models: tuple[str, ...]
    item_ids: tuple[str, ...]
    theta: np.ndarray
    b: np.ndarray
    dropped_all_correct: int
    dropped_none_correct: int
    fit: MapFit

    @property
    def dropped(self) -> int:
        return self.dropped_all_correct + self.dropped_none_correct


def shape_path(shape: str, data_dir: Path | None = None) -> Path:
    return (data_dir or SHARED_DATA) / "real" / SHAPES[shape].file


@functools.lru_cache(maxsize=None)
def load_shape(shape: str, data_dir: Path | None = None) -> ResponseMatrix:
    """The shape's full-rollout matrix, the paper's 12 models spread evenly by accuracy."""
    from benchfill.api import load_responses

    return load_responses(shape_path(shape, data_dir), models=N_MODELS)


def degenerate_items(n_correct: np.ndarray, n_trials: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(I,) masks of the items solved in every attempted rollout by every model, and by none."""
    attempted = n_trials.sum(0) > 0
    return attempted & (n_correct == n_trials).all(0), attempted & (n_correct == 0).all(0)


@functools.lru_cache(maxsize=None)
def truth(shape: str, data_dir: Path | None = None) -> Truth:
    """The independent MAP on the full-rollout matrix of ``shape`` (cached per process)."""
    resp = load_shape(shape, data_dir)
    all_correct, none_correct = degenerate_items(resp.n_correct, resp.n_trials)
    keep = ~(all_correct | none_correct) & (resp.n_trials.sum(0) > 0)
    fit = fit_map_1pl(resp.n_correct[:, keep], resp.n_trials[:, keep])
    return Truth(shape, tuple(resp.models), tuple(np.asarray(resp.item_ids, dtype=object)[keep]), fit.theta, fit.b,
                 int(all_correct.sum()), int(none_correct.sum()), fit)


@functools.lru_cache(maxsize=None)
def kept_matrix(shape: str, data_dir: Path | None = None) -> ResponseMatrix:
    """The shape's full-rollout matrix on the items its :func:`truth` keeps (the degenerate ones left out)."""
    return load_shape(shape, data_dir).subset(items=list(truth(shape, data_dir).item_ids))


def draw_benchmark(shape: str, rollouts: int | None = None, seed: int = 0, data_dir: Path | None = None
                   ) -> tuple[ResponseMatrix, np.ndarray, np.ndarray]:
    """A benchmark drawn from the shape's truth: Binomial counts at ``rollouts`` per cell (default: the paper's,
    MATH-500 8, HumanEval+ 4, AIME 32). Returns (responses, b_true, theta_true)."""
    from benchfill.irt.simulate import simulate_responses

    t = truth(shape, data_dir)
    resp = simulate_responses(t.theta, t.b, rollouts or SHAPES[shape].rollouts, seed=seed)
    return resp, t.b.copy(), t.theta.copy()


def true_metrics(b_true: np.ndarray) -> dict[str, Any]:
    """DDM, max gap and Top-5 sum of the true difficulties (min-max normalised) and the paper's flags on them
    (thresholds ``benchfill.diagnostics.metrics.FLAG_*``): ``{ddm, max_gap, top5_sum, flags: {metric: bool}}``."""
    from benchfill.diagnostics import metrics as M

    values = M.headline_metrics(M.normalise(np.asarray(b_true, float)))
    out: dict[str, Any] = {k: float(values[k]) for k in METRICS}
    out["flags"] = M.flags(out["ddm"], out["max_gap"], out["top5_sum"]).model_dump()
    return out


# ---------------------------------------------------------------------------------------------- coverage


class MetricRecord(BaseModel):
    """One metric of one diagnosis against its truth."""

    truth: float
    mean: float = Field(description="posterior mean")
    q05: float
    q95: float
    plug_in: float
    covered: bool = Field(description="q05 <= truth <= q95")


class Replicate(BaseModel):
    seed: int
    metrics: dict[str, MetricRecord]
    flags: dict[str, bool] = Field(description="flags the diagnosis raised")
    verdicts: dict[str, str] = Field(default_factory=dict, description="the diagnosis' verdicts ('flag', 'ok', "
                                                                       "'at floor')")
    unsolved: int = Field(description="items of the drawn benchmark no model solved in any rollout")
    wall_s: float = Field(description="seconds of the diagnose call")


def _record(dg: Any, name: str, value: float) -> MetricRecord:
    post = dg.posterior[name]
    return MetricRecord(truth=value, mean=post.mean, q05=post.q05, q95=post.q95, plug_in=float(getattr(dg, name)),
                        covered=bool(post.q05 <= value <= post.q95))


class CoverageResult(BaseModel):
    """Diagnoses of benchmarks drawn from one truth: per replicate, each metric against the truth and the flags."""

    shape: str
    rollouts: int
    n_models: int
    n_items: int
    dropped: int = Field(description="items of the real matrix left out of the truth (no finite MLE)")
    truth: dict[str, float]
    called: dict[str, bool] = Field(description="flags the true metrics call for")
    diagnose_kwargs: dict[str, Any]
    replicates: list[Replicate]

    def hits(self, name: str) -> int:
        """Replicates whose 90 % interval of ``name`` contains the truth."""
        return sum(r.metrics[name].covered for r in self.replicates)

    def coverage(self, name: str) -> float:
        """Share of replicates whose 90 % interval of ``name`` contains the truth."""
        return self.hits(name) / len(self.replicates)

    def mean_posterior(self, name: str) -> float:
        return float(np.mean([r.metrics[name].mean for r in self.replicates]))

    def mean_plug_in(self, name: str) -> float:
        return float(np.mean([r.metrics[name].plug_in for r in self.replicates]))

    def mean_width(self, name: str) -> float:
        return float(np.mean([r.metrics[name].q95 - r.metrics[name].q05 for r in self.replicates]))

    def mean_unsolved(self) -> float:
        return float(np.mean([r.unsolved for r in self.replicates]))

    def flag_rate(self, name: str) -> float:
        """Share of replicates that raised the flag of ``name``."""
        return float(np.mean([r.flags.get(name, False) for r in self.replicates]))

    def verdict_rate(self, name: str, verdict: str) -> float:
        """Share of replicates whose verdict on ``name`` was ``verdict``."""
        return float(np.mean([r.verdicts.get(name) == verdict for r in self.replicates]))

    def called_raised(self) -> tuple[int, int]:
        """(raised, called): over replicates, how many of the flags the truth calls for were raised."""
        called = [k for k in METRICS if self.called[k]]
        return sum(r.flags.get(k, False) for r in self.replicates for k in called), len(called) * len(self.replicates)

    @property
    def wall_s(self) -> list[float]:
        return [r.wall_s for r in self.replicates]


def replicate_seeds(replicates: int, seeds: int | Sequence[int]) -> list[int]:
    """An int: the first of ``replicates`` consecutive seeds; a sequence: the seeds themselves (``replicates`` of
    them)."""
    if isinstance(seeds, (int, np.integer)):
        return [int(seeds) + r for r in range(replicates)]
    out = [int(s) for s in seeds]
    if len(out) != replicates:
        raise ValueError(f"{len(out)} seeds for {replicates} replicates")
    return out


def coverage(shape: str, rollouts: int | None = None, replicates: int = 10, seeds: int | Sequence[int] = 0,
             diagnose_kwargs: Mapping[str, Any] | None = None, data_dir: Path | None = None) -> CoverageResult:
    """Diagnose ``replicates`` benchmarks drawn from the shape's truth (``rollouts`` per cell, default the
    paper's) with ``benchfill.api.diagnose(resp, seed=seed, **kwargs)``; ``diagnose_kwargs`` go through untouched
    over the fast defaults ``chains=4, tune=300, draws=300`` (e.g. ``prior="paper"``)."""
    from benchfill.api import diagnose

    t = truth(shape, data_dir)
    rollouts = rollouts or SHAPES[shape].rollouts
    kwargs = {**FAST_DIAGNOSE, **dict(diagnose_kwargs or {})}
    tm = true_metrics(t.b)
    reps = []
    for seed in replicate_seeds(replicates, seeds):
        resp, b_true, _ = draw_benchmark(shape, rollouts, seed, data_dir)
        clock = time.perf_counter()
        dg = diagnose(resp, **{"seed": seed, **kwargs})
        wall = time.perf_counter() - clock
        reps.append(Replicate(seed=seed, metrics={k: _record(dg, k, tm[k]) for k in METRICS},
                              flags={k: bool(dg.flags.get(k, False)) for k in METRICS},
                              verdicts={k: str(dg.verdicts.get(k, "")) for k in METRICS},
                              unsolved=int((resp.n_correct.sum(0) == 0).sum()), wall_s=wall))
    return CoverageResult(shape=shape, rollouts=rollouts, n_models=len(t.theta), n_items=len(t.b),
                          dropped=t.dropped, truth={k: tm[k] for k in METRICS}, called=tm["flags"],
                          diagnose_kwargs=kwargs, replicates=reps)


# ---------------------------------------------------------------------------------------------- real data thinned


def thin(resp: ResponseMatrix, rollouts: int, seed: int | np.random.Generator = 0) -> ResponseMatrix:
    """The same data with ``rollouts`` of each cell's rollouts kept, drawn without replacement (hypergeometric);
    cells with fewer rollouts keep them all."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n = np.minimum(resp.n_trials, rollouts).astype(np.int64)
    k = rng.hypergeometric(resp.n_correct, resp.n_trials - resp.n_correct, np.maximum(n, 0)) if n.size else n
    k = np.where(resp.n_trials > 0, k, 0).astype(np.int64)
    return ResponseMatrix(list(resp.models), list(resp.item_ids), k, n, source=f"{resp.source} (thinned to "
                          f"{rollouts})", meta=dict(resp.meta))


class ThinnedRun(BaseModel):
    seed: int
    mean: dict[str, float] = Field(description="posterior mean of each metric on the thinned data")
    q05: dict[str, float]
    q95: dict[str, float]
    plug_in: dict[str, float]
    inside_full: dict[str, bool] = Field(description="the thinned posterior mean lies in the full-data 90 % interval")
    covers_full: dict[str, bool] = Field(description="the thinned 90 % interval contains the full-data posterior mean")
    flags: dict[str, bool]
    wall_s: float


class ThinResult(BaseModel):
    """The full real matrix against the same data thinned to ``rollouts`` per cell, for several seeds."""

    shape: str
    rollouts: int
    n_models: int
    n_items: int
    drop_degenerate: bool
    full_mean: dict[str, float]
    full_q05: dict[str, float]
    full_q95: dict[str, float]
    full_plug_in: dict[str, float]
    full_flags: dict[str, bool]
    full_wall_s: float
    diagnose_kwargs: dict[str, Any]
    runs: list[ThinnedRun]

    def inside_rate(self, name: str) -> float:
        return float(np.mean([r.inside_full[name] for r in self.runs]))

    def covers_rate(self, name: str) -> float:
        return float(np.mean([r.covers_full[name] for r in self.runs]))


def thin_check(shape: str = "math500", rollouts: int = 4, seeds: Sequence[int] = (0, 1, 2),
               diagnose_kwargs: Mapping[str, Any] | None = None, data_dir: Path | None = None,
               drop_degenerate: bool = False) -> ThinResult:
    """Diagnose the shape's full-rollout 12-model matrix, then the same data thinned to ``rollouts`` per cell
    (without replacement) for each seed, and compare each thinned posterior with the full-data posterior.
    ``drop_degenerate``: first leave out the items the truth leaves out (no model ever right, or ever wrong), whose
    full-data difficulty is the prior's, not the data's."""
    resp = kept_matrix(shape, data_dir) if drop_degenerate else load_shape(shape, data_dir)
    return thinned_against_full(resp, shape, rollouts, seeds, diagnose_kwargs, drop_degenerate)


def thinned_against_full(resp: ResponseMatrix, shape: str, rollouts: int, seeds: Sequence[int],
                         diagnose_kwargs: Mapping[str, Any] | None = None, drop_degenerate: bool = False
                         ) -> ThinResult:
    """Diagnose ``resp`` (a full-rollout matrix of ``shape``), then ``resp`` thinned to ``rollouts`` per cell for
    each seed, and compare each thinned posterior with the full one."""
    from benchfill.api import diagnose

    kwargs = {**FAST_DIAGNOSE, **dict(diagnose_kwargs or {})}
    clock = time.perf_counter()
    full = diagnose(resp, **{"seed": 0, **kwargs})
    full_wall = time.perf_counter() - clock
    fp = {k: full.posterior[k] for k in METRICS}
    runs = []
    for seed in seeds:
        thinned = thin(resp, rollouts, seed)
        clock = time.perf_counter()
        dg = diagnose(thinned, **{"seed": int(seed), **kwargs})
        wall = time.perf_counter() - clock
        p = {k: dg.posterior[k] for k in METRICS}
        runs.append(ThinnedRun(
            seed=int(seed), mean={k: p[k].mean for k in METRICS}, q05={k: p[k].q05 for k in METRICS},
            q95={k: p[k].q95 for k in METRICS}, plug_in={k: float(getattr(dg, k)) for k in METRICS},
            inside_full={k: bool(fp[k].q05 <= p[k].mean <= fp[k].q95) for k in METRICS},
            covers_full={k: bool(p[k].q05 <= fp[k].mean <= p[k].q95) for k in METRICS},
            flags={k: bool(dg.flags.get(k, False)) for k in METRICS}, wall_s=wall))
    return ThinResult(shape=shape, rollouts=rollouts, n_models=resp.shape[0], n_items=resp.shape[1],
                      drop_degenerate=drop_degenerate,
                      full_mean={k: fp[k].mean for k in METRICS}, full_q05={k: fp[k].q05 for k in METRICS},
                      full_q95={k: fp[k].q95 for k in METRICS},
                      full_plug_in={k: float(getattr(full, k)) for k in METRICS},
                      full_flags={k: bool(full.flags.get(k, False)) for k in METRICS}, full_wall_s=full_wall,
                      diagnose_kwargs=kwargs, runs=runs)


# ---------------------------------------------------------------------------------------------- the thinning check,
# calibrated: what a posterior that is right about the data does when the same data lose 99.6 % of their rollouts


TRUTH_MODELS = ("1pl", "2pl")
LOG_A_PRIOR_SD = 0.5  # the 2PL truth's log-slope prior


def _neg_log_posterior_2pl(x: np.ndarray, k: np.ndarray, n: np.ndarray, J: int, I: int
                           ) -> tuple[float, np.ndarray]:
    """-log posterior of the 2PL P(correct) = sigmoid(a_i (theta_j - b_i)) on counts, x = (theta, b, log a), with
    theta ~ N(0, 3^2), b ~ N(0, 10^2), log a ~ N(0, 0.5^2), and its gradient."""
    theta, b, log_a = x[:J], x[J:J + I], x[J + I:]
    a = np.exp(log_a)
    gap = theta[:, None] - b[None, :]
    eta = a[None, :] * gap
    loglik = k * log_expit(eta) + (n - k) * log_expit(-eta)
    resid = k - n * expit(eta)  # d loglik / d eta
    value = (-loglik.sum() + 0.5 * (theta @ theta) / THETA_PRIOR_SD**2 + 0.5 * (b @ b) / B_PRIOR_SD**2
             + 0.5 * (log_a @ log_a) / LOG_A_PRIOR_SD**2)
    grad = np.concatenate([-(resid * a[None, :]).sum(1) + theta / THETA_PRIOR_SD**2,
                           (resid * a[None, :]).sum(0) + b / B_PRIOR_SD**2,
                           -(resid * gap).sum(0) * a + log_a / LOG_A_PRIOR_SD**2])
    return float(value), grad


@functools.lru_cache(maxsize=None)
def truth_2pl(shape: str, data_dir: Path | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(theta (J,), b (I',), a (I',)): an independent 2PL MAP of the items :func:`truth` keeps, started from its
    1PL MAP; theta centred to mean 0, b shifted alike. A truth outside the diagnosis' 1PL (measured on MATH-500:
    slopes 0.35-2.42 from the 5th to the 95th percentile; the log posterior 107,000 nats above its value at the 1PL
    MAP, for 498 more parameters)."""
    t = truth(shape, data_dir)
    resp = kept_matrix(shape, data_dir)
    k, n = resp.n_correct.astype(float), resp.n_trials.astype(float)
    J, I = k.shape
    with threadpool_limits(1):
        res = minimize(_neg_log_posterior_2pl, np.concatenate([t.theta, t.b, np.zeros(I)]), args=(k, n, J, I),
                       jac=True, method="L-BFGS-B", options={"maxiter": 20_000, "maxcor": 30, "gtol": 1e-6})
    if not res.success:
        raise RuntimeError(f"the 2PL MAP of {shape} did not converge: {res.message}")
    theta, b, a = res.x[:J], res.x[J:J + I], np.exp(res.x[J + I:])
    return theta - theta.mean(), b - theta.mean(), a


class SimulatedThinResult(BaseModel):
    """The thinning check on matrices drawn from a known truth of ``shape`` at the real matrix's own rollouts per
    cell (~1,100), each thinned once like the real data: the rates a posterior that is right about the data has."""

    shape: str
    truth_model: str = Field(description="'1pl': the 1PL MAP truth (the diagnosis' model); '2pl': the 2PL MAP")
    rollouts: int
    truth: dict[str, float] | None = Field(description="the true metrics (1PL truth only: a 2PL's b is not the "
                                                       "1PL's scale)")
    sims: list[ThinResult]

    def _runs(self) -> list[tuple[ThinResult, ThinnedRun]]:
        return [(sim, run) for sim in self.sims for run in sim.runs]

    def inside_rate(self, name: str) -> float:
        """Share of thinned posterior means inside their full matrix's 90 % interval."""
        return float(np.mean([run.inside_full[name] for _, run in self._runs()]))

    def covers_rate(self, name: str) -> float:
        """Share of thinned 90 % intervals containing their full matrix's posterior mean."""
        return float(np.mean([run.covers_full[name] for _, run in self._runs()]))

    def covers_truth_rate(self, name: str) -> float | None:
        """Share of thinned 90 % intervals containing the true metric (None for a 2PL truth)."""
        if self.truth is None:
            return None
        return float(np.mean([run.q05[name] <= self.truth[name] <= run.q95[name] for _, run in self._runs()]))

    def shift(self, name: str) -> float:
        """Mean of (thinned posterior mean - full posterior mean)."""
        return float(np.mean([run.mean[name] - sim.full_mean[name] for sim, run in self._runs()]))


def simulated_thin_check(shape: str = "math500", rollouts: int = 4, sims: int = 4, seed: int = 0,
                         truth_model: str = "1pl", diagnose_kwargs: Mapping[str, Any] | None = None,
                         data_dir: Path | None = None) -> SimulatedThinResult:
    """``sims`` full matrices drawn from the shape's truth (``truth_model``) with the real matrix's rollouts per
    cell (seeds 1000 + seed, ...), each diagnosed in full and thinned to ``rollouts`` (seed, seed + 1, ...): the
    real-data check of :func:`thin_check` where the truth is known and the diagnosis' model holds (1PL) or not
    (2PL)."""
    from benchfill.irt.simulate import simulate_responses

    if truth_model not in TRUTH_MODELS:
        raise ValueError(f"truth_model must be one of {TRUTH_MODELS}, got {truth_model!r}")
    t = truth(shape, data_dir)
    n = kept_matrix(shape, data_dir).n_trials
    theta, b, a = (t.theta, t.b, None) if truth_model == "1pl" else truth_2pl(shape, data_dir)
    out = []
    for s in range(seed, seed + sims):
        full = simulate_responses(theta, b, n, a=a, seed=1000 + s)
        out.append(thinned_against_full(full, shape, rollouts, [s], diagnose_kwargs))
    tm = true_metrics(b) if truth_model == "1pl" else None
    return SimulatedThinResult(shape=shape, truth_model=truth_model, rollouts=rollouts,
                               truth=None if tm is None else {k: tm[k] for k in METRICS}, sims=out)
