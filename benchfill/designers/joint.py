"""One joint item-level IRT fit of every designer's core items (and the seed items), with designer-level effects
and self / family interactions, by marginal maximum likelihood (items integrated out by Gauss-Hermite; scipy).

Model, for answerer a and item i of group g (a designer, or ``seed``)::

    P(correct) = c_i + (1 - c_i) sigmoid(theta_a - b_i + sum_k gamma_k X_k[a, i])
    b_i ~ Normal(mu_g + beta_g (L_i - 3), sigma_g)          L_i = declared level 1-5 (3 where unknown)

- ``mu_g`` is the designer's difficulty (logits, at L3) and ``beta_g`` its calibration slope (logits per requested
  level): both are group-level parameters, so they are NOT shrunk toward 0 as per-item posterior means are (a
  planted shift of +1.5 comes back near +1.5, not halved). ``sigma_g`` is estimated too.
- ``gamma_k`` are interaction effects on the logit scale (e.g. a designer's items x its own answerer), adjusted for
  answerer ability and item difficulty: preference estimates that do not move with how hard a designer writes or
  how strong an answerer is (the accuracy-scale difference in differences does).
- With ``slopes=True`` each group has a 2PL slope a_g (eta = a_g (theta - b) + interactions; the geometric mean
  of the a_g is 1): a designer whose items separate strong from weak answerers more sharply has a larger a_g, and
  pure-noise or negative-discrimination items pull it toward 0.
- The answerers' mean theta is 0 (a location constraint); c = 1/k for multiple choice.

Each item's b is integrated out (Gauss-Hermite, ``nodes`` points), so only theta, mu, beta, log sigma and gamma are
optimised (L-BFGS with the analytic gradient): marginal ML is consistent where a joint mode of (theta, b) with few
answers per item compresses the scale. Intervals: the inverse of the observed information (a finite-difference
Hessian of the analytic gradient); ``gamma_cov`` keeps the interactions' block of it, for linear combinations of
the gammas. Item b: posterior mean and SD given the fitted parameters (EAP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import optimize

_EPS = 1e-9


@dataclass
class GroupEffect:
    """One group's difficulty: ``mu`` at L3, ``beta`` per level, ``mean`` = mu + beta * mean(L - 3) over its items
    (the designer's difficulty on its own level mix), each with a standard error; ``sigma`` the item spread."""

    name: str
    n_items: int
    mu: float
    mu_se: float
    beta: float | None
    beta_se: float | None
    mean: float
    mean_se: float
    sigma: float
    slope: float | None = None  # designer-level 2PL slope a (with ``slopes=True``)
    slope_se: float | None = None

    def as_dict(self, z: float = 1.959964) -> dict[str, Any]:
        def f(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        return {"n_items": self.n_items, "mu": f(self.mu), "mu_se": f(self.mu_se),
                "mu_ci": [f(self.mu - z * self.mu_se), f(self.mu + z * self.mu_se)],
                "beta": f(self.beta), "beta_se": f(self.beta_se),
                "beta_ci": ([f(self.beta - z * self.beta_se), f(self.beta + z * self.beta_se)]
                            if self.beta is not None and self.beta_se is not None else None),
                "mean": f(self.mean), "mean_se": f(self.mean_se),
                "mean_ci": [f(self.mean - z * self.mean_se), f(self.mean + z * self.mean_se)],
                "sigma": f(self.sigma), "slope": f(self.slope), "slope_se": f(self.slope_se)}


@dataclass
class JointFit:
    answerers: list[str]
    theta: np.ndarray
    theta_se: np.ndarray
    b: np.ndarray
    b_sd: np.ndarray
    groups: dict[str, GroupEffect]
    gamma: dict[str, float]
    gamma_se: dict[str, float]
    converged: bool
    iterations: int
    p_main: np.ndarray = field(repr=False)  # (J, I) P(correct) with every interaction set to 0
    p_full: np.ndarray = field(repr=False)  # (J, I) fitted P(correct)
    # (K, K) covariance of the interactions, in the order of ``gamma``: a linear combination's SE needs it
    gamma_cov: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)

    def info(self) -> dict[str, Any]:
        slopes = any(g.slope is not None for g in self.groups.values())
        return {"model": ("2PL with a designer-level slope a_g" if slopes else "1PL")
                         + " (c = 1/k for multiple choice), designer-level b ~ N(mu + beta (L - 3), sigma) and "
                           "logit interactions; marginal ML (Gauss-Hermite), Wald intervals",
                "converged": self.converged, "iterations": self.iterations,
                "theta": {a: float(v) for a, v in zip(self.answerers, self.theta)},
                "theta_se": {a: float(v) for a, v in zip(self.answerers, self.theta_se)}}


def _p(eta: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(correct) and dP/deta for logits eta (..., I) and lower asymptotes c (I,)."""
    s = 1.0 / (1.0 + np.exp(-eta))
    p = c + (1 - c) * s
    return np.clip(p, _EPS, 1 - _EPS), (1 - c) * s * (1 - s)


def fit_joint(n_correct: np.ndarray, n_trials: np.ndarray, groups: Sequence[str], *,
              levels: Sequence[float | None] | None = None, guessing: np.ndarray | None = None,
              interactions: Mapping[str, np.ndarray] | None = None, answerers: Sequence[str] | None = None,
              nodes: int = 31, slopes: bool = False) -> JointFit:
    """Fit the joint model by marginal maximum likelihood.

    Args:
        n_correct, n_trials: (J, I) counts (0 trials = no answer).
        groups: (I,) group of each item (designer name, or "seed").
        levels: (I,) declared level 1-5 or None (treated as 3, and not used for beta).
        guessing: (I,) lower asymptote c (0 for open answers).
        interactions: name -> (J, I) 0/1 design matrix X_k.
        answerers: names of the J rows.
        nodes: Gauss-Hermite points per item.
        slopes: also fit a designer-level 2PL slope a_g (eta = a_g (theta - b) + interactions), the geometric mean
            over groups fixed at 1 (the scale).
    """
    y = np.asarray(n_correct, float)
    n = np.asarray(n_trials, float)
    J, I = y.shape
    c = np.zeros(I) if guessing is None else np.asarray(guessing, float)
    gnames = list(dict.fromkeys(groups))
    G = len(gnames)
    gi = np.array([gnames.index(g) for g in groups], int)
    lv = np.array([np.nan if v is None else float(v) for v in (levels if levels is not None else [None] * I)])
    x = np.where(np.isfinite(lv), lv - 3.0, 0.0)
    # beta is estimable for a group whose items span at least two declared levels
    has_beta = np.array([len(set(lv[(gi == g) & np.isfinite(lv)].tolist())) >= 2 for g in range(G)])
    bidx = np.cumsum(has_beta) - 1  # position of group g's beta among the estimated betas
    nB = int(has_beta.sum())
    knames = list(interactions or {})
    K = len(knames)
    X = np.array([np.asarray(interactions[k], float) for k in knames]) if interactions and K else np.zeros((0, J, I))
    z, wq = np.polynomial.hermite_e.hermegauss(nodes)
    logw = np.log(wq / wq.sum())
    # parameters: theta (J), mu (G), beta (nB), log sigma (G), gamma (K), log a (G if slopes)
    o_m, o_b, o_s, o_g = J, J + G, J + G + nB, J + 2 * G + nB
    o_a = o_g + K
    P = o_a + (G if slopes else 0)
    lam = 100.0  # location: 0.5 * lam * (sum theta)^2 (mean theta = 0)
    prior_ls = 0.25  # log sigma ~ N(0, 2^2): keeps a tiny group's sigma finite
    prec_g = 1e-2  # gamma ~ N(0, 10^2): keeps a non-identified interaction finite
    beta_x = np.where(has_beta[gi], x, 0.0)

    def unpack(v: np.ndarray):
        th, mu = v[:J], v[o_m:o_b]
        be = np.zeros(G)
        be[has_beta] = v[o_b:o_s]
        la = v[o_a:] if slopes else np.zeros(G)
        return th, mu, be, v[o_s:o_g], v[o_g:o_a], la

    def parts(v: np.ndarray):
        th, mu, be, ls, ga, la = unpack(v)
        sig = np.exp(ls)
        ag = np.exp(la)[gi]  # (I,) slope of each item's group
        m = mu[gi] + be[gi] * beta_x  # (I,)
        bq = m[None, :] + sig[gi][None, :] * z[:, None]  # (Q, I)
        inter = np.tensordot(ga, X, axes=1) if K else 0.0  # (J, I)
        eta = ag * (th[:, None, None].transpose(1, 0, 2) - bq[:, None, :]) + inter  # (Q, J, I)
        p, dp = _p(eta, c)
        ll = (y * np.log(p) + (n - y) * np.log1p(-p)).sum(1)  # (Q, I)
        a = ll + logw[:, None]
        amax = a.max(0)
        li = amax + np.log(np.exp(a - amax).sum(0))  # (I,)
        post = np.exp(a - li)  # (Q, I)
        r = (y / p - (n - y) / (1 - p)) * dp  # (Q, J, I) d ll / d eta
        return th, mu, be, ls, ga, la, ag, sig, bq, li, post, r

    def objective(v: np.ndarray):
        th, mu, be, ls, ga, la, ag, sig, bq, li, post, r = parts(v)
        f = -li.sum() + 0.5 * lam * th.sum() ** 2 + 0.5 * prior_ls * ls @ ls + 0.5 * prec_g * ga @ ga \
            + 0.5 * 1e-4 * (th @ th + mu @ mu) + (0.5 * lam * la.sum() ** 2 + 0.5 * la @ la if slopes else 0.0)
        rp = (post[:, None, :] * r)  # (Q, J, I)
        r_ai = rp.sum(0)  # (J, I): E_post[d ll / d eta]
        r_iq = rp.sum(1)  # (Q, I)
        d_eta_i = r_ai.sum(0) * ag  # (I,) sum over answerers, times the slope
        g = np.zeros(P)
        g[:J] = -(r_ai * ag).sum(1) + lam * th.sum() + 1e-4 * th
        g[o_m:o_b] = np.bincount(gi, d_eta_i, G) + 1e-4 * mu  # d eta / d mu = -1, and f = -ll
        if nB:
            g[o_b:o_s] = np.bincount(gi, d_eta_i * beta_x, G)[has_beta]
        g[o_s:o_g] = np.bincount(gi, (r_iq * z[:, None]).sum(0) * sig[gi] * ag, G) + prior_ls * ls
        if K:
            g[o_g:o_a] = -np.tensordot(X, r_ai, axes=([1, 2], [0, 1])) + prec_g * ga
        if slopes:
            term = th @ r_ai - (bq * r_iq).sum(0)  # (I,) E_post[sum_a r (theta_a - b)]
            g[o_a:] = -np.bincount(gi, term * ag, G) + lam * la.sum() + la  # log a ~ N(0, 1)
        return f, g

    acc = (y.sum(0) + 0.5) / (n.sum(0) + 1.0)
    q = np.clip((acc - c) / (1 - c), 0.02, 0.98)
    b0 = -np.log(q / (1 - q))
    v = np.zeros(P)
    v[o_m:o_b] = [b0[gi == g].mean() if (gi == g).any() else 0.0 for g in range(G)]
    res = optimize.minimize(objective, v, jac=True, method="L-BFGS-B",
                            options={"maxiter": 10000, "gtol": 1e-6, "ftol": 1e-13})
    v = res.x
    # observed information by central differences of the analytic gradient
    H = np.zeros((P, P))
    for k in range(P):
        h = 1e-4 * max(1.0, abs(v[k]))
        e = np.zeros(P)
        e[k] = h
        H[:, k] = (objective(v + e)[1] - objective(v - e)[1]) / (2 * h)
    H = 0.5 * (H + H.T)
    cov = np.linalg.pinv(H, hermitian=True)
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    th, mu, be, ls, ga, la, ag, sig, bq, li, post, r = parts(v)
    b_mean = (post * bq).sum(0)
    b_sd = np.sqrt(np.clip((post * bq ** 2).sum(0) - b_mean ** 2, 0, None))
    out_groups = {}
    for g, name in enumerate(gnames):
        members = gi == g
        xbar = float(beta_x[members].mean()) if members.any() else 0.0
        im = o_m + g
        var_mean = cov[im, im]
        beta, beta_se = None, None
        if has_beta[g]:
            ib = o_b + bidx[g]
            var_mean += xbar ** 2 * cov[ib, ib] + 2 * xbar * cov[im, ib]
            beta, beta_se = float(be[g]), float(se[ib])
        out_groups[name] = GroupEffect(name, int(members.sum()), float(mu[g]), float(se[im]), beta, beta_se,
                                       float(mu[g] + be[g] * xbar), float(math.sqrt(max(var_mean, 0.0))),
                                       float(sig[g]),
                                       float(np.exp(la[g])) if slopes else None,
                                       float(np.exp(la[g]) * se[o_a + g]) if slopes else None)
    inter = np.tensordot(ga, X, axes=1) if K else 0.0
    p_full, _ = _p(ag * (th[:, None] - b_mean[None]) + inter, c)
    p_main, _ = _p(ag * (th[:, None] - b_mean[None]), c)
    return JointFit(list(answerers) if answerers is not None else [f"a{j}" for j in range(J)], th, se[:J],
                    b_mean, b_sd, out_groups, {k: float(ga[i]) for i, k in enumerate(knames)},
                    {k: float(se[o_g + i]) for i, k in enumerate(knames)}, bool(res.success), int(res.nit),
                    p_main, p_full, cov[o_g:o_a, o_g:o_a].copy())
