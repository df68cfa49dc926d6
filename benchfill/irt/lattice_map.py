"""Stretched b-lattices: a block's node spacing grows where every key's integrand is smooth on a larger scale.

With guessing, a key's likelihood flattens at c^r (1 - c)^(n - r) once b is well beyond the panel's abilities (and
at 1 once it is well below them), so its conditional posterior's window runs ~20 logits into the population's tail,
at the spacing the measured region needs: on MMLU-Pro (29 models, c = 0.1) 60 % of the fit's window nodes lie
above the strongest model's ability + 4, where the integrand's scale is the population's (~2 logits), not the
0.15 logits of the lattice.

A stretched lattice is uniform in u, with b = phi(u),

    phi(u) = u + k_hi w softplus((u - t_hi) / w) - k_lo w softplus((t_lo - u) / w),

spacing h between t_lo and t_hi, (1 + k) h beyond, joined smoothly over a few w. The trapezoid rule in u on
f(phi(u)) phi'(u) keeps the spectral accuracy of the uniform one, phi being analytic (its singularities lie pi w off
the real axis; w >= 2 h keeps their share below e^-40): nodes phi(u_g), weights h phi'(u_g), whose log joins the
population's log density at the nodes (:meth:`benchfill.irt.fast.Block.log_prior`). The map is chosen so that the
spacing at every b stays within the local rule the uniform lattice applies globally: h(b) <= 1 / (H_FACTOR
sqrt(C(b))), C(b) the population's curvature near b plus the largest likelihood curvature sum_j n_j s_j (1 - s_j)
near b, "near" covering the abilities' moves (``reach``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchfill.irt.prior import Population

PROFILE_STEP = 0.02  # logits between the points where the spacing rule is checked
STRETCHES = (2.0, 4.0, 8.0, 16.0, 32.0)  # coarse-to-fine spacing ratios tried (1 + k)
MIN_SAVING = 0.25  # a stretch is used only when it saves at least this share of the window nodes ...
MIN_NODES = 50_000  # ... and only for keys with this many window nodes (fewer are cheap; choosing costs ~0.05 s)
KNOT_SLACK = 0.01  # how much coarser than the fine spacing a lattice may be over the population's spline knots
STRIP_NATS = 30.0  # the analytic-strip bound's error: e^-30 of the terms' deviation
T_TOL = 0.05  # logits: the transitions' places are found to this


@dataclass(frozen=True)
class LatticeMap:
    """b = phi(u) (see the module). The identity (k_lo = k_hi = 0) is the uniform lattice."""

    t_lo: float = 0.0
    t_hi: float = 0.0
    k_lo: float = 0.0
    k_hi: float = 0.0
    w: float = 1.0

    @property
    def identity(self) -> bool:
        return self.k_lo == 0.0 and self.k_hi == 0.0

    def b(self, u: np.ndarray) -> np.ndarray:
        """phi(u), any shape, logits."""
        u = np.asarray(u, dtype=float)
        if self.identity:
            return u
        return (u + self.k_hi * self.w * np.logaddexp(0.0, (u - self.t_hi) / self.w)
                - self.k_lo * self.w * np.logaddexp(0.0, (self.t_lo - u) / self.w))

    def slope(self, u: np.ndarray) -> np.ndarray:
        """phi'(u) >= 1."""
        from scipy.special import expit  # imported here: scipy.special costs ~0.17 s, and only a stretched map needs it

        u = np.asarray(u, dtype=float)
        return 1.0 + self.k_hi * expit((u - self.t_hi) / self.w) + self.k_lo * expit((self.t_lo - u) / self.w)

    def log_jacobian(self, u: np.ndarray) -> np.ndarray | None:
        """log phi'(u) (the trapezoid weights' log, up to log h), or None for the identity."""
        return None if self.identity else np.log(self.slope(u))

    def u(self, b: np.ndarray) -> np.ndarray:
        """phi^-1(b): Newton's method from the inverse of phi's asymptotes (a few steps), safeguarded by the bracket
        [b - |phi(b) - b|, b + |phi(b) - b|] (phi' >= 1 puts the root there)."""
        b = np.asarray(b, dtype=float)
        if self.identity:
            return b
        gap = np.abs(self.b(b) - b)
        lo, hi = b - gap, b + gap
        u = np.where(b > self.t_hi, self.t_hi + (b - self.t_hi) / (1.0 + self.k_hi),
                     np.where(b < self.t_lo, self.t_lo - (self.t_lo - b) / (1.0 + self.k_lo), b))
        for _ in range(100):
            f = self.b(u) - b
            lo, hi = np.where(f < 0, u, lo), np.where(f > 0, u, hi)
            step = u - f / self.slope(u)
            u_new = np.where((step >= lo) & (step <= hi), step, 0.5 * (lo + hi))
            if np.all(np.abs(u_new - u) <= 1e-13 * (1.0 + np.abs(u))):
                return u_new
            u = u_new
        return u


