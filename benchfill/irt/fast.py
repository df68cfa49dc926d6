"""Fast exact 1PL posterior: difficulties integrated out by quadrature, the abilities sampled from their exact
marginal posterior by independence Metropolis-Hastings (NUTS via nutpie as the fallback), then every difficulty
drawn exactly from its conditional posterior given each ability draw.

The model is the reference PyMC model of :func:`benchfill.irt.fit.build_pymc_model` for ``kind="1pl"``:
theta_j ~ Normal(0, 1), b_i ~ g (the difficulty population, :mod:`benchfill.irt.prior`: learned, or the paper's
N(0, 1)); y_ji ~ Binomial(n_ji, c_i + (1 - c_i) sigmoid(theta_j - b_i)) on cells with n_ji > 0, c_i fixed
(``spec.guessing``, 0 = none). Given the J abilities, the I difficulties are independent one-dimensional problems, so

    log p(theta | y) = log N(theta; 0, 1) + sum_i log integral g(b) p(y_i | theta, b) db + const,

a J-dimensional (J = number of models, ~12) well-conditioned density whose gradient is analytic:
d/dtheta_j = sum_i E[d log p(y_i | theta, b_i) / d theta_j | theta, y_i]. Each integral is a trapezoid sum on a
lattice over b (spectrally accurate for these smooth integrands: error ~ exp(-2 pi^2 (scale / spacing)^2); a
learned spline population is only C2 at its knots, where the sums converge as spacing^4 instead: on MMLU-Pro ~1e-4
nats per key, which moves the abilities' posterior means by ~0.02 posterior SDs).

Two reductions make it cheap:

* Sufficient statistics. Without guessing, log p(y_i | theta, b) = sum_j y_ji theta_j - r_i b
  - sum_j n_ji softplus(theta_j - b) with r_i = sum_j y_ji: the b-part depends on the item only through
  (n_i, r_i). Items are deduplicated on that key (12 models x 4 rollouts: at most 49 keys; a binary 12-model
  matrix: 13). With guessing the key is the full count column (n_i, y_i, c_i).
* Shared lattices. Keys with similar posterior width and location share one b-lattice, so sigmoid/softplus are
  computed once per (model, node) and each key only sums over its own window of nodes, chosen from a pilot
  Laplace fit so it holds all but ~1e-15 of the conditional mass for every plausible theta. A lattice moves with
  the abilities (b_nodes + wbar . (theta - theta_hat)), following the common shift of abilities and difficulties
  that dominates high-rollout data, so windows stay narrow. Where every key of a guessing rate has a flat side (a
  guessing item's likelihood flattens beyond the panel's abilities, so its window runs far into the population's
  tail), their lattices are stretched there: uniform in u with b = phi(u), the spacing growing smoothly to what
  the population and the likelihood's analytic strip allow (:mod:`benchfill.irt.lattice_map`; MMLU-Pro: 38 % fewer
  window nodes, a third of the lattice nodes).

Sampling the abilities. Without guessing and with a log-concave g (the paper's N(0, 1), a learned normal) the joint
posterior is log-concave, so the marginal of theta is too (Prekopa) and lighter-tailed than a Gaussian; with 12
models and hundreds of items it is close to Gaussian (a learned spline g need not be log-concave: the proposal's
importance efficiency and Pareto k-hat, check M4, say whether it still fits). A multivariate Student-t (df 100) with the Laplace approximation's mean and covariance is
therefore an independence proposal with bounded weights p / q: the chain is uniformly ergodic and each step costs
one log density, no gradient, evaluated for all proposals in one vectorised batch. Every chain starts from its own
overdispersed point (a proposal draw with twice its spread), not from a shared pool, so chains that disagree after
the burn-in (a proposal that misses part of the posterior) show up in R-hat; the Pareto k-hat of the check draws'
importance weights is reported as check M4. If the proposal's importance efficiency is poor (< MIN_KISH; never seen on
real data) the abilities go to NUTS (nutpie) in whitened coordinates theta = theta_hat + L z instead.

Under IMH each new proposal's log density and one draw of every difficulty given it come from one pass over the
windows, and a kept state keeps the draw made when it was proposed (:func:`imh_chain_with_draws`): an independence
sampler on the joint (theta, b) with the same acceptance ratio. The lattice terms are computed once per proposal
instead of twice (MMLU-Pro 29 x 12,032 with c = 0.1: `fit_irt` 45.7 -> 36.0 s, in-process), at the price of a repeated state
repeating its b (min bulk / tail ESS of b there 2,379 -> 1,963 at acceptance 0.88).

Difficulty draws use inverse-CDF sampling on each key's window: the log-density is linear inside each cell
(exponential pieces, inverted exactly) and each cell's mass carries a curvature correction, so draw means and SDs
are exact to ~1e-5 of a posterior SD and quantiles to ~0.5 % (far below the Monte Carlo error of 4,000 draws).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

import numpy as np

from benchfill.data import ResponseMatrix
from benchfill.forking import available_cores, die_with_parent, forked_ranges, start_method
from benchfill.irt.lattice_map import LatticeMap, choose_map, term_bounds
from benchfill.irt.model import IRTFit, IRTSpec, SamplerSettings
from benchfill.irt.prior import Population

log = logging.getLogger(__name__)

PEEL_RATIO = 2.0  # a key's window is priced alone only when it is this many times the next widest of its group
PAD_SPAN_CAP = 10.0  # a window's pad for its shape's change is a tenth of its span, of at most this many logits
LOG_CUT = 36.0  # window edge: nodes more than this many nats below the peak carry < 1e-15 of the mass
H_FACTOR = 1.2  # node spacing = local posterior scale / 1.2 -> trapezoid error ~ exp(-2 pi^2 1.2^2) ~ 5e-13
SHIFT_SDS = 7.0  # a window also covers the conditional mode moving by 7 posterior SDs of theta
ELEMENT_BUDGET = 2_000_000  # largest temporary array (elements) made in one step: bounds memory
DRAW_BUDGET = 200_000  # elements per step when drawing: temporaries stay in cache
KERNEL_MIN_WORK = 20_000_000  # window nodes x ability vectors from which the compiled kernels run (below it, numpy
# is as fast and a process need not import numba: ~0.3 s, more on a machine's first large fit, which compiles)
B_DTYPE = np.float32  # b draws: 7 significant digits, far below their Monte Carlo error; half the memory

# (w (k, J), wbar (J,)) -> (down (k,), up (k,)): room, in logits, a window needs for theta's uncertainty
MarginFn = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


# ------------------------------------------------------------------------------------------------ items -> keys


@dataclass(frozen=True)
class ItemKeys:
    """Items reduced to distinct likelihood keys.

    Attributes:
        n: (K, J) trials per model of each key.
        y: (K, J) correct counts; used only where c > 0 (zero rows otherwise).
        r: (K,) total correct over models.
        c: (K,) fixed guessing rate.
        mult: (K,) number of items sharing the key.
        item_key: (I,) key index of every item.
        theta_lin: (J,) sum over items of y_ji: the part of the log-likelihood linear in theta.
    """

    n: np.ndarray
    y: np.ndarray
    r: np.ndarray
    c: np.ndarray
    mult: np.ndarray
    item_key: np.ndarray
    theta_lin: np.ndarray

    @property
    def n_keys(self) -> int:
        return int(self.r.shape[0])


def unique_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of an integer table, as ``np.unique(table, axis=0, return_index=True,
    return_inverse=True, return_counts=True)`` gives them (rows sorted lexicographically, column 0 first):
    (uniq (K, W), first (K,), inverse (R,), counts (K,)).

    np.unique sorts whole rows, which costs seconds on leaderboard tables (thousands of rows of thousands of
    counts); here rows are hashed by a random linear map (wrapping int64), grouped by a 1-D unique, the groups
    verified row by row (a collision falls back to np.unique), and only the distinct rows sorted. Float
    tables go to np.unique itself."""
    t = np.ascontiguousarray(table)
    if t.dtype.kind in "iub":
        t = t.astype(np.int64, copy=False)
    if t.dtype == np.int64 and t.ndim == 2 and t.shape[0] >= 2 and t.shape[1] >= 8:  # not float, narrow or tiny
        weights = np.random.default_rng(0x5EED).integers(1, 2**62, size=t.shape[1], dtype=np.int64)
        _, first, group = np.unique(t @ weights, return_index=True, return_inverse=True)
        group = group.reshape(-1)
        reps = t[first]
        if np.array_equal(reps[group], t):  # else two distinct rows share a hash: np.unique below
            order = np.lexsort(reps.T[::-1])  # lexsort's last key is the primary one
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            inverse = rank[group]
            return reps[order], first[order], inverse, np.bincount(inverse, minlength=len(order))
    uniq, first, inverse, counts = np.unique(t, axis=0, return_index=True, return_inverse=True, return_counts=True)
    return uniq, first, inverse.reshape(-1), counts


def spread_totals(total: np.ndarray, n: np.ndarray) -> np.ndarray:
    """(K, J) correct counts that give each row the total ``total`` (K,) on trials ``n`` (K, J) or (J,), filled
    over the models in order: a plain key's representative count row (only the total enters its likelihood)."""
    n = np.asarray(n)
    total = np.asarray(total)
    return np.clip(total[:, None] - (np.cumsum(n, -1) - n), 0, n)


def reduce_items(n_correct: np.ndarray, n_trials: np.ndarray, guessing: np.ndarray | None = None) -> ItemKeys:
    """Deduplicate the (J, I) count matrix into likelihood keys (see module docstring).

    Args:
        n_correct, n_trials: (J, I) integer counts.
        guessing: (I,) fixed c_i in [0, 1), or None for none.
    """
    y = np.asarray(n_correct, dtype=np.int64)
    n = np.asarray(n_trials, dtype=np.int64)
    J, I = n.shape
    c = np.zeros(I) if guessing is None else np.asarray(guessing, dtype=float).reshape(-1)
    if c.shape != (I,):
        raise ValueError(f"guessing must have one entry per item ({I}), got {c.shape}")
    if np.any(~np.isfinite(c)) or np.any(c < 0) or np.any(c >= 1):
        raise ValueError("guessing rates must lie in [0, 1)")
    y = np.where(n > 0, y, 0)  # cells without trials carry no information
    item_key = np.empty(I, dtype=np.int64)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    offset = 0
    plain = np.flatnonzero(c <= 0)
    if plain.size:
        r = y[:, plain].sum(0)
        table = np.concatenate([n[:, plain].T, r[:, None]], axis=1)
        uniq, _, inv, cnt = unique_rows(table)
        item_key[plain] = inv + offset
        parts.append((uniq[:, :J], np.zeros_like(uniq[:, :J]), uniq[:, J], np.zeros(len(uniq)), cnt))
        offset += len(uniq)
    guess = np.flatnonzero(c > 0)
    if guess.size:
        cvals, ccode = np.unique(c[guess], return_inverse=True)
        table = np.concatenate([ccode[:, None], n[:, guess].T, y[:, guess].T], axis=1)
        uniq, _, inv, cnt = unique_rows(table)
        item_key[guess] = inv + offset
        parts.append((uniq[:, 1 : J + 1], uniq[:, J + 1 :], uniq[:, J + 1 :].sum(1), cvals[uniq[:, 0]], cnt))
    return ItemKeys(
        n=np.concatenate([p[0] for p in parts]).astype(float),
        y=np.concatenate([p[1] for p in parts]).astype(float),
        r=np.concatenate([p[2] for p in parts]).astype(float),
        c=np.concatenate([p[3] for p in parts]).astype(float),
        mult=np.concatenate([p[4] for p in parts]).astype(float),
        item_key=item_key,
        theta_lin=y.sum(1).astype(float),
    )


# ------------------------------------------------------------------------------------------------ lattices


