"""Learning a benchmark's difficulty population from its response data (empirical Bayes; README: IRT and checks).

The items' difficulties are the many exchangeable parameters here (hundreds to tens of thousands of items, ~12
models), so their population is what the data can inform. It is learned by marginal maximum likelihood, the
difficulties integrated out on a grid (the g-modeling of Efron 2016, "Empirical Bayes deconvolution estimates",
Biometrika 103(1), and the log-linear smoothed latent densities of IRT's marginal ML, e.g. Casabianca & Lewis
2015): for a population g_phi (:class:`benchfill.irt.prior.Population`),

    l(phi) = sum_k mult_k log sum_g g_phi(b_g) p(y_k | theta_hat, b_g) - penalty(phi),

with theta_hat the abilities' posterior mode under the current g, alternated with it until both settle (they move
together only through the theta ~ N(0, 1) prior, which fixes the common location). The normal envelope
(mu_b, sigma_b) is learned first and kept (its tails place the items beyond the panel's reach); the spline then
reshapes it inside the range the panel measures, with a ridge penalty on its coefficients whose strength is chosen
by BIC (log-likelihood minus log(I) / 2 per effective degree of freedom), so a benchmark with few items keeps a
nearly normal population and a large one can show holes and skew. The sampler then treats the learned g
as the prior: abilities and difficulties are exact posterior draws given it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from benchfill.irt import fast
from benchfill.irt.prior import NORMAL_TAILS, Population, PopulationKind, cubic_bspline_basis, envelope

FIT_GRID_STEP = 0.25  # largest node spacing of the fitting grid, logits (finer where items are measured finely)
BIN_STEP = 0.04  # finer fitting grids are binned to this (the population is smooth on the knots' scale)
FIT_GRID_REACH = 16.0  # the fitting grid spans the abilities +- this many logits
MAX_FIT_ELEMENTS = 6_000_000  # keys x grid nodes kept for the fit: above it the items are subsampled (seeded)
KNOT_REACH = 4.0  # the spline's knots span the abilities +- this (within mu +- 4 sigma): where items are measured
KNOT_STEP = 0.5  # target spacing of the spline's knots, logits
MIN_INTERVALS, MAX_INTERVALS = 6, 40
TAILS = (4.0, 2.8, 2.0, 1.4, 1.0, 0.7, 0.5)  # hyperbolic tail parameters tried for the spline's envelope (z units)
TAIL_MIN_ITEMS = 50  # fewer items keep the normal's tails (6 items of 3 models chose a 109-logit tail: 8 s windows)
PENALTIES = (1024.0, 256.0, 64.0, 16.0, 4.0, 1.0, 0.25, 0.0625, 0.016, 0.004)  # ridge strengths tried for the spline, strongest first
ROUNDS = 4  # alternations of (abilities' mode, population) at most
THETA_TOL = 0.01  # ... until the mode moves less than this, logits


@dataclass(frozen=True)
class FitGrid:
    """Keys' log-likelihoods on one b-grid at one ability vector.

    Attributes:
        grid: (G,) nodes, logits.  loglik: (K, G) b-dependent log-likelihood of each (kept) key, nats.
        mult: (K,) items per key (scaled up when items were subsampled).
    """

    grid: np.ndarray
    loglik: np.ndarray
    mult: np.ndarray

    @functools.cached_property
    def scaled(self) -> tuple[np.ndarray, np.ndarray]:
        """(top (K,), lik (K, G)): each key's peak log-likelihood and its likelihood over that peak, exp(loglik -
        top), in (0, 1]: the objective's one fixed (K, G) array, so each evaluation multiplies instead of
        exponentiating it again."""
        top = self.loglik.max(1)
        return top, np.exp(self.loglik - top[:, None])


def fit_grid(keys: fast.ItemKeys, theta: np.ndarray, seed: int = 0) -> FitGrid:
    """The fitting grid of :func:`learn_population` at abilities ``theta`` (J,)."""
    step = min(FIT_GRID_STEP, 1.0 / (1.2 * np.sqrt(keys.n.sum(1).max() / 4.0 + 1e-12)))
    lo, hi = theta.min() - FIT_GRID_REACH, theta.max() + FIT_GRID_REACH
    grid = lo + step * np.arange(int(np.ceil((hi - lo) / step)) + 1)
    sel, mult = np.arange(keys.n_keys), keys.mult.astype(float)
    if keys.n_keys * grid.size > MAX_FIT_ELEMENTS:  # subsample items (not keys): the population is about items
        rng = np.random.default_rng(seed)
        n_items = max(1, MAX_FIT_ELEMENTS // grid.size)
        items = rng.choice(keys.item_key.size, size=min(n_items, keys.item_key.size), replace=False)
        sel, counts = np.unique(keys.item_key[items], return_counts=True)
        mult = counts * (keys.item_key.size / items.size)
    X = theta[:, None] - grid[None, :]
    sp = fast.softplus(X)
    per = max(1, int(BIN_STEP / step))  # fine nodes per bin: narrow likelihoods are integrated over bins
    bins = grid[: (grid.size // per) * per].reshape(-1, per).mean(1)
    loglik = np.empty((sel.size, bins.size))
    chunk = max(1, 2_000_000 // grid.size)
    for s in range(0, sel.size, chunk):
        k = sel[s : s + chunk]
        ell = fast.grid_log_likelihood(keys.n[k], keys.y[k], keys.r[k], keys.c[k], X, sp, grid)
        if per > 1:  # log of each bin's likelihood mass: g varies little over a bin (BIN_STEP << KNOT_STEP)
            ell = ell[:, : bins.size * per].reshape(len(k), bins.size, per)
            top = ell.max(2, keepdims=True)
            ell = top[..., 0] + np.log(np.exp(ell - top).mean(2))
        loglik[s : s + chunk] = ell
    return FitGrid(bins, loglik, np.asarray(mult, dtype=float))


# ------------------------------------------------------------------------------------------------ the g-model


def _features(grid: np.ndarray, phi: np.ndarray, basis: np.ndarray, tails: tuple[float, float] = NORMAL_TAILS
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log g's unnormalised values f (G,), derivatives D (G, P) and the nonzero second derivatives of the
    parameters phi = (mu, log sigma, alpha...) (the (mu, log sigma) block, (G, 2, 2)); ``tails``: the envelope's
    (:func:`benchfill.irt.prior.envelope`, fixed here)."""
    mu, sigma = phi[0], np.exp(phi[1])
    z = (grid - mu) / sigma
    # e(z) and, with r = sqrt(1 + (z / delta)^2) (1 for the normal): e' = -z / r, e'' = -1 / r^3
    delta = np.where(z < 0.0, tails[0], tails[1])
    r = np.sqrt(1.0 + (z / delta) ** 2) if np.isfinite(tails).any() else np.ones_like(z)
    f = envelope(z, tails) + (basis @ phi[2:] if basis.shape[1] else 0.0)
    D = np.empty((grid.size, 2 + basis.shape[1]))
    D[:, 0] = z / (r * sigma)  # d e / d mu = -e'(z) / sigma
    D[:, 1] = z * z / r  # d e / d log sigma = -e'(z) z
    D[:, 2:] = basis
    D2 = np.empty((grid.size, 2, 2))
    D2[:, 0, 0] = -1.0 / (r**3 * sigma**2)
    D2[:, 0, 1] = D2[:, 1, 0] = -(z / r**3 + z / r) / sigma
    D2[:, 1, 1] = -z * z * (1.0 / r**3 + 1.0 / r)
    return f, D, D2


