"""Which model the counts support: the 1PL with its fixed guessing rate c, or the plain 1PL (c = 0).

The two models have the same parameters (one ability per model, one difficulty per item; c is fixed), so they are
compared by how well each predicts the items it was not shown: the leave-one-item-out expected log predictive
density over items (Vehtari, Gelman and Gabry 2017),

    elpd = sum_i log p(y_i | y_-i),   p(y_i | theta) = integral g(b) prod_j Binomial(y_ji | n_ji, p_j(b)) db,

with p_j(b) = c_i + (1 - c_i) sigmoid(theta_j - b) and g the model's own difficulty population. The item's
difficulty is integrated out, so an item is predicted as a new item would be, from the panel's abilities and the
population alone: a model cannot win by fitting each item's own b. Items are independent given the abilities, so
p(theta | y_-i) is p(theta | y) reweighted by 1 / p(y_i | theta) and

    p(y_i | y_-i) = 1 / E[1 / p(y_i | theta) | y]

over the posterior draws of theta (Gelfand 1992); the ratios' Pareto k-hat says whether that average is reliable
(the abilities rest on hundreds of items, so one item moves them little; the population, learned from all items,
is held fixed for the same reason). The integral over b is a trapezoid sum on a lattice fine enough for the item
with the most trials. Everything here is a pure function of arrays.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, Field
from threadpoolctl import threadpool_limits

from benchfill.forking import available_cores, forked_ranges
from benchfill.irt import fast, placement
from benchfill.irt.fast import pareto_k
from benchfill.irt.model import binomial_loglik, log_binomial_coefficients, probability
from benchfill.irt.prior import Population

LOO_DRAWS = 200  # ability draws behind each item's predictive density (evenly thinned from the fit's)
PARETO_KEYS = 100  # k-hat is computed for the items whose importance ratios vary most
SUPPORT_CUT = 50.0  # the lattice covers g down to exp(-50) of its peak
CLEAR_ELPD = 4.0  # a difference below 4 nats is small whatever its SE (Sivula et al. 2022)
BUDGET = 4_000_000  # largest temporary array, elements


class GuessingComparison(BaseModel):
    """The 1PL with the fitted guessing rate against the plain 1PL (c = 0), fitted to the same counts with the same
    sampler settings: which predicts the items' counts better, by how much, and the verdicts under each."""

    guessing: float = Field(description="the guessing rate c of the fit above (the largest, where items differ)")
    n_items: int
    elpd_guessing: float = Field(description="leave-one-item-out log predictive density of the counts under c, "
                                             "nats (each item's b integrated out under the population)")
    elpd_no_guessing: float = Field(description="the same under c = 0, nats")
    delta_elpd: float = Field(description="elpd_guessing - elpd_no_guessing, nats: > 0 favours guessing")
    se_delta: float = Field(description="standard error of delta_elpd over items, nats")
    preferred: Literal["guessing", "no guessing"]
    clear: bool = Field(description="|delta_elpd| >= 4 nats and >= 2 standard errors")
    pareto_k_max: float | None = Field(None, description="largest Pareto k-hat of the leave-one-item-out "
                                                         "importance ratios (< 0.7: reliable; null with < 10 draws)")
    loglik_at_mean_guessing: float = Field(description="log-likelihood of the counts at the posterior-mean "
                                                       "abilities and difficulties under c, nats")
    loglik_at_mean_no_guessing: float = Field(description="the same under c = 0 (same number of parameters)")
    verdicts_no_guessing: dict[str, str] = Field(description="the verdicts of the c = 0 fit (as `--guessing 0`)")
    posterior_no_guessing: dict[str, float] | None = Field(
        None, description="the metrics' posterior means under c = 0 (null for a MAP preview)")
    wall_time_s: float = Field(0.0, description="seconds the comparison took: the c = 0 side's own time (it may "
                                                "run beside the fit with guessing) plus this side's leave-one-out")