@dataclass(frozen=True)
class Block:
    """Keys that share one b-lattice and one guessing rate; each key sums over its own window of nodes.

    The lattice moves with the abilities: its nodes are grid + delta(theta), delta = wbar . (theta - anchor),
    wbar the block's mean sensitivity of the conditional mode to theta. The conditional posteriors of the keys
    follow the same move to first order, so windows need no room for the (often dominant) common shift of
    abilities and difficulties. Any smooth delta keeps the quadrature a valid trapezoid sum.

    Attributes:
        keys: (Kb,) key indices (into :class:`ItemKeys`).
        grid: (L,) lattice nodes at theta = anchor, logits, spacing ``h``.
        idx: (Kb, G) lattice index of each key's window nodes, a run starts_k + 0..G-1 (the compiled kernels read
            it from its first index), or None when every key uses the whole lattice.
        nodes: (Kb, G) or (1, L) the b value of each window node at theta = anchor.
        n, y: (Kb, J) trials and correct counts; ``n_shared`` (J,) when all rows of n are equal.
        r, mult: (Kb,) total correct and number of items.
        log_c: log guessing rate, None for c = 0.
        anchor, wbar: (J,) the tracking rule (zeros: a fixed lattice).
        prior: the difficulty population g(b) (its log density is part of every key's log density).
        n_basis, n_code: when the rows of n are not all equal but few distinct ones (a complete design with a
            few unasked cells), those rows (U, J) and each key's one-hot row of them (Kb, U); else None.
        stretch: a stretched lattice's map (:mod:`benchfill.irt.lattice_map`): ``grid`` is then phi(u0 + h g),
            uniform in u, not in b; None for a uniform lattice.  u0: the lattice's first node in u.
        log_jac: (L,) the log of a stretched lattice's node weights relative to ``h``, log phi'(u), or None.
        y_codes: (Kb, Q) each key's rows in the tables of :func:`kernel_terms` (its trial row's, where the block has
            a few, then its answers' subset sums: binary answers with guessing, where the keys outnumber the
            tables' rows), or None.
    """

    keys: np.ndarray
    grid: np.ndarray
    h: float
    idx: np.ndarray | None
    nodes: np.ndarray
    n: np.ndarray
    y: np.ndarray
    r: np.ndarray
    mult: np.ndarray
    log_c: float | None
    n_shared: np.ndarray | None
    anchor: np.ndarray
    wbar: np.ndarray
    prior: Population
    n_basis: np.ndarray | None = None
    n_code: np.ndarray | None = None
    stretch: LatticeMap | None = None
    u0: float = 0.0
    log_jac: np.ndarray | None = None
    y_codes: np.ndarray | None = None

    def log_prior(self, nodes: np.ndarray) -> np.ndarray:
        """The population's log density (unnormalised) at the lattice's nodes ``nodes`` (..., L) (the lattice moved
        by some delta), plus the log of a stretched lattice's node weights."""
        lp = self.prior.log_density_unnormalised(nodes)
        return lp if self.log_jac is None else lp + self.log_jac

    @property
    def width(self) -> int:
        return int(self.nodes.shape[1])

    @property
    def elements_per_theta(self) -> int:
        """Largest temporary (elements) :func:`block_log_density` makes per ability vector: sizes batches."""
        per_key_rows = self.n_shared is None or self.log_c is not None  # (Kb, L) lattice rows before gathering
        rows = self.n.shape[1] + (len(self.keys) if per_key_rows else 0)
        return max(len(self.keys) * self.width, len(self.grid) * rows)

    def batches(self, n_thetas: int, budget: int = ELEMENT_BUDGET, extra_per_theta: int = 0) -> list[slice]:
        """Consecutive slices of ``n_thetas`` ability vectors whose temporaries (plus the caller's
        ``extra_per_theta`` elements per vector) stay within ``budget`` elements."""
        step = max(1, budget // max(1, self.elements_per_theta, extra_per_theta))
        return [slice(s, min(n_thetas, s + step)) for s in range(0, n_thetas, step)]

    @property
    def size(self) -> int:
        return int(len(self.keys) * self.width)

    def shift(self, thetas: np.ndarray) -> np.ndarray:
        """delta(theta) for (..., J) abilities -> (...,) logits."""
        return (thetas - self.anchor) @ self.wbar


_ROW_TAG = np.random.default_rng(0x7A6).random(4096) + 1.0  # weights that tell trial rows apart (distinct rows ->
# distinct tags almost surely; a collision only sends the block to the exact count); designs of more models skip it
N_BASIS_MAX_SHARE = 0.5  # a block whose keys have at most this many distinct trial rows per model (U <= 0.5 J)
# sums -n . softplus over those rows and picks each key's by a one-hot weight: a (Kb, J + U) x (J + U, B L) product
# with guessing instead of (Kb, 2 J) x (2 J, B L) (MMLU-Pro: 29 models, 4 distinct rows in a block)


def make_block(keys: ItemKeys, sel: np.ndarray, lo: float, h: float, n_nodes: int, prior: Population,
               starts: np.ndarray | None = None, width: int | None = None,
               anchor: np.ndarray | None = None, wbar: np.ndarray | None = None,
               lattice: LatticeMap | None = None) -> Block:
    """A block for keys ``sel`` on the lattice lo + h * (0..n_nodes-1) (+ delta(theta)), or its image under a
    stretching ``lattice`` map; windows [starts, starts + width) or, with ``starts=None``, the whole lattice."""
    J = keys.n.shape[1]
    lattice = lattice or LatticeMap()
    u = lo + h * np.arange(n_nodes)
    grid = lattice.b(u)
    n = keys.n[sel]
    shared = n[0] if np.all(n == n[:1]) else None
    cs = np.unique(keys.c[sel])
    if cs.size != 1:
        raise AssertionError("a block holds one guessing rate")
    n_basis = n_code = None
    few = few_trial_rows(n, N_BASIS_MAX_SHARE * J) if shared is None else None
    if few is not None:
        n_basis, n_code = few[0], np.eye(len(few[0]))[few[1]]
    y = keys.y[sel]
    y_codes = None
    n_rows = 0 if few is None else len(few[0])
    if (cs[0] > 0 and (shared is not None or few is not None) and len(sel) > subset_rows(J) + n_rows
            and np.all((y == 0) | (y == 1))):
        # each key's rows: its trial row's term (where the block has a few), then its answers' subset sums
        y_codes = subset_codes(y) + n_rows
        if few is not None:
            y_codes = np.concatenate([few[1][:, None], y_codes], axis=1)
    if starts is None or width is None:
        idx, nodes = None, grid[None, :]
    else:
        idx = starts[:, None] + np.arange(width)[None, :]
        nodes = grid[idx]
    return Block(
        keys=np.asarray(sel), grid=grid, h=float(h), idx=idx, nodes=nodes, n=n, y=y, r=keys.r[sel],
        mult=keys.mult[sel], log_c=float(np.log(cs[0])) if cs[0] > 0 else None, n_shared=shared,
        anchor=np.zeros(J) if anchor is None else np.asarray(anchor, dtype=float),
        wbar=np.zeros(J) if wbar is None else np.asarray(wbar, dtype=float), prior=prior,
        n_basis=n_basis, n_code=n_code, stretch=None if lattice.identity else lattice, u0=float(lo),
        log_jac=lattice.log_jacobian(u), y_codes=y_codes,
    )


SUBSET_BITS = 6  # models per subset-sum table of :func:`kernel_terms` (2^6 rows each)


def _subset_groups(J: int) -> list[range]:
    """The models' groups of the subset-sum tables: runs of SUBSET_BITS consecutive models."""
    return [range(s, min(J, s + SUBSET_BITS)) for s in range(0, J, SUBSET_BITS)]


def subset_rows(J: int) -> int:
    """Rows of the stacked subset-sum tables for J models: 2^(group size) per group."""
    return sum(2 ** len(g) for g in _subset_groups(J))


def subset_codes(y: np.ndarray) -> np.ndarray:
    """(K, Q) row of each binary answer row ``y`` (K, J) in each group's table, offset into the stacked tables:
    the group's bits, model i of the group as bit i."""
    groups = _subset_groups(y.shape[1])
    codes = np.empty((y.shape[0], len(groups)), dtype=np.int64)
    offset = 0
    for q, g in enumerate(groups):
        bits = y[:, g.start : g.stop].astype(np.int64)
        codes[:, q] = offset + bits @ (1 << np.arange(len(g), dtype=np.int64))
        offset += 2 ** len(g)
    return codes


def subset_tables(terms: np.ndarray) -> np.ndarray:
    """(R, B, L) every subset sum of each group's rows of ``terms`` (B, J, L), stacked group after group (row
    ``offset + code`` = the sum of the group's terms whose bit is set in code), each built from the one with its
    highest bit cleared: one addition per element."""
    B, J, L = terms.shape
    out = np.empty((subset_rows(J), B, L))
    offset = 0
    for g in _subset_groups(J):
        out[offset] = 0.0
        for i, j in enumerate(g):
            np.add(out[offset : offset + 2**i], terms[None, :, j, :], out=out[offset + 2**i : offset + 2 ** (i + 1)])
        offset += 2 ** len(g)
    return out


def few_trial_rows(n: np.ndarray, max_rows: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The distinct rows of the trials ``n`` (K, J) and each row's index among them, (U, J) and (K,), where there
    are at most ``max_rows`` of them, else None. Counted first on one number per row (:data:`_ROW_TAG`), so a sparse
    design's thousands of distinct rows need no row sort."""
    J = n.shape[1]
    if J > len(_ROW_TAG) or len(np.unique(n @ _ROW_TAG[:J])) > max_rows:
        return None
    rows, _, inverse, _ = unique_rows(n.astype(np.int64))  # trial counts are whole: the hashed grouping
    return (rows.astype(n.dtype), inverse) if len(rows) <= max_rows else None


def use_kernels(work: int, large_fit: bool = False) -> bool:
    """Whether a step of ``work`` window-node evaluations runs in :mod:`benchfill.irt.kernels` (numba); in a
    ``large_fit`` (the Gibbs engine: many small steps, where the kernels measured ~15 % faster a sweep at 1,000 x
    5,000) at any size. ``BENCHFILL_KERNELS=0`` forces numpy everywhere, ``=1`` the kernels everywhere (tests
    compare the two)."""
    forced = os.environ.get("BENCHFILL_KERNELS", "")
    if forced in ("0", "1"):
        return forced == "1"
    return large_fit or work >= KERNEL_MIN_WORK


def softplus_sigmoid(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """softplus(X) = log(1 + e^X) and sigmoid(X), elementwise and overflow-free.

    Written with exp and log (SIMD in numpy) because np.logaddexp / scipy's expit are ~3x slower here."""
    E = np.exp(-np.abs(X))
    R = 1.0 / (1.0 + E)
    return np.maximum(X, 0.0) - np.log(R), np.where(X >= 0, R, E * R)


def softplus(X: np.ndarray) -> np.ndarray:
    """log(1 + e^X), elementwise and overflow-free."""
    return np.maximum(X, 0.0) + np.log1p(np.exp(-np.abs(X)))


CHEB_TOL = 1e-10  # nats: truncation error allowed in a Chebyshev-interpolated softplus sum
CHEB_MAX_DEGREE = 96  # a piece that needs more points is halved


def _chebyshev_degree(v_sorted: np.ndarray, w_sum: float, a: float, c: float) -> int:
    """Points a Chebyshev interpolant of s(x) = sum_j w_j softplus(v_j - x) on [a, c] needs for CHEB_TOL.

    s is analytic except at x = v_j +- i pi (2k + 1), so it is analytic inside the Bernstein ellipse with foci a, c
    that passes through the nearest of v_j +- i pi (its sum of distances to the foci is smallest); inside 0.9 of
    that ellipse's log-radius, |softplus| <= |z - v_j| + 10. Then |error| <= 4 M rho^-m / (rho - 1) (Trefethen,
    Approximation Theory and Approximation Practice, thm 8.2). The sum of distances is convex in v_j with its
    minimum at the midpoint, so the nearest pole belongs to a v_j next to the midpoint in the sorted ``v_sorted``
    (a search, not a pass over all J)."""
    half = max(0.5 * (c - a), 1e-9)
    mid = 0.5 * (a + c)
    at = int(np.searchsorted(v_sorted, mid))
    near = v_sorted[max(at - 1, 0):at + 1]
    q = float(np.min(np.hypot(near - a, np.pi) + np.hypot(near - c, np.pi))) / half  # > 2: poles off the axis
    rho = (0.5 * (q + np.sqrt(q * q - 4.0))) ** 0.9
    semi_major = 0.5 * half * (rho + 1.0 / rho)
    reach = max(abs(float(v_sorted[0]) - mid), abs(float(v_sorted[-1]) - mid))
    bound = max(w_sum, 1e-300) * (reach + semi_major + 10.0)
    return max(2, int(np.ceil(np.log(4.0 * bound / ((rho - 1.0) * CHEB_TOL)) / np.log(rho))))


@functools.lru_cache(maxsize=256)
def _chebyshev_basis(m: int) -> tuple[np.ndarray, np.ndarray]:
    """The m first-kind Chebyshev points of [-1, 1] (m,) and the (m, m) map from values there to coefficients."""
    k = np.arange(m)
    to_coef = (2.0 / m) * np.cos(np.pi * np.outer(k, k + 0.5) / m).T
    to_coef[:, 0] *= 0.5
    return np.cos(np.pi * (k + 0.5) / m), to_coef


def _sums_at(v: np.ndarray, W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(K, L) the sums sum_j W_kj softplus(v_j - x_l): one compiled pass for a single row (the numpy product with
    ``BENCHFILL_KERNELS=0``; only large sums come here), else a matrix product."""
    if W.shape[0] == 1 and use_kernels(len(v) * len(x), large_fit=True):
        from benchfill.irt import kernels

        out = np.empty(len(x))
        kernels.softplus_sums_at(v, W[0], np.ascontiguousarray(x), out)
        return out[None, :]
    return W @ softplus(v[:, None] - x[None, :])


def _chebyshev_coefficients(v: np.ndarray, W: np.ndarray, mid: float, half: float, m: int) -> np.ndarray:
    """(K, m) Chebyshev coefficients of the K sums interpolated at m first-kind points of [mid - half, mid + half]."""
    t, to_coef = _chebyshev_basis(m)
    return _sums_at(v, W, mid + half * t) @ to_coef


def _chebyshev_series(coef: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(K, n) the K Chebyshev series ``coef`` (K, m) at t (n,) in [-1, 1] (Clenshaw; compiled)."""
    if use_kernels(coef.size * len(t), large_fit=True):
        from benchfill.irt import kernels

        out = np.empty((coef.shape[0], len(t)))
        kernels.chebyshev_series_rows(np.ascontiguousarray(coef), np.ascontiguousarray(t), out)
        return out
    return np.polynomial.chebyshev.chebval(t, coef.T)


CHEB_MIN_TERMS = 50_000  # softplus terms (J x nodes) from which softplus_sums interpolates


def softplus_sums(values: np.ndarray, weights: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """s(x) = sum_j w_j softplus(v_j - x) at the nodes x (L,) -> (L,), nats; with weights (K, J), one such sum per
    row -> (K, L).

    Where J x L is large (the Gibbs engine's conditionals: thousands of items or models against hundreds of
    nodes), s is interpolated piece by piece instead: on each piece of the nodes' range, a Chebyshev interpolant
    whose degree (:func:`_chebyshev_degree`) bounds its truncation error by CHEB_TOL; a piece that would need more
    than CHEB_MAX_DEGREE points is halved, one with no more nodes than points is summed directly. Far from every
    v_j, s is smooth on a wide scale, so the long tails of a lattice cost a few dozen points. (Measured against
    long-double sums, tests/test_irt_gibbs.py: within 1e-8 nats on sums up to ~1e5 nats, the round-off of
    summing them in float64.) The bound asks 1.5-1.7x the points an a-posteriori check of the coefficients
    (Chebfun's) would keep; trying 0.7 of it first was measured to keep the try only about half the time, which
    costs more than it saves. With a (K, J) weight matrix the degree is chosen for the row of largest total weight
    (the bound grows with it), and the K sums share the softplus values at the interpolation points: one (K, J) x
    (J, points) product instead of (K, J) x (J, L). One row is summed and evaluated in compiled loops
    (:mod:`benchfill.irt.kernels`).

    Args:
        values: (J,) the v_j, logits.  weights: (J,) or (K, J) the w_j (trials), >= 0.  nodes: (L,) logits.
    """
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    x = np.asarray(nodes, dtype=float)
    rows = w.ndim == 2
    W = w if rows else w[None, :]  # (K, J)
    if len(v) * len(x) < CHEB_MIN_TERMS:
        out_direct = W @ softplus(v[:, None] - x[None, :])
        return out_direct if rows else out_direct[0]
    v, W = np.ascontiguousarray(v), np.ascontiguousarray(W)
    v_sorted = np.sort(v)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    out = np.empty((W.shape[0], len(x)))
    w_sum = float(np.abs(W).sum(1).max(initial=0.0))
    pending = [(0, len(xs))]
    while pending:
        i0, i1 = pending.pop()
        a, c = float(xs[i0]), float(xs[i1 - 1])
        m = _chebyshev_degree(v_sorted, w_sum, a, c) if c > a else 0
        if i1 - i0 <= max(m + 4, 8):
            out[:, order[i0:i1]] = _sums_at(v, W, xs[i0:i1])
        elif m > CHEB_MAX_DEGREE:
            cut = int(np.searchsorted(xs, 0.5 * (a + c), side="right", sorter=None))
            cut = min(max(cut, i0 + 1), i1 - 1)
            pending += [(i0, cut), (cut, i1)]
        else:
            mid, half = 0.5 * (a + c), 0.5 * (c - a)
            out[:, order[i0:i1]] = _chebyshev_series(_chebyshev_coefficients(v, W, mid, half, m),
                                                     (xs[i0:i1] - mid) / half)
    return out if rows else out[0]


def _gather_keys(mat: np.ndarray, blk: Block) -> np.ndarray:
    """(B, Kb, L) per-key lattice values -> (B, Kb, G) window values."""
    if blk.idx is None:
        return mat
    return np.take_along_axis(mat, np.broadcast_to(blk.idx, mat.shape[:1] + blk.idx.shape), axis=2)


def lattice_terms(thetas: np.ndarray, blk: Block, tables: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lattice-level terms of the keys' log densities, before each key takes its window (see
    :mod:`benchfill.irt.kernels` for the layout): base (B, L), per_key (Kb or 0, B, L), delta (B,).

    The key-specific term is one matrix product, [n | y] (Kb, 2J) @ [-softplus(X); softplus(log c - X)]
    (2J, B L), instead of one per ability vector. ``tables``: where the block has ``y_codes``, return the
    subset-sum tables (R, B, L) of softplus(log c - X) in place of per_key (:func:`kernel_terms`)."""
    delta = blk.shift(thetas)  # (B,)
    B, L = len(thetas), len(blk.grid)
    grid = blk.grid[None, :] + delta[:, None]  # (B, L)
    base = blk.log_prior(grid)
    if blk.n_shared is not None and blk.log_c is None and (B == 1 or thetas.shape[1] * L >= CHEB_MIN_TERMS):
        # sum_j n_j softplus(theta_j - b) by interpolation, one ability vector at a time (below
        # CHEB_MIN_TERMS the direct sums of all vectors at once are cheaper)
        sums = np.stack([softplus_sums(theta, blk.n_shared, nodes) for theta, nodes in zip(thetas, grid)])
        return base - sums, np.empty((0, B, L)), delta
    if blk.n_shared is None and blk.log_c is None and B == 1 and thetas.shape[1] * L >= CHEB_MIN_TERMS:
        # one ability vector and a row of trials per key (the Gibbs engine on a sparse design): the K sums
        # interpolated from shared softplus values, (K, J) x (J, points) instead of (K, J) x (J, L)
        return base, -softplus_sums(thetas[0], blk.n, grid[0])[:, None, :], delta
    X = thetas[:, :, None] - grid[:, None, :]  # (B, J, L)
    weights, terms = [], []
    if blk.n_shared is not None:
        base = base - np.einsum("j,bjl->bl", blk.n_shared, softplus(X))
    elif blk.n_basis is not None and blk.n_code is not None:
        weights.append(blk.n_code)
        terms.append(-np.einsum("uj,bjl->bul", blk.n_basis, softplus(X)))
    else:
        weights.append(blk.n)
        terms.append(-softplus(X))
    if blk.log_c is not None:
        if tables and blk.y_codes is not None:
            # the trial rows' terms (U, B, L), if the block has a few, then the answers' subset sums
            parts = [t.transpose(1, 0, 2) for t in terms] + [subset_tables(softplus(blk.log_c - X))]
            return base, np.concatenate(parts) if len(parts) > 1 else parts[0], delta
        weights.append(blk.y)
        terms.append(softplus(blk.log_c - X))
    if not weights:
        return base, np.empty((0, B, L)), delta
    Z = np.concatenate(terms, axis=1).transpose(1, 0, 2).reshape(-1, B * L)  # (J', B L)
    per_key = (np.concatenate(weights, axis=1) @ Z).reshape(len(blk.keys), B, L)
    return base, per_key, delta


def kernel_terms(thetas: np.ndarray, blk: Block) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`lattice_terms` as the compiled kernels read them: base (B, L), tables (R, B, L), codes (Kb, Q),
    delta (B,); key k's lattice term is the sum over q of tables[codes[k, q]] (:mod:`benchfill.irt.kernels`).

    With guessing and binary answers (MMLU-Pro: 29 models, ~9,000 answer patterns), the term
    y_k . softplus(log c - X) is read from subset-sum tables of SUBSET_BITS models each (R = 4 x 64 + 32 rows for
    29 models), Q additions per window node instead of the (Kb, J) x (J, B L) product (the tables cost R x B x L
    additions, the product Kb x J x B x L multiply-adds); a block with a few distinct trial rows adds the key's
    row of them as one more table row. Elsewhere the tables are per_key itself, one row per key."""
    base, terms, delta = lattice_terms(thetas, blk, tables=True)
    if blk.y_codes is not None:
        return base, terms, blk.y_codes, delta
    codes = np.arange(len(blk.keys))[:, None] if terms.shape[0] else np.empty((len(blk.keys), 0), dtype=np.int64)
    return base, terms, codes, delta


def grid_log_likelihood(n: np.ndarray, y: np.ndarray, r: np.ndarray, c: np.ndarray, X: np.ndarray, sp: np.ndarray,
                        grid: np.ndarray, rows: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """(K, G) b-dependent log-likelihood of K keys on one b-grid at one ability vector, nats.

    Args:
        n, y: (K, J) float trials and correct counts; r: (K,) total correct; c: (K,) guessing rates.
        X: (J, G) theta_j - grid; sp: softplus(X) (shared by every chunk of keys, so computed by the caller).
        grid: (G,) b nodes, logits. (Several ability vectors at once: X (J, S G) and grid tiled S times.)
        rows: the distinct rows of n and each key's (:func:`few_trial_rows`), if the caller has them: each term
            n . t is then summed once per distinct row (a (U, J) product and a gather for the (K, J) one).
    """
    def n_dot(term: np.ndarray, sel: np.ndarray | slice = slice(None)) -> np.ndarray:
        return n[sel] @ term if rows is None else (rows[0] @ term)[rows[1][sel]]

    plain = c <= 0
    if plain.all():
        return -n_dot(sp) - r[:, None] * grid[None, :]  # 1PL: log sigmoid = X - sp, log(1 - sigmoid) = -sp
    ell = np.empty((n.shape[0], grid.size))
    if plain.any():
        ell[plain] = -n_dot(sp, plain) - r[plain, None] * grid[None, :]
    for cv in np.unique(c[~plain]):
        gain, log_wrong = guessing_terms(X, sp, float(cv))
        if c.size and c[0] == cv and c[-1] == cv and np.all(c == cv):  # one rate for all: no row copies
            np.matmul(y, gain, out=ell)
            ell += n_dot(log_wrong)
            continue
        gi = np.flatnonzero(c == cv)
        ell[gi] = y[gi] @ gain + n_dot(log_wrong, gi)
    return ell


def guessing_terms(X: np.ndarray, sp: np.ndarray, c: float) -> tuple[np.ndarray, np.ndarray]:
    """A guessing item's log-likelihood per trial as y . gain + n . log_wrong: with guessing rate c > 0,
    y log(c + (1 - c) s) + (n - y) log((1 - c)(1 - s)) = y . (right - wrong) + n . wrong. ``X`` = theta_j - b and
    ``sp`` its softplus, (J, G) each; returns gain and log_wrong, (J, G) nats."""
    log_wrong = np.log1p(-c) - sp
    return np.logaddexp(np.log(c), np.log1p(-c) + X - sp) - log_wrong, log_wrong


def block_log_density(thetas: np.ndarray, blk: Block) -> tuple[np.ndarray, np.ndarray]:
    """Unnormalised log conditional density of b for every key of the block on its window nodes.

    Args:
        thetas: (B, J) ability vectors.
    Returns:
        ell (B, Kb, G): log g(b) (the prior) + b-dependent log-likelihood, nats (same constant for all nodes of a key);
        delta (B,): the lattice shift, so node values are ``blk.nodes + delta``.
    """
    base, per_key, delta = lattice_terms(thetas, blk)
    ell = base[:, None, :] if blk.idx is None else base[:, blk.idx]  # (B, 1 or Kb, G)
    if per_key.shape[0]:
        ell = ell + _gather_keys(per_key.transpose(1, 0, 2), blk)
    return ell - blk.r[:, None] * (blk.nodes[None, :, :] + delta[:, None, None]), delta


def expected_information(theta: np.ndarray, grid: np.ndarray, P: np.ndarray, blk: Block) -> np.ndarray:
    """(Kb, J) each key's expected information about b from each model, E_k[-d2 ell_k / db2] per model (the same
    as per theta_j), under the key's node weights ``P`` (Kb, L) on ``grid`` (L,) (the lattice's nodes, logits);
    with guessing, the y log(c + (1 - c) s) term's curvature is subtracted; floored at 0."""
    return information_and_curvature(theta, grid, P, blk, curvature=False)[0]


def information_and_curvature(theta: np.ndarray, grid: np.ndarray, P: np.ndarray, blk: Block,
                              curvature: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """:func:`expected_information` (Kb, J), and every key's -d2/db2 of the 1PL likelihood at each node,
    sum_j n_kj s(1 - s) ((1, L) when all keys share their trials, else (Kb, L); (0, L) without ``curvature``).

    Models are taken ELEMENT_BUDGET / L at a time: the Gibbs engine's transposed conditional has the items as its
    "models" and a fine lattice (each model holds thousands of trials), where one (J, L) array was measured at
    0.4 GB for 20,000 items (and its temporaries at three times that), growing with items x trials."""
    J, L = len(theta), len(grid)
    info = np.empty((P.shape[0], J))
    curv = np.zeros((0 if not curvature else 1 if blk.n_shared is not None else len(blk.keys), L))
    step = max(1, ELEMENT_BUDGET // max(1, L))
    for j0 in range(0, J, step):
        js = slice(j0, min(J, j0 + step))
        X = theta[js, None] - grid[None, :]  # (models of the slice, L)
        s = 1.0 / (1.0 + np.exp(-X))
        s *= 1.0 - s  # -d2/db2 of each softplus term, per trial
        part = blk.n[:, js] * (P @ s.T)
        if curvature:
            curv += (blk.n_shared[js] @ s)[None, :] if blk.n_shared is not None else blk.n[:, js] @ s
        if blk.log_c is not None:
            q = 1.0 / (1.0 + np.exp(-(blk.log_c - X)))
            part -= blk.y[:, js] * (P @ (q * (1.0 - q)).T)
        info[:, js] = part
    return np.maximum(info, 0.0), curv


def _on_lattice(W: np.ndarray, blk: Block) -> np.ndarray:
    """(Kb, G) values on each key's window nodes -> (Kb, L) on the whole lattice (zeros outside the window)."""
    if blk.idx is None:
        return W
    Om = np.zeros((len(blk.keys), len(blk.grid)))
    np.put_along_axis(Om, blk.idx, W, axis=1)
    return Om


def block_logp_grad(theta: np.ndarray, blk: Block) -> tuple[float, np.ndarray]:
    """sum_k mult_k log integral exp(ell_k(b)) db (up to a constant) and its gradient in theta (J,).

    The hot path of NUTS: one theta, few numpy calls. The gradient is E[d ell / d theta] under each key's
    quadrature weights; the lattice's own motion adds wbar * E[d ell / d b], which is zero (the integral of a
    derivative) up to the quadrature error, so it is left out."""
    delta = float(blk.shift(theta))
    grid = blk.grid + delta
    X = theta[:, None] - grid[None, :]  # (J, L)
    SP, SG = softplus_sigmoid(X)
    prior = blk.log_prior(grid)
    if blk.n_shared is not None:
        base = prior - blk.n_shared @ SP  # (L,)
        ell = base[None, :] if blk.idx is None else base[blk.idx]
    else:
        M = prior - blk.n @ SP  # (Kb, L)
        ell = M if blk.idx is None else np.take_along_axis(M, blk.idx, axis=1)
    if blk.log_c is not None:
        SQ, QS = softplus_sigmoid(blk.log_c - X)
        YQ = blk.y @ SQ
        ell = ell + (YQ if blk.idx is None else np.take_along_axis(YQ, blk.idx, axis=1))
    ell = ell - blk.r[:, None] * (blk.nodes + delta)
    mx = ell.max(axis=1)
    P = np.exp(ell - mx[:, None])
    S = P.sum(axis=1)
    logp = float(blk.mult @ (mx + np.log(S)))
    W = P * (blk.mult / S)[:, None]  # posterior weights of the nodes, times multiplicity
    if blk.n_shared is not None and blk.log_c is None:  # shared trials, no guessing: the sparse gradient
        om = W.sum(0) if blk.idx is None else np.bincount(blk.idx.ravel(), W.ravel(), minlength=len(blk.grid))
        grad = -blk.n_shared * (SG @ om)
    else:
        Om = _on_lattice(W, blk)
        if blk.n_shared is not None:
            grad = -blk.n_shared * (SG @ Om.sum(0))
        else:
            grad = -np.einsum("jl,jl->j", blk.n.T @ Om, SG)
        if blk.log_c is not None:
            grad = grad - np.einsum("jl,jl->j", blk.y.T @ Om, QS)
    return logp, grad


def _window_index(blk: Block) -> np.ndarray:
    """(Kb, G) lattice index of every window node (the whole lattice for every key when ``blk.idx`` is None)."""
    if blk.idx is not None:
        return blk.idx
    return np.broadcast_to(np.arange(len(blk.grid)), (len(blk.keys), len(blk.grid)))


def _kernel_batches(blk: Block, n_thetas: int, extra_per_theta: int = 0) -> list[slice]:
    per_theta = len(blk.grid) * (len(blk.keys) if blk.n_shared is None or blk.log_c is not None else 1)
    return blk.batches(n_thetas, ELEMENT_BUDGET, max(per_theta, extra_per_theta))


def window_log_masses(shifted: np.ndarray, peak: np.ndarray, mult: np.ndarray) -> np.ndarray:
    """(B,) sum_k mult_k log sum_g exp(ell[b, k, g]): the block's log density (:func:`block_logp_grad`'s constant)
    from the keys' window log densities less their peaks, ``shifted`` (B, Kb, G) (overwritten by its exponential),
    and the peaks (B, Kb)."""
    return (peak + np.log(np.exp(shifted, out=shifted).sum(-1))) @ mult


def block_logp_batch(thetas: np.ndarray, blk: Block) -> np.ndarray:
    """:func:`block_logp_grad`'s log density (same constant) for B ability vectors (B, J) at once -> (B,)."""
    out = np.empty(len(thetas))
    if use_kernels(len(thetas) * blk.size):
        from benchfill.irt import kernels

        idx = _window_index(blk)
        for part in _kernel_batches(blk, len(thetas)):
            base, tables, codes, delta = kernel_terms(thetas[part], blk)
            ell = np.empty((len(delta),) + idx.shape)
            peak = np.empty((len(delta), idx.shape[0]))
            kernels.window_shifted(base, tables, codes, idx, blk.nodes, blk.r, delta, ell, peak)
            out[part] = window_log_masses(ell, peak, blk.mult)
        return out
    for part in blk.batches(len(thetas)):
        ell, _ = block_log_density(thetas[part], blk)  # (B, Kb, G)
        mx = ell.max(-1)
        out[part] = window_log_masses(ell - mx[..., None], mx, blk.mult)
    return out


@dataclass(frozen=True)
class MarginalModel:
    """log p(theta | y) up to a constant, with the difficulties integrated out."""

    keys: ItemKeys
    blocks: tuple[Block, ...]

    def ability_terms(self, thetas: np.ndarray) -> np.ndarray:
        """The part of :meth:`logp_batch` outside the blocks, for (B, J) ability vectors -> (B,): the N(0, 1) prior
        and the log-likelihood's part linear in theta."""
        return thetas @ self.keys.theta_lin - 0.5 * np.einsum("bj,bj->b", thetas, thetas)

    def logp_batch(self, thetas: np.ndarray) -> np.ndarray:
        """log p(theta | y) (+ the constant of :meth:`logp_grad`) for (B, J) ability vectors -> (B,)."""
        thetas = np.atleast_2d(np.asarray(thetas, dtype=float))
        out = self.ability_terms(thetas)
        for blk in self.blocks:
            out += block_logp_batch(thetas, blk)
        return out

    def logp_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        lp = float(self.keys.theta_lin @ theta - 0.5 * theta @ theta)
        grad = self.keys.theta_lin - theta
        for blk in self.blocks:
            l, g = block_logp_grad(theta, blk)
            lp += l
            grad = grad + g
        return lp, grad

    @property
    def n_nodes(self) -> int:
        return int(sum(b.size for b in self.blocks))


def _spacing_bound(keys: ItemKeys, sel: np.ndarray, prior: Population) -> float:
    """Node spacing safe for every key: the conditional log density's curvature is at most the prior's plus
    sum_j n_j / 4."""
    return 1.0 / (H_FACTOR * np.sqrt(prior.curvature + keys.n[sel].sum(1).max() / 4.0))


def _full_blocks(keys: ItemKeys, lo: float, hi: float, prior: Population) -> list[Block]:
    """Wide fixed lattices [lo, hi] at the safe spacing, one per guessing rate, split so no temporary exceeds
    the element budget (a pilot: robust, not fast)."""
    blocks = []
    for cval in np.unique(keys.c):
        sel = np.flatnonzero(keys.c == cval)
        h = _spacing_bound(keys, sel, prior)
        L = int(np.ceil((hi - lo) / h)) + 1
        per = max(1, ELEMENT_BUDGET // L)
        for s in range(0, len(sel), per):
            blocks.append(make_block(keys, sel[s : s + per], lo, h, L, prior))
    return blocks


def block_neg_hessian(theta: np.ndarray, blk: Block) -> np.ndarray:
    """-d2/dtheta2 (J, J) of :func:`block_logp_grad`'s log density, exactly, for a block with shared trials and no
    guessing. Per key, d/dtheta_j log integral = E[y_j - n_j sigmoid(theta_j - b)] under the key's conditional of
    b, so the second derivative is -E[n_j s_j (1 - s_j)] on the diagonal plus Cov(n_j s_j, n_l s_l): summed over
    keys, one product with the lattice's sigmoids (J^2 L + K L J operations instead of 2 J gradients)."""
    if blk.n_shared is None or blk.log_c is not None:
        raise ValueError("the exact Hessian needs shared trials and no guessing")
    delta = float(blk.shift(theta))
    grid = blk.grid + delta
    SP, SG = softplus_sigmoid(theta[:, None] - grid[None, :])  # (J, L)
    base = blk.log_prior(grid) - blk.n_shared @ SP
    ell = (base[None, :] if blk.idx is None else base[blk.idx]) - blk.r[:, None] * (blk.nodes + delta)
    P = np.exp(ell - ell.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    Om = _on_lattice(P, blk)
    omega = blk.mult @ Om  # (L,) node weights summed over keys
    A = Om @ SG.T  # (K, J) E_k[s_j]
    second = (SG * omega) @ SG.T - A.T @ (A * blk.mult[:, None])  # sum_k mult_k Cov_k(s_j, s_l)
    n = blk.n_shared
    return np.diag(n * ((SG * (1.0 - SG)) @ omega)) - np.outer(n, n) * second


HESSIAN_NODE_CHUNK = 32  # lattice nodes per step of :func:`guessing_neg_hessian` (temporaries nodes x keys x J)
HESSIAN_WEIGHT_FLOOR = 1e-20  # a key's normalised node weight below which :func:`guessing_neg_hessian` skips it


def guessing_neg_hessian(theta: np.ndarray, blk: Block) -> np.ndarray:
    """-d2/dtheta2 (J, J) of :func:`block_logp_grad`'s log density for a block with guessing (any trials),
    exactly, instead of 2 J gradients by central differences (each a pass over every key's lattice row).

    Per key, the b-dependent log-likelihood is -n . softplus(X) + y . softplus(log c - X), X_j = theta_j - b, so
    d ell / d theta_j = f_j = -(n_j s_j + y_j q_j) with s = sigmoid(X), q = sigmoid(log c - X), and
    d2 ell / d theta_j2 = -n_j s_j (1 - s_j) + y_j q_j (1 - q_j); the second derivative of log integral exp(ell) db
    is E[d2 ell] + Cov(f) under the key's conditional of b (its quadrature weights). As in
    :func:`block_logp_grad`, the lattice's own motion is left out (it changes the sums by the quadrature error
    only). Cost: keys x lattice nodes x J^2 multiply-adds in matrix products, ~1/20 of the 2 J gradients at J = 29."""
    if blk.log_c is None:
        raise ValueError("guessing_neg_hessian is for blocks with guessing")
    delta = float(blk.shift(theta))
    grid = blk.grid + delta
    X = theta[:, None] - grid[None, :]  # (J, L)
    SP, SG = softplus_sigmoid(X)
    SQ, QS = softplus_sigmoid(blk.log_c - X)
    prior = blk.log_prior(grid)
    M = prior - blk.n @ SP + blk.y @ SQ  # (Kb, L)
    ell = (M if blk.idx is None else np.take_along_axis(M, blk.idx, axis=1)) - blk.r[:, None] * (blk.nodes + delta)
    P = np.exp(ell - ell.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    Pl = _on_lattice(P, blk)  # (Kb, L)
    W = Pl * blk.mult[:, None]
    N, Y = blk.n, blk.y
    # E[-d2 ell], summed over keys with their multiplicities: the diagonal
    diag = np.einsum("jl,jl->j", N.T @ W, SG * (1.0 - SG)) - np.einsum("jl,jl->j", Y.T @ W, QS * (1.0 - QS))
    A = N * (Pl @ SG.T) + Y * (Pl @ QS.T)  # (Kb, J): E_k[-f]
    J = len(theta)
    second = np.zeros((J, J))  # sum_k mult_k E_k[f f^T]
    # a key's weights live on its own conditional's few dozen nodes of the (pilot's ~600-node) lattice: each run of
    # nodes takes only the keys with a weight there above HESSIAN_WEIGHT_FLOOR of their unit mass (what is left
    # out is below round-off), and its sum is one matrix product over (node, key) rows
    live = Pl > HESSIAN_WEIGHT_FLOOR
    for g0 in range(0, len(grid), HESSIAN_NODE_CHUNK):
        g = slice(g0, g0 + HESSIAN_NODE_CHUNK)
        ks = np.flatnonzero(live[:, g].any(axis=1))
        if ks.size == 0:
            continue
        # C-ordered factors, so the products come out C-ordered and reshape without copying
        sg, qs, w = (np.ascontiguousarray(a.T) for a in (SG[:, g], QS[:, g], W[ks, g]))  # (G, J), (G, J), (G, k)
        U = N[ks][None, :, :] * sg[:, None, :]
        U += Y[ks][None, :, :] * qs[:, None, :]  # (G, k, J)
        second += (U * w[:, :, None]).reshape(-1, J).T @ U.reshape(-1, J)
    cov = second - A.T @ (A * blk.mult[:, None])
    return np.diag(diag) - cov


def _neg_hessian(model: MarginalModel, theta: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """-d2 log p / d theta2 (J, J): exact for blocks with shared trials and no guessing
    (:func:`block_neg_hessian`) and for blocks with guessing (:func:`guessing_neg_hessian`), by central
    differences of the analytic gradient for the rest; symmetrised."""
    J = len(theta)
    H = np.eye(J)  # the prior N(0, 1)
    rest = []
    for blk in model.blocks:
        if not _analytic_hessian(blk):
            rest.append(blk)
        elif blk.log_c is None:
            H += block_neg_hessian(theta, blk)
        else:
            H += guessing_neg_hessian(theta, blk)
    if rest:
        def grad(t: np.ndarray) -> np.ndarray:
            return sum((block_logp_grad(t, blk)[1] for blk in rest), np.zeros(J))

        D = np.empty((J, J))
        for j in range(J):
            e = np.zeros(J)
            e[j] = eps
            D[j] = (grad(theta + e) - grad(theta - e)) / (2 * eps)
        H -= D
    return (H + H.T) / 2


def _analytic_hessian(blk: Block) -> bool:
    """Whether :func:`_neg_hessian` takes ``blk``'s part in closed form (shared trials, or guessing) rather than by
    central differences of 2 J gradients (keys with their own trials and no guessing)."""
    return blk.log_c is not None or blk.n_shared is not None


def hessian_is_analytic(model: MarginalModel) -> bool:
    """Whether :func:`_neg_hessian` is exact in closed form for every block of ``model``."""
    return all(_analytic_hessian(blk) for blk in model.blocks)


def _positive_definite(H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues floored, eigenvectors) of a symmetric H: the prior alone gives curvature >= 1, so a floor
    only guards round-off and the flat directions a guessing model can have far from the mode."""
    w, V = np.linalg.eigh(H)
    return np.maximum(w, 1e-6 * max(w.max(), 1.0)), V


GRADIENT_ROUNDOFF = 1e-10  # nats per logit per trial: the round-off of a log density's gradient summed over trials


def gradient_floor(model: MarginalModel) -> float:
    """The smallest gradient (nats per logit) a mode search on ``model`` can resolve where its blocks have
    guessing: the gradient's round-off grows with the trials it sums (measured ~2e-11 per trial, 183 models x
    5,000 items). Below it a line search only halves its step ~34 times per step to no avail and re-measures the
    curvature (measured on MMLU-Pro 12 x 12,032 with c = 0.1: 30 log densities and gradients per mode search, most
    of them on wide pilot lattices). 0 without guessing (those searches keep their own tolerance)."""
    if not any(blk.log_c is not None for blk in model.blocks):
        return 0.0
    return trials_roundoff(model.keys)


def trials_roundoff(keys: ItemKeys) -> float:
    """The round-off of a log density's gradient summed over all of ``keys``' trials (nats per logit):
    GRADIENT_ROUNDOFF per trial."""
    return GRADIENT_ROUNDOFF * float(keys.mult @ keys.n.sum(1))


def _mode_and_cov(model: MarginalModel, theta0: np.ndarray, gtol: float = 1e-8, max_iter: int = 200,
                  curvature: np.ndarray | None = None, with_cov: bool = True,
                  cov0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mode of theta and the Laplace covariance there.

    Quasi-Newton steps with a backtracking (Armijo) line search, the curvature started from the finite-difference
    Hessian and kept up to date by BFGS updates: J is ~12 and the function smooth, so this converges in a handful
    of steps. (Written out rather than scipy.optimize: importing scipy.optimize alone costs ~0.5 s, a fifth of a
    whole small ``diagnose``.) The covariance is the inverse of the finite-difference Hessian at the mode.

    Both the curvature B and its inverse H are updated (two rank-2 updates, O(J^2)), so a step is H g: no
    factorisation per step (at J = 1,000 a Cholesky factorisation and solve per step were most of the search).

    ``curvature``: a starting -Hessian (J, J) instead of measuring one (e.g. from a nearby mode); ``cov0``: its
    inverse where the caller has it (a previous search's result: no eigendecomposition at the start);
    ``with_cov=False`` skips the final Hessian and returns H, the BFGS curvature's inverse, instead (2 J gradients
    fewer each)."""
    theta = np.asarray(theta0, dtype=float).copy()
    gtol = max(gtol, gradient_floor(model))
    lp, g = model.logp_grad(theta)
    if cov0 is not None:
        H = (cov0 + cov0.T) / 2
        B = np.linalg.inv(H) if curvature is None else curvature
    else:
        w, V = _positive_definite(_neg_hessian(model, theta) if curvature is None else curvature)
        B, H = (V * w) @ V.T, (V / w) @ V.T  # curvature model of -log p and its inverse
    for _ in range(max_iter):
        if np.max(np.abs(g)) <= gtol:
            break
        step = H @ g  # ascent direction on log p
        slope = float(g @ step)  # twice the predicted gain of log p (the Newton decrement squared)
        if slope < 1e-14:  # within round-off of the mode
            break
        t = 1.0
        while True:
            cand = theta + t * step
            lp_new, g_new = model.logp_grad(cand)
            if np.isfinite(lp_new) and lp_new >= lp + 1e-4 * t * slope:
                break
            # at the mode the gain falls below the log density's round-off (~1e-16 of it) before the gradient
            # does: a point whose gradient passes is taken if it is no worse within that round-off
            if np.isfinite(lp_new) and np.max(np.abs(g_new)) <= gtol and lp_new >= lp - 1e-13 * abs(lp):
                break
            t *= 0.5
            if t < 1e-10:
                break
        if t < 1e-10:  # no progress along the model's direction: re-measure the curvature once, else stop
            fresh = _neg_hessian(model, theta)
            if np.allclose(fresh, B, rtol=1e-6, atol=1e-9):
                break
            w, V = _positive_definite(fresh)
            B, H = fresh, (V / w) @ V.T
            continue
        s_k, y_k = cand - theta, g - g_new  # y: change of the gradient of -log p
        theta, lp, g = cand, lp_new, g_new
        sy = float(s_k @ y_k)
        if sy > 1e-12 * float(s_k @ s_k):  # BFGS update of the curvature of -log p, and of its inverse
            Bs, Hy = B @ s_k, H @ y_k
            B = B - np.outer(Bs, Bs) / float(s_k @ Bs) + np.outer(y_k, y_k) / sy
            H = H - (np.outer(s_k, Hy) + np.outer(Hy, s_k)) / sy + (1.0 + float(y_k @ Hy) / sy) / sy * np.outer(s_k, s_k)
        if np.max(np.abs(t * step)) < 1e-12:
            break
    if not with_cov:
        return theta, (H + H.T) / 2
    w, V = _positive_definite(_neg_hessian(model, theta))
    return theta, (V / w) @ V.T


class _RangeTooNarrow(Exception):
    """Some conditional density reaches the edge of the pilot lattice: widen it."""


@dataclass(frozen=True)
class KeyWindows:
    """Per key, from the conditional posterior of b at one ability vector ``theta``.

    Attributes:
        a, b: (K,) ends of the interval holding all but ~e^-36 of the conditional mass (plus a little room for
            its shape to change), logits; no room yet for theta's uncertainty.
        h: (K,) node spacing its largest curvature needs, logits.
        w: (K, J) sensitivity of the conditional mode to theta (from the expected curvature per model).
        theta: (J,) where they were computed.
    """

    a: np.ndarray
    b: np.ndarray
    h: np.ndarray
    w: np.ndarray
    theta: np.ndarray


def key_windows(keys: ItemKeys, theta: np.ndarray, lo: float, hi: float, prior: Population) -> KeyWindows:
    """Scan each key's conditional log density at ``theta`` on a wide lattice [lo, hi] (see :class:`KeyWindows`).

    Raises _RangeTooNarrow when some density is still above the cut at the lattice's ends."""
    K, J = keys.n.shape
    a, b, h, w = np.empty(K), np.empty(K), np.empty(K), np.empty((K, J))
    for blk in _full_blocks(keys, lo, hi, prior):
        ell = block_log_density(theta[None, :], blk)[0][0]  # (Kb, L)
        mx = ell.max(1, keepdims=True)
        inside = ell >= mx - LOG_CUT
        first = inside.argmax(1)
        last = inside.shape[1] - 1 - inside[:, ::-1].argmax(1)
        if np.any(first == 0) or np.any(last == len(blk.grid) - 1):
            raise _RangeTooNarrow()
        P = np.exp(ell - mx)
        P /= P.sum(1, keepdims=True)
        g = blk.grid
        # the window's shape changes a little as theta moves; a window that runs far into an exponential tail of
        # the population (a key beyond the panel's reach: ~50 logits) changes only at its measured end, and padding
        # it by a tenth of its span reached into the steep likelihood there and cut the spacing 3x
        pad = 0.1 * np.minimum(g[last] - g[first], PAD_SPAN_CAP) + 2 * blk.h
        a[blk.keys] = g[first] - pad
        b[blk.keys] = g[last] + pad
        win = (g[None, :] >= a[blk.keys][:, None]) & (g[None, :] <= b[blk.keys][:, None])
        # every key's -d2/db2 of the likelihood on the lattice (one row when all keys have the same trials), on
        # the nodes that carry mass or lie in a window: elsewhere P is exactly 0 and no curvature is read. (The
        # Gibbs engine's transposed conditional: 183 models of ~47,000 trials each fill ~6 of a 33-logit pilot.)
        held = np.flatnonzero((P > 0.0).any(0) | win.any(0))
        cols = slice(None) if len(held) == len(g) else held  # (no copy where every node counts: the items)
        info, curv_keys = information_and_curvature(theta, g[cols], P[:, cols], blk)
        w[blk.keys] = info / (1.0 + info.sum(1, keepdims=True))  # implicit function theorem at the mode
        curv = prior.curvature + np.where(win[:, cols], curv_keys, 0.0).max(1)  # largest curvature over the window
        h[blk.keys] = 1.0 / (H_FACTOR * np.sqrt(curv))
    return KeyWindows(a, b, h, w, np.asarray(theta, dtype=float))


def cov_margins(cov: np.ndarray) -> MarginFn:
    """Room for theta's uncertainty: SHIFT_SDS posterior SDs of each key's residual mode shift
    (w_k - wbar) . theta under the Laplace covariance ``cov``."""

    def margins(w: np.ndarray, wbar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dw = w - wbar
        sd = np.sqrt(np.maximum(np.einsum("kj,jl,kl->k", dw, cov, dw), 0.0))
        return SHIFT_SDS * sd, SHIFT_SDS * sd

    return margins


class DrawMargins:
    """Room for theta's uncertainty from actual draws (a :data:`MarginFn`): the exact range of
    (w_k - wbar) . (theta_s - theta_ref) over the draws s.

    :func:`build_blocks` prices many groupings of the same keys; it projects every key's w on the draws once
    (:meth:`projections`, one (S, J) x (J, K) product) and takes each group's range from those columns
    (:func:`projected_margins`) instead of one (S, J) x (J, k) product per grouping tried."""

    def __init__(self, shifts: np.ndarray):
        self.shifts = shifts

    def __call__(self, w: np.ndarray, wbar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        proj = self.shifts @ (w - wbar).T  # (S, K)
        return -np.minimum(proj.min(0), 0.0), np.maximum(proj.max(0), 0.0)

    def projections(self, w: np.ndarray) -> np.ndarray:
        """(S, K) w_k . (theta_s - theta_ref) for every key."""
        return self.shifts @ w.T


def projected_margins(proj: np.ndarray, centred: bool) -> tuple[np.ndarray, np.ndarray]:
    """:class:`DrawMargins` of a group from its keys' columns of :meth:`DrawMargins.projections` (S, k): with
    ``centred`` (wbar = the group's mean w) the draws' projection on wbar is the columns' mean (the product is
    linear), so the result equals the direct one up to round-off."""
    if centred:
        proj = proj - proj.mean(1, keepdims=True)
    return -np.minimum(proj.min(0), 0.0), np.maximum(proj.max(0), 0.0)


def draw_margins(shifts: np.ndarray) -> DrawMargins:
    """Room for theta's uncertainty from actual draws (:class:`DrawMargins`)."""
    return DrawMargins(shifts)


BATCHED_BLOCK_OVERHEAD = 2_500.0  # the per-block overhead per ability vector where blocks are used in batches


def _block_cost(n_keys: int, width: int, n_nodes: int, J: int, overhead: float = 25_000.0) -> float:
    # ~ns per logp evaluation (measured: ~16 ns per window node, ~8 ns per (model, lattice node), ~25 us of
    # numpy call overhead per block for one ability vector; batched evaluations share it over the batch)
    return 16.0 * n_keys * width + 8.0 * J * n_nodes + overhead


def _peel_widest(g: np.ndarray, sg: dict, shape: Callable[[np.ndarray], dict], win: KeyWindows
                 ) -> list[tuple[np.ndarray, dict]]:
    """``g`` with its widest windows split off into lattices of their own while that is cheaper: every key of a
    block gets the block's widest window, and one key beyond the panel's reach, whose window runs far into the
    population's tail (an exponential tail: ~50 logits against ~1 for a measured key), made all its neighbours pay
    for it (measured on the bundled MATH-500: 15,800 of 31,600 window nodes, 6 keys at the width of one)."""
    out = []
    while len(g) > 1:
        span = win.b[g] - win.a[g]
        k = int(np.argmax(span))
        if span[k] <= PEEL_RATIO * np.partition(span, -2)[-2]:  # no window stands out: pricing it costs more
            break
        rest, alone = np.delete(g, k), g[k : k + 1]
        s_rest, s_alone = shape(rest), shape(alone)
        if s_rest["cost"] + s_alone["cost"] >= sg["cost"]:
            break
        out.append((alone, s_alone))
        g, sg = rest, s_rest
    out.append((g, sg))
    return out


def build_blocks(keys: ItemKeys, win: KeyWindows, margins: MarginFn, prior: Population, track: bool = True,
                 for_draws: bool = False, reach: float | None = None) -> list[Block]:
    """Group keys (per guessing rate, by node spacing) into shared tracking lattices, merging groups while
    that is cheaper; each key's window gets ``margins(w_k, wbar)`` of room for theta's uncertainty.

    Args:
        win: the keys' windows at the reference abilities ``win.theta`` (the lattices' anchor).
        margins: (w (k, J), wbar (J,)) -> (down (k,), up (k,)) logits.
        track: move lattices with theta (False: fixed lattices, wbar = 0).
        for_draws: blocks for drawing difficulties, whose cost is per window node: windows are kept whenever
            they are narrower than the lattice (for log densities, only where that is cheaper).
        reach: how far (logits) any ability moves from ``win.theta`` where the blocks are used; given, the keys of
            each guessing rate may share a stretched lattice (:mod:`benchfill.irt.lattice_map`) whose spacing grows
            where all their integrands are smooth on a larger scale (a guessing item's flat tails).
    """
    K, J = keys.n.shape
    blocks: list[Block] = []
    # draws' projections of every key's w, computed once for all the groupings priced below
    proj = margins.projections(win.w) if isinstance(margins, DrawMargins) else None
    for cval in np.unique(keys.c):
        sel = np.flatnonzero(keys.c == cval)
        order = sel[np.argsort(win.h[sel])]
        bucket = np.floor(2 * np.log2(win.h[order]))  # half-octave buckets of spacing
        groups = [order[bucket == v] for v in np.unique(bucket)]
        lattice = LatticeMap() if reach is None else choose_map(
            prior, win.theta, *term_bounds(keys.n[sel], keys.y[sel], keys.c[sel]), reach, float(win.h[sel].max()),
            win.a[sel], win.b[sel], H_FACTOR)

        def shape(g: np.ndarray) -> dict:
            wbar = win.w[g].mean(0) if track else np.zeros(J)
            down, up = margins(win.w[g], wbar) if proj is None else projected_margins(proj[:, g], track)
            a, b = lattice.u(win.a[g] - down), lattice.u(win.b[g] + up)  # in u: the lattice is uniform there
            hh = win.h[g].min()
            width = int(np.ceil((b - a).max() / hh)) + 2
            lo = a.min()
            starts = np.floor((a - lo) / hh).astype(np.int64)
            n_nodes = int(starts.max()) + width  # the last window's end: every key's window fits
            return {"wbar": wbar, "h": hh, "lo": lo, "width": width, "n_nodes": n_nodes, "starts": starts,
                    "cost": _block_cost(len(g), width, n_nodes, J, BATCHED_BLOCK_OVERHEAD)}

        merged: list[tuple[np.ndarray, dict]] = []
        for g in groups:
            sg = shape(g)
            if merged:
                cand = np.concatenate([merged[-1][0], g])
                sc = shape(cand)
                if sc["cost"] <= merged[-1][1]["cost"] + sg["cost"]:
                    merged[-1] = (cand, sc)
                    continue
            merged.append((g, sg))
        # keys at similar difficulty draw their information from the same models, so their modes move alike:
        # cutting a group into runs of neighbouring keys, each with its own tracking lattice, shrinks windows
        pieces: list[tuple[np.ndarray, dict]] = []
        for g, _ in merged:
            g = g[np.argsort((win.a[g] + win.b[g]) / 2, kind="stable")]
            best = [(g, shape(g))]
            for nc in (2, 4, 8, 16, 32, 64):
                if nc > len(g):
                    break
                parts = [(p, shape(p)) for p in np.array_split(g, nc)]
                if sum(q["cost"] for _, q in parts) < sum(q["cost"] for _, q in best):
                    best = parts
            for p, sp in best:
                pieces.extend(_peel_widest(p, sp, shape, win))
        for g, sg in pieces:
            width, n_nodes = sg["width"], sg["n_nodes"]
            per = max(1, ELEMENT_BUDGET // (4 * width))  # keep every (Kb, G) temporary within budget
            # keys with their own count rows or guessing need per-key lattice rows; gathering windows out of
            # them costs more than summing the whole (short) lattice (measured ~20 % slower at width = 0.4 L)
            dense = cval > 0 or not np.all(keys.n[g] == keys.n[g][:1])
            # the compiled kernels read windows straight off the lattice: there windows pay whenever narrower
            windows_pay = for_draws or use_kernels(CHECK_DRAWS * len(g) * width)
            for s in range(0, len(g), per):
                part = slice(s, s + per)
                full = width >= (0.9 if windows_pay else 0.35 if dense else 0.8) * n_nodes
                starts = None if full else sg["starts"][part]
                blocks.append(make_block(keys, g[part], sg["lo"], sg["h"], n_nodes, prior, starts, width,
                                         anchor=win.theta, wbar=sg["wbar"], lattice=lattice))
    return blocks


@dataclass(frozen=True)
class Marginal:
    """The marginal posterior of the abilities and what drawing the difficulties needs.

    Attributes:
        model: log p(theta | y) on the fast lattices.
        mode: (J,) its mode; cov: (J, J) the Laplace covariance there, logits^2.
        windows: each key's conditional-posterior window at the mode.
        pilot_half_width: half-width (logits) of the pilot lattice that bracketed every conditional.
        prior: the difficulty population.
    """

    model: MarginalModel
    mode: np.ndarray
    cov: np.ndarray
    windows: KeyWindows
    pilot_half_width: float
    prior: Population

    def draw_blocks(self, thetas: np.ndarray) -> list[Block]:
        """Lattices for drawing difficulties given the ability draws (S, J): every window covers the exact
        range of its key's conditional mode over these draws."""
        shifts = thetas - self.windows.theta
        return build_blocks(self.model.keys, self.windows, draw_margins(shifts), self.prior, for_draws=True,
                            reach=float(np.abs(shifts).max(initial=0.0)))


def pilot_range(theta: np.ndarray, half: float, prior: Population) -> tuple[float, float]:
    """A pilot lattice's ends: ``half`` logits beyond the abilities (and 0), and the prior's reach (to 80 nats below
    its peak: a conditional whose peak lies in the prior's tail spans LOG_CUT below that peak; a lattice that
    turns out too narrow is widened)."""
    p_lo, p_hi = prior.support(cut=50.0)
    return min(-half, theta.min() - half, p_lo), max(half, theta.max() + half, p_hi)


def pilot_model(keys: ItemKeys, theta: np.ndarray, half: float, prior: Population) -> MarginalModel:
    """log p(theta | y) on wide fixed lattices around ``theta`` (robust, not fast: for modes)."""
    return MarginalModel(keys, tuple(_full_blocks(keys, *pilot_range(theta, half, prior), prior)))


@dataclass(frozen=True)
class ModeStart:
    """Where a mode search of the abilities ended, for a later search on a nearby model (the same keys under the
    population learned from them) to start from: ``theta`` (J,) the mode, ``cov`` (J, J) the inverse of the
    curvature the search held there (logits^2; a quasi-Newton estimate or the exact Hessian's inverse)."""

    theta: np.ndarray
    cov: np.ndarray


def build_marginal(keys: ItemKeys, prior: Population, start: ModeStart | None = None) -> Marginal:
    """Pilot on wide fixed lattices -> mode and covariance of theta -> per-key windows -> the fast model.
    ``start``: where the mode search starts and its first curvature (default: 0 and the exact Hessian there)."""
    J = keys.n.shape[1]
    theta = np.zeros(J) if start is None else np.asarray(start.theta, dtype=float).copy()
    cov0 = None if start is None else start.cov
    half = 14.0
    for _ in range(6):
        lo, hi = pilot_range(theta, half, prior)
        pilot = MarginalModel(keys, tuple(_full_blocks(keys, lo, hi, prior)))
        theta_new, cov = _mode_and_cov(pilot, theta, cov0=cov0)
        try:
            win = key_windows(keys, theta_new, lo, hi, prior)
        except _RangeTooNarrow:
            theta, cov0, half = theta_new, cov, half * 1.5
            continue
        theta = theta_new
        break
    else:  # pragma: no cover - would need abilities beyond ~100 logits
        raise RuntimeError("could not bracket the conditional posteriors of the difficulties")
    model = MarginalModel(keys, tuple(build_blocks(keys, win, cov_margins(cov), prior,
                                                   reach=SHIFT_SDS * float(np.sqrt(np.diag(cov).max())))))
    # the mode again on the fast lattices (the same function to ~1e-12), for the proposal / NUTS whitening; its
    # search starts from the pilot's exact curvature at the same mode (its own Hessian is taken at the end)
    theta, cov = _mode_and_cov(model, theta, cov0=cov)
    return Marginal(model, theta, cov, win, half, prior)


# ------------------------------------------------------------------------------------------------ abilities: IMH


PROPOSAL_DF = 100.0  # Student-t proposal: polynomial tails over a sub-Gaussian posterior -> bounded weights
CHECK_DRAWS = 1000  # importance draws that check the proposal and seed the chains
MIN_KISH = 0.5  # below this importance efficiency of the proposal the abilities are sampled by NUTS instead
BURN_IN = 100  # states each chain discards (at most ``tune``)
CHECK_FORK_MIN_WORK = 100_000_000  # window nodes x check draws from which the check draws are split over forked
# processes (~0.5 s of work against a fork's ~0.05 s; MMLU-Pro 29 x 12,032 with guessing: 2.1 M nodes x 1,000)
PARALLEL_MIN_DRAWS = 20_000_000  # b draws (chains x draws x items) from which chains run in worker processes
PARALLEL_MIN_KEYS = 500  # ... or likelihood keys (each costs quadrature at every ability draw)
FORK_MIN_DRAWS = 200_000  # the same, where workers are forked (~0.05 s; a fork server costs ~1 s): measured on
# 12 models x 100 items x 4 rollouts, 4 x 1,000 draws, 2 cores: 0.82 s in one process, 0.61 s in two
START_SPREAD = 2.0  # chains start from proposal draws this many times farther from its centre


@dataclass(frozen=True)
class Proposal:
    """Multivariate Student-t proposal for the abilities' marginal posterior.

    Attributes:
        loc: (J,) location, logits.  shape: (J, J) scale matrix (covariance * (df - 2) / df).  df: degrees of freedom.
        accept_estimate: acceptance rate of an independence chain over the check draws, in [0, 1].
        kish: importance-sampling efficiency of the check draws, (sum w)^2 / (n sum w^2), in (0, 1].
        pool: (n, J) the check draws; pool_log_w: (n,) their log weights log p - log q.
        pareto_k: PSIS k-hat of the check draws' importance weights (< 0.7: reliable; Vehtari et al. 2024).
    """

    loc: np.ndarray
    shape: np.ndarray
    df: float
    accept_estimate: float
    kish: float
    pool: np.ndarray
    pool_log_w: np.ndarray
    pareto_k: float = float("nan")

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n draws (n, J): loc + L z / sqrt(chi2_df / df), L L^T = shape."""
        z = rng.standard_normal((n, len(self.loc))) @ np.linalg.cholesky(self.shape).T
        return self.loc + z / np.sqrt(rng.chisquare(self.df, n) / self.df)[:, None]

    def log_density(self, thetas: np.ndarray) -> np.ndarray:
        """log q (n,) up to a constant (which cancels in importance weights and acceptance ratios).

        Written out (numpy only) rather than scipy.stats.multivariate_t: importing scipy.stats costs ~0.3 s, a
        third of a whole 12 x 1,000 fit."""
        r = np.linalg.solve(np.linalg.cholesky(self.shape), (thetas - self.loc).T)
        return -0.5 * (self.df + len(self.loc)) * np.log1p(np.einsum("jn,jn->n", r, r) / self.df)


def imh_chain(log_w: np.ndarray, log_u: np.ndarray) -> tuple[np.ndarray, int]:
    """Independence Metropolis-Hastings over proposals drawn in advance: from state x, proposal x' is accepted
    with probability min(1, w(x') / w(x)), w = p / q, which leaves p exactly invariant.

    Args:
        log_w: (S + 1,) log weights; entry 0 is the initial state, entries 1..S the proposals in order.
        log_u: (S,) log uniforms.
    Returns:
        (S,) index into ``log_w`` of the state after each step, and the number of accepted proposals.
    """
    states = np.empty(len(log_u), dtype=np.int64)
    cur, accepted = 0, 0
    for s in range(len(log_u)):
        if log_u[s] < log_w[s + 1] - log_w[cur]:
            cur, accepted = s + 1, accepted + 1
        states[s] = cur
    return states, accepted


def _normalised_weights(log_w: np.ndarray) -> np.ndarray:
    lw = np.where(np.isfinite(log_w), log_w, -np.inf)
    w = np.exp(lw - lw.max())
    return w / w.sum()


def _weighted_draws(model: MarginalModel, proposal: "Proposal", n: int, rng: np.random.Generator,
                    processes: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """n draws (n, J) from the proposal and their log importance weights log p(theta | y) - log q(theta) (n,);
    ``processes``: the draws' densities split over this many forked processes (the same values)."""
    if n == 0:
        return np.empty((0, len(proposal.loc))), np.empty(0)
    th = proposal.draw(n, rng)
    (logp,) = forked_ranges(lambda part: (model.logp_batch(th[part[0] : part[1]]),), n, processes)
    return th, logp - proposal.log_density(th)


def laplace_proposal(model: MarginalModel, mode: np.ndarray, cov: np.ndarray, rng: np.random.Generator,
                     n: int = CHECK_DRAWS, df: float = PROPOSAL_DF, processes: int = 1) -> Proposal:
    """The Student-t with the Laplace approximation's mean and covariance, checked on ``n`` of its draws
    (acceptance estimate, Kish efficiency; the draws, with their weights, become the chains' first proposals).

    Refitting it to importance-weighted moments was tried and made it worse: the moment estimates' noise
    (J (J + 1) / 2 covariances from ~1,000 weighted draws) costs more than the Laplace fit's bias (measured Kish
    efficiency 0.99 -> 0.92 with 12 models, 0.72 -> 0.13 with 48). ``processes``: the check draws' densities
    are evaluated in this many forked processes (the chains run in parallel after it; this step did not)."""
    proposal = Proposal(mode, cov * (df - 2.0) / df, df, 0.0, 0.0, np.empty((0, len(mode))), np.empty(0))
    pool, pool_lw = _weighted_draws(model, proposal, n, rng, processes)
    w = _normalised_weights(pool_lw)
    _, accepted = imh_chain(pool_lw, np.log(rng.random(n - 1)))
    return replace(proposal, accept_estimate=accepted / (n - 1), kish=float(1.0 / (n * np.sum(w**2))),
                   pool=pool, pool_log_w=pool_lw, pareto_k=pareto_k(pool_lw))


def _gpd_fit(x: np.ndarray) -> float:
    """Shape k of a generalised Pareto fitted to sorted exceedances x (Zhang and Stephens 2009, with the weak
    prior of PSIS; the same estimator as ArviZ's ``_gpdfit``)."""
    n = len(x)
    m = 30 + int(n**0.5)
    b = 1 - np.sqrt(m / (np.arange(1, m + 1, dtype=float) - 0.5))
    b /= 3 * x[int(n / 4 + 0.5) - 1]
    b += 1 / x[-1]
    k = np.log1p(-b[:, None] * x).mean(axis=1)
    len_scale = n * (np.log(-(b / k)) - k - 1)
    w = 1 / np.exp(len_scale - len_scale[:, None]).sum(axis=1)
    keep = w >= 10 * np.finfo(float).eps
    w, b = w[keep], b[keep]
    w /= w.sum()
    k_post = np.log1p(-np.sum(b * w) * x).mean()
    return float((n * k_post + 10 * 0.5) / (n + 10))


def pareto_k(log_w: np.ndarray) -> float:
    """PSIS k-hat of importance weights exp(log_w): a generalised Pareto fitted to the largest
    min(n / 5, 3 sqrt(n)) weights (as ``arviz.psislw``). Below 0.7 the weights' estimates are reliable."""
    x = np.asarray(log_w, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n < 10:
        return float("nan")
    x = x - x.max()
    srt = np.sort(x)
    cut = max(srt[-int(np.ceil(min(0.2 * n, 3 * np.sqrt(n)))) - 1], np.log(np.finfo(float).tiny))
    tail = np.sort(x[x > cut])
    if len(tail) <= 4:
        return float("inf")
    return _gpd_fit(np.exp(tail) - np.exp(cut))


def sample_theta_imh(model: MarginalModel, proposal: Proposal, chains: int, burn_in: int, draws: int,
                     rng: np.random.Generator, first: tuple[np.ndarray, np.ndarray] | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Independent IMH chains on the abilities, each started from its own overdispersed point: a proposal draw
    moved twice as far from the proposal's centre (so a chain can start where the proposal is poor, and stay there
    long enough for R-hat to see it).

    ``first``: proposal draws already weighted, (m, J) and their log weights (m,) (the check draws of
    :func:`laplace_proposal`, each independent of the rest), taken as the first m proposals (in chain order) before
    new ones are drawn: the check's density evaluations are not paid twice.

    Returns theta (chains, draws, J) and the acceptance rate of each chain (chains,)."""
    J = len(proposal.loc)
    steps = burn_in + draws
    m = 0 if first is None else min(len(first[1]), chains * steps)
    th, x0, log_u = imh_inputs(proposal, chains, steps, m, rng)
    lw = model.logp_batch(th) - proposal.log_density(th) if len(th) else np.empty(0)
    if first is not None and m:
        th, lw = np.concatenate([first[0][:m], th]), np.concatenate([first[1][:m], lw])
    th, lw = th.reshape(chains, steps, J), lw.reshape(chains, steps)
    lw0 = model.logp_batch(x0) - proposal.log_density(x0)
    theta = np.empty((chains, draws, J))
    accept = np.empty(chains)
    for c in range(chains):
        states, accepted = imh_chain(np.concatenate([lw0[c : c + 1], lw[c]]), log_u[c])
        theta[c] = np.concatenate([x0[c][None, :], th[c]])[states][burn_in:]
        accept[c] = accepted / steps
    return theta, accept


def imh_inputs(proposal: Proposal, chains: int, steps: int, m: int, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the chains of :func:`sample_theta_imh` draw from ``rng``, in its order: the new proposals
    (chains x steps - m, J) (the first m are check draws), each chain's start (chains, J) and its log uniforms
    (chains, steps)."""
    th = proposal.draw(chains * steps - m, rng)
    x0 = proposal.loc + START_SPREAD * (proposal.draw(chains, rng) - proposal.loc)
    log_u = np.stack([np.log(rng.random(steps)) for _ in range(chains)])
    return th, x0, log_u


CHAIN_B_BUDGET = 8_000_000  # difficulty draws (proposals x items) an independence chain keeps at a time (32 MB)


def imh_chain_with_draws(marginal: "Marginal", proposal: Proposal, burn_in: int, draws: int,
                         rng: np.random.Generator, b_rng: np.random.Generator,
                         first: tuple[np.ndarray, np.ndarray] | None, b_out: np.ndarray
                         ) -> tuple[np.ndarray, float, float]:
    """One chain of :func:`sample_theta_imh` (the same proposals, start and uniforms from ``rng``, so the same
    abilities) with its difficulty draws (draws, I), written to ``b_out``.

    Every new proposal's log density and one exact draw of every difficulty given it come from one pass over the
    model's windows (:func:`draw_difficulties` with ``logp``): a proposal (theta', b') with b' ~ p(b | theta', y)
    is accepted with the abilities' ratio w(theta') / w(theta), an independence sampler on the joint (theta, b)
    whose acceptance ratio has the same value (the conditional of b cancels), so a state kept twice keeps its b.
    The proposals are weighed CHAIN_B_BUDGET / I at a time and the chain run through each batch before the next
    (memory: one batch's draws, not every proposal's). States not proposed here (the chain's start, the check
    draws of ``first``, weighted earlier) get their draws at the end. Returns theta (draws, J), the acceptance rate
    and the largest window-edge ratio of the draws (:func:`draw_difficulties`)."""
    model = marginal.model
    steps, I = burn_in + draws, b_out.shape[1]
    m = 0 if first is None else min(len(first[1]), steps)
    th_new, x0, log_u = imh_inputs(proposal, 1, steps, m, rng)
    path = np.concatenate([x0, first[0][:m], th_new]) if first is not None and m else np.concatenate([x0, th_new])
    lw = np.empty(1 + steps)  # the start's, the check draws', then each batch's as it is weighed
    lw[0] = (model.logp_batch(x0) - proposal.log_density(x0))[0]
    if m:
        lw[1 : 1 + m] = first[1][:m]  # type: ignore[index]
    states = np.empty(steps, dtype=np.int64)
    state, accepted, edge = 0, 0, -np.inf
    held: np.ndarray | None = None  # the b of the state the chain holds, where it is a new proposal
    batch = max(1, CHAIN_B_BUDGET // max(1, I))
    # the compiled kernels where the chain's window nodes are many over all its proposals: a batch alone can fall
    # below the threshold (OpenCompass 12 x 41,871 with c = 0.25, 669,000 window nodes, 191 proposals a batch: the
    # numpy path took its fit from 28 to 41 s); where the nodes are few and the items many (the same without
    # guessing: 13 keys), numpy's batches were faster and leaner than the kernels (9.2 s / 1,186 MB against 9.7 s /
    # 1,424 MB whole)
    large = use_kernels((steps - m) * model.n_nodes)
    cuts = sorted({0, steps, *([m] if m < steps else []), *range(m + batch, steps, batch)})
    for lo, hi in zip(cuts[:-1], cuts[1:]):  # the check draws' steps (if any), then batches of new proposals
        new = lo >= m
        if new:  # weigh proposals lo..hi - 1 (path indices lo + 1..hi) and draw their difficulties
            th = path[lo + 1 : hi + 1]
            logp = model.ability_terms(th)  # draw_difficulties adds the blocks' part
            b_batch, e = draw_difficulties(model.keys, model.blocks, th, b_rng, np.empty((hi - lo, I), b_out.dtype),
                                           large_fit=large, logp=logp)
            lw[lo + 1 : hi + 1] = logp - proposal.log_density(th)
            edge = max(edge, e)
        run, n_acc = imh_chain(np.concatenate([lw[state : state + 1], lw[lo + 1 : hi + 1]]), log_u[0, lo:hi])
        accepted += n_acc
        at = np.where(run == 0, state, lo + run)  # the path index of each step's state
        states[lo:hi] = at
        if new:
            for step in range(max(lo, burn_in), hi):
                if run[step - lo] > 0:
                    b_out[step - burn_in] = b_batch[run[step - lo] - 1]
                elif held is not None:
                    b_out[step - burn_in] = held
            if run[-1] > 0:
                held = b_batch[run[-1] - 1].copy()
        state = int(at[-1])
    kept = states[burn_in:]
    earlier = np.flatnonzero(kept <= m)  # the start and the check draws: drawn now
    if earlier.size:
        which, where = np.unique(kept[earlier], return_inverse=True)
        thetas = path[which]
        b_earlier, e = draw_difficulties(model.keys, marginal.draw_blocks(thetas), thetas, b_rng,
                                         np.empty((len(which), I), dtype=b_out.dtype))
        b_out[earlier] = b_earlier[where.reshape(-1)]
        edge = max(edge, e)
    return path[kept], accepted / steps, edge


# ------------------------------------------------------------------------------------------------ abilities: NUTS


def _sample_theta(model: MarginalModel, mode: np.ndarray, cov: np.ndarray, settings: SamplerSettings,
                  names: list[str]) -> tuple[np.ndarray, int]:
    """NUTS (nutpie) on z with theta = mode + chol(cov) z. Returns theta (C, S, J) and the divergences."""
    import nutpie
    from nutpie.compiled_pyfunc import from_pyfunc

    J = len(mode)
    Lc = np.linalg.cholesky(cov)

    def make_logp_fn():
        def logp(z, **_):
            lp, g = model.logp_grad(mode + Lc @ z)
            return lp, Lc.T @ g

        return logp

    def make_expand_fn(seed1, seed2, chain):
        def expand(z, **_):
            return {"theta": mode + Lc @ z}

        return expand

    def make_init(seed):
        return np.random.default_rng(seed).normal(0.0, 0.5, J)

    compiled = from_pyfunc(
        J, make_logp_fn, make_expand_fn, [np.dtype("float64")], [(J,)], ["theta"],
        coords={"model": list(names)}, dims={"theta": ("model",)}, make_initial_point_fn=make_init,
    )
    # The chains share the GIL: with a cheap logp, two threads only fight over it (measured: 1 thread 3.8 s,
    # 2 threads 5.9 s); numpy releases the GIL inside large array loops, so heavy models do gain from threads.
    t = time.perf_counter()
    for _ in range(20):
        model.logp_grad(mode)
    per_eval = (time.perf_counter() - t) / 20
    cores = max(1, min(settings.chains, os.cpu_count() or 1)) if per_eval > 5e-4 else 1
    trace = nutpie.sample(
        compiled, draws=settings.draws, tune=settings.tune, chains=settings.chains, cores=cores,
        seed=settings.seed, progress_bar=False, target_accept=settings.target_accept, save_warmup=False,
    )
    theta = np.asarray(trace.posterior["theta"].values, dtype=float)  # (C, S, J)
    stats = trace.sample_stats
    div = int(np.asarray(stats["diverging"]).sum()) if "diverging" in stats else 0
    return theta, div


# ------------------------------------------------------------------------------------------------ exact b draws


def cell_masses(ell: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masses of the cells between window nodes for a log density that is linear inside each cell, each scaled
    by exp(-(second difference) / 12), the integral of the log density's local curvature across the cell (so
    cell masses are O(h^4) accurate while the draw inside a cell stays an exact exponential inversion).

    Args:
        ell: (R, G) log density at the nodes (any constant per row), G >= 3.
    Returns:
        mass (R, G-1) relative to the row's peak, e0 (R, G-1) the corrected left-node density, delta (R, G-1) the
        log-density jump across each cell.
    """
    shifted = ell - ell.max(axis=-1, keepdims=True)
    d1 = np.diff(shifted, axis=-1)  # (R, G-1) jumps
    d2 = np.diff(d1, axis=-1)  # (R, G-2) second differences at interior nodes
    curv = np.empty_like(d1)  # mean second difference at the two ends of each cell
    curv[:, 1:-1] = 0.5 * (d2[:, :-1] + d2[:, 1:])
    curv[:, 0] = d2[:, 0]
    curv[:, -1] = d2[:, -1]
    e0 = np.exp(shifted[:, :-1] - curv / 12.0)
    delta = np.clip(d1, -700.0, 700.0)
    small = np.abs(delta) < 1e-3
    # integral over the cell of e0 * exp(delta * t), t in [0, 1]: e0 * (exp(delta) - 1) / delta
    factor = np.where(small, 1.0 + delta * (0.5 + delta / 6.0), (np.exp(delta) - 1.0) / np.where(small, 1.0, delta))
    return h * e0 * factor, e0, delta


def cell_draws(mass: np.ndarray, e0: np.ndarray, delta: np.ndarray, h: float, row: np.ndarray, u: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-CDF draws from R piecewise-exponential densities, as where they fall: the flat index (into (R, C))
    of each draw's cell and its position inside the cell, t in [0, 1] (the draw is the cell's left node + h t).

    Args:
        mass, e0, delta: (R, C) cells (see :func:`cell_masses`).  h: the node spacing, logits.
        row: (N,) which density each draw comes from.  u: (N,) uniforms in [0, 1).

    The cell of each uniform is found by a branch-free binary search of its row's CDF, all draws at once:
    log2(C) + 1 gathers of N values. (A guide table, tried before, touches every cell of every row to build, for
    a few draws per row; this search made a 12 x 1,000 fit's draws 5-8 % faster.)
    """
    R, C = mass.shape
    cum = np.cumsum(mass, axis=1)
    total = cum[:, -1].copy()
    cdf = np.divide(cum, total[:, None], out=cum)
    cdf[:, -1] = 2.0  # sentinel: no uniform passes the last cell
    cdf_flat = cdf.ravel()
    flat = row * C  # the first cell whose CDF exceeds u: the row's first cell + the number of its cells <= u
    last = flat + (C - 1)
    step = 1 << int(C - 1).bit_length()
    while step:
        flat += step * (cdf_flat[np.minimum(flat + (step - 1), last)] <= u)
        step >>= 1
    cell = flat - row * C
    prev = cdf_flat[flat - 1]
    prev[cell == 0] = 0.0
    # mass-to-rho factor of each draw's cell: the CDF step over the cell is e0 * (e^(delta t) - 1) / delta * h / total
    rho = (u - prev) * (total[row] / (h * np.maximum(e0.ravel()[flat], 1e-300)))
    d = delta.ravel()[flat]
    small = np.abs(d) < 1e-9
    t = np.where(small, rho, np.log1p(np.maximum(d * rho, -1.0 + 1e-16)) / np.where(small, 1.0, d))
    return flat, np.clip(t, 0.0, 1.0)


def edge_log_ratio(ell: np.ndarray, peak: np.ndarray) -> float:
    """Largest log density at a window's two end nodes relative to its peak, over all windows: a coverage check
    (< -20: the windows hold all the mass that matters).

    Args:
        ell: (..., G) log densities on window nodes.  peak: (...,) their maxima over G.
    """
    return float(np.max(np.maximum(ell[..., 0], ell[..., -1]) - peak))


def draw_difficulties(keys: ItemKeys, blocks: list[Block] | tuple[Block, ...], theta_flat: np.ndarray,
                      rng: np.random.Generator, out: np.ndarray | None = None, large_fit: bool = False,
                      logp: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """b draws (S, I): for each ability draw s and item i, an exact draw from p(b_i | theta_s, y_i).

    Args:
        out: (S, I) array to fill (float64 or float32), or None for a new float64 one.
        large_fit: draw in the compiled kernels at any size (see :func:`use_kernels`).
        logp: (S,) array to which each block's log density at each ability vector is added, from the same pass
            over the windows (with a model's blocks: :meth:`MarginalModel.logp_batch` less
            :meth:`MarginalModel.ability_terms`), or None.
    Returns the draws and the largest edge-to-peak log density ratio seen (a coverage check; < -20 is fine).
    """
    S = theta_flat.shape[0]
    I = keys.item_key.shape[0]
    out = np.empty((S, I)) if out is None else out
    edge = -np.inf
    key_block = np.empty(keys.n_keys, dtype=np.int64)
    key_local = np.empty(keys.n_keys, dtype=np.int64)
    for bi, blk in enumerate(blocks):
        key_block[blk.keys] = bi
        key_local[blk.keys] = np.arange(len(blk.keys))
    item_block = key_block[keys.item_key]
    for bi, blk in enumerate(blocks):
        items = np.flatnonzero(item_block == bi)
        if items.size == 0:
            continue
        local = key_local[keys.item_key[items]]
        Kb, G = len(blk.keys), blk.width
        if use_kernels(S * (blk.size + items.size), large_fit):
            edge = max(edge, _draw_block_compiled(blk, items, local, theta_flat, rng, out, logp))
            continue
        for part in blk.batches(S, DRAW_BUDGET, items.size):
            s0, s1 = part.start, part.stop
            B = s1 - s0
            ell, shift = block_log_density(theta_flat[part], blk)  # (B, Kb, G), (B,)
            peak = ell.max(-1)
            edge = max(edge, edge_log_ratio(ell, peak))
            if logp is not None:
                logp[part] += window_log_masses(ell - peak[..., None], peak, blk.mult)
            mass, e0, delta = cell_masses(ell.reshape(B * Kb, G), blk.h)
            row = (np.arange(B)[:, None] * Kb + local[None, :]).ravel()
            u = rng.random(row.size)
            flat, t = cell_draws(mass, e0, delta, blk.h, row, u)
            # the cell's left node: the key's window node plus the ability draw's lattice shift
            key = row % Kb if blk.nodes.shape[0] > 1 else 0  # (1, L) nodes: every key on the whole lattice
            cell = flat % (G - 1)
            shifts = np.repeat(shift, items.size)
            if blk.stretch is None:
                draw = blk.nodes[key, cell] + shifts + blk.h * t
            else:  # t is the draw's place in its cell in u, where the lattice is uniform
                node = cell if blk.idx is None else blk.idx[key, cell]
                draw = blk.stretch.b(blk.u0 + blk.h * (node + t)) + shifts
            out[s0:s1, items] = draw.reshape(B, items.size)
    return out, edge


def _draw_block_compiled(blk: Block, items: np.ndarray, local: np.ndarray, theta_flat: np.ndarray,
                         rng: np.random.Generator, out: np.ndarray, logp: np.ndarray | None = None) -> float:
    """:func:`draw_difficulties` for one block in :mod:`benchfill.irt.kernels`: the same uniforms, in the same
    order, as the numpy path, so the two give the same draws up to rounding (and ``logp`` as there)."""
    from benchfill.irt import kernels

    order = np.argsort(local, kind="stable")
    key_ptr = np.searchsorted(local[order], np.arange(len(blk.keys) + 1))
    idx = _window_index(blk)
    m = blk.stretch  # its (t_lo, t_hi, k_lo, k_hi, w); zero stretches: uniform
    stretch = np.array([0.0, 0.0, 0.0, 0.0, 1.0] if m is None else [m.t_lo, m.t_hi, m.k_lo, m.k_hi, m.w])
    edge = -np.inf
    cells = (len(blk.keys), blk.width - 1)
    for part in _kernel_batches(blk, theta_flat.shape[0], items.size + (3 if logp is None else 4) * blk.size):
        base, tables, codes, delta = kernel_terms(theta_flat[part], blk)
        B = len(delta)
        log_e0, jump = np.empty((B,) + cells), np.empty((B,) + cells)
        shifted, peak = (np.empty((0, 0, 0)), np.empty((0, 0))) if logp is None else (
            np.empty((B,) + idx.shape), np.empty((B, idx.shape[0])))
        edge = max(edge, kernels.cell_logs(base, tables, codes, idx, blk.nodes, blk.r, delta, log_e0, jump,
                                           shifted, peak))
        if logp is not None:
            logp[part] += window_log_masses(shifted, peak, blk.mult)
        e0 = np.exp(log_e0, out=log_e0)
        u = rng.random((B, items.size))
        kernels.draws_from_cells(e0, jump, np.exp(jump), blk.nodes, delta, blk.h, key_ptr, order, items, u, out,
                                 part.start, idx, blk.u0, stretch)
    return edge


# ------------------------------------------------------------------------------------------------ the sampler


ChainResult = tuple[np.ndarray, int, np.ndarray, float]  # theta (C, S, J), divergences, acceptance (C,), edge ratio


class ChainJob(Protocol):
    """What worker processes run: :class:`_ChainJob` (IMH / NUTS) or :class:`benchfill.irt.gibbs.GibbsJob`."""

    def run(self, settings: SamplerSettings, first_chain: int, b_out: np.ndarray) -> ChainResult: ...


@dataclass(frozen=True)
class _ChainJob:
    """Everything a set of chains needs: the abilities by IMH (or NUTS), then the exact difficulty draws."""

    marginal: Marginal
    names: list[str]
    proposal: Proposal | None  # None: NUTS
    chains: int  # chains of the whole fit: chain g's first proposals are the check draws g, g + chains, ...

    def run(self, settings: SamplerSettings, first_chain: int, b_out: np.ndarray) -> ChainResult:
        """Chains ``first_chain`` .. ``first_chain + settings.chains - 1`` of the fit: fill ``b_out`` (C, S, I)
        with their difficulty draws; -> theta (C, S, J), divergences, per-chain acceptance (NaN under NUTS),
        edge ratio.

        Under IMH each chain draws from its own random stream, seeded by (seed, chain number): the draws are the
        same whichever process runs which chains (one process, or the chains split over forked or served
        workers, on any number of cores)."""
        mg = self.marginal
        if self.proposal is None:  # NUTS: nutpie seeds its chains from one seed per call
            theta, div = _sample_theta(mg.model, mg.mode, mg.cov,
                                       replace(settings, seed=settings.seed + 7919 * first_chain), self.names)
            C, S, J = theta.shape
            flat = theta.reshape(C * S, J)
            b_rng = np.random.default_rng(np.random.SeedSequence([settings.seed, 0x1F7, first_chain, 1]))
            _, edge = draw_difficulties(mg.model.keys, mg.draw_blocks(flat), flat, b_rng, b_out.reshape(C * S, -1))
            return theta, div, np.full(C, np.nan), edge
        thetas, accept, edge = [], np.empty(settings.chains), -np.inf
        for c in range(settings.chains):
            seq = np.random.SeedSequence([settings.seed, 0x1F7, first_chain + c])
            theta_rng, b_rng = (np.random.default_rng(s) for s in seq.spawn(2))
            pool = slice(first_chain + c, None, self.chains)
            theta, accept[c], e = imh_chain_with_draws(
                mg, self.proposal, min(settings.tune, BURN_IN), settings.draws, theta_rng, b_rng,
                (self.proposal.pool[pool], self.proposal.pool_log_w[pool]), b_out[c])
            thetas.append(theta[None])
            edge = max(edge, e)
        return np.concatenate(thetas), 0, accept, edge


def _chain_split(settings: SamplerSettings) -> list[SamplerSettings]:
    """Chains split over the cores this process may use (at most one process per chain): NUTS's Python callbacks
    hold the GIL and the IMH / draw loops are many small numpy calls, so threads do not help, but processes do."""
    procs = min(settings.chains, available_cores())
    if procs < 2:
        return [settings]
    sizes = [settings.chains // procs + (k < settings.chains % procs) for k in range(procs)]
    return [replace(settings, chains=c) for c in sizes]


SHARED_PREFIX = "benchfill-b-"


def sweep_orphans(folder: str) -> list[str]:
    """Remove this project's shared arrays (``benchfill-b-<pid>-*``) whose owner process no longer exists; returns
    the paths removed."""
    import glob

    removed = []
    for path in glob.glob(os.path.join(folder, SHARED_PREFIX + "*")):
        owner = os.path.basename(path)[len(SHARED_PREFIX):].split("-", 1)[0]
        if not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
            continue  # alive (or not ours to signal): keep it
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:  # pragma: no cover - removed by someone else meanwhile
            pass
    return removed


class _SharedFile:
    """A (C, S, I) output array in a memory-mapped file under /dev/shm (or the temp dir), so that worker
    processes, forked or started by a fork server, write their chains in place: no copy back through a pipe,
    whatever the size. The file is unlinked once the workers are done; the mapping stays valid."""

    def __init__(self, shape: tuple[int, int, int], dtype: type) -> None:
        import mmap
        import tempfile

        folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        sweep_orphans(folder or tempfile.gettempdir())
        # the owner's PID is in the name: a file whose owner is gone (killed with -9) is swept by the next fit
        fd, self.path = tempfile.mkstemp(prefix=f"{SHARED_PREFIX}{os.getpid()}-", dir=folder)
        self.shape, self.dtype = shape, np.dtype(dtype)
        nbytes = max(int(np.prod(shape)) * self.dtype.itemsize, 1)
        try:
            os.ftruncate(fd, nbytes)
            self.array = np.frombuffer(mmap.mmap(fd, nbytes), dtype=self.dtype,
                                       count=int(np.prod(shape))).reshape(shape)
        finally:
            os.close(fd)

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:  # pragma: no cover
            pass


def _attach(path: str, shape: tuple[int, int, int], dtype: str) -> np.ndarray:
    import mmap

    with open(path, "r+b") as fh:
        mm = mmap.mmap(fh.fileno(), 0)
    return np.frombuffer(mm, dtype=np.dtype(dtype), count=int(np.prod(shape))).reshape(shape)


_FORKED: tuple[ChainJob, np.ndarray] | None = None


def _worker_run(job: ChainJob, settings: SamplerSettings, first_chain: int, b_out: np.ndarray):
    from threadpoolctl import threadpool_limits

    # one BLAS thread per worker: each worker already has a core (measured: 2 x 2 OpenBLAS threads made a
    # guessing fit 5x slower than the same work in one process)
    with threadpool_limits(limits=1):
        return job.run(settings, first_chain, b_out)


def _forked_run(args: tuple[SamplerSettings, int]):
    assert _FORKED is not None
    job, b_out = _FORKED
    settings, c0 = args
    return _worker_run(job, settings, c0, b_out[c0 : c0 + settings.chains])


def _server_run(args: tuple[ChainJob, SamplerSettings, int, str, tuple[int, int, int], str]):
    job, settings, c0, path, shape, dtype = args
    return _worker_run(job, settings, c0, _attach(path, shape, dtype)[c0 : c0 + settings.chains])


def _warm_forkserver() -> None:
    """Start the fork server now if chains will need it (no-op when plain fork will do)."""
    if start_method() != "forkserver":
        return
    import multiprocessing as mp
    from multiprocessing import forkserver

    mp.get_context("forkserver").set_forkserver_preload(["benchfill.irt.fast"])
    try:
        forkserver.ensure_running()
    except Exception as exc:  # pragma: no cover
        log.info("fast IRT: could not start the fork server early (%s)", exc)


def _wait(result):
    """The pool's results, with a progress beat every fraction of a second while the workers run."""
    from benchfill.progress import BEAT_S, beat

    while not result.ready():
        result.wait(BEAT_S)
        beat()
    return result.get()


def _finish(pool: Any, results: Any) -> Any:
    """``results``, after the pool's workers ended the ordinary way (each takes its stop sentinel): leaving the
    ``with`` block then terminates nobody. Ending them by terminate()'s SIGTERM instead was seen to hang the fit
    once, a worker surviving the signal while it waited on the pool's queue lock; terminate() is left for an
    exception (Ctrl-C, SIGTERM of the command)."""
    pool.close()
    pool.join()
    return results


def run_chains(job: ChainJob, settings: SamplerSettings, parts: list[SamplerSettings], n_items: int
               ) -> tuple[list[ChainResult], list[SamplerSettings], np.ndarray]:
    """Run the chains of ``settings`` split as ``parts``: one worker process per part writing its difficulty draws
    into a shared (C, S, I) float32 array, or all in this process when there is one part or workers are
    unavailable. Returns each part's result, the parts actually run, and the draws (C, S, I)."""
    shape = (settings.chains, settings.draws, n_items)
    results = None
    if len(parts) > 1:
        shared = _SharedFile(shape, B_DTYPE)
        b = shared.array
        results = _run_parallel(job, parts, shared)
    else:
        b = np.empty(shape, dtype=B_DTYPE)
    if results is None:  # one process: all chains, then all difficulty draws
        results = [job.run(settings, 0, b)]
        parts = [settings]
    return results, parts, b


def _run_parallel(job: ChainJob, parts: list[SamplerSettings], out: _SharedFile):
    """Run each part in its own process writing into ``out``; None if that is unavailable or fails, and the
    caller falls back to one process."""
    import multiprocessing as mp

    global _FORKED
    method = start_method()
    if method is None:
        return None
    offsets = np.cumsum([0] + [p.chains for p in parts])[:-1]
    try:
        if method == "fork":
            _FORKED = (job, out.array)
            with mp.get_context("fork").Pool(len(parts), initializer=die_with_parent) as pool:
                return _finish(pool, _wait(pool.map_async(_forked_run, [(p, int(c0)) for p, c0 in zip(parts, offsets)])))
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["benchfill.irt.fast"])
        tasks = [(job, p, int(c0), out.path, out.shape, out.dtype.str) for p, c0 in zip(parts, offsets)]
        with ctx.Pool(len(parts), initializer=die_with_parent) as pool:
            return _finish(pool, _wait(pool.map_async(_server_run, tasks)))
    except Exception as exc:  # pragma: no cover - e.g. a sandbox without fork
        log.warning("fast IRT: parallel chains failed (%s); sampling in one process", exc)
        return None
    finally:
        _FORKED = None
        out.unlink()


def check_fast_spec(spec: IRTSpec) -> None:
    if spec.kind != "1pl":
        raise ValueError(f"sampler 'fast' fits the 1PL model only (got kind={spec.kind!r}); use method 'pymc' or 'nutpie'")
    if spec.estimate_guessing:
        raise ValueError("sampler 'fast' needs fixed guessing rates (estimate_guessing=True); use method 'pymc' or 'nutpie'")


def fit_fast(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings,
             start: ModeStart | None = None) -> IRTFit:
    """Exact 1PL posterior (same model as the PyMC reference) by quadrature + IMH (or NUTS) on the abilities.

    ``settings``: ``chains`` x ``draws`` kept draws; each chain first discards min(``tune``, 100) states (an
    independence chain started from a weighted draw of the posterior needs no longer warm-up; the proposal is
    checked beforehand on 1,000 importance draws). ``target_accept`` applies to the NUTS fallback only.

    Returns an :class:`IRTFit` with theta (C, S, J) float64 and b (C, S, I) float32 draws, logits. ``fit.extra["fast"]`` holds the engine ("imh" or "nuts"), each chain's acceptance
    rate, the proposal's importance efficiency, timings and quadrature facts. ``start``: where the abilities' mode
    search starts (learning the population found it: :func:`benchfill.irt.population.learn_population`).
    """
    check_fast_spec(spec)
    from threadpoolctl import threadpool_limits

    # one BLAS thread: the matrix products here are small, and a second BLAS thread only competes with the
    # worker processes or other programs for the cores (measured on a loaded 2-core machine: the set-up of a
    # 1,721-key guessing fit 0.09 s with one thread, 2.7 s with two; a batch of log densities 2.2x faster)
    with threadpool_limits(limits=1):
        return _fit_fast(responses, spec, settings, start)


def _fit_fast(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings, start: ModeStart | None
              ) -> IRTFit:
    t0 = time.perf_counter()
    keys = reduce_items(responses.n_correct, responses.n_trials, spec.guessing)
    I = len(responses.item_ids)
    if settings.chains * settings.draws * I >= PARALLEL_MIN_DRAWS or keys.n_keys >= PARALLEL_MIN_KEYS:
        _warm_forkserver()  # its start-up (~1 s of imports in another process) overlaps the set-up below
    marginal = build_marginal(keys, spec.population_prior, start)
    model = marginal.model
    rng = np.random.default_rng(np.random.SeedSequence([settings.seed, 0xADA]))
    check_work = CHECK_DRAWS * model.n_nodes  # window nodes the check draws' densities visit
    proposal = laplace_proposal(model, marginal.mode, marginal.cov, rng,
                                processes=available_cores() if check_work >= CHECK_FORK_MIN_WORK else 1)
    # the posterior of the abilities is log-concave without guessing and near-Gaussian with it (measured Kish
    # efficiency 0.72-0.99 on every real matrix in ../shared); anything far from that goes to NUTS
    use_imh = proposal.kish >= MIN_KISH
    if not use_imh:
        log.info("fast IRT: the t proposal fits the ability posterior poorly (importance efficiency %.2f); "
                 "sampling the abilities with NUTS", proposal.kish)
        import nutpie  # noqa: F401  (imported once here, so forked workers inherit it instead of each importing it)
    t1 = time.perf_counter()
    job = _ChainJob(marginal, list(responses.models), proposal if use_imh else None, settings.chains)
    C, S = settings.chains, settings.draws
    # worker processes cost ~0.05 s to fork, but ~1 s to start through a fork server (when another thread is
    # alive): forked, they pay from small fits on; served, only for large ones
    forks = start_method() == "fork"
    big = (not use_imh or C * S * I >= (FORK_MIN_DRAWS if forks else PARALLEL_MIN_DRAWS)
           or keys.n_keys >= PARALLEL_MIN_KEYS)
    results, parts, b = run_chains(job, settings, _chain_split(settings) if big else [settings], I)
    theta = np.concatenate([r[0] for r in results], axis=0)
    div = sum(r[1] for r in results)
    accept = np.concatenate([r[2] for r in results])
    edge = max(r[3] for r in results)
    t3 = time.perf_counter()
    if edge > -20.0:
        log.warning("fast IRT: a quadrature window edge holds exp(%.1f) of its peak density; results may be "
                    "slightly truncated", edge)
    return IRTFit(
        spec=spec, settings=settings, models=list(responses.models), item_ids=list(responses.item_ids),
        theta=theta, b=b.reshape(C, S, I), divergences=div,
        extra={"fast": {
            "engine": "imh" if use_imh else "nuts", "acceptance": [float(a) for a in accept],
            "proposal_accept_estimate": proposal.accept_estimate, "proposal_kish": proposal.kish,
            "proposal_pareto_k": proposal.pareto_k, "proposal_draws": len(proposal.pool_log_w),
            "keys": keys.n_keys, "blocks": len(model.blocks), "window_nodes": model.n_nodes,
            "edge_log_ratio": edge, "setup_s": t1 - t0, "sampling_and_draws_s": t3 - t1,
            "processes": len(parts), "b_dtype": np.dtype(b.dtype).name,
            "pilot_half_width": marginal.pilot_half_width,
        }},
    )
