"""The seven checks of README: IRT and checks, as data: four on the response matrix (R1-R4), three on the sampler (M1-M3).

Each check is a :class:`Check` with a pass/fail, the figure it measured and the threshold it was held to.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_serializer

from benchfill.data import ResponseMatrix
from benchfill.irt.fast import unique_rows
from benchfill.irt.model import IRTFit

# Thresholds. R2-R4 are not fixed by the paper; these are stated in the report next to each figure.
R2_MAX_FLOOR_CEILING_SHARE = 0.20
R1_MIN_MODELS = 2  # an item answered by fewer models is placed by one model alone
R1_MIN_ITEMS = 10  # a model answering fewer items gets an ability from too few answers to place others
R3_MAX_MISFIT_SHARE = 0.05
R3_REPLICATES = 100  # posterior predictive replicates of the item-rest correlations
R3_Z = 3.09  # an item misfits this many predictive SDs below (one-sided 0.001)
SMALL_N = 16  # R4 simulates cells with at most this many trials as sums of uniforms
R4_MAX_OUTSIDE_SHARE = 0.10  # share of models/items outside their 95 % posterior predictive interval
M1_MAX_RHAT = 1.01
M2_MIN_ESS = 400.0


class Check(BaseModel):
    """One diagnostic check. ``passed`` is None when the check could not run (e.g. MCMC checks on a MAP fit).

    Serialised with ``model_dump`` / ``model_dump_json``: a value that is not finite (a check that did not run)
    is written as null. Positional construction ``Check(name, description, passed, value, threshold, comparison,
    details)`` is kept."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    passed: bool | None
    value: float
    threshold: float
    comparison: str  # how value is held to threshold: "<=", ">=", "=="
    details: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, name: str, description: str, passed: bool | None = None, value: float = float("nan"),
                 threshold: float = 0.0, comparison: str = "==", details: dict[str, Any] | None = None,
                 **kw: Any) -> None:
        super().__init__(name=name, description=description, passed=passed, value=value, threshold=threshold,
                         comparison=comparison, details=details or {}, **kw)

    @field_serializer("value")
    def _finite_or_null(self, value: float) -> float | None:
        return float(value) if np.isfinite(value) else None


def check_r1_complete(responses: ResponseMatrix) -> Check:
    """R1: valid counts (0 <= n_correct <= n_trials), every item answered by at least R1_MIN_MODELS models and every
    model answering at least R1_MIN_ITEMS items. A sparse matrix (leaderboards: not every model answers every item)
    is real data, not a failure: the observed share of cells is reported, and the check names the items and models
    that have too few answers to be placed or to place others (value: how many, invalid cells included)."""
    observed = responses.n_trials > 0
    valid = (responses.n_correct >= 0) & (responses.n_correct <= responses.n_trials)
    J, I = observed.shape
    models_per_item, items_per_model = observed.sum(0), observed.sum(1)
    # a small benchmark's models answer all of it: the model minimum is at most the items there are
    few_items = np.flatnonzero(items_per_model < min(R1_MIN_ITEMS, I))
    few_models = np.flatnonzero(models_per_item < min(R1_MIN_MODELS, J))
    model_free = [responses.item_ids[i] for i in np.flatnonzero(models_per_item == 0)]
    invalid = int((~valid).sum())
    share_observed = float(observed.mean()) if observed.size else 0.0
    below = len(few_items) + len(few_models)
    return Check(
        "R1", f"valid counts; every item answered by >= {R1_MIN_MODELS} models, every model >= {R1_MIN_ITEMS} "
              f"items ({share_observed:.0%} of cells observed)",
        passed=bool(invalid == 0 and below == 0), value=float(invalid + below), threshold=0.0, comparison="==",
        details={"observed_share": share_observed, "missing_cells": int((~observed).sum()), "invalid_cells": invalid,
                 "items_below_minimum": [responses.item_ids[i] for i in few_models[:20]],
                 "n_items_below_minimum": int(len(few_models)),
                 "models_below_minimum": [responses.models[j] for j in few_items[:20]],
                 "items_without_responses": model_free[:20], "n_items_without_responses": len(model_free)},
    )