def term_bounds(n: np.ndarray, y: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n_max, amplitude) (J,) of keys with trials ``n``, correct counts ``y`` (K, J) and guessing rates ``c`` (K,),
    as :func:`allowed_spacing` takes them: the largest trials per model, plus, where some key guesses, the largest
    correct counts over the smallest guessing rate (the success term log(c + (1 - c) s) strays up to 1/c further)."""
    n_max = np.asarray(n, dtype=float).max(0)
    guessing = np.asarray(c) > 0
    if not guessing.any():
        return n_max, n_max
    return n_max, n_max + np.asarray(y, dtype=float)[guessing].max(0) / float(np.min(np.asarray(c)[guessing]))


def allowed_spacing(prior: Population, theta: np.ndarray, n_max: np.ndarray, amplitude: np.ndarray, reach: float,
                    span: tuple[float, float], h_factor: float, fine: float) -> tuple[np.ndarray, np.ndarray]:
    """(b (P,), h(b) (P,)): the largest node spacing the local rule allows at points of ``span``, logits.

    Args:
        theta: (J,) the abilities the lattice is anchored at.  n_max: (J,) the keys' largest trials per model.
        amplitude: (J,) a bound on how far each model's log-likelihood terms, per unit e^-|b - theta_j|, stray
            from their asymptotes (n_max, plus the largest correct counts over c with guessing).
        reach: how far (logits) any ability, and with it the lattice, moves from ``theta`` where the lattice is used.
        fine: the spacing of the lattice's uniform part, logits.
    """
    b = np.arange(span[0] - 2.0 * reach - 2.0, span[1] + 2.0 * reach + 2.0, PROFILE_STEP)
    lp = prior.log_density_unnormalised(b)
    prior_curv = np.abs(np.gradient(np.gradient(lp, PROFILE_STEP), PROFILE_STEP))
    s = 1.0 / (1.0 + np.exp(-(theta[:, None] - b[None, :])))
    curv = _running_max(prior_curv, reach + 0.5) + n_max @ _running_max(s * (1.0 - s), 2.0 * reach + 0.5)
    allowed = 1.0 / (h_factor * np.sqrt(curv))
    # Each log-likelihood term (log sigmoid, log(1 - sigmoid), log(c + (1 - c) sigmoid)) is analytic within pi of
    # the real axis, so the trapezoid rule errs by ~ its deviation from its asymptote times e^(-2 pi^2 / spacing)
    # however small its curvature: a bound the curvature rule misses far from the abilities
    dist = np.maximum(np.abs(b[None, :] - theta[:, None]) - 2.0 * reach, 0.0)
    deviation = amplitude @ np.exp(-dist)
    allowed = np.minimum(allowed, 2.0 * np.pi**2 / np.maximum(np.log(np.maximum(deviation, 1.0)) + STRIP_NATS, 1.0))
    if prior.has_spline:  # the cubic spline's third derivative jumps at its knots, and the trapezoid error from
        # such a jump grows as the spacing's fourth power: its span (as the lattice moves) keeps the fine spacing
        # (to within KNOT_SLACK: the stretch's tail reaches everywhere, and raises that error by ~4 KNOT_SLACK)
        near = (b > prior.knot_lo - reach - 0.5) & (b < prior.knot_hi + reach + 0.5)
        allowed[near] = np.minimum(allowed[near], fine * (1.0 + KNOT_SLACK))
    # where the local rule asks for finer than the fine spacing, the uniform lattice's own rule (the window's
    # largest curvature) has already set that spacing: the stretch just must not coarsen it there
    return b, np.maximum(allowed, fine * (1.0 + KNOT_SLACK))


def _running_max(x: np.ndarray, half_width: float) -> np.ndarray:
    """Max of x (..., P) over +- ``half_width`` logits of each point (PROFILE_STEP apart)."""
    from scipy.ndimage import maximum_filter1d

    return maximum_filter1d(x, size=2 * int(np.ceil(half_width / PROFILE_STEP)) + 1, axis=-1, mode="nearest")


def _fits(lmap: LatticeMap, h: float, b: np.ndarray, allowed: np.ndarray) -> bool:
    """Whether spacing h phi'(u) at every profile point stays within the allowed spacing there."""
    return bool(np.all(h * lmap.slope(lmap.u(b)) <= allowed))