def _objective(fg: FitGrid, phi: np.ndarray, basis: np.ndarray, penalty: float, hessian: bool = True,
               tails: tuple[float, float] = NORMAL_TAILS) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Penalised marginal log-likelihood, its gradient and Hessian in phi, and the unpenalised Hessian
    (-inf where sigma leaves [e^-4, e^4] logits: a line search's overshoot, never an optimum here)."""
    if not -4.0 <= phi[1] <= 4.0:
        return -np.inf, np.zeros_like(phi), np.zeros((phi.size, phi.size)), np.zeros((phi.size, phi.size))
    f, D, D2 = _features(fg.grid, phi, basis, tails)
    fmax = f.max()
    prior = np.exp(f - fmax)
    Zp = prior.sum()
    pg = prior / Zp
    # each key's marginal sum_g lik_kg prior_g as a product with the fixed scaled likelihoods (no (K, G)
    # exponentials per evaluation); a key whose sum underflows (its likelihood where g is ~e^-700 of its peak: a
    # line search's far step) is summed around its own maximum instead
    top, lik = fg.scaled
    S = lik @ prior
    tiny = S < 1e-250
    S_kept = np.where(tiny, 1.0, S)
    inv_S = np.where(tiny, 0.0, 1.0 / S_kept)
    log_m = top + np.log(S_kept)  # (K,) log marginal of each key (over e^fmax Zp)
    post = ((fg.mult * inv_S) @ lik) * prior  # (G,) expected items per node: sum_k mult_k P_kg
    P_tiny = None
    if tiny.any():
        A = fg.loglik[tiny] + (f - fmax)[None, :]
        amax = A.max(1, keepdims=True)
        E = np.exp(A - amax)
        E_sum = E.sum(1)
        log_m[tiny] = amax[:, 0] + np.log(E_sum)
        P_tiny = E / E_sum[:, None]
        post += fg.mult[tiny] @ P_tiny
    M = fg.mult.sum()
    ll = float(fg.mult @ log_m) - M * float(np.log(Zp))
    resid = post - M * pg
    grad = D.T @ resid
    alpha = phi[2:]
    ll_pen = ll - 0.5 * penalty * float(alpha @ alpha)
    grad[2:] -= penalty * alpha
    if not hessian:
        return ll_pen, grad, np.zeros(0), np.zeros(0)
    PD = (lik @ (prior[:, None] * D)) * inv_S[:, None]  # (K, P) per-key posterior means of the features
    if P_tiny is not None:
        PD[tiny] = P_tiny @ D
    H = D.T @ (post[:, None] * D) - PD.T @ (fg.mult[:, None] * PD)  # sum_k mult Cov_post_k(D)
    H -= M * (D.T @ (pg[:, None] * D) - np.outer(pg @ D, pg @ D))  # - M Cov_prior(D)
    H[:2, :2] += np.einsum("g,gab->ab", resid, D2)
    H_pen = H.copy()
    H_pen[2:, 2:] -= penalty * np.eye(len(alpha))
    return ll_pen, grad, H_pen, H


def _maximise(fg: FitGrid, phi: np.ndarray, basis: np.ndarray, penalty: float, free: slice,
              max_iter: int = 100, tol: float = 1e-7, tails: tuple[float, float] = NORMAL_TAILS) -> np.ndarray:
    """Newton ascent (eigenvalue-floored, with backtracking) on the parameters ``free`` of phi."""
    phi = phi.copy()
    val, grad, H, _ = _objective(fg, phi, basis, penalty, tails=tails)
    for _ in range(max_iter):
        g = grad[free]
        w, V = np.linalg.eigh(-H[free, free])
        w = np.maximum(w, 1e-6 * max(1.0, float(np.abs(w).max())))
        step = V @ ((V.T @ g) / w)
        decrement = float(g @ step)
        if decrement < tol:
            break
        t = 1.0
        while t > 1e-8:
            cand = phi.copy()
            cand[free] += t * step
            new_val = _objective(fg, cand, basis, penalty, hessian=False, tails=tails)[0]
            if np.isfinite(new_val) and new_val >= val + 1e-4 * t * decrement:
                break
            t *= 0.5
        if t <= 1e-8:
            break
        phi = cand
        val, grad, H, _ = _objective(fg, phi, basis, penalty, tails=tails)
    return phi


def _start(fg: FitGrid) -> np.ndarray:
    """A starting (mu, log sigma): the items' flat-prior posterior means, their spread widened a little."""
    A = fg.loglik - fg.loglik.max(1, keepdims=True)
    P = np.exp(A)
    P /= P.sum(1, keepdims=True)
    m = P @ fg.grid
    w = fg.mult / fg.mult.sum()
    mu = float(w @ m)
    sd = float(np.sqrt(max(w @ (m - mu) ** 2, 0.25)))
    return np.array([mu, np.log(min(sd, 8.0))])


def fit_envelope(fg: FitGrid, tails: tuple[float, float] | None = None) -> tuple[np.ndarray, tuple[float, float]]:
    """The spline's envelope: (mu, log sigma) and its tail parameters (:func:`benchfill.irt.prior.envelope`;
    infinite: the normal's tails) by marginal maximum likelihood on ``fg``, one delta for both sides over the grid
    :data:`TAILS`. What the panel measures near its reach says how far the items beyond it go on: measured on real
    shapes drawn at the paper's rollouts (12 seeds each, ``bench/real_shapes.py``), a HumanEval+ shape, whose
    hardest items lie 3 logits past the rest, gains 1-6 nats with delta 0.5-1.4; MATH-500 0-1.2 nats at delta 2-4
    and loses 2-15 nats at delta <= 1; AIME 2024 loses with every finite delta. The choice is by likelihood alone,
    like mu and sigma: with BIC's log(I) / 2 nats asked of the extra parameter, 5 of 12 HumanEval+ draws kept normal
    tails and their 90 % intervals missed the true max gap (coverage 58 %; by likelihood 100 %, MATH-500 92-100 %,
    AIME 100 %). A delta per side, chosen the same way, followed a skewed bulk instead of the tail (MATH-500's
    hard side gains 6-10 nats from an exponential tail) and placed the items beyond reach too far: MATH-500's Top-5
    covered 12 %, AIME's DDM 62 % (8 draws each). The price of one delta: on a right-skewed shape the scale's
    origin (set by the priors, not the data) moves by ~0.1 logit, which no normalised figure sees. A benchmark of
    fewer than :data:`TAIL_MIN_ITEMS` items keeps the normal's tails: too few items lie near the reach to show a
    tail. ``tails``: keep these (only mu and sigma are fitted)."""
    none = np.zeros((fg.grid.size, 0))
    phi = _maximise(fg, _start(fg), none, 0.0, slice(0, 2))
    if tails is None and fg.mult.sum() < TAIL_MIN_ITEMS:
        tails = NORMAL_TAILS
    if tails is not None:
        return (phi if tails == NORMAL_TAILS else _maximise(fg, phi, none, 0.0, slice(0, 2), tails=tails)), tails

    def ll_of(cand_tails: tuple[float, float], start: np.ndarray) -> tuple[float, np.ndarray]:
        cand = _maximise(fg, start, none, 0.0, slice(0, 2), tails=cand_tails)
        return _objective(fg, cand, none, 0.0, hessian=False, tails=cand_tails)[0], cand

    best = (_objective(fg, phi, none, 0.0, hessian=False)[0], phi, NORMAL_TAILS)
    for tail in TAILS:
        ll, cand = ll_of((tail, tail), phi)
        if ll > best[0]:
            best = (ll, cand, (tail, tail))
    return best[1], best[2]


def fit_population(fg: FitGrid, kind: PopulationKind, theta: np.ndarray,
                   tails: tuple[float, float] | None = None) -> Population:
    """The population of ``kind`` ("normal" or "spline") that maximises the (penalised) marginal likelihood on
    ``fg`` (the abilities at ``theta`` (J,)); ``tails``: the spline envelope's tail parameters, kept (None: learned
    too, :func:`fit_envelope`)."""
    if kind == "normal":
        none = np.zeros((fg.grid.size, 0))
        phi = _maximise(fg, _start(fg), none, 0.0, slice(0, 2))
        return Population.normal(float(phi[0]), float(np.exp(phi[1])))
    phi, tails = fit_envelope(fg, tails)
    mu, sigma = float(phi[0]), float(np.exp(phi[1]))
    lo = max(theta.min() - KNOT_REACH, mu - 4.0 * sigma)
    hi = min(theta.max() + KNOT_REACH, mu + 4.0 * sigma)
    if hi - lo < MIN_INTERVALS * 0.1:  # the panel measures no range of the population: the envelope alone
        return Population("spline", mu, sigma, tail_lo=tails[0], tail_hi=tails[1])
    intervals = int(np.clip(np.round((hi - lo) / KNOT_STEP), MIN_INTERVALS, MAX_INTERVALS))
    step = (hi - lo) / intervals
    m = intervals - 3  # cubic B-splines wholly inside [lo, hi]: s and its first two derivatives vanish at the ends
    basis = cubic_bspline_basis(fg.grid, lo, step, m)
    best: tuple[float, np.ndarray, float] | None = None
    current = np.concatenate([phi, np.zeros(m)])
    worse = 0
    for penalty in PENALTIES:  # strongest first, each warm-started from the last; stop once BIC falls twice
        # the envelope stays the learned normal (its tails place the items beyond reach); the spline reshapes
        current = _maximise(fg, current, basis, penalty, slice(2, 2 + m), tails=tails)
        ll_pen, _, H_pen, H = _objective(fg, current, basis, penalty, tails=tails)
        alpha = current[2:]
        ll = ll_pen + 0.5 * penalty * float(alpha @ alpha)
        # effective degrees of freedom of the penalised fit: tr((-H_pen)^-1 (-H))
        try:
            edf = float(np.trace(np.linalg.solve(-H_pen[2:, 2:], -H[2:, 2:])))  # the spline's (the envelope is kept)
        except np.linalg.LinAlgError:
            continue
        # BIC: AIC (ll - edf) let a 12 x 4 design's discrete totals carve bumps into g (measured on the
        # real shapes: MATH-500's max gap covered 5/6 and a Top-5 flag fired where the truth has none; BIC 6/6, none)
        bic = ll - 0.5 * np.log(fg.mult.sum()) * edf
        if best is None or bic > best[0]:
            best, worse = (bic, current.copy(), penalty), 0
        else:
            worse += 1
            if worse == 2:
                break
    assert best is not None
    _, phi, penalty = best
    return Population("spline", float(phi[0]), float(np.exp(phi[1])), float(lo), float(step), phi[2:].copy(),
                      penalty, *tails)


def uniform_range(fg: FitGrid, max_nodes: int = 160) -> tuple[float, float]:
    """(lo, hi) of the uniform population U(lo, hi) that maximises the marginal likelihood on ``fg``: the
    benchmark's difficulties, were they spread evenly over their own range (the null's hole-free benchmark).

    Every pair of nodes of a (coarsened) grid is tried at once through cumulative sums of each key's likelihood."""
    step = max(1, int(np.ceil(fg.grid.size / max_nodes)))
    grid = fg.grid[::step]
    top = fg.loglik.max(1, keepdims=True)
    L = np.exp(fg.loglik - top)  # (K, G) likelihood, each key scaled by its own peak
    L = np.add.reduceat(L, np.arange(0, fg.grid.size, step), axis=1)  # mass per coarse cell
    C = np.concatenate([np.zeros((L.shape[0], 1)), np.cumsum(L, 1)], axis=1)  # (K, G + 1)
    G = grid.size
    lo_i, hi_i = np.triu_indices(G + 1, k=1)  # cells lo_i .. hi_i - 1
    best, best_ll = (float(grid[0]), float(grid[-1])), -np.inf
    chunk = max(1, 4_000_000 // max(1, L.shape[0]))
    width = (hi_i - lo_i) * (grid[1] - grid[0] if G > 1 else 1.0)
    for s0 in range(0, lo_i.size, chunk):
        a, b = lo_i[s0 : s0 + chunk], hi_i[s0 : s0 + chunk]
        mass = C[:, b] - C[:, a]  # (K, pairs)
        with np.errstate(divide="ignore"):
            ll = fg.mult @ np.log(mass) - fg.mult.sum() * np.log(width[s0 : s0 + chunk])
        k = int(np.argmax(ll))
        if ll[k] > best_ll:
            edges = np.append(grid, grid[-1] + (grid[1] - grid[0] if G > 1 else 1.0))
            best_ll, best = float(ll[k]), (float(edges[a[k]]), float(edges[b[k]]))
    return best


START_CURVATURE_MODELS = 32  # from this many models the first mode search starts from :func:`start_curvature`
# (with guessing at any number of models), and stops once the gradient is at its round-off (fast.trials_roundoff)


def start_curvature(model: fast.MarginalModel, theta: np.ndarray) -> np.ndarray:
    """A positive definite approximation (J, J) of -d2 log p(theta | y) / d theta2 at ``theta`` for any blocks, at
    the cost of about one gradient (the exact one, :func:`benchfill.irt.fast._neg_hessian`, takes 2 J gradients
    where keys have their own trials or guessing): the prior's identity plus, per key k,
    diag(a_k) - Var_k(b) a_k a_k^T with a_kj = E_k[-d2 ell_k / d theta_j2] (the expected information from model
    j under the key's conditional of b): Cov_k(d ell / d theta_j, d ell / d theta_l) by the delta method in b. It is
    a starting curvature for the quasi-Newton mode search, whose result it does not change (the search stops on
    the gradient; :func:`benchfill.irt.fast._mode_and_cov` floors its eigenvalues)."""
    J = len(theta)
    H = np.eye(J)
    for blk in model.blocks:
        delta = float(blk.shift(theta))
        grid = blk.grid + delta
        ell, _ = fast.block_log_density(theta[None, :], blk)
        ell = ell[0]  # (Kb, G)
        P = np.exp(ell - ell.max(1, keepdims=True))
        P /= P.sum(1, keepdims=True)
        Pl = fast._on_lattice(P, blk)  # (Kb, L)
        a = fast.expected_information(theta, grid, Pl, blk)  # (Kb, J)
        m1 = Pl @ grid
        var = np.maximum(Pl @ grid**2 - m1**2, 1e-12)
        w = blk.mult * var
        H += np.diag(blk.mult @ a) - a.T @ (a * w[:, None])
    return (H + H.T) / 2


def learn_population(keys: fast.ItemKeys, kind: PopulationKind, seed: int = 0
                     ) -> tuple[Population, fast.ModeStart]:
    """The benchmark's difficulty population of ``kind`` and the abilities' posterior mode under it, with the
    inverse curvature the last search held there (a sampler's own mode search starts from both).

    ``paper`` returns N(0, 1) without looking at the data (and the mode search's start: 0, no curvature)."""
    J = keys.n.shape[1]
    prior = Population.paper()
    theta = np.zeros(J)
    if kind == "paper":
        return prior, fast.ModeStart(theta, np.eye(J))
    pilot = fast.pilot_model(keys, theta, 14.0, prior)
    gtol, gtol_later = 1e-8, 1e-6
    guessing = any(b.log_c is not None for b in pilot.blocks)
    if guessing or (J >= START_CURVATURE_MODELS and any(b.n_shared is None for b in pilot.blocks)):
        # the exact Hessian costs 2 J gradients where keys have their own trials (a sparse design: every item its
        # own key) or guessing; the mode does not depend on the starting curvature, only the number of steps does.
        # The gradient's round-off grows with the trials it sums (measured ~2e-11 per trial, 183 models x 5,000
        # items): below that floor the line search only halves its step ~30 times per round to no avail. With
        # guessing the exact Hessian's 2 J gradients cost as much at any number of models (MMLU-Pro 29 x 12,032,
        # c = 0.1: 58 gradients on a ~600-node pilot lattice for each of 9,389 keys)
        floor = fast.trials_roundoff(keys)
        gtol, gtol_later = max(gtol, floor), max(gtol_later, floor)
        theta, cov = fast._mode_and_cov(pilot, theta, gtol=gtol, curvature=start_curvature(pilot, theta),
                                        with_cov=False)
    else:
        theta, cov = fast._mode_and_cov(pilot, theta)
    tails: tuple[float, float] | None = None
    # with guessing the first search's curvature is the paper prior's, a cruder start under the learned population:
    # the first learned round measures the exact one (closed form there, ~7 gradients' cost), and each round
    # starts from the last one's (MMLU-Pro 29 x 12,032, c = 0.1: 48 -> 24 gradients over three rounds)
    exact_first = guessing and fast.hessian_is_analytic(pilot)
    for round_ in range(ROUNDS):
        # the tails are chosen once, on the first round's abilities (choosing them every round cost ~2 s of the
        # bundled 12 x 500 at ~1,100 rollouts and changed 2 of 18 choices on the real shapes, each to a neighbour)
        prior = fit_population(fit_grid(keys, theta, seed), kind, theta, tails)
        tails = prior.tails
        # quasi-Newton from the last curvature: the population changes the abilities' posterior little
        fresh = exact_first and round_ == 0
        new, cov = fast._mode_and_cov(fast.pilot_model(keys, theta, 14.0, prior), theta, gtol=gtol_later,
                                      cov0=None if fresh else cov, with_cov=False)
        moved = float(np.max(np.abs(new - theta)))
        theta = new
        if moved < THETA_TOL:
            break
    return prior, fast.ModeStart(theta, cov)
