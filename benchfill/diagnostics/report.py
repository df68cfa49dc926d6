"""The diagnosis of one benchmark: the documented JSON contract (``Diagnosis``) and the function that builds it.

``diagnose(responses, spec, settings)`` runs IRT, the seven checks and every metric of SPEC section 3.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

import benchfill
from benchfill.data import ResponseMatrix
from benchfill.diagnostics import metrics as M
from benchfill.irt.checks import Check, run_checks
from benchfill.irt.fit import fit_irt
from benchfill.irt.model import IRTFit, IRTSpec, SamplerSettings

SCHEMA_VERSION = 1


class GapOut(BaseModel):
    lo: float
    hi: float
    mid: float
    width: float


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
    preview: bool = Field(description="True for a MAP point estimate: SDs are Laplace approximations, no MCMC checks")
    divergences: int


class Diagnosis(BaseModel):
    """What ``benchfill diagnose --json`` writes. Difficulties b are logits (larger = harder); d is b min-max
    normalised with the posterior-mean b of this benchmark; every ``*_sd`` is a posterior SD over draws, each draw
    normalised by itself (null for a MAP preview)."""

    schema_version: int = SCHEMA_VERSION
    benchfill_version: str = benchfill.__version__
    created_at: str
    source: str
    n_models: int
    n_items: int
    irt_model: str
    guessing: float | None = Field(None, description="fixed guessing rate c = 1/k used for every item, if any")
    sampler: SamplerOut
    ddm: float
    ddm_sd: float | None
    w1_uniform: float = Field(description="W1 to the continuous U[0, 1]")
    w1_uniform_sd: float | None
    max_gap: float
    max_gap_sd: float | None
    top5_sum: float
    top5_sum_sd: float | None
    uniform_median_max_gap: float
    uniform_baseline_ratio: float
    flags: dict[str, bool]
    gaps: list[GapOut] = Field(description="largest first")
    checks: list[CheckOut]
    items: list[ItemOut]
    models: list[ModelOut]
    theory: dict[str, Any] = Field(default_factory=dict)
    robustness: dict[str, Any] | None = None
    files: dict[str, str] = Field(default_factory=dict)

    @property
    def checks_passed(self) -> int:
        return sum(1 for c in self.checks if c.passed)

    def d_values(self) -> np.ndarray:
        return np.array([it.d for it in self.items])


def posterior_metric_draws(b_draws: np.ndarray, max_draws: int = 1000, chunk: int = 100, seed: int = 0) -> dict[str, np.ndarray]:
    """DDM, W1-to-uniform, max gap and Top-5 per posterior draw, each draw normalised by itself.

    b_draws: (S, I) logits. At most ``max_draws`` draws are used (evenly thinned) and processed in chunks so
    memory stays bounded for 40k-item suites.
    """
    S = b_draws.shape[0]
    idx = np.unique(np.linspace(0, S - 1, min(S, max_draws)).round().astype(int))
    out: dict[str, list[np.ndarray]] = {"ddm": [], "w1_uniform": [], "max_gap": [], "top5_sum": []}
    for start in range(0, len(idx), chunk):
        d = M.normalise(b_draws[idx[start : start + chunk]])
        out["ddm"].append(np.atleast_1d(M.ddm(d)))
        out["w1_uniform"].append(np.atleast_1d(M.w1_to_continuous_uniform(d)))
        out["max_gap"].append(np.atleast_1d(M.max_gap(d)))
        out["top5_sum"].append(np.atleast_1d(M.top_k_gap_sum(d, 5)))
    return {k: np.concatenate(v) for k, v in out.items()}


def theory_summary(d: np.ndarray, w1: float) -> dict[str, Any]:
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
            "undetectable_intervals_wider_than_0.05": [g.as_dict() for g in holes[:10]],
        },
    }


def build_diagnosis(
    responses: ResponseMatrix,
    fit: IRTFit,
    checks: list[Check],
    *,
    top_gaps: int = 10,
    baseline_sims: int = 2000,
    seed: int = 0,
) -> Diagnosis:
    """Assemble the report from a fit: point metrics from posterior-mean b, SDs from per-draw metrics."""
    b = fit.b_mean
    d = M.normalise(b)
    ddm, mg, t5 = M.ddm(d), M.max_gap(d), M.top_k_gap_sum(d, 5)
    w1 = M.w1_to_continuous_uniform(d)
    if fit.is_map:
        sds: dict[str, float | None] = {k: None for k in ("ddm", "w1_uniform", "max_gap", "top5_sum")}
    else:
        per_draw = posterior_metric_draws(fit.flat("b"), seed=seed)
        sds = {k: float(np.std(v, ddof=1)) for k, v in per_draw.items()}
    median_gap = M.uniform_max_gap_median(len(d), baseline_sims, seed)
    flags = M.flags(ddm, mg, t5)
    guess = fit.spec.guessing
    guess_value = float(np.max(guess)) if guess is not None and np.any(guess > 0) else None
    acc = responses.accuracy_by_model()
    s = fit.settings
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
        ddm=ddm, ddm_sd=sds["ddm"], w1_uniform=w1, w1_uniform_sd=sds["w1_uniform"],
        max_gap=mg, max_gap_sd=sds["max_gap"], top5_sum=t5, top5_sum_sd=sds["top5_sum"],
        uniform_median_max_gap=median_gap, uniform_baseline_ratio=mg / median_gap,
        flags=flags.as_dict(),
        gaps=[GapOut(**g.as_dict()) for g in M.gaps(d, top=top_gaps)],
        checks=[CheckOut(**c.as_dict()) for c in checks],
        items=[ItemOut(item_id=i, b=float(bb), b_sd=float(sd), d=float(dd))
               for i, bb, sd, dd in zip(fit.item_ids, b, fit.b_sd, d)],
        models=[ModelOut(model=m, theta=float(t), theta_sd=float(sd), accuracy=float(a))
                for m, t, sd, a in zip(fit.models, fit.theta_mean, fit.theta_sd, acc)],
        theory=theory_summary(d, ddm),
    )


def diagnose(
    responses: ResponseMatrix,
    spec: IRTSpec | None = None,
    settings: SamplerSettings | None = None,
    *,
    top_gaps: int = 10,
) -> tuple[Diagnosis, IRTFit]:
    """Fit IRT, run the seven checks and compute every metric. Returns the report and the fit (for the scale)."""
    settings = settings or SamplerSettings()
    fit = fit_irt(responses, spec, settings)
    checks = run_checks(responses, fit, seed=settings.seed)
    return build_diagnosis(responses, fit, checks, top_gaps=top_gaps, seed=settings.seed), fit
