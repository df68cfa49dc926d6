"""The difficulty population: the prior density g(b) every item's difficulty is drawn from (README: IRT and checks).

One family covers the three populations benchfill offers:

    log g(b) = e(z) + s(b) - log Z,      z = (b - mu) / sigma,      s(b) = sum_k alpha_k B_k(b),

with B_k uniform cubic B-splines whose supports lie inside [knot_lo, knot_hi] (so s and its first two derivatives
vanish at both ends and outside: the tails are the envelope's, and log g is twice differentiable everywhere, which
keeps the quadrature lattices of :mod:`benchfill.irt.fast` accurate). The envelope e is the normal's -z^2 / 2, or,
on a side with a finite tail parameter delta (``tail_lo`` for the easy side z < 0, ``tail_hi`` for the hard side
z > 0), the hyperbolic

    e(z) = -delta^2 (sqrt(1 + (z / delta)^2) - 1),

normal in the middle (e ~ -z^2 / 2 for |z| << delta) with an exponential tail of scale sigma / delta logits (e ~
-delta |z| for |z| >> delta): log-concave and smooth (the two sides agree to the third derivative at z = 0), like
the normal. The tails are what place the items beyond the panel's reach (solved by no model, or by all), which the
data bound on one side only; how heavy each is is learned from the items the panel does measure
(:mod:`benchfill.irt.population`).

* ``paper``: N(0, 1), fixed (the paper's prior, kept for comparison with its tables);
* ``normal``: N(mu_b, sigma_b^2), both learned from the benchmark (a hierarchical normal, empirical Bayes);
* ``spline``: the envelope (normal or hyperbolic tails) reshaped by the spline (log-spline g-modeling, Efron
  2016, "Empirical Bayes deconvolution estimates", Biometrika 103(1)), learned from the benchmark: it can have
  holes, skew and long tails.

This module is pure: parameters in, densities out. Learning a population from response data is
:mod:`benchfill.irt.population`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

PopulationKind = Literal["paper", "normal", "spline"]
POPULATION_KINDS: tuple[str, ...] = ("spline", "normal", "paper")
DEFAULT_POPULATION: PopulationKind = "spline"
TABLE_PER_KNOT = 256  # s(b) is tabulated this finely per knot interval: linear interpolation errs < 1e-6 nats
LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)


NORMAL_TAILS = (float("inf"), float("inf"))  # (easy side, hard side): no tail parameter, the normal's tails


def half_envelope(z: np.ndarray, tail: float) -> np.ndarray:
    """One side's envelope in standard units, up to a constant: -z^2 / 2 (``tail`` infinite: the normal), else the
    hyperbolic -tail^2 (sqrt(1 + (z / tail)^2) - 1) (an exponential tail of rate ``tail`` per unit z)."""
    z = np.asarray(z, dtype=float)
    if not np.isfinite(tail):
        return -0.5 * z * z
    return -tail * tail * (np.sqrt(1.0 + (z / tail) ** 2) - 1.0)


def envelope(z: np.ndarray, tails: tuple[float, float] = NORMAL_TAILS) -> np.ndarray:
    """The envelope's log density in standard units, up to a constant: ``tails[0]``'s side below z = 0 (easy
    items), ``tails[1]``'s above (hard items) (:func:`half_envelope`)."""
    z = np.asarray(z, dtype=float)
    lo, hi = tails
    if lo == hi:
        return half_envelope(z, hi)
    return np.where(z < 0.0, half_envelope(z, lo), half_envelope(z, hi))


def half_log_mass(tail: float) -> float:
    """log of the integral of exp(half_envelope(z, tail)) over z > 0 (sqrt(pi / 2) for the normal; numerically
    for a hyperbolic tail, whose closed form delta e^(delta^2) K1(delta^2) would need scipy.special's import, ~0.3 s
    of a command)."""
    if not np.isfinite(tail):
        return float(LOG_SQRT_2PI - np.log(2.0))
    reach = tail + 60.0 / tail  # e < -59 nats beyond: nothing the sum sees
    z = np.linspace(0.0, reach, 200_001)
    f = np.exp(half_envelope(z, tail))
    return float(np.log(np.sum((f[1:] + f[:-1]) * 0.5 * np.diff(z))))


def envelope_log_norm(tails: tuple[float, float] = NORMAL_TAILS) -> float:
    """log of the integral of exp(envelope(z)) dz (log sqrt(2 pi) for the normal)."""
    if not np.isfinite(tails[0]) and not np.isfinite(tails[1]):
        return float(LOG_SQRT_2PI)
    return float(np.logaddexp(half_log_mass(tails[0]), half_log_mass(tails[1])))