def check_r2_floor_ceiling(responses: ResponseMatrix) -> Check:
    """R2: share of items solved by every model (all rollouts right) or by none (no rollout right)."""
    obs = responses.n_trials > 0
    all_right = np.all((responses.n_correct == responses.n_trials) | ~obs, axis=0)
    none_right = responses.n_correct.sum(0) == 0
    share = float((all_right | none_right).mean())
    return Check(
        "R2", "share of items solved by every model or by none (ceiling/floor)",
        passed=share <= R2_MAX_FLOOR_CEILING_SHARE, value=share, threshold=R2_MAX_FLOOR_CEILING_SHARE,
        comparison="<=", details={"ceiling_items": int(all_right.sum()), "floor_items": int(none_right.sum())},
    )


def item_rest_correlations(n_correct: np.ndarray, n_trials: np.ndarray) -> np.ndarray:
    """Corrected item-rest correlation per item, over the models that answered it: Pearson over those models of
    the item's pass rate with the model's mean pass rate on its OTHER answered items.

    Args:
        n_correct, n_trials: (..., J, I) counts (leading axes: replicates); cells with n_trials = 0 are unanswered.
    Returns:
        (..., I) correlations; NaN where fewer than 3 models answered the item or either side has no variance.
    """
    obs = n_trials > 0
    w = obs.astype(float)
    rate = np.where(obs, n_correct / np.maximum(n_trials, 1), 0.0)
    count = w.sum(-1, keepdims=True)
    rest = np.where(obs, (rate.sum(-1, keepdims=True) - rate) / np.maximum(count - 1, 1), 0.0)
    m = w.sum(-2, keepdims=True)  # (..., 1, I) models per item
    x = np.where(obs, rate - (rate * w).sum(-2, keepdims=True) / np.maximum(m, 1), 0.0)
    y = np.where(obs, rest - (rest * w).sum(-2, keepdims=True) / np.maximum(m, 1), 0.0)
    denom = np.sqrt((x**2).sum(-2) * (y**2).sum(-2))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (x * y).sum(-2) / denom
    return np.where((denom > 1e-12) & (m[..., 0, :] >= 3), r, np.nan)


