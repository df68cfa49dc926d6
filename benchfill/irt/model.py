"""IRT model specification and the fitted-posterior container every sampler returns.

Conventions (README: IRT and checks): P(correct | model j, item i) = c_i + (1 - c_i) * sigmoid(a_i (theta_j - b_i)),
theta_j ~ Normal(0, 1), b_i ~ g (the difficulty population, :mod:`benchfill.irt.prior`: learned from the benchmark
by default, the paper's N(0, 1) on request), a_i = 1 (1PL) or a_i ~ LogNormal(0, 0.5) (2PL), c_i = 0 or 1/k for
k-option items.
Larger b = harder. Counts enter as Binomial(n_trials, p); cells with n_trials = 0 contribute nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from benchfill.irt.prior import DEFAULT_POPULATION, POPULATION_KINDS, Population, PopulationKind

IRTKind = Literal["1pl", "2pl"]


@dataclass(frozen=True)
class IRTSpec:
    """Which IRT model to fit.

    Attributes:
        kind: "1pl" or "2pl".
        guessing: (I,) fixed lower asymptote c_i per item (0 = none), or None for no guessing anywhere.
        estimate_guessing: if True, c_i ~ Beta centred on ``guessing`` (only items with guessing > 0).
        population: the difficulty population: "spline" (learned log-spline, the default), "normal" (learned
            N(mu_b, sigma_b^2)) or "paper" (the paper's fixed N(0, 1)).
        prior: the population's density once learned (:func:`benchfill.irt.fit.fit_irt` learns it when None);
            a fitted spec carries it, so refits and placements use the same one.
    """

    kind: IRTKind = "1pl"
    guessing: np.ndarray | None = None
    estimate_guessing: bool = False
    population: PopulationKind = DEFAULT_POPULATION
    prior: Population | None = None

    def __post_init__(self) -> None:
        if self.population not in POPULATION_KINDS:
            raise ValueError(f"unknown difficulty population {self.population!r}; choose from "
                             f"{', '.join(POPULATION_KINDS)}")

    @property
    def population_prior(self) -> Population:
        """The population's density: the learned one, or N(0, 1) for ``paper``."""
        if self.prior is not None:
            return self.prior
        if self.population == "paper":
            return Population.paper()
        raise ValueError(f"the {self.population!r} population has not been learned yet (fit_irt learns it)")

    @classmethod
    def for_items(cls, item_ids: list[str], items=None, *, guessing: float | None = None, choices: int | None = None,
                  kind: IRTKind = "1pl", population: PopulationKind = DEFAULT_POPULATION) -> "IRTSpec":
        """The spec for a benchmark: c = ``guessing`` for every item, else 1/``choices``, else each item's own
        :attr:`benchfill.data.Item.guessing_rate` (items: benchfill.data.Item sequence; 1/k for k-option multiple
        choice, 1/(2^k - 1) where it keys several options), else no guessing."""
        c = np.zeros(len(item_ids))
        if guessing is not None:
            c[:] = guessing
        elif choices is not None:
            c[:] = 1.0 / choices
        elif items is not None:
            by_id = {it.id: it for it in items}
            c = np.array([by_id[i].guessing_rate for i in item_ids])
        return cls(kind=kind, guessing=c if c.any() else None, population=population)

    @property
    def has_guessing(self) -> bool:
        return self.guessing is not None and bool(np.any(self.guessing > 0))


@dataclass(frozen=True)
class SamplerSettings:
    """How the posterior was obtained. ``method`` is one of the registered samplers (see :mod:`benchfill.irt.fit`);
    the default, ``fast``, is the exact sampler every command uses (``pymc`` is the paper's reference NUTS)."""

    method: str = "fast"
    chains: int = 4
    tune: int = 1000
    draws: int = 1000
    seed: int = 0
    target_accept: float = 0.8

    def as_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "chains": self.chains,
            "tune": self.tune,
            "draws": self.draws,
            "seed": self.seed,
            "target_accept": self.target_accept,
        }