def envelope_reach(depth: float, tail: float = np.inf) -> float:
    """The |z| at which one side's envelope is ``depth`` nats below its peak (inverse of -half_envelope)."""
    depth = max(float(depth), 0.0)
    if not np.isfinite(tail):
        return float(np.sqrt(2.0 * depth))
    return float(tail * np.sqrt((1.0 + depth / tail**2) ** 2 - 1.0))


def interp_uniform(x: np.ndarray, xs: np.ndarray, fs: np.ndarray) -> np.ndarray:
    """``np.interp(x, xs, fs, left=0.0, right=0.0)`` for points x (m,) and nodes ``xs`` (n >= 2,) spaced (nearly)
    uniformly, bit for bit: each x's cell is computed from the spacing, then moved by one where rounding put it next to
    its own, so the same cell and the same arithmetic as np.interp's give the same value. np.interp binary-searches a
    table of ~7,000 nodes for every point: 2.56 ms for 32,000 points against 0.56 ms here (a micro-benchmark, this
    project's 2-core machine, 2026-12-07); in a Gibbs sweep on a dense 192 x 32,000 design, whose shift move evaluates
    the population at every item three times, that search was a fifth of the sweep (py-spy)."""
    x = np.asarray(x, dtype=float)
    n = xs.size
    cell = np.floor((x - xs[0]) * (1.0 / (xs[1] - xs[0])))
    j = np.clip(np.nan_to_num(cell, nan=0.0), 0, n - 2).astype(np.intp)
    j -= (x < xs[j]) & (j > 0)
    j += (x >= xs[j + 1]) & (j < n - 2)
    x0, f0 = xs[j], fs[j]
    out = (fs[j + 1] - f0) / (xs[j + 1] - x0) * (x - x0) + f0
    out[x == xs[-1]] = fs[-1]
    out[(x < xs[0]) | (x > xs[-1])] = 0.0
    out[np.isnan(x)] = np.nan
    return out


def cubic_bspline_basis(x: np.ndarray, lo: float, step: float, m: int) -> np.ndarray:
    """(len(x), m) values of the uniform cubic B-splines B_k, k = 0..m-1, B_k supported on
    [lo + k step, lo + (k + 4) step] (zero elsewhere)."""
    x = np.asarray(x, dtype=float).reshape(-1)
    out = np.zeros((x.size, m))
    u = (x - lo) / step
    cell = np.floor(u).astype(np.int64)  # knot interval of x
    t = u - cell
    # the four pieces of the cardinal cubic B-spline, for a point at offset t in its r-th interval (r = 0..3)
    pieces = (t**3 / 6, (-3 * t**3 + 3 * t**2 + 3 * t + 1) / 6, (3 * t**3 - 6 * t**2 + 4) / 6, (1 - t) ** 3 / 6)
    rows = np.arange(x.size)
    for r, val in enumerate(pieces):
        k = cell - r
        ok = (k >= 0) & (k < m)
        out[rows[ok], k[ok]] = val[ok]
    return out


