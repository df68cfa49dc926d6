"""Exact placement of new items on a fixed scale (README: IRT and checks).

The abilities stay fixed at the benchmark's posterior draws theta_1..theta_S; only b_new is inferred. Its
posterior is the average over draws of the normalised conditional posterior

    p(b | y_new) = (1 / S) sum_s g(b) p(y_new | theta_s, b) / Z_s(y_new),

with g the benchmark's own difficulty population (:mod:`benchfill.irt.prior`, stored with the scale), so a new item
is placed on the axis its benchmark was measured on,

one-dimensional, so it is computed by quadrature (trapezoid sums on lattices chosen per distinct count row so
every conditional's mass is covered; spectrally accurate) rather than sampled. Identical count rows are placed
once (without guessing, rows with the same trials and the same total correct have the same posterior).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
from pydantic import BaseModel
from threadpoolctl import threadpool_limits

from benchfill.data import ResponseMatrix
from benchfill.errors import InputError
from benchfill.forking import available_cores, forked_ranges
from benchfill.irt import fast
from benchfill.irt.lattice_map import LatticeMap, choose_map, term_bounds
from benchfill.irt.model import IRTFit, thin_draws
from benchfill.irt.prior import Population
from benchfill.irt.scale import Scale

EDGE_OK = -30.0  # a window edge more than 30 nats below its peak holds a negligible share of the mass


@dataclass(frozen=True)
class Placement:
    """Posterior of new items' difficulty on a scale.

    Attributes:
        b_mean, b_sd: (K,) posterior mean and SD of b_new, logits.
        d, d_sd: (K,) the same on the benchmark's normalised scale, (b - b_min) / (b_max - b_min); d may fall
            outside [0, 1]; d_sd includes the uncertainty of the axis' ends (:meth:`Scale.d_sd`).
        item_ids: ids of the placed items (empty when placed from bare arrays).
        ignored_models: models in the responses that are not on the scale (their answers were not used).
    """

    b_mean: np.ndarray
    b_sd: np.ndarray
    d: np.ndarray
    d_sd: np.ndarray
    item_ids: list[str] = field(default_factory=list)
    ignored_models: list[str] = field(default_factory=list)

    def placed_items(self) -> list["PlacedItem"]:
        """One pydantic :class:`PlacedItem` per item (its ``model_dump`` is the item's JSON record)."""
        ids = self.item_ids or [str(i) for i in range(len(self.b_mean))]
        return [PlacedItem(item_id=i, b=float(b), b_sd=float(s), d=float(d), d_sd=float(ds))
                for i, b, s, d, ds in zip(ids, self.b_mean, self.b_sd, self.d, self.d_sd)]


class PlacedItem(BaseModel):
    """One placed item: b and its SD in logits, d and its SD on the benchmark's normalised axis."""

    item_id: str
    b: float
    b_sd: float
    d: float
    d_sd: float


def _validate(scale: Scale, n_correct: np.ndarray, n_trials: np.ndarray, guessing) -> tuple[np.ndarray, ...]:
    if scale.kind != "1pl":
        raise InputError(scale.source or "<scale>", f"placement needs a 1PL scale (this one is {scale.kind})")
    y = np.asarray(n_correct)
    n = np.asarray(n_trials)
    J = len(scale.models)
    if y.ndim != 2 or y.shape != n.shape or y.shape[1] != J:
        raise ValueError(f"n_correct and n_trials must both be (K, {J}) (one column per scale model); "
                         f"got {y.shape} and {n.shape}")
    if not (np.isfinite(y).all() and np.isfinite(n).all()):
        raise ValueError("counts must be finite")
    if np.any(y < 0) or np.any(n < 0) or np.any(y > n) or np.any(y != np.round(y)) or np.any(n != np.round(n)):
        raise ValueError("counts must be whole numbers with 0 <= n_correct <= n_trials")
    K = y.shape[0]
    if guessing is None:
        c = np.full(K, scale.guessing)
    else:
        c = np.broadcast_to(np.asarray(guessing, dtype=float), (K,)).copy()
        if np.any(~np.isfinite(c)) or np.any(c < 0) or np.any(c >= 1):
            raise ValueError("guessing rates must lie in [0, 1)")
    return y.astype(np.int64), n.astype(np.int64), c


def place_items(scale: Scale, n_correct: np.ndarray, n_trials: np.ndarray,
                guessing: np.ndarray | float | None = None, prior: Population | None = None) -> Placement:
    """Place K new items on ``scale`` with the abilities fixed.

    Args:
        scale: the benchmark's scale (ability draws (S, J), b_min, b_max, its difficulty population).
        n_correct, n_trials: (K, J) counts of the new items, columns in ``scale.models`` order; 0 trials = not asked.
        guessing: (K,) or one lower asymptote c per item; None = ``scale.guessing``.
        prior: the population of b_new; None = the scale's own (the one its benchmark was measured with).
    Returns:
        :class:`Placement` with posterior mean / SD of b (logits) and of d.
    """
    y, n, c = _validate(scale, n_correct, n_trials, guessing)
    if y.shape[0] == 0:
        empty = np.zeros(0)
        return Placement(empty, empty, empty, empty)
    draws = np.asarray(scale.theta_draws, dtype=float)
    moments = grid_key_moments(draws, y, n, c, prior=scale.population if prior is None else prior)
    b_mean, b_sd = moments.item_mean, moments.item_sd
    d = scale.normalise(b_mean)
    return Placement(b_mean=b_mean, b_sd=b_sd, d=d, d_sd=scale.d_sd(d, b_sd))


@dataclass(frozen=True)
class KeyMoments:
    """Exact posterior moments of b for rows of counts that share likelihood keys.

    Attributes:
        mean, sd: (K,) posterior mean and SD of b per distinct key, logits.
        item_key: (I,) key index of each input row (rows with the same key get the same moments).
    """

    mean: np.ndarray
    sd: np.ndarray
    item_key: np.ndarray

    @property
    def n_keys(self) -> int:
        return int(self.mean.shape[0])

    @property
    def item_mean(self) -> np.ndarray:
        return self.mean[self.item_key]

    @property
    def item_sd(self) -> np.ndarray:
        return self.sd[self.item_key]


def key_posterior_moments(theta_draws: np.ndarray, n_correct: np.ndarray, n_trials: np.ndarray,
                          guessing: np.ndarray | None = None, prior: Population | None = None) -> KeyMoments:
    """Posterior mean and SD of b for each row of counts, by quadrature, averaged over ability draws.

    E[b | y] = mean_s E[b | theta_s, y] and likewise the second moment: exact given the draws (no Monte Carlo
    noise from b itself), and identical for rows with the same likelihood key. For a benchmark's own items pass
    the fit's ability draws (they already condition on every item); for a new item the same formula is the
    fixed-scale placement of README: IRT and checks.

    Args:
        theta_draws: (S, J) ability draws, logits.
        n_correct, n_trials: (K, J) counts per row (one row per item, one column per model).
        guessing: (K,) fixed lower asymptote per row, or None for none.
        prior: the difficulty population (default: the paper's N(0, 1)).
    """
    y = np.asarray(n_correct, dtype=np.int64)
    n = np.asarray(n_trials, dtype=np.int64)
    prior = prior or Population.paper()
    keys = fast.reduce_items(y.T, n.T, guessing)
    draws = np.asarray(theta_draws, dtype=float)
    center = draws.mean(0)
    margins = fast.draw_margins(draws - center)
    half = 14.0
    widen = 0.0
    for _ in range(8):
        lo, hi = fast.pilot_range(draws.reshape(-1), half, prior)
        try:
            win = fast.key_windows(keys, center, lo, hi, prior)
        except fast._RangeTooNarrow:
            half *= 1.5
            continue
        if widen > 0.0:
            room = widen * (win.b - win.a)
            win = fast.KeyWindows(win.a - room, win.b + room, win.h, win.w, win.theta)
        blocks = fast.build_blocks(keys, win, margins, prior, reach=float(np.abs(draws - center).max(initial=0.0)))
        mean, sd, edge = _mixture_moments(keys, blocks, draws)
        if edge <= EDGE_OK:
            break
        widen = 2 * widen + 0.5  # some draw's conditional reached a window edge: widen every window and redo
    else:  # pragma: no cover - would need absurd abilities
        raise RuntimeError("placement: could not cover the conditional posteriors")
    return KeyMoments(mean=mean, sd=sd, item_key=keys.item_key)


KEY_CHUNK_ELEMENTS = 200_000
FORK_MIN_NODES = 20_000_000  # keys x grid nodes x draws from which the keys are split over forked processes
# (~0.15 s of work; a fork costs ~0.03 s)
EXACT_DRAWS = 1000  # ability draws behind every exact per-key moment of a benchmark's own items


def exact_item_moments(fit: IRTFit, responses: ResponseMatrix, max_draws: int = EXACT_DRAWS) -> KeyMoments | None:
    """Exact per-key posterior moments of a 1PL fit's own items (README: Reading the figures, "exact point values"), stored on
    the fit (``fit.b_mean`` / ``fit.b_sd`` then return them). None, and the fit untouched, where they do not apply:
    a MAP preview, a 2PL fit, or estimated guessing.

    The ability draws are thinned evenly to ``max_draws``: their Monte Carlo error is common to every item of a key,
    so tied items stay tied and gaps are not eaten by per-item noise."""
    if fit.is_map or fit.spec.kind != "1pl" or fit.c is not None or fit.n_draws < 2:
        return None
    g = None if fit.spec.guessing is None else np.asarray(fit.spec.guessing, dtype=float)
    moments = grid_key_moments(thin_draws(fit.flat("theta"), max_draws), responses.n_correct.T,
                               responses.n_trials.T, g, prior=fit.spec.population_prior)
    fit.b_mean_exact, fit.b_sd_exact = moments.item_mean, moments.item_sd
    return moments


def _mixture_moments(keys: fast.ItemKeys, blocks: list[fast.Block], draws: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean and SD (K,) of each key's draw-averaged normalised conditional posterior, and the largest
    edge-to-peak log density over keys and draws.

    Per draw s the conditional of key k has mean m_sk and second moment about the key's window centre; the
    mixture's mean is the average of the m_sk and its variance the average second moment minus the squared
    mean (all about the centre, so no precision is lost for narrow posteriors far from 0)."""
    mean = np.empty(keys.n_keys)
    sd = np.empty(keys.n_keys)
    edge = -np.inf
    S = draws.shape[0]
    for blk in blocks:
        Kb, G = len(blk.keys), blk.width
        nodes = np.broadcast_to(blk.nodes, (Kb, G))
        ref = nodes.mean(1)  # (Kb,) window centres at the anchor
        rel = nodes - ref[:, None]
        m1 = np.zeros(Kb)
        m2 = np.zeros(Kb)
        for part in blk.batches(S):
            ell, shift = fast.block_log_density(draws[part], blk)  # (B, Kb, G), (B,)
            peak = ell.max(-1, keepdims=True)
            edge = max(edge, fast.edge_log_ratio(ell, peak[..., 0]))
            p = np.exp(ell - peak)
            p /= p.sum(-1, keepdims=True)  # trapezoid weights of each draw's normalised conditional
            e1 = np.einsum("bkg,kg->bk", p, rel)  # E[b - ref - shift] under each draw
            e2 = np.einsum("bkg,kg->bk", p, rel**2)
            x = e1 + shift[:, None]  # E[b - ref] for each draw
            m1 += x.sum(0)
            m2 += (e2 + 2 * shift[:, None] * e1 + shift[:, None] ** 2).sum(0)
        m1 /= S
        m2 /= S
        mean[blk.keys] = ref + m1
        sd[blk.keys] = np.sqrt(np.maximum(m2 - m1**2, 0.0))
    return mean, sd, edge


def place_responses(scale: Scale, responses: ResponseMatrix,
                    guessing: np.ndarray | float | None = None) -> Placement:
    """Place the items of a response matrix keyed by model names (every scale model must be present; models not
    on the scale are ignored and listed in ``Placement.ignored_models``)."""
    missing = [m for m in scale.models if m not in responses.models]
    if missing:
        raise InputError(
            responses.source,
            f"{len(missing)} model(s) of the scale have no responses here: {', '.join(missing)} "
            f"(the scale's panel: {', '.join(scale.models)})",
        )
    rows = [responses.models.index(m) for m in scale.models]
    extra = [m for m in responses.models if m not in scale.models]
    placed = place_items(scale, responses.n_correct[rows].T, responses.n_trials[rows].T, guessing)
    return Placement(placed.b_mean, placed.b_sd, placed.d, placed.d_sd, list(responses.item_ids), extra)


def grid_key_moments(theta_draws: np.ndarray, n_correct: np.ndarray, n_trials: np.ndarray,
                     guessing: np.ndarray | None = None, *, prior: Population | None = None,
                     h_factor: float = 1.2, max_nodes: int = 400) -> KeyMoments:
    """:func:`key_posterior_moments` on one shared b-grid, as matrix products: for many keys with guessing
    (each a whole count column) it is far cheaper than per-key windows, and as exact (trapezoid sums of smooth
    densities with spacing <= the smallest posterior SD / ``h_factor``: error ~ exp(-2 pi^2 h_factor^2)). A learned
    spline population is only twice differentiable at its knots, so there the error falls as a power of the spacing
    instead: measured on MMLU-Pro's (c = 0.1, the null's 50 replicates of 12,032 items' means), the plug-in DDM, max
    gap and Top-5 moved by at most 1.1e-5 between h_factor 1.0 and 1.2 (and 7e-6 to 0.8).

    Shapes and units as :func:`key_posterior_moments`; ``prior``: the difficulty population (default: the paper's
    N(0, 1)).
    """
    y = np.asarray(n_correct, dtype=np.int64)
    n = np.asarray(n_trials, dtype=np.int64)
    prior = prior or Population.paper()
    keys = fast.reduce_items(y.T, n.T, guessing)
    draws = np.asarray(theta_draws, dtype=float)
    # The diagnosis asks for the same keys under the same draws and population three times (its items, the
    # null's every total, the placements a new item can reach): each key is integrated once.
    memo = _KEY_MEMO.on(draws, prior)
    tags = [hashlib.blake2b(row.tobytes(), digest_size=16).digest()
            for row in np.concatenate([keys.n, keys.y, keys.r[:, None], keys.c[:, None]], axis=1)]
    missing = [k for k, tag in enumerate(tags) if tag not in memo]
    if missing:
        rows = np.asarray(missing)
        n_rows = keys.n[rows]
        y_rows = np.where((keys.c[rows] > 0)[:, None], keys.y[rows], fast.spread_totals(keys.r[rows], n_rows))
        fresh = distinct_key_moments(draws, y_rows, n_rows, keys.c[rows], prior=prior, h_factor=h_factor,
                                     max_nodes=max_nodes)
        for k, mean, sd in zip(missing, fresh.item_mean.tolist(), fresh.item_sd.tolist()):
            memo[tags[k]] = (mean, sd)
    mean, sd = np.array([memo[tag] for tag in tags], dtype=float).reshape(-1, 2).T
    return KeyMoments(mean=mean, sd=sd, item_key=keys.item_key)


def distinct_key_moments(theta_draws: np.ndarray, n_correct: np.ndarray, n_trials: np.ndarray,
                         guessing: np.ndarray | None = None, *, prior: Population, h_factor: float = 1.2,
                         max_nodes: int = 400) -> KeyMoments:
    """:func:`grid_key_moments` for rows that are distinct keys already: integrated as they are, neither reduced a
    second time nor looked up in (or added to) the memo. The null's replicates ask ~10^6 keys once each (MMLU-Pro with
    guessing: every item its own answer pattern), and a sparse leaderboard's null ~10^5 keys of ~200 counts each:
    reducing and hashing them cost a sixth of the integrals.

    Args:
        theta_draws: (S, J) ability draws, logits.
        n_correct, n_trials: (K, J) one row per key (a key without guessing: any count row with its total).
        guessing: (K,) fixed guessing rate per key, or None.
        prior: the difficulty population.
    Returns:
        :class:`KeyMoments` with one entry per row (``item_key`` = 0..K - 1), logits.
    """
    n = np.asarray(n_trials, dtype=np.int64)
    y = np.where(n > 0, np.asarray(n_correct, dtype=np.int64), 0)  # cells without trials carry no information
    c = np.zeros(len(n)) if guessing is None else np.asarray(guessing, dtype=float).reshape(-1)
    guessed = c > 0
    # the layout of :func:`benchfill.irt.fast.reduce_items`: a key without guessing keeps only its total
    keys = fast.ItemKeys(n=n.astype(float), y=np.where(guessed[:, None], y, 0).astype(float),
                         r=y.sum(1).astype(float), c=c, mult=np.ones(len(n)), item_key=np.arange(len(n)),
                         theta_lin=y.sum(0).astype(float))
    return _grid_key_moments(np.asarray(theta_draws, dtype=float), y, n, c if guessed.any() else None, prior,
                             h_factor, max_nodes, keys)


class _KeyMemo:
    """Per-key moments (mean, sd) under the last ability draws and population asked for (one at a time: a new
    fit's draws replace the old ones), bounded to MEMO_MAX_KEYS keys."""

    def __init__(self) -> None:
        self.tag: bytes = b""
        self.moments: dict[bytes, tuple[float, float]] = {}

    def on(self, draws: np.ndarray, prior: Population) -> dict[bytes, tuple[float, float]]:
        digest = hashlib.blake2b(np.ascontiguousarray(draws).tobytes(), digest_size=16)
        digest.update(repr((draws.shape, prior.key)).encode())
        tag = digest.digest()
        if tag != self.tag or len(self.moments) > MEMO_MAX_KEYS:
            self.tag, self.moments = tag, {}
        return self.moments


MEMO_MAX_KEYS = 500_000
_KEY_MEMO = _KeyMemo()


def _shared_grid(draws: np.ndarray, prior: Population, max_trials: float, h_factor: float, max_nodes: int
                 ) -> np.ndarray | None:
    """The b-grid (logits) every key with at most ``max_trials`` trials is integrated on, or None when it would
    need more than ``max_nodes`` nodes."""
    # The conditional posterior of b is no narrower than 1 / sqrt(prior curvature + sum_j n_j / 4) (the
    # information bound), and the prior's own features need no finer spacing than that.
    h = 1.0 / (h_factor * np.sqrt(prior.curvature + max_trials / 4.0))
    # The prior keeps b within its support (25 nats: beyond, a key's share of mass is < 1e-10 even where the
    # likelihood is flat, as for items no model solves) and the likelihood within ~8 logits of the abilities.
    p_lo, p_hi = prior.support(cut=25.0)
    lo, hi = min(p_lo, draws.min() - 8.0), max(p_hi, draws.max() + 8.0)
    G = int(np.ceil((hi - lo) / h)) + 1
    return None if G > max_nodes else lo + h * np.arange(G)


MAX_SHIFT_REACH = 300.0  # nats: up to this bound on a key's log density moving between draws, exp(ell - centre's
# peak) stays far from overflow and :func:`total_moments` needs no maximum per draw


def total_moments(theta_draws: np.ndarray, patterns: np.ndarray, pattern_of: np.ndarray, totals: np.ndarray, *,
                  prior: Population | None = None, h_factor: float = 1.2, max_nodes: int = 400) -> KeyMoments:
    """:func:`grid_key_moments` for keys without guessing given as (trial pattern, total correct): key e has the
    trials ``patterns[pattern_of[e]]`` and ``totals[e]`` correct.

    The 1PL's b-dependent log-likelihood is -r b - sum_j n_j softplus(theta_j - b): the softplus sums are a
    property of the pattern, so they are computed once per pattern and ability draw for all its totals, not once
    per key (the null of a sparse design asks ~100 totals of each of ~10^4-10^5 patterns).

    Args:
        theta_draws: (S, J) ability draws, logits.
        patterns: (P, J) trials per model.  pattern_of: (E,) pattern of each key.  totals: (E,) correct counts.
        prior: the difficulty population (default: the paper's N(0, 1)).
    Returns:
        :class:`KeyMoments` with one entry per key (``item_key`` = 0..E - 1), logits.
    """
    draws = np.asarray(theta_draws, dtype=float)
    prior = prior or Population.paper()
    trials = np.asarray(patterns, dtype=float)
    pat = np.asarray(pattern_of, dtype=np.int64)
    r = np.asarray(totals, dtype=float)
    E = len(r)
    grid = _shared_grid(draws, prior, float(trials.sum(1).max(initial=0.0)), h_factor, max_nodes)
    if grid is None:  # many trials per key: the per-key windows of grid_key_moments
        n_rows = trials[pat].astype(np.int64)
        km = grid_key_moments(draws, fast.spread_totals(r.astype(np.int64), n_rows), n_rows, prior=prior)
        return KeyMoments(mean=km.item_mean, sd=km.item_sd, item_key=np.arange(E))
    log_prior = prior.log_density_unnormalised(grid)
    centre = draws.mean(0)
    reach = (trials @ np.abs(draws - centre).T).max(1, initial=0.0)  # (P,) see _chunk_window
    G = grid.size
    base_c = log_prior - trials @ fast.softplus(centre[:, None] - grid[None, :])  # (P, G) at the centre
    bounded = float(reach.max(initial=0.0)) <= MAX_SHIFT_REACH
    # the draws split over forked processes when there is enough work; each returns its sums over its draws
    procs = available_cores() if E * G * len(draws) >= FORK_MIN_NODES else 1
    if bounded and fast.use_kernels(E * G * len(draws)):
        return _total_moments_compiled(draws, trials, pat, r, grid, log_prior, base_c, reach, procs)
    # keys in order of a rough location, so each chunk's conditionals share a short stretch of the grid
    n_tot = np.maximum(trials.sum(1), 1.0)[pat]
    rough = (trials @ centre)[pat] / n_tot - np.log((r + 0.5) / (n_tot - r + 0.5))
    order = np.argsort(rough, kind="stable")
    step = max(1, KEY_CHUNK_ELEMENTS // G)
    chunks = []
    for start in range(0, E, step):
        ks = order[start : start + step]
        ell = base_c[pat[ks]] - r[ks, None] * grid[None, :]
        peak = ell.max(1, keepdims=True)
        win = _mass_window(ell, peak, reach[pat[ks], None])
        # each key's density is shifted by its peak at the centre: at any draw it lies within reach of it (so
        # the exponentials neither overflow nor lose the peak), and the shift cancels in the ratios
        chunks.append((ks, pat[ks], r[ks, None], peak, win.start, win.stop))

    def some(bounds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        m1, m2 = np.zeros((1, E)), np.zeros((1, E))
        with threadpool_limits(1):
            for theta in draws[bounds[0] : bounds[1]]:
                base = log_prior - trials @ fast.softplus(theta[:, None] - grid[None, :])  # (P, G)
                for ks, pk, rk, shift, first, last in chunks:
                    g = grid[first:last]
                    ell = base[pk, first:last]
                    ell -= rk * g + shift
                    if not bounded:  # abilities so uncertain that the centre's peak could be far off
                        ell -= ell.max(1, keepdims=True)
                    p = np.exp(ell, out=ell)
                    mass = p.sum(1)
                    m1[0, ks] += (p @ g) / mass
                    m2[0, ks] += (p @ (g * g)) / mass
        return m1, m2

    m1_parts, m2_parts = forked_ranges(some, len(draws), procs)
    return _moments_from_sums(m1_parts.sum(0), m2_parts.sum(0), len(draws), np.arange(E))


def _moments_from_sums(m1_sum: np.ndarray, m2_sum: np.ndarray, n_draws: int, item_key: np.ndarray) -> KeyMoments:
    """KeyMoments from each key's per-draw first and second moments summed over ``n_draws`` draws (K,)."""
    m1, m2 = m1_sum / n_draws, m2_sum / n_draws
    return KeyMoments(mean=m1, sd=np.sqrt(np.maximum(m2 - m1**2, 0.0)), item_key=item_key)


def _total_moments_compiled(draws: np.ndarray, trials: np.ndarray, pat: np.ndarray, r: np.ndarray,
                            grid: np.ndarray, log_prior: np.ndarray, base_c: np.ndarray, reach: np.ndarray,
                            procs: int) -> KeyMoments:
    """:func:`total_moments` where its keys' densities stay within MAX_SHIFT_REACH of the centre's peak, in
    :mod:`benchfill.irt.kernels`: each key's own window (not its chunk's), and one exponential per key and draw
    (:func:`benchfill.irt.kernels.pattern_key_moments`). On the null of a sparse 183 x 78,712 design (6.7 M keys,
    274 nodes, 25 draws) 39.9 -> 12.8 s in-process, against the chunked numpy loop, moments the same to 6e-13."""
    from benchfill.irt import kernels

    E = len(r)
    peak, first, last = np.empty(E), np.empty(E, dtype=np.int64), np.empty(E, dtype=np.int64)
    kernels.pattern_key_windows(base_c, pat, r, grid, fast.LOG_CUT + 2.0 * reach + 1.0, peak, first, last)

    def some(bounds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        m1, m2 = np.zeros((1, E)), np.zeros((1, E))
        # (P, G) buffers reused by every draw: fresh ones cost their page faults each time (~4x the product)
        base, ratio = np.empty((len(trials), len(grid))), np.empty((len(trials), len(grid) - 1))
        with threadpool_limits(1):
            for theta in draws[bounds[0] : bounds[1]]:
                np.matmul(trials, fast.softplus(theta[:, None] - grid[None, :]), out=base)
                np.subtract(log_prior, base, out=base)
                np.exp(np.subtract(base[:, 1:], base[:, :-1], out=ratio), out=ratio)
                kernels.pattern_key_moments(base, ratio, pat, r, peak, first, last, grid, m1[0], m2[0])
        return m1, m2

    m1_parts, m2_parts = forked_ranges(some, len(draws), procs)
    return _moments_from_sums(m1_parts.sum(0), m2_parts.sum(0), len(draws), np.arange(E))


def _grid_key_moments(draws: np.ndarray, y: np.ndarray, n: np.ndarray, guessing: np.ndarray | None,
                      prior: Population, h_factor: float, max_nodes: int, reduced: fast.ItemKeys | None = None
                      ) -> KeyMoments:
    """:func:`grid_key_moments` without the memo: (K, J) count rows ``y`` / ``n``; ``reduced``: those rows already
    reduced (:func:`benchfill.irt.fast.reduce_items`), if the caller has them."""
    keys = fast.reduce_items(y.T, n.T, guessing) if reduced is None else reduced
    grid = _shared_grid(draws, prior, float(keys.n.sum(1).max()), h_factor, max_nodes)
    if grid is None:  # many trials per item: narrow posteriors, cheaper in per-key windows
        return key_posterior_moments(draws, y, n, guessing, prior)
    grid, log_prior = _stretched_grid(grid, keys, draws, prior, h_factor)
    G = grid.size
    step = max(1, KEY_CHUNK_ELEMENTS // G)  # keys per chunk: the (keys, G) temporaries stay in cache

    def some(bounds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        m1, m2 = np.zeros(bounds[1] - bounds[0]), np.zeros(bounds[1] - bounds[0])
        with threadpool_limits(1):  # small products: BLAS threads only contend (3-4x slower on 2 busy cores)
            _accumulate_grid_moments(keys, draws, grid, step, m1, m2, log_prior, bounds)
        return m1, m2

    # the keys split over forked processes when there is enough work (each process computes its own keys)
    procs = available_cores() if keys.n_keys * G * len(draws) >= FORK_MIN_NODES else 1
    order = location_order(keys.n, keys.r, draws)
    keys = dataclasses.replace(keys, n=keys.n[order], y=keys.y[order], r=keys.r[order], c=keys.c[order],
                               mult=keys.mult[order])
    m1_sorted, m2_sorted = forked_ranges(some, keys.n_keys, procs)
    m1, m2 = np.empty_like(m1_sorted), np.empty_like(m2_sorted)
    m1[order], m2[order] = m1_sorted, m2_sorted
    return _moments_from_sums(m1, m2, len(draws), keys.item_key)


def _stretched_grid(grid: np.ndarray, keys: fast.ItemKeys, draws: np.ndarray, prior: Population, h_factor: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The shared grid stretched where guessing keys' likelihoods flatten (:mod:`benchfill.irt.lattice_map`, as the
    fit's lattices: on MMLU-Pro half of the null's window nodes lay above the strongest model + 4), and the log of
    its trapezoid weights plus the population's log density there, (G',) each; the grid unchanged without guessing
    or where no stretch saves nodes."""
    log_prior = prior.log_density_unnormalised(grid)
    if not np.any(keys.c > 0) or grid.size < 3:
        return grid, log_prior
    centre = draws.mean(0)
    n_max, amplitude = term_bounds(keys.n, keys.y, keys.c)
    reach, h = float(np.abs(draws - centre).max()), float(grid[1] - grid[0])
    tag = (prior.key, centre.tobytes(), n_max.tobytes(), amplitude.tobytes(), reach, float(grid[0]), h, grid.size,
           h_factor)
    lattice = _GRID_MAPS.get(tag)
    if lattice is None:  # a null asks for the same design's grid once per chunk of replicates (choosing: ~0.2 s)
        if len(_GRID_MAPS) > 16:
            _GRID_MAPS.clear()
        lattice = _GRID_MAPS[tag] = choose_map(prior, centre, n_max, amplitude, reach, h, grid[:1], grid[-1:],
                                               h_factor, min_nodes=0)
    if lattice.identity:
        return grid, log_prior
    lo, hi = lattice.u(grid[[0, -1]])
    u = lo + h * np.arange(int(np.ceil((hi - lo) / h)) + 1)
    stretched = lattice.b(u)
    return stretched, prior.log_density_unnormalised(stretched) + np.log(lattice.slope(u))


_GRID_MAPS: dict[tuple, LatticeMap] = {}  # the maps :func:`_stretched_grid` chose, by population and design


def location_order(n: np.ndarray, r: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Keys (K, J) trials ``n`` / (K,) totals ``r`` in order of a rough location: their panel's mean ability less
    the logit of their share correct, so that each chunk of :func:`grid_chunks` shares a short stretch of the grid."""
    trials = np.maximum(n.sum(1), 1.0)
    return np.argsort((n @ draws.mean(0)) / trials - np.log((r + 0.5) / (trials - r + 0.5)), kind="stable")


FEW_ROWS_SHARE = 0.25  # distinct trial rows per key of a chunk up to which n . t is summed once per row
DRAW_TERMS_BUDGET = 50_000_000  # elements (400 MB) of the per-draw terms grid_chunks keeps (183 models x 1,000
# draws x a 400-node grid would be 146 M: 1.2 GB in each process)


def grid_chunks(n: np.ndarray, y: np.ndarray, r: np.ndarray, c: np.ndarray, draws: np.ndarray, grid: np.ndarray,
                log_prior: np.ndarray, step: int, bounds: tuple[int, int]
                ) -> Iterator[tuple[slice, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Keys lo..hi - 1 (``bounds``) of the counts n, y (K, J), r, c (K,), ``step`` at a time, on the part of
    ``grid`` (G,) where their conditionals can hold mass under some draw (:func:`_chunk_window`), not the whole grid:
    with many trials per key, a few logits of the grid's ~30. Yields, for each chunk and each ability draw s of
    ``draws`` (S, J) in turn: the chunk's rows (a slice counted from lo), s, the window's nodes g (W,), the
    chunk's b-dependent log-likelihood plus ``log_prior`` (G,) on them less each key's ``shift``, (Kc, W) nats (for
    the 1PL without its b-free term y . theta_s), and that shift (Kc, 1): the key's peak at the draws' centre, within
    MAX_SHIFT_REACH nats of its peak under draw s (so the exponentials neither overflow nor lose the peak, with no
    maximum per draw), or its peak under draw s where the draws lie further apart."""
    lo, hi = bounds
    # each draw's theta_j - b and softplus of it on the whole grid, kept for every chunk where they fit in
    # DRAW_TERMS_BUDGET (else each chunk computes them on its window: ~J W softplus against its Kc J W products)
    kept = 2 * draws.size * grid.size <= DRAW_TERMS_BUDGET
    per_draw = [_draw_terms(theta, grid) for theta in draws] if kept else []
    # the keys share few trial rows where the design is complete or nearly (not a sparse one): each chunk then
    # sums n . t once per distinct row
    few = fast.few_trial_rows(np.asarray(n[lo:hi], dtype=float), FEW_ROWS_SHARE * min(step, hi - lo))
    mean = draws.mean(0)
    centre = _draw_terms(mean, grid)  # the draws' centre's theta_j - b and softplus, for the windows
    moved = np.abs(draws - mean).T  # (J, S) how far each draw's abilities lie from the centre's
    for start in range(lo, hi, step):
        part = slice(start, min(hi, start + step))
        # float counts: an integer operand would take numpy's slow non-BLAS matmul
        n_k, y_k, r_k, c_k = (np.asarray(a[part], dtype=float) for a in (n, y, r, c))
        rows = slice(part.start - lo, part.stop - lo)
        trial_rows = None if few is None else (few[0], few[1][rows])
        win, peak, reach = _chunk_window(n_k, y_k, r_k, c_k, centre, grid, log_prior, moved, trial_rows)
        g, lp = grid[win], log_prior[win]
        bounded = reach <= MAX_SHIFT_REACH
        rates = np.unique(c_k)
        # one guessing rate (or none) and a fixed shift: every term of a key's log density, the prior and the
        # shift included, is one column of a single product per draw (:func:`_stacked_keys`), ~16 % faster than
        # the product and three passes of additions over the (Kc, W) result
        left = _stacked_keys(n_k, y_k, r_k, float(rates[0]), peak, trial_rows) if bounded and rates.size == 1 else None
        for s, theta in enumerate(draws):
            X, sp = (per_draw[s][0][:, win], per_draw[s][1][:, win]) if kept else _draw_terms(theta, g)
            if left is not None:
                yield rows, s, g, left @ _stacked_terms(X, sp, g, lp, float(rates[0]), trial_rows), peak
                continue
            ell = fast.grid_log_likelihood(n_k, y_k, r_k, c_k, X, sp, g, trial_rows)
            ell += lp
            shift = peak if bounded else ell.max(1, keepdims=True)
            ell -= shift
            yield rows, s, g, ell, shift


def _stacked_keys(n: np.ndarray, y: np.ndarray, r: np.ndarray, c: float, shift: np.ndarray,
                  trial_rows: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """The left factor (Kc, Q) of a chunk's log densities as one product, for keys (Kc, J) with one guessing rate
    ``c`` (0: none): with guessing [y | trials | 1 | -shift], else [trials | r | 1 | -shift], where "trials" is
    each key's row of n, or its one-hot choice among ``trial_rows``' distinct rows. :func:`_stacked_terms` is the
    right factor (Q, W) under one draw."""
    trials = n if trial_rows is None else np.eye(len(trial_rows[0]))[trial_rows[1]]
    first = [y, trials] if c > 0 else [trials, r[:, None]]
    return np.concatenate(first + [np.ones((len(n), 1)), -shift], axis=1)


def _stacked_terms(X: np.ndarray, sp: np.ndarray, g: np.ndarray, log_prior: np.ndarray, c: float,
                   trial_rows: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """The right factor (Q, W) of :func:`_stacked_keys` under one draw (X = theta_j - b (J, W), sp its softplus,
    ``g`` the nodes, ``log_prior`` the prior's log density there): the terms of
    :func:`benchfill.irt.fast.grid_log_likelihood` per model (or per distinct trial row), then the prior, then 1."""
    parts = list(fast.guessing_terms(X, sp, c)) if c > 0 else [-sp, -g[None, :]]
    per_trial = 1 if c > 0 else 0  # the term each trial adds (n . log_wrong; -n . sp)
    if trial_rows is not None:
        parts[per_trial] = trial_rows[0] @ parts[per_trial]
    return np.concatenate(parts + [log_prior[None, :], np.ones((1, len(g)))], axis=0)


def _draw_terms(theta: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """theta_j - b (J, G) on ``grid`` and its softplus log(1 + e^X) (log sigmoid = X - sp, log(1 - sigmoid) = -sp)."""
    X = theta[:, None] - grid[None, :]
    return X, fast.softplus(X)


def _accumulate_grid_moments(keys: fast.ItemKeys, draws: np.ndarray, grid: np.ndarray, step: int, m1: np.ndarray,
                             m2: np.ndarray, log_prior: np.ndarray, bounds: tuple[int, int] | None = None) -> None:
    """Add each key's first and second moment of b under every draw's conditional (trapezoid weights on grid,
    whose log, with the population's log density, is ``log_prior`` (G,)); ``bounds``: only keys lo..hi - 1, whose
    moments go to m1[0..hi - lo - 1], m2 (default: every key)."""
    powers: tuple[np.ndarray, np.ndarray] | None = None  # the window's (1, b, b^2) (W, 3), kept while it is the same
    for out, _, g, ell, _ in grid_chunks(keys.n, keys.y, keys.r, keys.c, draws, grid, log_prior, step,
                                         bounds or (0, keys.n_keys)):
        if powers is None or powers[0] is not g:
            powers = (g, np.stack([np.ones_like(g), g, g * g], axis=1))
        sums = np.exp(ell, out=ell) @ powers[1]  # (Kc, 3): mass, first and second moment, one pass over p
        m1[out] += sums[:, 1] / sums[:, 0]
        m2[out] += sums[:, 2] / sums[:, 0]


def _chunk_window(n: np.ndarray, y: np.ndarray, r: np.ndarray, c: np.ndarray, centre: tuple[np.ndarray, np.ndarray],
                  grid: np.ndarray, log_prior: np.ndarray, moved: np.ndarray,
                  trial_rows: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[slice, np.ndarray, float]:
    """The nodes of ``grid`` outside which every key of a chunk has log density below its peak by more than
    fast.LOG_CUT under every draw (so they carry < e^-36 of its mass and are left out), found at the draws' centre.

    Each log-likelihood term is 1-Lipschitz in theta_j per trial (log sigmoid, log(1 - sigmoid) and, with
    guessing, log(c + (1 - c) sigmoid)), so between the centre and draw s a key's log density changes by at most
    D_s = sum_j n_j |theta_sj - centre_j| at any b: a node more than LOG_CUT + 2 max_s D_s below the peak at the
    centre is more than LOG_CUT below it at every draw. Args: the chunk's counts (K, J) / (K,), ``centre`` the
    centre's theta_j - b (J, G) and its softplus, ``moved`` (J, S) |theta_sj - centre_j|, ``trial_rows`` as
    :func:`benchfill.irt.fast.grid_log_likelihood`'s.

    Returns the window, each key's peak at the centre (K, 1) and max_s D_s, nats (the b-free 1PL term y . theta
    left out, the b-dependent part -n . softplus(theta - b) - r b is n-Lipschitz in theta as well)."""
    ell = fast.grid_log_likelihood(n, y, r, c, *centre, grid, trial_rows) + log_prior  # (K, G)
    peak, reach = ell.max(1, keepdims=True), float((n @ moved).max(initial=0.0))
    return _mass_window(ell, peak, reach), peak, reach


def _mass_window(ell: np.ndarray, peak: np.ndarray, reach: float | np.ndarray) -> slice:
    """The nodes outside which every row of ``ell`` (K, G), the keys' log densities at the draws' centre with peaks
    ``peak`` (K, 1), is more than fast.LOG_CUT + 2 ``reach`` + 1 below its peak (``reach``: the largest change of a
    key's log density between the centre and any draw, one for all keys or (K, 1); see :func:`_chunk_window`)."""
    inside = ell >= peak - (fast.LOG_CUT + 2.0 * reach + 1.0)
    first = int(inside.argmax(1).min())
    last = int(ell.shape[1] - 1 - inside[:, ::-1].argmax(1).min())
    return slice(first, last + 1)


PROBABILITY_NODES = 401  # nodes of each key's own window (mean +- WINDOW_SDS posterior SDs): spacing 0.06 SD
WINDOW_SDS = 12.0
PROBABILITY_DRAWS = 500  # ability draws behind each probability (their Monte Carlo error is < 0.01 here)


def interval_probabilities(scale: Scale, n_correct: np.ndarray, n_trials: np.ndarray, bounds_d: np.ndarray,
                           guessing: np.ndarray | float | None = None) -> np.ndarray:
    """Posterior probability that each new item's difficulty lies in each interval of the normalised axis.

    The probability is exact given the scale's ability draws: each draw's conditional posterior of b (the scale's
    population times the item's likelihood) is integrated by trapezoid sums on the key's own window, and the
    conditionals are averaged. An interval [lo, hi] of d is the interval [b_min + lo span, b_min + hi span] of b:
    a gap's edges are its neighbours' positions on the same axis, so the uncertainty of the axis' ends moves the
    edges with the item and cancels out of "is it inside the gap" (unlike ``d_sd``, which is about d itself).

    Args:
        scale: the benchmark's scale (ability draws, axis, population).
        n_correct, n_trials: (K, J) counts, columns in ``scale.models`` order.
        bounds_d: (M, 2) intervals [lo, hi] on d.
        guessing: as :func:`place_items`.
    Returns:
        (K, M) probabilities in [0, 1].
    """
    y, n, c = _validate(scale, n_correct, n_trials, guessing)
    bounds = np.asarray(bounds_d, dtype=float).reshape(-1, 2)
    if y.shape[0] == 0:
        return np.zeros((0, len(bounds)))
    draws = thin_draws(np.asarray(scale.theta_draws, dtype=float), PROBABILITY_DRAWS)
    prior = scale.population
    keys = fast.reduce_items(y.T, n.T, c if np.any(c > 0) else None)
    moments = grid_key_moments(draws, y, n, c if np.any(c > 0) else None, prior=prior)
    edges_b = scale.b_min + bounds * scale.span  # (M, 2)
    out = np.empty((keys.n_keys, len(bounds)))
    for k in range(keys.n_keys):
        half = WINDOW_SDS * max(moments.sd[k], 1e-3)
        grid = np.linspace(moments.mean[k] - half, moments.mean[k] + half, PROBABILITY_NODES)
        X = draws[:, :, None] - grid[None, None, :]  # (S, J, G)
        sp = fast.softplus(X)
        if keys.c[k] > 0:
            gain, log_wrong = fast.guessing_terms(X, sp, float(keys.c[k]))
            ell = np.einsum("j,sjg->sg", keys.y[k].astype(float), gain) + np.einsum(
                "j,sjg->sg", keys.n[k].astype(float), log_wrong)
        else:
            ell = -np.einsum("j,sjg->sg", keys.n[k].astype(float), sp) - keys.r[k] * grid[None, :]
        ell = ell + prior.log_density_unnormalised(grid)[None, :]
        p = np.exp(ell - ell.max(1, keepdims=True))
        cum = np.concatenate([np.zeros((len(p), 1)), np.cumsum((p[:, 1:] + p[:, :-1]) / 2, axis=1)], axis=1)
        cdf = (cum / cum[:, -1:]).mean(0)  # the draws' mixture, (G,)
        lo = np.interp(edges_b[:, 0], grid, cdf, left=0.0, right=1.0)
        hi = np.interp(edges_b[:, 1], grid, cdf, left=0.0, right=1.0)
        out[k] = np.clip(hi - lo, 0.0, 1.0)
    return out[keys.item_key]


CHILD_GRID_STEP = 0.04  # b-grid spacing for a search's children, logits (>= 2.5 nodes per SD of the narrowest
# posterior a 12-model x 32-rollout child has; the interval edges are read off the CDF by linear interpolation)
CHILD_GRID_REACH = 12.0  # ... spanning the abilities +- this
CHILD_DRAWS = 200  # ability draws behind each child's likelihood
CHILD_SIGMA_RANGE = (0.1, 4.0)  # the children population's sigma: log-uniform on this range, logits
HYPER_POINTS = (41, 21)  # refined hyper-grid: mu and log sigma nodes over +- 6 posterior SDs
HYPER_PASSES = 3  # a coarse pass, then refinements around the posterior of (mu, log sigma)


@dataclass(frozen=True)
class ChildPlacement:
    """The children of one search placed together (:func:`place_children`).

    Attributes:
        b_mean, b_sd: (K,) posterior mean and SD of each child's b, logits.
        d, d_sd: (K,) the same on the normalised axis (d_sd with the axis' ends uncertain, as :class:`Placement`).
        probabilities: (K, M) posterior P(d in each interval).
        population_mu, population_sigma: posterior means of the children's population N(mu, sigma), logits.
    """

    b_mean: np.ndarray
    b_sd: np.ndarray
    d: np.ndarray
    d_sd: np.ndarray
    probabilities: np.ndarray
    population_mu: float
    population_sigma: float


def place_children(scale: Scale, n_correct: np.ndarray, n_trials: np.ndarray, bounds_d: np.ndarray,
                   guessing: np.ndarray | float | None = None) -> ChildPlacement:
    """Place the children of one search on ``scale``: their difficulties share an unknown population.

    A rewriter aims its children at a gap, where the benchmark has few items: the benchmark's own population is
    the wrong prior for them (it pulls each child out of the gap, and "P(inside)" comes out too low where the
    children cluster in the gap and too high where they do not). Here the children's b are exchangeable draws from
    N(mu, sigma) with (mu, sigma) unknown: a flat prior on mu, a log-uniform one on sigma in [0.1, 4] logits,
    integrated over a grid (no plug-in estimate, so a sigma the data cannot pin down does not collapse to 0 and
    overstate every probability). Each child's posterior is then the average over (mu, sigma) of its conditional
    posterior, weighted by how well (mu, sigma) explains all the children's answers. The likelihood of a child
    averages over the scale's ability draws.

    Args:
        scale: the benchmark's scale.
        n_correct, n_trials: (K, J) counts of the K children, columns in ``scale.models`` order.
        bounds_d: (M, 2) intervals [lo, hi] of d whose probabilities are wanted (see
            :func:`interval_probabilities` on why the axis' ends cancel out of them).
        guessing: as :func:`place_items`.
    """
    y, n, c = _validate(scale, n_correct, n_trials, guessing)
    bounds = np.asarray(bounds_d, dtype=float).reshape(-1, 2)
    K = y.shape[0]
    if K == 0:
        empty = np.zeros(0)
        return ChildPlacement(empty, empty, empty, empty, np.zeros((0, len(bounds))), float("nan"), float("nan"))
    draws = thin_draws(np.asarray(scale.theta_draws, dtype=float), CHILD_DRAWS)
    lo, hi = draws.min() - CHILD_GRID_REACH, draws.max() + CHILD_GRID_REACH
    grid = lo + CHILD_GRID_STEP * np.arange(int(np.ceil((hi - lo) / CHILD_GRID_STEP)) + 1)
    log_lik = _draw_averaged_log_likelihood(y, n, c, draws, grid)  # (K, G)
    lik = np.exp(log_lik - log_lik.max(1, keepdims=True))
    log_lo, log_hi = np.log(CHILD_SIGMA_RANGE[0]), np.log(CHILD_SIGMA_RANGE[1])
    mus = np.arange(draws.min() - 6.0, draws.max() + 6.0 + 1e-9, 0.25)  # coarse first pass
    log_sigmas = np.linspace(log_lo, log_hi, 24)
    for _ in range(HYPER_PASSES):
        mu_h, ls_h, w, prior, marg = _hyper_posterior(lik, grid, mus, log_sigmas)
        m_mu, m_ls = w @ mu_h, w @ ls_h
        s_mu = np.sqrt(max(w @ (mu_h - m_mu) ** 2, 1e-8))
        s_ls = np.sqrt(max(w @ (ls_h - m_ls) ** 2, 1e-8))
        # refine around the posterior: +- 6 SDs (at least the last grid's step, so a posterior on one node widens)
        step_mu = mus[1] - mus[0] if len(mus) > 1 else 0.25
        step_ls = log_sigmas[1] - log_sigmas[0] if len(log_sigmas) > 1 else 0.1
        half_mu, half_ls = 6 * max(s_mu, step_mu / 2), 6 * max(s_ls, step_ls / 2)
        mus = np.linspace(m_mu - half_mu, m_mu + half_mu, HYPER_POINTS[0])
        log_sigmas = np.linspace(max(log_lo, m_ls - half_ls), min(log_hi, m_ls + half_ls), HYPER_POINTS[1])
    # each child's posterior on the grid: sum_h w_h lik prior_h / marg_ih
    coef = w[None, :] / np.maximum(marg, 1e-300)  # (K, H)
    post = lik * (coef @ prior)  # (K, G)
    post /= post.sum(1, keepdims=True)
    b_mean = post @ grid
    b_sd = np.sqrt(np.maximum(post @ grid**2 - b_mean**2, 0.0))
    cdf = np.cumsum(post, axis=1) - 0.5 * post  # the mass up to each node (half the node's own)
    edges_b = scale.b_min + bounds * scale.span
    probs = np.empty((K, len(bounds)))
    for m, (a, b) in enumerate(edges_b):
        fa = np.array([np.interp(a, grid, row, left=0.0, right=1.0) for row in cdf])
        fb = np.array([np.interp(b, grid, row, left=0.0, right=1.0) for row in cdf])
        probs[:, m] = np.clip(fb - fa, 0.0, 1.0)
    d = scale.normalise(b_mean)
    return ChildPlacement(b_mean, b_sd, d, scale.d_sd(d, b_sd), probs, float(m_mu), float(w @ np.exp(ls_h)))


def _draw_averaged_log_likelihood(y: np.ndarray, n: np.ndarray, c: np.ndarray, draws: np.ndarray,
                                  grid: np.ndarray, batch: int = 25) -> np.ndarray:
    """(K, G) log of each row's likelihood averaged over the (S, J) ability draws, on the b-grid. The full
    likelihood, its theta-dependent part included: the draws are weighted by how well they explain the answers
    (likelihood keys, which drop that part, would not do here)."""
    yf, nf = y.astype(float), n.astype(float)
    parts = []
    with threadpool_limits(1):
        for start in range(0, len(draws), batch):
            X = draws[start : start + batch, :, None] - grid[None, None, :]  # (B, J, G)
            sp = fast.softplus(X)
            ell = np.empty((X.shape[0], len(y), grid.size))
            for cv in np.unique(c):
                rows = np.flatnonzero(c == cv)
                # y . gain + n . log_wrong: without guessing gain = log sigmoid - log(1 - sigmoid) = X
                gain, log_wrong = (X, -sp) if cv == 0 else fast.guessing_terms(X, sp, float(cv))
                ell[:, rows] = np.einsum("kj,bjg->bkg", yf[rows], gain) + np.einsum(
                    "kj,bjg->bkg", nf[rows], log_wrong)
            top = ell.max(0)
            parts.append((top, np.exp(ell - top).sum(0)))
    top = np.max([t for t, _ in parts], axis=0)
    total = sum(s * np.exp(t - top) for t, s in parts)
    return top + np.log(total / len(draws))


def _hyper_posterior(lik: np.ndarray, grid: np.ndarray, mus: np.ndarray, log_sigmas: np.ndarray):
    """The posterior of the children's population N(mu, sigma) over a grid of (mu, log sigma) (flat on both:
    log-uniform in sigma), from each child's likelihood ``lik`` (K, G) on ``grid``. Returns the hypotheses' mu and
    log sigma (H,), their weights (H,), their populations on the grid (H, G) and each child's marginal likelihood
    under each (K, H)."""
    M_, L_ = np.meshgrid(mus, log_sigmas, indexing="ij")
    mu_h, ls_h = M_.ravel(), L_.ravel()
    z = (grid[None, :] - mu_h[:, None]) / np.exp(ls_h)[:, None]
    prior = np.exp(-0.5 * z * z)
    prior /= np.maximum(prior.sum(1, keepdims=True), 1e-300)
    marg = lik @ prior.T
    log_w = np.log(np.maximum(marg, 1e-300)).sum(0)
    w = np.exp(log_w - log_w.max())
    return mu_h, ls_h, w / w.sum(), prior, marg