def _simulate_counts(p: np.ndarray, n: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Binomial(n, p) counts for (R, J, I) probabilities and (J, I) trials; with few trials (<= SMALL_N in every
    cell) as sums of Bernoulli trials: uniforms are ~20x cheaper than binomial draws."""
    n_max = int(n.max(initial=0))
    if n_max > SMALL_N:
        return rng.binomial(n[None, :, :], p.astype(float))
    y: np.ndarray = np.zeros(p.shape, dtype=np.int8)
    for t in range(n_max):
        hit = rng.random(p.shape, dtype=np.float32) < p
        hit &= n[None, :, :] > t
        y += hit.view(np.int8)
    return y


PPC_KERNEL_MIN_WORK = 20_000_000  # replicated cells (replicates x cells) from which R3 / R4 simulate a 1PL in the
# compiled kernels (one fused pass per replicate; below it numpy, and no numba import for a small diagnosis)


def use_ppc_kernel(a: np.ndarray | None, n: np.ndarray, n_rep: int, min_work: int) -> bool:
    """Whether R3 / R4 replicate in :func:`benchfill.irt.kernels.ppc_counts_1pl`: a 1PL (fixed guessing allowed)
    with few trials per cell (<= SMALL_N, the sums-of-uniforms regime) and at least ``min_work`` replicated cells."""
    return a is None and int(n.max(initial=0)) <= SMALL_N and n_rep * n.size >= min_work


class Replicator:
    """Replicated count matrices of a 1PL from posterior draws, one at a time, in the compiled kernel: the
    sums-of-uniforms simulation of :func:`_simulate_counts` with 32-bit uniforms (the bit generator's raw output)
    compared in float64 with the exact probability (the numpy path compares float32 uniforms with a float32
    probability)."""

    def __init__(self, n: np.ndarray, rng: np.random.Generator):
        from benchfill.irt import kernels

        self.kernels, self.n, self.rng = kernels, np.ascontiguousarray(n, dtype=np.int64), rng
        self.T = max(1, int(n.max(initial=0)))
        self.y = np.empty(n.shape, dtype=np.int8)

    def counts(self, theta: np.ndarray, b: np.ndarray, c: np.ndarray | None, row: np.ndarray | None = None,
               col: np.ndarray | None = None) -> np.ndarray:
        """(J, I) int8 counts for one draw (theta (J,), b (I,), c (I,) or None); adds the models' and items'
        totals into ``row`` / ``col`` when given."""
        J, I = self.n.shape
        # 32-bit uniforms as the halves of the bit generator's raw 64-bit outputs (as numpy's own 32-bit draws are
        # made): half the cost of ``rng.integers(0, 2**32, dtype=np.uint32)``, which spends a call per value
        size = self.T * J * I
        bits = self.rng.bit_generator.random_raw((size + 1) // 2).view(np.uint32)[:size].reshape(self.T, J, I)
        # exp(b - m) exp(-(theta - m)) = exp(b - theta) around the draw's mean ability m; logits beyond 700 of it
        # are clipped there (e^-700 ~ 1e-304: p is 0 or 1 long before), so the product is never 0 x inf
        m = float(np.mean(theta))
        F = np.exp(-np.clip(np.asarray(theta, dtype=float) - m, -700.0, 700.0))
        E = np.exp(np.clip(np.asarray(b, dtype=float) - m, -700.0, 700.0))
        cc = np.zeros(I) if c is None else np.broadcast_to(np.asarray(c, dtype=float), (I,)).copy()
        empty = np.zeros(0, dtype=np.int64)
        self.kernels.ppc_counts_1pl(F, E, cc, self.n, bits, self.y, empty if row is None else row,
                                    empty if col is None else col)
        return self.y


def _draws_guessing(c: np.ndarray | None, s):
    """The guessing rates of draws ``s`` from :func:`_posterior_draws`' ``c``: per draw (S, I), fixed (I,) or None."""
    return None if c is None else (c[s] if c.ndim == 2 else c)


REPLICATE_BLOCK = 10  # replicates per random stream in the kernel path: blocks, not processes, fix the numbers


def replicate_blocks(fn: Callable[[range, np.random.Generator], tuple[np.ndarray, ...]], n_rep: int, seed: int,
                      tag: int) -> tuple[np.ndarray, ...]:
    """``fn(block, rng)`` for the blocks of REPLICATE_BLOCK replicates of 0..n_rep (``block``: a range of replicate
    indices; ``rng``: that block's own stream, seeded by (seed, tag, block number)), spread over the cores this
    process may use (:func:`benchfill.forking.forked_ranges`); ``fn`` returns a tuple of arrays with one leading row
    per replicate or per block, concatenated here in block order. The same seed gives the same replicates on any
    number of cores."""
    from benchfill.forking import available_cores, forked_ranges

    n_blocks = -(-n_rep // REPLICATE_BLOCK)

    def some(lohi: tuple[int, int]) -> tuple[np.ndarray, ...]:
        parts = [fn(range(k * REPLICATE_BLOCK, min(n_rep, (k + 1) * REPLICATE_BLOCK)),
                    np.random.default_rng(np.random.SeedSequence([seed, tag, k])))
                 for k in range(*lohi)]
        return tuple(np.concatenate(arrays) for arrays in zip(*parts))

    return forked_ranges(some, n_blocks, available_cores())


def _add_fisher_z(corr: np.ndarray, z_sum: np.ndarray, z_sq: np.ndarray, z_n: np.ndarray) -> None:
    """Adds the Fisher z of replicated item-rest correlations ``corr`` (R, I) (NaN: not defined) to the per-item
    sums ``z_sum``, ``z_sq`` and counts ``z_n`` (I,), in place."""
    z_rep = np.arctanh(np.clip(corr, -0.999, 0.999))
    ok = np.isfinite(z_rep)
    z_sum += np.where(ok, z_rep, 0.0).sum(0)
    z_sq += np.where(ok, z_rep**2, 0.0).sum(0)
    z_n += ok.sum(0)


def _posterior_draws(fit: IRTFit, n_rep: int, rng: np.random.Generator):
    """``n_rep`` posterior draws (with replacement only when the fit has fewer: a MAP fit replicates its one point):
    (indices, theta (S, J), b (S, I), a (S, I) or None, c (S, I) / (I,) / None) for :func:`_ppc_probability`."""
    theta, b = fit.flat("theta"), fit.flat("b")
    a = fit.flat("a") if fit.a is not None else None
    c = fit.flat("c") if fit.c is not None else (None if fit.spec.guessing is None else np.asarray(fit.spec.guessing))
    if c is not None and c.ndim == 1 and not np.any(c > 0):
        c = None
    draws = rng.choice(len(b), size=n_rep, replace=len(b) < n_rep)
    return draws, theta, b, a, c


def binomial_quantile(q: float, n: int, p: float) -> int:
    """The smallest k with P(Binomial(n, p) <= k) >= q (scipy's ``binom.ppf``, without importing scipy.stats:
    ~0.7 s of a 2 s command). Summed upward from k = 0 in log space (no underflow at any n)."""
    if n <= 0 or p <= 0.0:
        return 0
    log_pmf, log_ratio, log_q = n * math.log1p(-p), math.log(p) - math.log1p(-p), math.log(q) - 1e-12
    log_cdf, k = log_pmf, 0
    while log_cdf < log_q and k < n:
        log_pmf += math.log((n - k) / (k + 1)) + log_ratio
        k += 1
        log_cdf = max(log_cdf, log_pmf) + math.log1p(math.exp(-abs(log_cdf - log_pmf)))
    return k


def check_r3_misfit(responses: ResponseMatrix, fit: IRTFit, seed: int = 0, budget: int = 40_000_000,
                    min_work: int = PPC_KERNEL_MIN_WORK) -> Check:
    """R3: items whose corrected item-rest correlation is <= 0 AND far below what the fitted model predicts.

    On a small panel (12 models), a binary design or a sparse matrix a perfectly fitting item has a correlation
    <= 0 by chance fairly often, so a bare "r <= 0" rule fails data drawn from the model itself. Each item's
    observed correlation is compared with its posterior predictive distribution (R replicated matrices from
    posterior draws, the same trials and the same unanswered cells), on Fisher's z = atanh(r) scale where that
    distribution is near normal: the item misfits when r <= 0 and its z lies below the replicates' mean by more
    than R3_Z SDs (one-sided 0.001). The check fails when more items misfit than both R3_MAX_MISFIT_SHARE of the
    items and the 95th percentile of that count on a model-true benchmark (Binomial(I, 0.001)). R: R3_REPLICATES,
    fewer (down to 20) where the matrix is large (``budget`` cells). From ``min_work`` replicated cells a 1PL's
    replicates are simulated and correlated in compiled kernels (:class:`Replicator`), one replicate at a time, in
    blocks with their own seeded streams spread over the cores (:func:`replicate_blocks`)."""
    rng = np.random.default_rng(seed + 1)
    n, k = responses.n_trials, responses.n_correct
    J, I = n.shape
    r_obs = item_rest_correlations(k, n)
    n_rep = int(np.clip(budget // max(1, J * I), 20, R3_REPLICATES))
    draws, theta, b, a, c = _posterior_draws(fit, n_rep, rng)
    z_sum, z_sq, z_n = np.zeros(I), np.zeros(I), np.zeros(I)
    if use_ppc_kernel(a, n, n_rep, min_work):
        def block(reps: range, block_rng: np.random.Generator) -> tuple[np.ndarray, ...]:
            rep, corr = Replicator(n, block_rng), np.empty(I)
            sums = np.zeros((3, I))
            for s in draws[reps.start : reps.stop]:
                y = rep.counts(theta[s], b[s], _draws_guessing(c, s))
                rep.kernels.item_rest_correlations_one(y, rep.n, corr)
                _add_fisher_z(corr[None, :], *sums)
            return (sums[None],)

        z_sum, z_sq, z_n = replicate_blocks(block, n_rep, seed, 3)[0].sum(0)
    else:
        step = max(1, 1_000_000 // max(1, J * I))  # replicates per block: ~10 float64 temporaries of this many cells
        for r0 in range(0, n_rep, step):
            s = draws[r0 : r0 + step]
            y = _simulate_counts(_ppc_probability(theta[s], b[s], None if a is None else a[s], _draws_guessing(c, s)),
                                 n, rng)
            _add_fisher_z(item_rest_correlations(y, n[None, :, :]), z_sum, z_sq, z_n)
    mean = z_sum / np.maximum(z_n, 1)
    sd = np.sqrt(np.maximum(z_sq / np.maximum(z_n, 1) - mean**2, 0.0) * z_n / np.maximum(z_n - 1, 1))
    z_obs = np.arctanh(np.clip(r_obs, -0.999, 0.999))
    defined = np.isfinite(r_obs) & (z_n >= 10) & (sd > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = (z_obs - mean) / sd
    bad = defined & (r_obs <= 0) & (score <= -R3_Z)
    n_defined = int(defined.sum())
    allowed = max(int(np.floor(R3_MAX_MISFIT_SHARE * n_defined)),
                  binomial_quantile(0.95, n_defined, 0.5 * math.erfc(R3_Z / math.sqrt(2.0))))
    share = float(bad.sum() / max(n_defined, 1))
    ids = [responses.item_ids[i] for i in np.flatnonzero(bad)]
    return Check(
        "R3", "share of items with corrected item-rest correlation <= 0 and far below the model's prediction "
              "(misfit)",
        passed=bool(bad.sum() <= allowed), value=share, threshold=allowed / max(n_defined, 1), comparison="<=",
        details={"misfitting_items": ids[:50], "n_misfitting": len(ids), "n_undefined": int(I - n_defined),
                 "n_correlation_le_0": int((np.isfinite(r_obs) & (r_obs <= 0)).sum()), "replicates": n_rep,
                 "allowed": allowed},
    )


def _ppc_probability(theta: np.ndarray, b: np.ndarray, a: np.ndarray | None, c: np.ndarray | None) -> np.ndarray:
    """(R, J, I) float32 P(correct) for R draws: theta (R, J), b (R, I), a (R, I) or None, c (R, I) / (I,) / None."""
    z = theta[:, :, None].astype(np.float32) - b[:, None, :].astype(np.float32)
    if a is not None:
        z *= a[:, None, :].astype(np.float32)
    np.negative(z, out=z)
    with np.errstate(over="ignore"):  # exp(z) = inf past float32's range gives p = 0, as it should
        np.exp(z, out=z)
    z += np.float32(1.0)
    p = np.reciprocal(z, out=z)
    if c is not None:
        cc = np.asarray(c, dtype=np.float32)
        cc = cc[:, None, :] if cc.ndim == 2 else cc[None, None, :]
        p *= np.float32(1.0) - cc
        p += cc
    return p


def check_r4_ppc(responses: ResponseMatrix, fit: IRTFit, n_rep: int = 400, seed: int = 0,
                 budget: int = 8_000_000, min_work: int = PPC_KERNEL_MIN_WORK) -> Check:
    """R4: posterior predictive check of per-model accuracy and per-item pass rate: the share of models and items
    whose observed figure lies outside the central 95 % of its posterior predictive distribution.

    Replicates are simulated in blocks of draws (at most ``budget`` cells at a time) in float32; cells with few
    trials (<= 16 in every cell) as sums of uniforms compared with their probability, others by binomial draws.
    From ``min_work`` replicated cells a 1PL's replicates are simulated one at a time in a compiled kernel that
    also sums them (:class:`Replicator`): no (R, J, I) temporaries; in blocks with their own seeded streams, spread
    over the cores (:func:`replicate_blocks`)."""
    rng = np.random.default_rng(seed)
    draws, theta, b, a, c = _posterior_draws(fit, n_rep, rng)
    n = responses.n_trials
    J, I = n.shape
    n_model = np.maximum(n.sum(1), 1).astype(float)
    n_item = np.maximum(n.sum(0), 1).astype(float)
    if use_ppc_kernel(a, n, len(draws), min_work):
        def block(reps: range, block_rng: np.random.Generator) -> tuple[np.ndarray, ...]:
            rep = Replicator(n, block_rng)
            row, col = np.zeros((len(reps), J), dtype=np.int64), np.zeros((len(reps), I), dtype=np.int64)
            for r, s in enumerate(draws[reps.start : reps.stop]):
                rep.counts(theta[s], b[s], _draws_guessing(c, s), row[r], col[r])
            return row / n_model, col / n_item

        ms, its = replicate_blocks(block, n_rep, seed, 4)
    else:
        ms, its = np.empty((n_rep, J)), np.empty((n_rep, I))
        step = max(1, budget // max(1, J * I))
        for r0 in range(0, n_rep, step):
            s = draws[r0 : r0 + step]
            y = _simulate_counts(_ppc_probability(theta[s], b[s], None if a is None else a[s], _draws_guessing(c, s)),
                                 n, rng)
            ms[r0 : r0 + len(s)] = y.sum(2, dtype=np.int64) / n_model
            its[r0 : r0 + len(s)] = y.sum(1, dtype=np.int64) / n_item

    def outside(sim: np.ndarray, obs: np.ndarray) -> np.ndarray:
        lo, hi = np.quantile(sim, [0.025, 0.975], axis=0)
        return (obs < lo - 1e-12) | (obs > hi + 1e-12)

    om = outside(ms, responses.accuracy_by_model())
    oi = outside(its, responses.accuracy_by_item())
    share = float((om.sum() + oi.sum()) / (om.size + oi.size))
    return Check(
        "R4", "posterior predictive check: share of models and items outside their 95 % predictive interval",
        passed=share <= R4_MAX_OUTSIDE_SHARE, value=share, threshold=R4_MAX_OUTSIDE_SHARE, comparison="<=",
        details={"models_outside": [fit.models[j] for j in np.flatnonzero(om)],
                 "items_outside": int(oi.sum()), "replicates": int(len(draws))},
    )


MAX_CHECKED_DIFFICULTIES = 500  # above this many items, R-hat / ESS of b are computed per likelihood key: items
# of a key have one posterior and their chains differ by Monte Carlo noise only, so more of them add cost, not news


def _difficulties_to_check(responses: ResponseMatrix, fit: IRTFit, limit: int | None) -> np.ndarray:
    """Item indices whose b chains enter M1 / M2: all of them up to ``limit``; beyond it, per likelihood key
    (items with the same counts from the same models, and the same guessing rate, share one posterior, so their
    chains differ only by Monte Carlo noise) the first items of every key, at least one per key, as many per key
    as keeps the total within ``limit``."""
    I = len(fit.item_ids)
    if limit is None or I <= limit:
        return np.arange(I)
    n, y = responses.n_trials, np.where(responses.n_trials > 0, responses.n_correct, 0)
    g = fit.spec.guessing
    if fit.spec.kind == "1pl" and not fit.spec.estimate_guessing and (g is None or not np.any(np.asarray(g) > 0)):
        cols = np.concatenate([n.T, y.sum(0)[:, None]], axis=1)  # (n_i, r_i): the 1PL's sufficient statistic
    else:
        gcol = np.zeros((I, 1)) if g is None else np.asarray(g, dtype=float).reshape(I, 1)
        cols = np.concatenate([gcol, n.T, y.T], axis=1)
    key = unique_rows(cols)[2]
    order = np.argsort(key, kind="stable")
    first = np.searchsorted(key[order], key[order], side="left")
    rank_in_key = np.arange(I) - first  # 0 for a key's first item, 1 for its second, ...
    lo, hi = 1, I  # the largest per-key count whose total stays within the limit (at least one per key)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if np.sum(rank_in_key < mid) <= limit else (lo, mid - 1)
    per_key = lo
    return np.sort(order[rank_in_key < per_key])


def convergence_summary(fit: IRTFit, method: str = "fast", responses: ResponseMatrix | None = None,
                        max_difficulties: int | None = MAX_CHECKED_DIFFICULTIES) -> dict[str, Any]:
    """Max R-hat and min bulk / tail ESS over the sampled parameters (rank-normalised, Vehtari et al. 2021).

    ``method="fast"``: :mod:`benchfill.irt.convergence`, all parameters at once (the same numbers as ArviZ);
    with ``responses`` and more than ``max_difficulties`` items, the difficulties are checked per likelihood key
    (see :func:`_difficulties_to_check`). ``method="arviz"``: ArviZ, every parameter, one at a time (slow)."""
    if method == "arviz":
        import arviz as az

        data = {"theta": fit.theta, "b": fit.b}
        if fit.a is not None:
            data["a"] = fit.a
        ds = az.convert_to_dataset(data)
        rhat = az.rhat(ds)
        bulk = az.ess(ds, method="bulk")
        tail = az.ess(ds, method="tail")

        def reduce(dset, fn) -> float:
            vals = np.concatenate([np.ravel(dset[v].values) for v in dset.data_vars])
            vals = vals[np.isfinite(vals)]
            return float(fn(vals)) if vals.size else float("nan")

        n_par = sum(int(np.prod(v.shape[2:])) for v in data.values())
        return {"max_rhat": reduce(rhat, np.max), "min_ess_bulk": reduce(bulk, np.min),
                "min_ess_tail": reduce(tail, np.min), "parameters": n_par, "checked": n_par, "method": "arviz"}
    from benchfill.irt.convergence import rank_diagnostics

    items = (_difficulties_to_check(responses, fit, max_difficulties) if responses is not None
             else np.arange(len(fit.item_ids)))
    parts = [fit.theta, fit.b if len(items) == fit.b.shape[2] else fit.b[:, :, items]]
    if fit.a is not None:
        parts.append(fit.a if len(items) == fit.a.shape[2] else fit.a[:, :, items])
    rh, eb, et = [], [], []
    for arr in parts:
        r, b_, t = rank_diagnostics(arr)
        rh.append(r)
        eb.append(b_)
        et.append(t)

    def reduce_(vals: list[np.ndarray], fn) -> float:
        v = np.concatenate(vals)
        v = v[np.isfinite(v)]
        return float(fn(v)) if v.size else float("nan")

    n_par = sum(int(np.prod(x.shape[2:])) for x in [fit.theta, fit.b] + ([fit.a] if fit.a is not None else []))
    return {"max_rhat": reduce_(rh, np.max), "min_ess_bulk": reduce_(eb, np.min), "min_ess_tail": reduce_(et, np.min),
            "parameters": n_par, "checked": int(sum(int(np.prod(x.shape[2:])) for x in parts)),
            "method": "all parameters" if len(items) == len(fit.item_ids) else "per likelihood key"}


IS_MAX_PARETO_K = 0.7  # PSIS (Vehtari et al. 2024): importance weights with k-hat above this are unreliable


def mcmc_checks(fit: IRTFit, responses: ResponseMatrix | None = None, method: str = "fast") -> list[Check]:
    """M1 max R-hat <= 1.01; M2 min bulk and tail ESS >= 400; M3 zero divergent transitions; and, for the fast
    sampler, M4: the Pareto k-hat of its independence proposal's importance weights <= 0.7."""
    if fit.is_map or fit.b.shape[0] * fit.b.shape[1] < 4:
        na = {"reason": "MAP preview: no MCMC draws"}
        return [
            Check("M1", "max R-hat", None, float("nan"), M1_MAX_RHAT, "<=", na),
            Check("M2", "min bulk and tail ESS", None, float("nan"), M2_MIN_ESS, ">=", na),
            Check("M3", "divergent transitions", None, float("nan"), 0.0, "==", na),
        ]
    conv = convergence_summary(fit, method=method, responses=responses)
    ess = min(conv["min_ess_bulk"], conv["min_ess_tail"])
    rhat_ok = fit.b.shape[0] > 1 and conv["max_rhat"] <= M1_MAX_RHAT
    scope = {"parameters": conv["parameters"], "checked": conv["checked"], "method": conv["method"]}
    over = ("over all parameters" if conv["checked"] == conv["parameters"] else
            f"over {conv['checked']:,} of {conv['parameters']:,} parameters (all abilities; difficulties per "
            "likelihood key, items of a key sharing one posterior)")
    checks = [
        Check("M1", f"max R-hat {over}", bool(rhat_ok), conv["max_rhat"], M1_MAX_RHAT, "<=",
              scope if fit.b.shape[0] > 1 else {"reason": "R-hat needs >= 2 chains", **scope}),
        Check("M2", f"min bulk and tail ESS {over}", bool(ess >= M2_MIN_ESS), ess, M2_MIN_ESS, ">=",
              {"min_ess_bulk": conv["min_ess_bulk"], "min_ess_tail": conv["min_ess_tail"], **scope}),
        Check("M3", "divergent transitions", fit.divergences == 0, float(fit.divergences), 0.0, "=="),
    ]
    info = fit.extra.get("fast") if isinstance(fit.extra, dict) else None
    if isinstance(info, dict) and "proposal_pareto_k" in info:
        k = float(info["proposal_pareto_k"])
        imh = info.get("engine") == "imh"
        details = {"engine": info.get("engine"), "importance_efficiency": info.get("proposal_kish"),
                   "importance_draws": info.get("proposal_draws"),
                   "acceptance": info.get("acceptance")}
        if not imh:
            by = "two-block Gibbs" if info.get("engine") == "gibbs" else "NUTS"
            details["reason"] = f"the abilities were sampled by {by}: no independence proposal was used"
        checks.append(Check(
            "M4", "Pareto k-hat of the independence proposal's importance weights (abilities)",
            bool(k <= IS_MAX_PARETO_K) if imh else None, k, IS_MAX_PARETO_K, "<=", details))
    return checks


def run_checks(responses: ResponseMatrix, fit: IRTFit, seed: int = 0, timings: dict[str, float] | None = None,
               convergence: str = "fast") -> list[Check]:
    """All checks, in order R1-R4, M1-M3 (and M4 for the fast sampler). ``timings``: a dict that receives the
    seconds each took (keys ``R1``..``R4`` and ``M``); ``convergence``: "fast" or "arviz" (exact, slow)."""
    import time

    out: list[Check] = []
    for name, fn in (("R1", lambda: [check_r1_complete(responses)]),
                     ("R2", lambda: [check_r2_floor_ceiling(responses)]),
                     ("R3", lambda: [check_r3_misfit(responses, fit, seed=seed)]),
                     ("R4", lambda: [check_r4_ppc(responses, fit, seed=seed)]),
                     ("M", lambda: mcmc_checks(fit, responses, convergence))):
        t = time.perf_counter()
        out.extend(fn())
        if timings is not None:
            timings[name] = time.perf_counter() - t
    return out