@dataclass(frozen=True, eq=False)
class Population:
    """A difficulty population g(b) (see the module docstring). Logits throughout.

    Attributes:
        kind: "paper", "normal" or "spline".
        mu, sigma: the envelope's centre and scale (for ``normal`` the whole population).
        tail_lo, tail_hi: the envelope's tail parameters delta on the easy side (low b) and the hard side (high b)
            (infinite: the normal's tail; finite: an exponential tail of scale sigma / delta logits, see the module
            docstring).
        knot_lo, knot_step: the spline's uniform knots knot_lo + k knot_step; ``coef`` (m,) its coefficients
            (empty: no spline).
        penalty: the ridge penalty the spline coefficients were learned with (0 where there is no spline).
    """

    kind: PopulationKind
    mu: float = 0.0
    sigma: float = 1.0
    knot_lo: float = 0.0
    knot_step: float = 1.0
    coef: np.ndarray = field(default_factory=lambda: np.zeros(0))
    penalty: float = 0.0
    tail_lo: float = float("inf")
    tail_hi: float = float("inf")
    # derived in __post_init__: the spline's table (nodes, values) and log Z of the density
    _xs: np.ndarray = field(init=False, repr=False)
    _table: np.ndarray = field(init=False, repr=False)
    _log_norm: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not (np.isfinite(self.mu) and np.isfinite(self.sigma) and self.sigma > 0):
            raise ValueError(f"a population needs a finite mu and sigma > 0 (got {self.mu}, {self.sigma})")
        if not (self.tail_lo > 0 and self.tail_hi > 0):
            raise ValueError(f"a population's tail parameters must be positive (got {self.tail_lo}, {self.tail_hi})")
        coef = np.asarray(self.coef, dtype=float).reshape(-1)
        object.__setattr__(self, "coef", coef)
        if coef.size:
            xs = self.knot_lo + self.knot_step / TABLE_PER_KNOT * np.arange(TABLE_PER_KNOT * (coef.size + 3) + 1)
            table = cubic_bspline_basis(xs, self.knot_lo, self.knot_step, coef.size) @ coef
        else:
            xs = table = np.zeros(0)
        object.__setattr__(self, "_xs", xs)
        object.__setattr__(self, "_table", table)
        object.__setattr__(self, "_log_norm", self._normaliser())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Population):
            return NotImplemented
        return self.key == other.key

    @property
    def key(self) -> tuple:
        """What tells populations apart, hashable (equal keys: the same density)."""
        return (self.kind, self.mu, self.sigma, self.knot_lo, self.knot_step, self.penalty, self.tails,
                self.coef.tobytes())

    __hash__ = None  # type: ignore[assignment]  # mutable-looking: holds an array

    # ---- constructors ------------------------------------------------------------------------------------
    @classmethod
    def paper(cls) -> "Population":
        """The paper's fixed N(0, 1)."""
        return cls("paper", 0.0, 1.0)

    @classmethod
    def normal(cls, mu: float, sigma: float) -> "Population":
        return cls("normal", float(mu), float(sigma))

    # ---- the density -------------------------------------------------------------------------------------
    @property
    def has_spline(self) -> bool:
        return self.coef.size > 0

    @property
    def tails(self) -> tuple[float, float]:
        """(tail_lo, tail_hi): the envelope's tail parameters, easy side and hard side."""
        return (self.tail_lo, self.tail_hi)

    @property
    def has_tails(self) -> bool:
        """Whether the envelope has an exponential (hyperbolic) tail on either side instead of the normal's."""
        return bool(np.isfinite(self.tail_lo) or np.isfinite(self.tail_hi))

    def tail_scale(self, side: str) -> float | None:
        """Scale (logits) of the exponential tail on ``side`` ("lo": easy, "hi": hard), None for a normal tail."""
        tail = self.tail_lo if side == "lo" else self.tail_hi
        return float(self.sigma / tail) if np.isfinite(tail) else None

    @property
    def knot_hi(self) -> float:
        return self.knot_lo + self.knot_step * (self.coef.size + 3)

    def spline(self, b: np.ndarray) -> np.ndarray:
        """s(b), any shape (0 outside the knots)."""
        b = np.asarray(b, dtype=float)
        if not self.has_spline:
            return np.zeros_like(b)
        return interp_uniform(b.reshape(-1), self._xs, self._table).reshape(b.shape)

    def log_density(self, b: np.ndarray) -> np.ndarray:
        """log g(b), normalised, any shape; nats."""
        b = np.asarray(b, dtype=float)
        z = (b - self.mu) / self.sigma
        out = (-0.5 * z * z if not self.has_tails else envelope(z, self.tails)) - self._log_norm
        return out + self.spline(b) if self.has_spline else out

    def log_density_unnormalised(self, b: np.ndarray) -> np.ndarray:
        """log g(b) + log Z: the same up to a constant (what quadrature needs). Written as the normalised density
        plus its constant back: computing it directly changes the last bits, and a seeded fill's exact call count
        with them (measured 284 -> 260 calls in tests/test_fill.py's kill test)."""
        return self.log_density(b) + self._log_norm

    def spline_table(self) -> tuple[np.ndarray, np.ndarray]:
        """(b nodes, s(b)) of the spline's table, uniformly spaced over the knots; s is linear between nodes and 0
        outside (what :meth:`spline` evaluates; empty without a spline)."""
        return self._xs, self._table

    @property
    def curvature(self) -> float:
        """Largest |d^2 log g / db^2|, logits^-2: the prior's share of the curvature that sets lattice spacing (the
        hyperbolic envelope's is at most the normal's, reached at its centre)."""
        base = 1.0 / self.sigma**2
        if not self.has_spline:
            return base
        h = self.knot_step / TABLE_PER_KNOT
        d2 = np.diff(self._table, 2) / h**2
        return float(max(base, np.max(np.abs(base - d2))))

    def support(self, cut: float = 40.0) -> tuple[float, float]:
        """(lo, hi) outside which log g is more than ``cut`` nats below its largest value."""
        if not self.has_spline:
            return (float(self.mu - self.sigma * envelope_reach(cut, self.tail_lo)),
                    float(self.mu + self.sigma * envelope_reach(cut, self.tail_hi)))
        u = self.log_density_unnormalised(self._xs)  # inside the knots (log g + log Z)
        top = float(u.max())
        if not self.knot_lo <= self.mu <= self.knot_hi:
            top = max(top, 0.0)  # the envelope's own peak, outside the knots where s = 0
        keep = self._xs[u >= top - cut]
        # outside the knots log g + log Z = e(z), within the cut where -e(z) <= cut - top
        lo = self.mu - self.sigma * envelope_reach(cut - top, self.tail_lo)
        hi = self.mu + self.sigma * envelope_reach(cut - top, self.tail_hi)
        if keep.size:
            lo, hi = min(lo, float(keep[0])), max(hi, float(keep[-1]))
        return float(lo), float(hi)

    def _normaliser(self) -> float:
        base = float(np.log(self.sigma) + envelope_log_norm(self.tails))
        if not self.has_spline:
            return base
        # log Z = log of the envelope's integral of e^s: e^s - 1 vanishes outside the knots
        x = np.linspace(self.knot_lo, self.knot_hi, 8 * TABLE_PER_KNOT * (self.coef.size + 3) + 1)
        z = (x - self.mu) / self.sigma
        f = np.exp(envelope(z, self.tails)) * np.expm1(self.spline(x))
        extra = float(np.sum((f[1:] + f[:-1]) * 0.5 * np.diff(x))) / np.exp(base)
        return base + float(np.log1p(extra))

    # ---- summaries ---------------------------------------------------------------------------------------
    def grid(self, n: int = 801) -> tuple[np.ndarray, np.ndarray]:
        """(x, density) on n points over the central 1 - 1e-9 of the mass (for pictures and summaries)."""
        lo, hi = self.support(cut=25.0)
        x = np.linspace(lo, hi, 4 * n + 1)
        p = np.exp(self.log_density(x))
        cdf = np.concatenate([[0.0], np.cumsum((p[1:] + p[:-1]) * 0.5 * np.diff(x))])
        cdf /= cdf[-1]
        a, b = np.interp([1e-9, 1 - 1e-9], cdf, x)
        x = np.linspace(a, b, n)
        return x, np.exp(self.log_density(x))

    def moments(self) -> tuple[float, float]:
        """Mean and SD of g, logits."""
        x, p = self.grid(2001)
        w = p / p.sum()
        mean = float(w @ x)
        return mean, float(np.sqrt(max(w @ (x - mean) ** 2, 0.0)))

    def quantiles(self, q) -> np.ndarray:
        x, p = self.grid(2001)
        cdf = np.cumsum(p)
        cdf = (cdf - cdf[0]) / (cdf[-1] - cdf[0])
        return np.interp(np.asarray(q, dtype=float), cdf, x)

    def label(self) -> str:
        """One line naming the population, for reports."""
        if self.kind == "paper":
            return "N(0, 1), fixed (the paper's prior)"
        mean, sd = self.moments()
        if self.kind == "normal":
            return f"learned normal N({self.mu:.2f}, {self.sigma:.2f}^2)"
        scales = [(name, self.tail_scale(side)) for name, side in (("easy", "lo"), ("hard", "hi"))]
        tails = ", ".join(f"{name} tail {'exponential, scale ' + format(sc, '.2f') if sc else 'normal'}"
                          for name, sc in scales)
        tails = ", " + tails if self.has_tails else ", normal tails"
        return f"learned log-spline (mean {mean:.2f}, SD {sd:.2f}, {self.coef.size} knots' coefficients{tails})"

    # ---- persistence -------------------------------------------------------------------------------------
    def to_arrays(self, prefix: str = "population_") -> dict[str, np.ndarray]:
        """The population as named numpy arrays (for ``.npz`` files; no pickles)."""
        return {f"{prefix}kind": np.array(self.kind), f"{prefix}mu": np.array(self.mu),
                f"{prefix}sigma": np.array(self.sigma), f"{prefix}knot_lo": np.array(self.knot_lo),
                f"{prefix}knot_step": np.array(self.knot_step), f"{prefix}coef": np.asarray(self.coef, dtype=float),
                f"{prefix}penalty": np.array(self.penalty), f"{prefix}tail_lo": np.array(self.tail_lo),
                f"{prefix}tail_hi": np.array(self.tail_hi)}

    @classmethod
    def from_arrays(cls, arrays, prefix: str = "population_") -> "Population":
        """Inverse of :meth:`to_arrays`; a mapping without them (a file saved before populations) gives the
        paper's N(0, 1), the prior those files were fitted with; one saved before tails has normal tails."""
        if f"{prefix}kind" not in arrays:
            return cls.paper()
        kind = str(arrays[f"{prefix}kind"])
        if kind not in POPULATION_KINDS:
            raise ValueError(f"unknown population kind {kind!r}")
        return cls(kind, float(arrays[f"{prefix}mu"]), float(arrays[f"{prefix}sigma"]),  # type: ignore[arg-type]
                   float(arrays[f"{prefix}knot_lo"]), float(arrays[f"{prefix}knot_step"]),
                   np.asarray(arrays[f"{prefix}coef"], dtype=float), float(arrays[f"{prefix}penalty"]),
                   *(float(arrays[f"{prefix}{k}"]) if f"{prefix}{k}" in arrays else float("inf")
                     for k in ("tail_lo", "tail_hi")))
