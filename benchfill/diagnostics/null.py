"""The design's resolution and its design-aware null (README: Reading the figures).

A response design (which models, how many trials per cell, which guessing rate) limits how finely the difficulty
axis can be resolved: items with the same likelihood key get the same posterior, so with K distinct keys the
normalised difficulties take at most K values and the gaps can never be smaller than the key lattice allows. The
null asks what the plug-in metrics look like for a benchmark WITHOUT holes under the same design: true
difficulties i.i.d. uniform over the benchmark's own range (the maximum-likelihood uniform population), answered by
the same models (a posterior draw of the abilities per replicate where answers are simulated; their posterior mean
in the exact multinomial null) with the same trial counts and guessing rates, and put through the same estimator
(exact per-key posterior means of b given the fit's ability draws, under the benchmark's own difficulty
population). A metric is only evidence of a hole when it exceeds the null's 95th percentile.

Cheap at any size: with the abilities fixed the posterior mean of b is a function of the key, so each distinct key
is integrated once (cached across replicates) and a replicate costs one draw of the counts plus a sort. Without
guessing a key is (trial pattern, total): every replicate's totals are drawn first (in the compiled 1PL simulation
for a large design), and each pattern's softplus sums serve all of its totals at once
(:func:`benchfill.irt.placement.total_moments`), so a sparse leaderboard, whose items are each their own pattern,
pays one lattice sum per item and ability draw, not one per item, total and draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from benchfill.diagnostics import metrics as M
from benchfill.irt.checks import PPC_KERNEL_MIN_WORK, Replicator, replicate_blocks, use_ppc_kernel
from benchfill.irt.fast import spread_totals, unique_rows
from benchfill.irt.model import thin_draws
from benchfill.irt.placement import EXACT_DRAWS, distinct_key_moments, grid_key_moments, total_moments
from benchfill.irt.prior import Population

METRICS = ("ddm", "max_gap", "top5_sum")
MULTINOMIAL_MAX_PATTERNS = 64  # trial patterns (columns of n) up to which the exact multinomial null is used
# ... when its Poisson-binomial convolutions (~ nodes x trials x window per pattern) cost less than simulating
# every cell of every replicate; the constant converts one to the other, conservatively (by hand on this 2-core
# machine: ~1.6 ns per element-step, 0.8 s for 1,000 binary models, against the old null's ~30-50 ns per
# simulated cell at 1,000 x 5,000)
CONVOLUTION_PER_CELL = 4.0
MIN_NODES = 400  # midpoint nodes over U(lo, hi) in the exact null, at least ...
NODES_PER_SD = 8.0  # ... and per narrowest SD of b given a total (1 / sqrt(trials / 4))
PMF_TOL = 1e-15  # mass per node below which the edge columns of a total's distribution are dropped
NODE_CHUNK = 128  # nodes convolved together (they share one window of totals)
KEY_DRAW_BUDGET = 1e6  # distinct keys x ability draws integrated by the null
MIN_DRAWS = 25
NULL_STREAM = 5  # tag of the null's replicate streams (R3 and R4 use 3 and 4)
THRESHOLDS = {"ddm": M.FLAG_DDM, "max_gap": M.FLAG_MAX_GAP, "top5_sum": M.FLAG_TOP5}


@dataclass(frozen=True)
class Resolution:
    """How finely the design can resolve the axis.

    Attributes:
        distinct_keys: number of distinct likelihood keys among the items (the number of distinct d values).
        max_gap_floor, top5_floor: the smallest max gap and Top-5 sum any benchmark can show with that many
            distinct values (1 / (K - 1) and min(5, K - 1) / (K - 1)).
        at_floor: the design alone reaches a flag threshold: a benchmark without holes, answered by this panel,
            would show max gap >= 0.10 or Top-5 >= 0.30 (by the key floor, or in at least half of the null's
            replicates).
    """

    distinct_keys: int
    max_gap_floor: float
    top5_floor: float
    at_floor: bool


MAX_ENUMERATED_KEYS = 4096


def attainable_keys(n_pattern: np.ndarray, guessing: float = 0.0) -> tuple[np.ndarray, np.ndarray] | None:
    """Every likelihood key a new item answered by models with (J,) trials ``n_pattern`` can have: (K, J) correct
    counts and trials, one row per key (the totals 0..sum(n) without guessing, every count column with it). None
    when guessing makes the columns more than :data:`MAX_ENUMERATED_KEYS`."""
    n = np.asarray(n_pattern, dtype=np.int64)
    if guessing > 0:
        sizes = n + 1
        if float(np.prod(sizes.astype(float))) > MAX_ENUMERATED_KEYS:
            return None
        y = np.stack(np.meshgrid(*[np.arange(k) for k in sizes], indexing="ij"), -1).reshape(-1, len(n))
    else:
        total = np.arange(int(n.sum()) + 1)
        y = spread_totals(total, n)
    return y, np.broadcast_to(n, y.shape).copy()


def attainable_b(theta_draws: np.ndarray, n_pattern: np.ndarray, guessing: float = 0.0,
                 prior: Population | None = None) -> np.ndarray | None:
    """Every posterior-mean b (logits, sorted) that a new item answered by these models with these trials can get
    (placed under ``prior``, the benchmark's population; default the paper's N(0, 1)).

    A panel places an item only at one of its likelihood keys (:func:`attainable_keys`). A gap with none of these
    values strictly inside cannot be filled measurably by this panel. None when guessing makes the keys too many
    to enumerate.
    """
    keys = attainable_keys(n_pattern, guessing)
    if keys is None:
        return None
    y, rows = keys
    g = np.full(len(y), guessing) if guessing > 0 else None
    return np.sort(grid_key_moments(thin_draws(np.asarray(theta_draws, dtype=float), EXACT_DRAWS), y, rows, g,
                                    prior=prior).mean)


def gap_is_unfillable(lo: float, hi: float, attainable_d: np.ndarray | None) -> bool:
    """No attainable placement strictly inside (lo, hi) on the normalised axis (False when unknown)."""
    if attainable_d is None:
        return False
    return not bool(np.any((attainable_d > lo + 1e-9) & (attainable_d < hi - 1e-9)))


def key_floor(distinct_keys: int) -> tuple[float, float]:
    """(max gap floor, Top-5 floor) that K distinct values put under every benchmark."""
    if distinct_keys < 2:
        return 1.0, 1.0
    steps = distinct_keys - 1
    return 1.0 / steps, min(5, steps) / steps


def hole_free_counts(rng: np.random.Generator, theta: np.ndarray, n: np.ndarray, c: np.ndarray,
                     b_range: tuple[float, float]) -> np.ndarray:
    """(J, I) correct counts of one hole-free benchmark: b ~ U(b_range), answered by abilities ``theta`` (J,) with
    the trials ``n`` (J, I) and guessing ``c`` (I,) of the observed design."""
    b = np.asarray(rng.uniform(b_range[0], b_range[1], size=n.shape[1]), dtype=float)
    p = c + (1.0 - c) / (1.0 + np.exp(-(theta[:, None] - b[None, :])))
    y = (rng.random(n.shape) < p).astype(np.int64) if n.max() <= 1 else rng.binomial(n, p)
    return np.where(n > 0, y, 0)


def design_null(theta_draws: np.ndarray, n_trials: np.ndarray, guessing: np.ndarray | None,
                b_range: tuple[float, float], *, replicates: int = 200, seed: int = 0,
                max_draws: int | None = None, chunk: int = 25, prior: Population | None = None
                ) -> dict[str, np.ndarray]:
    """Plug-in DDM, max gap and Top-5 of ``replicates`` hole-free benchmarks under the observed design.

    Args:
        theta_draws: (S, J) the fit's ability draws, logits, thinned evenly to ``max_draws`` for the estimator:
            by default as many as KEY_DRAW_BUDGET allows for the number of keys the design can produce, at most
            :data:`benchfill.irt.placement.EXACT_DRAWS` (the draws of the observed per-key means, so a coarse
            design without guessing reproduces them exactly) and at least MIN_DRAWS (guessing with rollouts,
            whose keys are whole count columns and nearly all distinct).
        n_trials: (J, I) trials per cell of the observed design (0 = not asked).
        guessing: (I,) fixed guessing rate per item, or None.
        b_range: (lo, hi) logits; true difficulties are U(lo, hi) (the diagnosis passes the maximum-likelihood
            uniform population's range, :func:`benchfill.irt.population.uniform_range`).
        prior: the difficulty population the replicates' exact means use (the benchmark's; default the paper's
            N(0, 1)).
    Returns:
        {"ddm", "max_gap", "top5_sum"}: (replicates,) arrays; "theta_draws": the number of draws used.
    """
    rng = np.random.default_rng(seed)
    n = np.asarray(n_trials, dtype=np.int64)
    J, I = n.shape
    c = np.zeros(I) if guessing is None else np.asarray(guessing, dtype=float)
    theta = np.asarray(theta_draws, dtype=float).mean(0)
    lo, hi = b_range
    # Items without guessing are keyed by (trial pattern, total correct); with guessing by the whole column.
    patterns, _, pattern_of, _ = unique_rows(n.T)
    plain = c <= 0
    if plain.all() and len(patterns) <= MULTINOMIAL_MAX_PATTERNS and _exact_is_cheaper(patterns, J * I, replicates,
                                                                                         (lo, hi)):
        return _multinomial_null(theta_draws, theta, patterns, np.bincount(pattern_of, minlength=len(patterns)),
                                 (lo, hi), replicates, rng, prior)
    c_values, c_index = np.unique(c, return_inverse=True)
    # A key row: (trial pattern, guessing rate, total correct for plain items | the count column with guessing).
    width = J if not plain.all() else 1
    radices = np.array([len(patterns), len(c_values)] + [int(n.sum(0).max()) + 1 if plain.all() else int(n.max()) + 1]
                       * width, dtype=object)
    packable = float(np.sum([np.log2(float(r)) for r in radices])) < 62
    weights = np.cumprod([1] + [int(r) for r in radices[:0:-1]])[::-1].astype(np.int64) if packable else None
    if max_draws is None:  # as many ability draws as a budget of key x draw integrals allows
        key_space = min(float(np.prod([float(r) for r in radices])), float(replicates) * I)
        max_draws = int(np.clip(KEY_DRAW_BUDGET / key_space, MIN_DRAWS, EXACT_DRAWS))
    draws = thin_draws(np.asarray(theta_draws, dtype=float), max_draws)
    all_draws = np.asarray(theta_draws, dtype=float)
    if plain.all():
        return _plain_null(rng, all_draws, draws, n, c, patterns, pattern_of, (lo, hi), replicates, prior, seed)
    out = {k: np.empty(replicates) for k in METRICS}
    known = KeyCache()
    for first in range(0, replicates, chunk):
        reps = range(first, min(replicates, first + chunk))
        rows = []
        for _ in reps:
            # each replicate's abilities are a posterior draw: the null carries the abilities' uncertainty
            y = hole_free_counts(rng, all_draws[rng.integers(len(all_draws))], n, c, (lo, hi))
            body = np.where(plain[:, None], y.sum(0)[:, None], y.T)  # (plain items: their total; else the column)
            rows.append(np.concatenate([pattern_of[:, None], c_index[:, None], body], axis=1))
        means = known.means(np.concatenate(rows), weights,
                            lambda new: _integrate(new, draws, patterns, c_values, prior)).reshape(len(reps), I)
        for r, m in zip(reps, means):
            for k, v in M.headline_metrics(M.normalise(m)).items():
                out[k][r] = v
    out["theta_draws"] = np.array(len(draws))
    return out


class KeyCache:
    """The null's per-key posterior means, kept across chunks of replicates (MMLU-Pro with guessing: 200 x 12,032
    items hold 1.2 M distinct count columns, half of them) as sorted arrays of the rows' tags, looked up and merged by
    numpy: a dict of the same keys cost ~3.5 s of Python per null there."""

    def __init__(self) -> None:
        self.tags: np.ndarray | None = None  # sorted, distinct
        self.values = np.empty(0)

    def means(self, rows: np.ndarray, weights: np.ndarray | None,
              integrate: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The mean of every row of ``rows`` (N, width) int64: each distinct row integrated once (``integrate``:
        (K, width) distinct rows -> (K,) means), here or in an earlier call. A row's tag is its mixed-radix packing
        into one int64 (``weights``), or where a row does not fit in 64 bits (None) its bytes."""
        if weights is not None:
            packed = rows @ weights
        else:
            packed = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
        tags, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
        known = tags[:0] if self.tags is None else self.tags
        at = np.minimum(np.searchsorted(known, tags), max(len(known) - 1, 0))
        found = known[at] == tags if len(known) else np.zeros(len(tags), dtype=bool)
        values = np.empty(len(tags))
        values[found] = self.values[at[found]]
        new = ~found
        if new.any():
            values[new] = integrate(rows[first[new]])
            place = np.searchsorted(known, tags[new])
            self.tags = np.insert(known, place, tags[new])
            self.values = np.insert(self.values, place, values[new])
        return values[inverse.reshape(-1)]


