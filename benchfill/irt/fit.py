"""Fitting: the reference PyMC model, its NUTS backends (pymc, nutpie, numpyro), a MAP preview, and the table of
samplers (:data:`SAMPLERS`: these and the exact fast engine of :mod:`benchfill.irt.fast`).

``fit_irt(responses, spec, settings)`` is the one entry point; ``settings.method`` picks the backend.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import numpy as np

from benchfill.data import ResponseMatrix
from benchfill.errors import SAMPLER_EXTRA, MissingExtra, missing_module
from benchfill.irt import fast, gibbs, population
from benchfill.irt.model import IRTFit, IRTSpec, SamplerSettings, binomial_loglik, probability

SamplerFn = Callable[[ResponseMatrix, IRTSpec, SamplerSettings], IRTFit]


def available_samplers() -> list[str]:
    """The samplers of :data:`SAMPLERS` whose optional extra (:data:`benchfill.errors.SAMPLER_EXTRA`) is
    installed here."""
    return [n for n in SAMPLERS if n not in SAMPLER_EXTRA or missing_module(SAMPLER_EXTRA[n]) is None]


def fit_irt(responses: ResponseMatrix, spec: IRTSpec | None = None, settings: SamplerSettings | None = None) -> IRTFit:
    """Fit an IRT model to a response matrix; returns posterior draws (or a MAP preview)."""
    spec = spec or IRTSpec()
    settings = settings or SamplerSettings()
    if settings.method not in SAMPLERS:
        raise ValueError(f"unknown sampler {settings.method!r}; choose from {', '.join(sorted(SAMPLERS))}")
    if settings.method not in available_samplers():
        raise MissingExtra(f"sampler {settings.method!r}", SAMPLER_EXTRA[settings.method])
    if spec.guessing is not None and len(spec.guessing) != len(responses.item_ids):
        raise ValueError("spec.guessing must have one entry per item")
    start = time.perf_counter()
    spec, mode = learned_population(responses, spec, settings.seed)
    learned_s = time.perf_counter() - start
    if settings.method == "fast" and mode is not None:  # the exact engine's mode search starts where learning ended
        fit = _fit_exact(responses, spec, settings, mode)
    else:
        fit = SAMPLERS[settings.method](responses, spec, settings)
    fit.wall_time_s = time.perf_counter() - start
    fit.extra["population_s"] = learned_s
    return fit


def _fit_exact(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings,
               start: fast.ModeStart | None = None) -> IRTFit:
    """The "fast" sampler: the quadrature engine with independence MH on the abilities
    (:func:`benchfill.irt.fast.fit_fast`) at the paper's scale, two-block Gibbs (:func:`benchfill.irt.gibbs.fit_gibbs`)
    from ``GIBBS_MIN_MODELS`` models, where a joint proposal for the abilities no longer fits (with guessing too, by
    data augmentation)."""
    if gibbs.use_gibbs(len(responses.models)):
        return gibbs.fit_gibbs(responses, spec, settings)
    return fast.fit_fast(responses, spec, settings, start)


def with_population(responses: ResponseMatrix, spec: IRTSpec, seed: int = 0) -> IRTSpec:
    """``spec`` with its difficulty population learned from ``responses`` (unchanged when it already has one, or
    asks for the paper's fixed N(0, 1)). The population is learned under the 1PL with the spec's fixed guessing
    (for a 2PL or estimated guessing too: the population is about where items lie, which the 1PL measures)."""
    return learned_population(responses, spec, seed)[0]


def learned_population(responses: ResponseMatrix, spec: IRTSpec, seed: int = 0
                       ) -> tuple[IRTSpec, fast.ModeStart | None]:
    """:func:`with_population`, and where it learned the population, the abilities' mode it ended on (None where
    nothing was learned)."""
    from dataclasses import replace

    if spec.prior is not None or spec.population == "paper":
        return spec, None
    from threadpoolctl import threadpool_limits

    keys = fast.reduce_items(responses.n_correct, responses.n_trials, spec.guessing)
    # one BLAS thread, as the samplers' chains run: the mode searches' (J, J) factorisations are small enough that
    # a second thread gains little on a quiet machine, and where the cores are shared OpenBLAS's spinning threads
    # made each one 10-30x slower (measured on 2 shared cores, 1,000 models: a Cholesky factorisation and solve
    # 0.05 s on one thread, 0.1-1.6 s on two; the population of 1,000 x 5,000 took 9 to 124 s on two threads)
    with threadpool_limits(limits=1):
        prior, mode = population.learn_population(keys, spec.population, seed)
    return replace(spec, prior=prior), mode


# ------------------------------------------------------------------------------------------ the PyMC model


def build_pymc_model(responses: ResponseMatrix, spec: IRTSpec):
    """The reference model of README: IRT and checks as a ``pm.Model`` over the observed (n_trials > 0) cells."""
    import pymc as pm
    import pytensor.tensor as pt

    jj, ii = np.nonzero(responses.n_trials)
    n = responses.n_trials[jj, ii]
    k = responses.n_correct[jj, ii]
    J, I = responses.shape
    with pm.Model(coords={"model": responses.models, "item": responses.item_ids}) as model:
        theta = pm.Normal("theta", 0.0, 1.0, dims="model")
        b = population_variable(spec.population_prior, I)
        z = theta[jj] - b[ii]
        if spec.kind == "2pl":
            a = pm.LogNormal("a", 0.0, 0.5, dims="item")
            z = a[ii] * z
        if spec.has_guessing:
            g = np.asarray(spec.guessing, dtype=float)
            if spec.estimate_guessing:
                # Beta prior with mean 1/k and 20 pseudo-observations; items without options keep c = 0.
                has = g > 0
                conc = 20.0
                c_free = pm.Beta("c_free", alpha=np.where(has, g, 0.5) * conc, beta=np.where(has, 1 - g, 0.5) * conc,
                                 dims="item")
                c = pm.Deterministic("c", pt.where(has, c_free, 0.0), dims="item")
                cc = c[ii]
            else:
                cc = g[ii]
            p = cc + (1.0 - cc) * pm.math.sigmoid(z)
            pm.Binomial("y", n=n, p=pt.clip(p, 1e-9, 1 - 1e-9), observed=k)
        else:
            pm.Binomial("y", n=n, logit_p=z, observed=k)
    return model


def population_variable(prior, n_items: int):
    """b (I,) with the difficulty population as its prior, inside a pm.Model: a Normal for ``paper`` and
    ``normal``; otherwise a flat variable plus the log density as a potential: the envelope (normal, or hyperbolic
    with exponential tails) and the same piecewise-linear table of the spline correction that the fast engine
    evaluates."""
    import pymc as pm
    import pytensor.tensor as pt

    if not prior.has_spline and not prior.has_tails:
        return pm.Normal("b", prior.mu, prior.sigma, dims="item")
    b = pm.Flat("b", dims="item", initval=np.full(n_items, prior.mu))
    z = (b - prior.mu) / prior.sigma
    def half(tail: float):  # benchfill.irt.prior.half_envelope, in PyTensor
        return -0.5 * z**2 if not np.isfinite(tail) else -(tail**2) * (pt.sqrt(1.0 + (z / tail) ** 2) - 1.0)

    log_g = half(prior.tail_hi) if prior.tail_lo == prior.tail_hi else pt.switch(
        z < 0.0, half(prior.tail_lo), half(prior.tail_hi))
    if prior.has_spline:
        xs, table = prior.spline_table()
        step = float(xs[1] - xs[0])
        u = pt.clip((b - xs[0]) / step, 0.0, len(xs) - 1.000001)
        i = pt.floor(u).astype("int64")
        t = u - i
        tab = pt.as_tensor_variable(table)
        log_g = log_g + pt.switch((b >= xs[0]) & (b <= xs[-1]), tab[i] + t * (tab[i + 1] - tab[i]), 0.0)
    pm.Potential("b_population", pt.sum(log_g))
    return b


def _draws(posterior, name: str) -> np.ndarray | None:
    if name not in posterior:
        return None
    return np.asarray(posterior[name].values, dtype=float)  # (chain, draw, K)


def _nuts(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings, backend: str) -> IRTFit:
    import pymc as pm

    logging.getLogger("pymc").setLevel(logging.ERROR)
    model = build_pymc_model(responses, spec)
    var_names = ["theta", "b"] + (["a"] if spec.kind == "2pl" else []) + (["c"] if spec.estimate_guessing and spec.has_guessing else [])
    kwargs = dict(
        draws=settings.draws, tune=settings.tune, chains=settings.chains, random_seed=settings.seed,
        progressbar=False, nuts_sampler=backend, target_accept=settings.target_accept,
        compute_convergence_checks=False, var_names=var_names,
    )
    if backend == "pymc":
        kwargs["cores"] = min(settings.chains, 2)
    with model:
        idata = pm.sample(**kwargs)
    post = idata.posterior
    div = int(np.asarray(idata.sample_stats["diverging"]).sum()) if "diverging" in idata.sample_stats else 0
    theta, b = _draws(post, "theta"), _draws(post, "b")
    assert theta is not None and b is not None  # the model always has both
    return IRTFit(
        spec=spec, settings=settings, models=list(responses.models), item_ids=list(responses.item_ids),
        theta=theta, b=b, a=_draws(post, "a"), c=_draws(post, "c"), divergences=div,
    )


def _fit_pymc(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings) -> IRTFit:
    return _nuts(responses, spec, settings, "pymc")


def _fit_nutpie(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings) -> IRTFit:
    return _nuts(responses, spec, settings, "nutpie")


def _fit_numpyro(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings) -> IRTFit:
    return _nuts(responses, spec, settings, "numpyro")


def _fit_map(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings) -> IRTFit:
    """MAP point estimate (a preview, labelled as such): SDs are conditional Laplace approximations."""
    import pymc as pm

    logging.getLogger("pymc").setLevel(logging.ERROR)
    model = build_pymc_model(responses, spec)
    with model:
        point = pm.find_MAP(progressbar=False, seed=settings.seed)
    theta = np.asarray(point["theta"], dtype=float)
    b = np.asarray(point["b"], dtype=float)
    a = np.asarray(point["a"], dtype=float) if "a" in point else None
    c = np.asarray(point["c"], dtype=float) if "c" in point else (
        np.asarray(spec.guessing, dtype=float) if spec.guessing is not None else None
    )
    b_sd, theta_sd = _laplace_sds(responses, theta, b, a, c)
    fit = IRTFit(
        spec=spec, settings=settings, models=list(responses.models), item_ids=list(responses.item_ids),
        theta=theta[None, None, :], b=b[None, None, :], a=None if a is None else a[None, None, :],
        c=np.asarray(point["c"], dtype=float)[None, None, :] if "c" in point else None,
        is_map=True, b_sd_override=b_sd, theta_sd_override=theta_sd,
    )
    fit.log_likelihood_max = float(
        binomial_loglik(responses.n_correct, responses.n_trials, probability(theta[:, None], b[None, :], a, c)).sum()
    )
    return fit


def _laplace_sds(responses: ResponseMatrix, theta, b, a, c) -> tuple[np.ndarray, np.ndarray]:
    """Conditional Laplace SDs: 1 / sqrt(Fisher information + prior precision), one parameter at a time."""
    p = probability(theta[:, None], b[None, :], a, c)
    star = 1.0 / (1.0 + np.exp(-((theta[:, None] - b[None, :]) * (1.0 if a is None else a))))
    # d p / d z = (1 - c) * star * (1 - star); Fisher info of a binomial in z: n (dp/dz)^2 / (p (1 - p)).
    cc = 0.0 if c is None else c
    dp = (1.0 - cc) * star * (1.0 - star) * (1.0 if a is None else a)
    info = responses.n_trials * dp**2 / np.clip(p * (1 - p), 1e-12, None)
    return 1.0 / np.sqrt(info.sum(0) + 1.0), 1.0 / np.sqrt(info.sum(1) + 1.0)


# every sampler by its name (``SamplerSettings.method``): the exact fast engine first, the default of every command
SAMPLERS: dict[str, SamplerFn] = {"fast": _fit_exact, "pymc": _fit_pymc, "nutpie": _fit_nutpie,
                                  "numpyro": _fit_numpyro, "map": _fit_map}