def count_keys(n_correct: np.ndarray, n_trials: np.ndarray, guessing: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Items deduplicated on (c_i, count column): items with the same counts have the same predictive density.

    Args:
        n_correct, n_trials: (J, I) counts.  guessing: (I,) c_i in [0, 1).
    Returns:
        y (K, J), n (K, J) the keys' counts (cells without trials hold 0 / 0), c (K,), item_key (I,) into them.
    """
    n = np.asarray(n_trials, dtype=np.int64)
    y = np.where(n > 0, np.asarray(n_correct, dtype=np.int64), 0)
    J = n.shape[0]
    c = np.asarray(guessing, dtype=float).reshape(-1)
    _, code = np.unique(c, return_inverse=True)
    table = np.concatenate([code.reshape(-1, 1), n.T, y.T], axis=1)
    uniq, first, item_key, _ = fast.unique_rows(table)
    return uniq[:, 1 + J :], uniq[:, 1 : 1 + J], c[first], item_key


def item_log_marginals(theta: np.ndarray, y: np.ndarray, n: np.ndarray, c: np.ndarray, prior: Population,
                       budget: int = BUDGET) -> np.ndarray:
    """log p(y_k | theta_s) = log integral g(b) prod_j Binomial(y_kj | n_kj, c_k + (1 - c_k) sigmoid(theta_sj - b)) db.

    Args:
        theta: (S, J) ability draws, logits.  y, n: (K, J) counts.  c: (K,) guessing rates.
        prior: the difficulty population g.  budget: largest temporary array, elements.
    Returns:
        (K, S) log predictive densities, nats, binomial coefficients included.

    The lattice spacing keeps the trapezoid sum's error negligible: the log integrand's curvature in b is at most
    g's plus 1/4 per trial without guessing; the spacing allows 1/2 per trial (guessing bends the success term
    more) and half a curvature SD per node.
    """
    theta = np.atleast_2d(np.asarray(theta, dtype=float))
    y, n = np.asarray(y, dtype=float), np.asarray(n, dtype=float)
    c = np.asarray(c, dtype=float)
    S, J = theta.shape
    K = y.shape[0]
    lo, hi = prior.support(cut=SUPPORT_CUT)
    curvature = prior.curvature + 0.5 * float(n.sum(axis=1).max(initial=0.0))
    h = 1.0 / (2.0 * np.sqrt(curvature))
    b = np.linspace(lo, hi, max(3, int(np.ceil((hi - lo) / h)) + 1))
    G = b.size
    log_w = prior.log_density(b) + np.log(np.full(G, b[1] - b[0]) * np.r_[0.5, np.ones(G - 2), 0.5])
    r = y.sum(axis=1)
    # keys in order of location, each chunk integrated on the stretch of the lattice where its integrands hold
    # mass under some draw (placement.grid_chunks: < e^-36 of it left out), the keys split over the cores
    order = placement.location_order(n, r, theta)
    ys, ns, rs, cs = y[order], n[order], r[order], c[order]
    # fast.grid_log_likelihood leaves out the 1PL's b-free term y . theta (it is the whole log-likelihood with
    # guessing): across ability draws it differs, so it goes back in for the plain keys
    plain_y = np.where((cs <= 0)[:, None], ys, 0.0)
    step = max(1, min(K, min(budget, placement.KEY_CHUNK_ELEMENTS) // G))  # keys per chunk, as the exact moments'

    def some(bounds: tuple[int, int]) -> tuple[np.ndarray]:
        part = np.empty((bounds[1] - bounds[0], S))
        with threadpool_limits(1):  # small products: BLAS threads only contend
            for rows, s, _, ell, shift in placement.grid_chunks(ns, ys, rs, cs, theta, b, log_w, step, bounds):
                part[rows, s] = shift[:, 0] + np.log(np.exp(ell, out=ell).sum(axis=1))
                part[rows, s] += plain_y[bounds[0] + rows.start : bounds[0] + rows.stop] @ theta[s]
        return (part,)

    procs = available_cores() if K * G * S >= placement.FORK_MIN_NODES else 1
    (sorted_out,) = forked_ranges(some, K, procs)
    out = np.empty_like(sorted_out)
    out[order] = sorted_out
    return out + log_binomial_coefficients(y.astype(np.int64), n.astype(np.int64))[:, None]


def loo_from_draws(log_lik: np.ndarray) -> np.ndarray:
    """log p(y_k | y_-k) = -log mean_s exp(-log p(y_k | theta_s)) for (K, S) log densities -> (K,), nats."""
    neg = -np.asarray(log_lik, dtype=float)
    peak = neg.max(axis=1)
    return -(peak + np.log(np.exp(neg - peak[:, None]).mean(axis=1)))


def worst_pareto_k(log_lik: np.ndarray, keys: int = PARETO_KEYS) -> float | None:
    """Largest Pareto k-hat of the importance ratios 1 / p(y_k | theta_s) over the ``keys`` rows of (K, S) whose
    log ratios vary most (the others' ratios are flatter); None with fewer than 10 draws."""
    if log_lik.shape[1] < 10:
        return None
    spread = log_lik.var(axis=1)
    rows = np.argsort(spread)[::-1][:keys]
    ks = [pareto_k(-log_lik[r]) for r in rows]
    finite = [k for k in ks if np.isfinite(k)]
    return float(max(finite)) if finite else None


def loglik_at(theta: np.ndarray, b: np.ndarray, c: np.ndarray, n_correct: np.ndarray, n_trials: np.ndarray
              ) -> float:
    """Binomial log-likelihood of (J, I) counts at abilities theta (J,) and difficulties b (I,) with guessing c (I,),
    binomial coefficients included; nats."""
    n = np.asarray(n_trials, dtype=np.int64)
    y = np.where(n > 0, np.asarray(n_correct, dtype=np.int64), 0)
    ll = binomial_loglik(y, n, probability(theta[:, None], b[None, :], c=c[None, :]))
    return float(ll.sum() + log_binomial_coefficients(y.T, n.T).sum())


def elpd_difference(elpd_a: np.ndarray, elpd_b: np.ndarray, item_key: np.ndarray) -> tuple[float, float]:
    """(sum_i (a_i - b_i), its standard error sqrt(I var_i(a_i - b_i))) for per-key elpds (K,) mapped to the items
    by item_key (I,); nats."""
    diff = (np.asarray(elpd_a) - np.asarray(elpd_b))[item_key]
    se = float(np.sqrt(diff.size * diff.var(ddof=1))) if diff.size > 1 else 0.0
    return float(diff.sum()), se


def is_clear(delta: float, se: float) -> bool:
    """A difference the data settle: at least 4 nats and at least two standard errors."""
    return abs(delta) >= max(CLEAR_ELPD, 2.0 * se)