def _plain_null(rng: np.random.Generator, all_draws: np.ndarray, draws: np.ndarray, n: np.ndarray, c: np.ndarray,
                patterns: np.ndarray, pattern_of: np.ndarray, b_range: tuple[float, float], replicates: int,
                prior: Population | None, seed: int) -> dict[str, np.ndarray]:
    """:func:`design_null` without guessing, by simulation: every replicate's totals first, then each distinct
    (trial pattern, total) integrated once, with the pattern's softplus sums shared by all its totals
    (:func:`benchfill.irt.placement.total_moments`)."""
    I = n.shape[1]
    if use_ppc_kernel(None, n, replicates, PPC_KERNEL_MIN_WORK):
        # a large design: the compiled 1PL simulation, in blocks of replicates with their own seeded streams
        # spread over the cores (the same totals on any number of cores)
        def block(reps: range, block_rng: np.random.Generator) -> tuple[np.ndarray]:
            sim, out = Replicator(n, block_rng), np.zeros((len(reps), I), dtype=np.int64)
            for k in range(len(reps)):
                theta = all_draws[block_rng.integers(len(all_draws))]
                sim.counts(theta, np.asarray(block_rng.uniform(b_range[0], b_range[1], size=I)), None, col=out[k])
            return (out,)

        totals = replicate_blocks(block, replicates, seed, NULL_STREAM)[0]
    else:
        totals = np.empty((replicates, I), dtype=np.int64)
        for rep in range(replicates):
            # each replicate's abilities are a posterior draw: the null carries the abilities' uncertainty
            totals[rep] = hole_free_counts(rng, all_draws[rng.integers(len(all_draws))], n, c, b_range).sum(0)
    radix = int(patterns.sum(1).max(initial=0)) + 1
    keys, inverse = np.unique(pattern_of[None, :] * radix + totals, return_inverse=True)
    means = total_moments(draws, patterns, keys // radix, keys % radix, prior=prior).mean[inverse.reshape(totals.shape)]
    out = {k: np.empty(replicates) for k in METRICS}
    for rep in range(replicates):
        for k, v in M.headline_metrics(M.normalise(means[rep])).items():
            out[k][rep] = v
    out["theta_draws"] = np.array(len(draws))
    return out


def _multinomial_null(theta_draws: np.ndarray, theta: np.ndarray, patterns: np.ndarray, counts: np.ndarray,
                      b_range: tuple[float, float], replicates: int, rng: np.random.Generator,
                      prior: Population | None = None) -> dict[str, np.ndarray]:
    """The null without guessing and with few trial patterns, exactly and without simulating answers: an item of
    pattern p with b ~ U(lo, hi) has total r with probability pi_p(r) = mean over b of the Poisson-binomial
    P(r | b) (:func:`mixture_total_pmf`), and items are independent, so a replicate's key counts are
    Multinomial(I_p, pi_p) per pattern."""
    probs, means = [], []
    draws = thin_draws(np.asarray(theta_draws, dtype=float), EXACT_DRAWS)
    for pattern in patterns:
        probs.append(mixture_total_pmf(theta, pattern, b_range))
        keys = attainable_keys(pattern)  # every total, spread over the models in order
        assert keys is not None  # without guessing the keys are the totals: never too many
        y, rows = keys
        means.append(grid_key_moments(draws, y, rows, prior=prior).mean)
    values = np.concatenate(means)
    order = np.argsort(values, kind="stable")
    out = {k: np.empty(replicates) for k in METRICS}
    for r in range(replicates):
        k = np.concatenate([rng.multinomial(n_p, pi / pi.sum()) for n_p, pi in zip(counts, probs)])
        d = M.normalise(np.repeat(values[order], k[order]))
        for name, v in M.headline_metrics(d).items():
            out[name][r] = v
    out["theta_draws"] = np.array(len(draws))
    return out


def null_nodes(pattern: np.ndarray, b_range: tuple[float, float]) -> int:
    """Midpoint nodes over U(lo, hi) for :func:`mixture_total_pmf`: NODES_PER_SD per narrowest SD of b given a
    total (at least 1 / sqrt(trials / 4)), and at least MIN_NODES."""
    narrowest = 1.0 / math.sqrt(max(float(np.sum(pattern)), 1.0) / 4.0)
    return max(MIN_NODES, int(math.ceil(NODES_PER_SD * (b_range[1] - b_range[0]) / narrowest)))


def mixture_total_pmf(theta: np.ndarray, pattern: np.ndarray, b_range: tuple[float, float]) -> np.ndarray:
    """(N + 1,) probability of each total correct of an item with b ~ U(lo, hi), answered by abilities ``theta``
    (J,) with ``pattern`` (J,) trials (N in all): the midpoint rule over :func:`null_nodes` nodes of the
    Poisson-binomial P(total | b), each the convolution of the models' Binomial(n_j, p_j(b)).

    Nodes are convolved NODE_CHUNK at a time, and edge totals whose mass is below PMF_TOL at every node of the
    chunk are dropped as the convolution grows (a convolution moves mass, never creates it, so the result is off
    by at most the dropped mass, < 2 PMF_TOL per model): the window of totals stays ~ 15 SD wide, not N + 1.
    """
    lo, hi = b_range
    pattern = np.asarray(pattern, dtype=np.int64)
    models = np.flatnonzero(pattern)
    trials = pattern[models].tolist()
    total = int(pattern.sum())
    B = null_nodes(pattern, b_range)
    b = lo + (hi - lo) * (np.arange(B) + 0.5) / B
    out = np.zeros(total + 1)
    coefs = {n: np.array([math.comb(n, t) for t in range(n + 1)], dtype=float) for n in set(trials)}
    for start in range(0, B, NODE_CHUNK):
        p = 1.0 / (1.0 + np.exp(-(theta[models, None] - b[None, start:start + NODE_CHUNK])))  # (J', C)
        buf = np.zeros((p.shape[1], total + 1))  # totals first..last - 1 live in buf[:, first:last]
        buf[:, 0] = 1.0
        first, last = 0, 1
        for n_j, p_j in zip(trials, p):
            q = p_j[:, None]
            live = buf[:, first:last]
            if n_j == 1:  # in place: P(t) = P(t)(1 - q) + P(t - 1) q
                moved = live * q
                live *= 1.0 - q
                buf[:, first + 1:last + 1] += moved
            else:
                k = np.arange(n_j + 1)
                pmf = coefs[n_j] * q**k * (1.0 - q) ** (n_j - k)  # (C, n_j + 1) binomial
                old = live.copy()
                live *= pmf[:, :1]
                for t in range(1, n_j + 1):
                    buf[:, first + t:last + t] += old * pmf[:, t:t + 1]
            last += n_j
            edge = buf[:, first:last].max(0)
            drop_lo = int(np.searchsorted(np.cumsum(edge), PMF_TOL))
            drop_hi = int(np.searchsorted(np.cumsum(edge[::-1]), PMF_TOL))
            drop_lo = min(drop_lo, last - first - 1)
            buf[:, first:first + drop_lo] = 0.0
            first += drop_lo
            if drop_hi and last - drop_hi > first:
                buf[:, last - drop_hi:last] = 0.0
                last -= drop_hi
        out += buf.sum(0)
    return out / B


def _exact_is_cheaper(patterns: np.ndarray, cells: int, replicates: int, b_range: tuple[float, float]) -> bool:
    """Whether the exact multinomial null costs less than simulating ``replicates`` x ``cells`` answers (each
    pattern's convolution: nodes x trials x a window of ~ 15 SD of the total, at most every total)."""
    trials = patterns.sum(1).astype(float)
    window = np.minimum(trials + 1.0, 15.0 * np.sqrt(trials / 4.0) + 2 * NODE_CHUNK)
    nodes = np.array([null_nodes(p, b_range) for p in patterns], dtype=float)
    return float(np.sum(nodes * trials * window)) <= CONVOLUTION_PER_CELL * replicates * cells


def _integrate(rows: np.ndarray, draws: np.ndarray, patterns: np.ndarray, c_values: np.ndarray,
               prior: Population | None = None) -> np.ndarray:
    """Exact posterior means of b (K,) for distinct key rows (K, 2 + width) as built by :func:`design_null`."""
    n_rows = patterns[rows[:, 0]]
    c_rows = c_values[rows[:, 1]]
    body = rows[:, 2:]
    # Without guessing only the total matters: spread it over the models in order, within their trials.
    total = body[:, 0]
    spread = spread_totals(total, n_rows)
    y_rows = spread if body.shape[1] == 1 else np.where((c_rows <= 0)[:, None], spread, body)
    return distinct_key_moments(draws, y_rows, n_rows, c_rows if np.any(c_rows > 0) else None,
                                prior=prior or Population.paper()).item_mean


def summarise_null(null: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Median and 95th percentile of each null metric."""
    return {k: {"median": float(np.median(null[k])), "q95": float(np.quantile(null[k], 0.95))} for k in METRICS}