def _transition(h: float, k: float, w: float, b: np.ndarray, allowed: np.ndarray, side: str,
                bounds: tuple[float, float]) -> float | None:
    """The innermost place of one side's transition (t_hi, or t_lo) with stretch k that keeps the spacing rule, by
    bisection between ``bounds`` (the rule holds at the outer bound once the stretch starts beyond every window)."""
    inner, outer = bounds if side == "hi" else bounds[::-1]

    def make(t: float) -> LatticeMap:
        return LatticeMap(t_hi=t, k_hi=k, w=w) if side == "hi" else LatticeMap(t_lo=t, k_lo=k, w=w)

    if not _fits(make(outer), h, b, allowed):
        return None
    if _fits(make(inner), h, b, allowed):
        return inner
    while abs(outer - inner) > T_TOL:
        mid = 0.5 * (inner + outer)
        if _fits(make(mid), h, b, allowed):
            outer = mid
        else:
            inner = mid
    return outer


def choose_map(prior: Population, theta: np.ndarray, n_max: np.ndarray, amplitude: np.ndarray, reach: float, h: float,
               a: np.ndarray, b: np.ndarray, h_factor: float, min_nodes: int = MIN_NODES) -> LatticeMap:
    """The stretch that leaves fewest window nodes for keys whose windows are [a, b] (K,) (with their room for
    the abilities' moves) at fine spacing ``h`` (the largest any of their lattices uses), or the identity where
    none saves MIN_SAVING of them or they hold fewer than ``min_nodes``. Arguments as :func:`allowed_spacing`."""
    uniform = float(np.sum(b - a)) / h
    if uniform < min_nodes:
        return LatticeMap()
    span = (float(a.min()), float(b.max()))
    points, allowed = allowed_spacing(prior, theta, n_max, amplitude, reach, span, h_factor, h)
    w = max(0.5, 2.0 * h)
    best, best_nodes = LatticeMap(), uniform
    far = 8.0 * w  # a transition this far beyond every window leaves them on the uniform lattice
    # each side's stretch starts beyond the stretch of b that needs the fine spacing (the measured region and the
    # spline's knots), so the two never overlap
    tight = points[allowed <= h * (1.0 + KNOT_SLACK) * (1.0 + 1e-9)]
    inner = (float(tight.min()), float(tight.max())) if tight.size else (float(theta.mean()),) * 2
    for stretch in STRETCHES:
        k = stretch - 1.0
        t_hi = _transition(h, k, w, points, allowed, "hi", (inner[1], span[1] + far))
        t_lo = _transition(h, k, w, points, allowed, "lo", (span[0] - far, inner[0]))
        lmap = LatticeMap(t_lo=t_lo if t_lo is not None else 0.0, t_hi=t_hi if t_hi is not None else 0.0,
                          k_lo=k if t_lo is not None else 0.0, k_hi=k if t_hi is not None else 0.0, w=w)
        if lmap.identity or not _fits(lmap, h, points, allowed):
            continue
        nodes = float(np.sum(lmap.u(b) - lmap.u(a))) / h
        if nodes < best_nodes:
            best, best_nodes = lmap, nodes
    return best if best_nodes <= (1.0 - MIN_SAVING) * uniform else LatticeMap()
