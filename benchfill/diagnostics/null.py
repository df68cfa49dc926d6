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
is integrated once (cached across replicates) and a replicate costs one draw of the counts plus a sort.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from benchfill.diagnostics import metrics as M
from benchfill.irt.model import thin_draws
from benchfill.irt.placement import EXACT_DRAWS, grid_key_moments
from benchfill.irt.prior import Population

METRICS = ("ddm", "max_gap", "top5_sum")
MULTINOMIAL_MAX_PATTERNS = 64  # trial patterns (columns of n) up to which the exact multinomial null is used
MULTINOMIAL_MAX_TRIALS = 400  # ... and trials per item (the Poisson-binomial costs B_NODES x trials^2)
B_NODES = 2000
KEY_DRAW_BUDGET = 1e6  # distinct keys x ability draws integrated by the null
MIN_DRAWS = 25
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
        y = np.clip(total[:, None] - (np.cumsum(n) - n)[None, :], 0, n[None, :])
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
    patterns, pattern_of = np.unique(n.T, axis=0, return_inverse=True)
    pattern_of = pattern_of.reshape(-1)
    plain = c <= 0
    if plain.all() and len(patterns) <= MULTINOMIAL_MAX_PATTERNS and patterns.sum(1).max() <= MULTINOMIAL_MAX_TRIALS:
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
    cache: dict[object, float] = {}
    out = {k: np.empty(replicates) for k in METRICS}
    for first in range(0, replicates, chunk):
        reps = range(first, min(replicates, first + chunk))
        per_rep = []
        for _ in reps:
            # each replicate's abilities are a posterior draw: the null carries the abilities' uncertainty
            y = hole_free_counts(rng, all_draws[rng.integers(len(all_draws))], n, c, (lo, hi))
            body = y.sum(0)[:, None] if plain.all() else np.where(plain[:, None], y.sum(0)[:, None], y.T)
            rows = np.concatenate([pattern_of[:, None], c_index[:, None], body], axis=1)
            if weights is not None:  # one integer per item: a 1-D unique is far faster than one over rows
                _, first_of, inverse = np.unique(rows @ weights, return_index=True, return_inverse=True)
                rows = rows[first_of]
                tags = list((rows @ weights).tolist())
            else:
                rows, inverse = np.unique(rows, axis=0, return_inverse=True)
                tags = [row.tobytes() for row in rows]
            per_rep.append((tags, inverse.reshape(-1), rows))
        new: dict[object, np.ndarray] = {}
        for tags, _, rows in per_rep:
            for t, row in zip(tags, rows):
                if t not in cache and t not in new:
                    new[t] = row
        if new:
            _integrate(new, cache, draws, patterns, c_values, prior)
        for r, (tags, inverse, _) in zip(reps, per_rep):
            means = np.array([cache[t] for t in tags])[inverse]
            for k, v in M.headline_metrics(M.normalise(means)).items():
                out[k][r] = v
    out["theta_draws"] = np.array(len(draws))
    return out


def _multinomial_null(theta_draws: np.ndarray, theta: np.ndarray, patterns: np.ndarray, counts: np.ndarray,
                      b_range: tuple[float, float], replicates: int, rng: np.random.Generator,
                      prior: Population | None = None) -> dict[str, np.ndarray]:
    """The null without guessing and with few trial patterns, exactly and without simulating answers: an item of
    pattern p with b ~ U(lo, hi) has total r with probability pi_p(r) = mean over b of the Poisson-binomial
    P(r | b), and items are independent, so a replicate's key counts are Multinomial(I_p, pi_p) per pattern."""
    lo, hi = b_range
    b = lo + (hi - lo) * (np.arange(B_NODES) + 0.5) / B_NODES  # midpoint rule over U(lo, hi)
    p = 1.0 / (1.0 + np.exp(-(theta[:, None] - b[None, :])))  # (J, B)
    probs, means = [], []
    draws = thin_draws(np.asarray(theta_draws, dtype=float), EXACT_DRAWS)
    for pattern in patterns:
        dist = np.ones((B_NODES, 1))
        for j in np.flatnonzero(pattern):  # convolve in each model's Binomial(n_j, p_j(b))
            k = np.arange(pattern[j] + 1)
            coef = np.array([math.comb(int(pattern[j]), int(t)) for t in k], dtype=float)
            pmf = coef * p[j][:, None] ** k * (1.0 - p[j][:, None]) ** (pattern[j] - k)  # (B, n_j + 1) binomial
            new = np.zeros((B_NODES, dist.shape[1] + pattern[j]))
            for t in range(pattern[j] + 1):
                new[:, t:t + dist.shape[1]] += dist * pmf[:, t:t + 1]
            dist = new
        probs.append(dist.mean(0))
        total = np.arange(dist.shape[1])
        y = np.clip(total[:, None] - (np.cumsum(pattern) - pattern)[None, :], 0, pattern[None, :])
        means.append(grid_key_moments(draws, y, np.broadcast_to(pattern, y.shape), prior=prior).mean)
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


def _integrate(new: dict[object, np.ndarray], cache: dict[object, float], draws: np.ndarray,
               patterns: np.ndarray, c_values: np.ndarray, prior: Population | None = None) -> None:
    """Exact posterior means of b for the keys in ``new`` (rows as built by :func:`design_null`), into cache."""
    rows = np.array(list(new.values()))
    n_rows = patterns[rows[:, 0]]
    c_rows = c_values[rows[:, 1]]
    body = rows[:, 2:]
    # Without guessing only the total matters: spread it over the models in order, within their trials.
    total = body[:, 0]
    spread = np.clip(total[:, None] - (np.cumsum(n_rows, 1) - n_rows), 0, n_rows)
    y_rows = spread if body.shape[1] == 1 else np.where((c_rows <= 0)[:, None], spread, body)
    moments = grid_key_moments(draws, y_rows, n_rows, c_rows if np.any(c_rows > 0) else None, prior=prior)
    for t, m in zip(new, moments.item_mean):
        cache[t] = float(m)


def summarise_null(null: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Median and 95th percentile of each null metric."""
    return {k: {"median": float(np.median(null[k])), "q95": float(np.quantile(null[k], 0.95))} for k in METRICS}