@dataclass
class IRTFit:
    """Posterior draws of an IRT fit.

    Attributes:
        spec: the model fitted.
        settings: the sampler settings used.
        models: model names, length J.  item_ids: item ids, length I.
        theta: (C, S, J) ability draws (C chains, S draws each); logits.
        b: (C, S, I) difficulty draws; logits.
        a: (C, S, I) discrimination draws (2PL) or None.
        c: (C, S, I) guessing draws when estimated, else None (then ``spec.guessing`` is fixed).
        divergences: divergent transitions over all chains (0 where the sampler has none).
        is_map: True for a MAP point estimate (a preview: C = S = 1, SDs are Laplace approximations).
        b_sd_override / theta_sd_override: SDs for MAP previews (Laplace), None for sampled fits.
        wall_time_s: seconds the fit took.
        log_likelihood_max: largest log-likelihood seen (MAP value for MAP fits), for BIC.
        b_mean_exact / b_sd_exact: (I,) posterior mean and SD of b computed exactly per likelihood key (quadrature
            given the ability draws, see :func:`benchfill.irt.placement.exact_item_moments`); when set, ``b_mean``
            and ``b_sd`` return them, so items with the same counts get identical values.
    """

    spec: IRTSpec
    settings: SamplerSettings
    models: list[str]
    item_ids: list[str]
    theta: np.ndarray
    b: np.ndarray
    a: np.ndarray | None = None
    c: np.ndarray | None = None
    divergences: int = 0
    is_map: bool = False
    b_sd_override: np.ndarray | None = None
    theta_sd_override: np.ndarray | None = None
    wall_time_s: float = 0.0
    log_likelihood_max: float | None = None
    b_mean_exact: np.ndarray | None = None
    b_sd_exact: np.ndarray | None = None
    extra: dict[str, object] = field(default_factory=dict)

    # ---- summaries -------------------------------------------------------------------------------------
    @property
    def n_draws(self) -> int:
        return int(self.b.shape[0] * self.b.shape[1])

    def flat(self, name: Literal["theta", "b", "a", "c"]) -> np.ndarray:
        """(C * S, K) draws of one parameter with chains concatenated."""
        arr = getattr(self, name)
        if arr is None:
            raise ValueError(f"this fit has no {name!r} draws")
        return arr.reshape(-1, arr.shape[-1])

    @property
    def b_mean(self) -> np.ndarray:
        return self.b_mean_exact if self.b_mean_exact is not None else self.b.mean(axis=(0, 1))

    @property
    def b_sd(self) -> np.ndarray:
        if self.b_sd_exact is not None:
            return self.b_sd_exact
        return self.b_sd_override if self.b_sd_override is not None else self.b.std(axis=(0, 1), ddof=1)

    @property
    def theta_mean(self) -> np.ndarray:
        return self.theta.mean(axis=(0, 1))

    @property
    def theta_sd(self) -> np.ndarray:
        if self.theta_sd_override is not None:
            return self.theta_sd_override
        return self.theta.std(axis=(0, 1), ddof=1)

    def guessing_vector(self) -> np.ndarray:
        """(I,) point value of c_i used by the fit (posterior mean when estimated)."""
        if self.c is not None:
            return self.c.mean(axis=(0, 1))
        if self.spec.guessing is not None:
            return np.asarray(self.spec.guessing, dtype=float)
        return np.zeros(len(self.item_ids))


def thin_draws(draws: np.ndarray, max_draws: int) -> np.ndarray:
    """At most ``max_draws`` rows of (S, ...) draws, evenly spaced (the same rows for the same S)."""
    keep = np.unique(np.linspace(0, len(draws) - 1, min(max_draws, len(draws))).round().astype(int))
    return draws[keep]


def probability(theta: np.ndarray, b: np.ndarray, a: np.ndarray | None = None, c: np.ndarray | None = None) -> np.ndarray:
    """P(correct) with broadcasting: theta (..., J, 1) against b (..., 1, I) gives (..., J, I)."""
    z = theta - b if a is None else a * (theta - b)
    p = 1.0 / (1.0 + np.exp(-z))
    return p if c is None else c + (1.0 - c) * p


def log_binomial_coefficients(y: np.ndarray, n: np.ndarray) -> np.ndarray:
    """sum_j log C(n_kj, y_kj) per row of (K, J) integer counts -> (K,), nats (what :func:`binomial_loglik` leaves
    out)."""
    y, n = np.asarray(y, dtype=np.int64), np.asarray(n, dtype=np.int64)
    top = int(n.max()) if n.size else 0
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, top + 1, dtype=float)))])
    return (log_fact[n] - log_fact[y] - log_fact[n - y]).sum(axis=-1)


def binomial_loglik(n_correct: np.ndarray, n_trials: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Log-likelihood of counts up to the binomial coefficient (constant in the parameters), elementwise."""
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return n_correct * np.log(p) + (n_trials - n_correct) * np.log1p(-p)
