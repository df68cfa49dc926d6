"""Robustness of the difficulty scale: leave-one-model-out refits and the 1PL-vs-2PL BIC comparison."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from pydantic import BaseModel, ConfigDict, computed_field
from scipy import stats

from benchfill.data import ResponseMatrix
from benchfill.irt.fit import fit_irt
from benchfill.irt.model import IRTFit, IRTSpec, SamplerSettings, log_binomial_coefficients


class LeaveOneOut(BaseModel):
    """Agreement of b (posterior means) between the full fit and each refit without one model. ``model_dump``
    includes the means and worst cases."""

    model_config = ConfigDict(frozen=True)

    dropped: list[str]
    pearson: list[float]
    spearman: list[float]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean_pearson(self) -> float:
        return float(np.mean(self.pearson))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def worst_pearson(self) -> float:
        return float(np.min(self.pearson))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean_spearman(self) -> float:
        return float(np.mean(self.spearman))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def worst_spearman(self) -> float:
        return float(np.min(self.spearman))


def leave_one_model_out(
    responses: ResponseMatrix, full: IRTFit, spec: IRTSpec | None = None, settings: SamplerSettings | None = None
) -> LeaveOneOut:
    """Refit without each model in turn (same model and sampler as ``full``) and correlate b with the full fit."""
    spec = spec or full.spec
    settings = settings or full.settings
    if len(responses.models) < 3:
        raise ValueError("leave-one-model-out needs at least 3 models")
    ref = full.b_mean
    pearson, spearman = [], []
    for k, model in enumerate(responses.models):
        keep = [m for m in responses.models if m != model]
        fit = fit_irt(responses.subset(models=keep), spec, replace(settings, seed=settings.seed + k + 1))
        pearson.append(float(stats.pearsonr(ref, fit.b_mean)[0]))
        spearman.append(float(stats.spearmanr(ref, fit.b_mean)[0]))
    return LeaveOneOut(dropped=list(responses.models), pearson=pearson, spearman=spearman)


class BICComparison(BaseModel):
    """BIC = k ln(n) - 2 ln L at the MAP; n = Bernoulli trials, k = free parameters. Lower is preferred
    (``preferred``, included in ``model_dump``)."""

    model_config = ConfigDict(frozen=True)

    n_observations: int
    loglik_1pl: float
    loglik_2pl: float
    k_1pl: int
    k_2pl: int
    bic_1pl: float
    bic_2pl: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def preferred(self) -> str:
        return "1pl" if self.bic_1pl <= self.bic_2pl else "2pl"


def compare_1pl_2pl(responses: ResponseMatrix, guessing: np.ndarray | None = None, seed: int = 0) -> BICComparison:
    """Fit 1PL and 2PL by MAP on the same data and compare their BIC."""
    n = int(responses.n_trials.sum())
    J, I = responses.shape
    settings = SamplerSettings(method="map", seed=seed)
    one = fit_irt(responses, IRTSpec("1pl", guessing), settings)
    two = fit_irt(responses, IRTSpec("2pl", guessing), settings)
    k1, k2 = J + I, J + 2 * I
    # log_likelihood_max omits the binomial coefficients; add them so BIC is the textbook figure.
    kc, nt = responses.n_correct, responses.n_trials
    const = float(log_binomial_coefficients(kc, nt).sum())
    assert one.log_likelihood_max is not None and two.log_likelihood_max is not None  # MAP fits record it
    l1, l2 = float(one.log_likelihood_max) + const, float(two.log_likelihood_max) + const
    return BICComparison(n_observations=n, loglik_1pl=l1, loglik_2pl=l2, k_1pl=k1, k_2pl=k2,
                         bic_1pl=k1 * np.log(n) - 2 * l1, bic_2pl=k2 * np.log(n) - 2 * l2)
