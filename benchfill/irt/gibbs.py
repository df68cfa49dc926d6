"""Exact 1PL posterior for leaderboards (hundreds to thousands of models): a two-block Gibbs sampler whose both
conditionals are exact quadrature draws, plus a joint shift move.

The model is the fast engine's (:mod:`benchfill.irt.fast`): theta_j ~ N(0, 1), b_i ~ g (the difficulty
population), y_ji ~ Binomial(n_ji, sigmoid(theta_j - b_i)), no guessing. The fast engine integrates the
difficulties out and samples the J abilities jointly by an independence proposal; with hundreds of models that
J-dimensional proposal no longer fits (measured importance efficiency 0.39 at 1,000 models) and the NUTS fallback
takes minutes. Here instead:

* b | theta: the items are independent one-dimensional problems, drawn exactly on the fast engine's tracking
  lattices (:func:`benchfill.irt.fast.draw_difficulties`; items sharing a likelihood key share the lattice work).
* theta | b: the same problem transposed. With theta'_i = -b_i as the "abilities" and b'_j = -theta_j as the
  "difficulties", theta_j - b_i = theta'_i - b'_j and b'_j ~ N(0, 1), so the models are drawn by the same code,
  keyed by (their trials, their total correct).
* A shift move: (theta + s, b + s) leaves the likelihood unchanged, and only the priors pin the common location, so
  Gibbs alone would crawl along it. A random-walk Metropolis step on s (a translation: Lebesgue measure is
  preserved, so the plain ratio of the joint densities is the acceptance ratio) moves along it at every sweep.

Given the other block, every item (model) depends on the data only through its key, so a sweep costs about
(models + items) x lattice nodes, not models x items. Each conditional lattice comes from windows at a reference
point with room measured on the chain's own warm-up; a draw whose window edge holds more than e^-25 of its peak
(the state moved beyond the room) is redone on windows rebuilt at the current state, a choice made from the state
alone, so the chain keeps its target. The output is the fast engine's :class:`benchfill.irt.model.IRTFit`, with
``extra["fast"]["engine"] = "gibbs"``.

Fixed guessing (c_i > 0) by data augmentation (the 3PL's classic augmentation, Beguin & Glas 2001), partially
collapsed (van Dyk & Park 2008): a trial is answered right when the model knows the item (probability
p = sigmoid(theta_j - b_i)) or, not knowing it, guesses right (c_i), so P(right) = p + (1 - p) c_i. Given
(theta, b), the number of the y_ji right answers the model knew is Binomial(y_ji, p / (p + (1 - p) c_i)); given
those counts x, the likelihood of theta is the plain 1PL's with x successes of n trials (the guesses' factor
c^(y - x) (1 - c)^(n - y) is free of theta and b). A sweep draws b | theta, y exactly with x integrated out (the
items keyed by their whole answer pattern, as the fast engine does), then x | theta, b, y, then theta | b, x on
one key per model whose total known changes every sweep: (b, x) is one draw from p(b, x | theta, y), so the chain
keeps its target. Drawing b given x instead (keys by total known: far fewer) mixed too slowly: on 150 x 1,000 with
c = 0.2, min bulk ESS of b 435 and max R-hat 1.017 against 3,158 and 1.003 collapsed. With guessing, the joint
proposal of the independence sampler grows with the models like the plain one's, hence this engine from
GIBBS_MIN_MODELS models too. ``extra["fast"]["guessing_augmented"]`` says it ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from benchfill.data import ResponseMatrix
from benchfill.irt import fast
from benchfill.irt.model import IRTFit, IRTSpec, SamplerSettings
from benchfill.irt.prior import Population

GIBBS_MIN_MODELS = 100  # from this many models the fast engine's "fast" sampler runs Gibbs
EDGE_REBUILD = -25.0  # a window edge above this (log, relative to the peak) means the window is redone
WARM_UP = 50  # sweeps after which the lattices are rebuilt with room measured on the chain itself
ROOM_FACTOR = 3.0  # that room: this many times the warm-up's own range of each key's mode shift
START_ROOM = 1.0  # logits of room each way before any sweep has been measured
SHIFT_STEPS = 2  # random-walk steps on the common shift per sweep
START_SD = 0.5  # chains start from the accuracy-based abilities plus N(0, START_SD^2) noise (overdispersed)


def use_gibbs(n_models: int) -> bool:
    """Whether the "fast" sampler uses this engine: from GIBBS_MIN_MODELS models (below, the abilities' joint
    independence proposal is exact and cheaper); with guessing too (by augmentation, see the module docstring)."""
    return n_models >= GIBBS_MIN_MODELS


def _room(width: float):
    """A margin function (see :data:`benchfill.irt.fast.MarginFn`): the same room each way for every key."""

    def margins(w: np.ndarray, wbar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.full(len(w), width), np.full(len(w), width)

    return margins


@dataclass
class Conditional:
    """One block of the sampler: exact draws of the "difficulties" of ``keys`` given the "abilities" (J,).

    Attributes:
        keys: the likelihood keys (items, or models for the transposed problem).
        prior: the "difficulties'" prior (the population for items, N(0, 1) for models).
        blocks: the current lattices (None until the first draw).
    """

    keys: fast.ItemKeys
    prior: Population
    blocks: list[fast.Block] | None = None

    def build(self, abilities: np.ndarray, margins: fast.MarginFn) -> None:
        """Windows of every key at ``abilities``, with ``margins`` of room for the abilities' later moves."""
        half = 14.0
        for _ in range(6):
            lo, hi = fast.pilot_range(abilities, half, self.prior)
            try:
                win = fast.key_windows(self.keys, abilities, lo, hi, self.prior)
                break
            except fast._RangeTooNarrow:
                half *= 1.5
        else:  # pragma: no cover - abilities beyond ~100 logits
            raise RuntimeError("could not bracket the conditional posteriors")
        self.blocks = fast.build_blocks(self.keys, win, margins, self.prior, for_draws=True)

    def set_totals(self, r: np.ndarray) -> None:
        """New totals r (K,) for the same keys: the windows stay, and a draw whose window no longer holds its
        density rebuilds them (:meth:`draw`)."""
        self.keys = replace(self.keys, r=r)
        if self.blocks is not None:
            self.blocks = [replace(blk, r=r[blk.keys]) for blk in self.blocks]

    def draw(self, abilities: np.ndarray, rng: np.random.Generator, out: np.ndarray) -> float:
        """Fill ``out`` (n_items,) with one exact draw per item given ``abilities`` (J,); -> the edge ratio."""
        if self.blocks is None:
            self.build(abilities, _room(START_ROOM))
        assert self.blocks is not None
        row = out[None, :]
        _, edge = fast.draw_difficulties(self.keys, self.blocks, abilities[None, :], rng, row, large_fit=True)
        if edge > EDGE_REBUILD:  # decided from the state alone (the densities at the window ends), not the draw
            self.build(abilities, _room(START_ROOM))
            _, edge = fast.draw_difficulties(self.keys, self.blocks, abilities[None, :], rng, row, large_fit=True)
        return edge


def _log_joint_prior(theta: np.ndarray, b: np.ndarray, prior: Population, s: float) -> float:
    """log N(theta + s; 0, 1) + sum log g(b + s): the part of the joint density a common shift changes."""
    t = theta + s
    return float(-0.5 * (t @ t) + prior.log_density_unnormalised(b + s).sum())


def shift_scale(theta: np.ndarray, b: np.ndarray, prior: Population) -> float:
    """Random-walk scale for the shift: 2.4 / sqrt(curvature) of its log density at s = 0 (the 1-D optimum)."""
    eps = 1e-2
    f = [_log_joint_prior(theta, b, prior, s) for s in (-eps, 0.0, eps)]
    curv = -(f[0] - 2 * f[1] + f[2]) / eps**2
    return 2.4 / np.sqrt(max(curv, float(len(theta))))


@dataclass(frozen=True)
class Augmentation:
    """The third block under fixed guessing (see the module docstring): how many right answers were known.

    Attributes:
        rows, cols: (M,) model and item of every cell with right answers on an item with c > 0.
        y: (M,) its right answers (int64), or None when every one is a single trial.
        log_c: (M,) log of its item's guessing rate.
        model_base: (J,) known right answers fixed by the data (all those on items without guessing), per model.
    """

    rows: np.ndarray
    cols: np.ndarray
    y: np.ndarray | None
    log_c: np.ndarray
    model_base: np.ndarray

    def draw(self, theta: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One draw of the known right answers given (theta, b); -> their totals per model (J,).
        P(known | right) = p / (p + (1 - p) c) = sigmoid(theta_j - b_i - log c)."""
        q = 1.0 / (1.0 + np.exp(self.log_c - theta[self.rows] + b[self.cols]))
        known = rng.random(q.shape[0]) < q if self.y is None else rng.binomial(self.y, q)
        return self.model_base + np.bincount(self.rows, weights=known, minlength=len(self.model_base))


def augmented_models(y: np.ndarray, n: np.ndarray, guessing: np.ndarray) -> tuple[fast.ItemKeys, Augmentation]:
    """The model keys of the augmented problem (one per model: its total known changes every sweep) and the third
    block, for counts y, n (J, I) and guessing rates (I,)."""
    y, n = np.where(n > 0, y, 0).astype(np.int64), np.asarray(n, dtype=np.int64)
    J, I = n.shape
    c = np.asarray(guessing, dtype=float)
    models = fast.ItemKeys(n=n.astype(float), y=np.zeros((J, I)), r=y.sum(1).astype(float), c=np.zeros(J),
                           mult=np.ones(J), item_key=np.arange(J), theta_lin=y.sum(0).astype(float))
    guessed = (y > 0) & (c[None, :] > 0)
    rows, cols = np.nonzero(guessed)
    aug = Augmentation(rows=rows, cols=cols, y=None if y.max(initial=0) <= 1 else y[rows, cols],
                       log_c=np.log(np.where(c > 0, c, 1.0))[cols],
                       model_base=np.where(guessed, 0, y).sum(1).astype(float))
    return models, aug


@dataclass(frozen=True)
class GibbsJob:
    """What a set of chains needs (picklable: workers started by a fork server receive it)."""

    items: fast.ItemKeys
    models: fast.ItemKeys
    prior: Population
    theta_start: np.ndarray
    augment: Augmentation | None = None

    def run(self, settings: SamplerSettings, first_chain: int, b_out: np.ndarray) -> fast.ChainResult:
        """Chains ``first_chain`` .. of the fit into ``b_out`` (C, S, I); -> theta (C, S, J), 0 divergences, each
        chain's shift acceptance rate, the largest edge ratio. Chain c draws from the stream (seed, c), so the draws
        do not depend on which process runs it."""
        thetas, accept, edge = [], np.empty(settings.chains), -np.inf
        for c in range(settings.chains):
            rng = np.random.default_rng(np.random.SeedSequence([settings.seed, 0x61B5, first_chain + c]))
            theta, acc, e = self.chain(settings, rng, b_out[c])
            thetas.append(theta[None])
            accept[c], edge = acc, max(edge, e)
        return np.concatenate(thetas), 0, accept, edge

    def chain(self, settings: SamplerSettings, rng: np.random.Generator, b_out: np.ndarray
              ) -> tuple[np.ndarray, float, float]:
        """One chain: ``max(WARM_UP, min(tune, 100))`` discarded sweeps, then ``draws`` kept ones into
        ``b_out`` (S, I); -> theta (S, J), shift acceptance, edge ratio."""
        J, I = len(self.theta_start), len(self.items.item_key)
        on_items = Conditional(self.items, self.prior)
        on_models = Conditional(self.models, Population.paper())
        theta = self.theta_start + START_SD * rng.standard_normal(J)
        b = np.empty(I)
        neg_theta = np.empty(J)
        burn = max(WARM_UP, min(settings.tune, 100))
        keep = np.empty((settings.draws, J))
        seen_t, seen_b = np.empty((WARM_UP, J)), np.empty((WARM_UP, I))
        tau, accepted, edge = 0.0, 0, -np.inf
        aug = self.augment
        for sweep in range(burn + settings.draws):
            edge = max(edge, on_items.draw(theta, rng, b))
            if aug is not None:  # (b, known) ~ p(b, known | theta, y): b drawn with the knowns integrated out
                on_models.set_totals(aug.draw(theta, b, rng))
            edge = max(edge, on_models.draw(-b, rng, neg_theta))
            theta = -neg_theta
            if sweep == 0 or sweep == WARM_UP:
                tau = shift_scale(theta, b, self.prior)
            lp = _log_joint_prior(theta, b, self.prior, 0.0)
            s = 0.0
            for _ in range(SHIFT_STEPS):
                prop = s + tau * rng.standard_normal()
                lp_prop = _log_joint_prior(theta, b, self.prior, prop)
                if np.log(rng.random()) < lp_prop - lp:
                    s, lp = prop, lp_prop
                    accepted += sweep >= burn
            theta, b = theta + s, b + s
            if sweep < WARM_UP:
                seen_t[sweep], seen_b[sweep] = theta, b
            if sweep == WARM_UP - 1:  # room measured on the warm-up, around its mean, for the rest of the chain
                ref_t, ref_b = seen_t[WARM_UP // 2:].mean(0), seen_b[WARM_UP // 2:].mean(0)
                on_items.build(ref_t, _scaled(fast.draw_margins(seen_t[WARM_UP // 2:] - ref_t)))
                on_models.build(-ref_b, _scaled(fast.draw_margins(ref_b - seen_b[WARM_UP // 2:])))
            if sweep >= burn:
                keep[sweep - burn] = theta
                b_out[sweep - burn] = b
        return keep, accepted / max(1, SHIFT_STEPS * settings.draws), edge


def _scaled(margins: fast.MarginFn) -> fast.MarginFn:
    """``margins`` widened ROOM_FACTOR times, plus a floor of two tenths of a logit."""

    def wider(w: np.ndarray, wbar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        down, up = margins(w, wbar)
        return ROOM_FACTOR * down + 0.2, ROOM_FACTOR * up + 0.2

    return wider


def start_abilities(n_correct: np.ndarray, n_trials: np.ndarray) -> np.ndarray:
    """(J,) a rough start: each model's smoothed log-odds of success, centred (the chain finds the rest)."""
    acc = (n_correct.sum(1) + 0.5) / (n_trials.sum(1) + 1.0)
    lo = np.log(acc / (1 - acc))
    return lo - lo.mean()


def fit_gibbs(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings) -> IRTFit:
    """The exact 1PL posterior by two-block Gibbs (see the module docstring); same contract as
    :func:`benchfill.irt.fast.fit_fast`: theta (C, S, J) float64, b (C, S, I) float32 draws, logits."""
    fast.check_fast_spec(spec)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _fit_gibbs(responses, spec, settings)


def _fit_gibbs(responses: ResponseMatrix, spec: IRTSpec, settings: SamplerSettings) -> IRTFit:
    t0 = time.perf_counter()
    y, n = responses.n_correct, responses.n_trials
    aug = None
    if spec.has_guessing:
        assert spec.guessing is not None
        items = fast.reduce_items(y, n, spec.guessing)
        models, aug = augmented_models(y, n, spec.guessing)
    else:
        items = fast.reduce_items(y, n)
        models = fast.reduce_items(np.asarray(y).T, np.asarray(n).T)
    job = GibbsJob(items, models, spec.population_prior, start_abilities(y, n), aug)
    C, S, I = settings.chains, settings.draws, len(responses.item_ids)
    results, parts, b = fast.run_chains(job, settings, fast._chain_split(settings), I)
    theta = np.concatenate([r[0] for r in results], axis=0)
    accept = np.concatenate([r[2] for r in results])
    edge = max(r[3] for r in results)
    return IRTFit(
        spec=spec, settings=settings, models=list(responses.models), item_ids=list(responses.item_ids),
        theta=theta, b=b.reshape(C, S, I), divergences=0,
        extra={"fast": {
            "engine": "gibbs", "acceptance": [float(a) for a in accept], "proposal_pareto_k": float("nan"),
            "keys": items.n_keys, "model_keys": models.n_keys, "edge_log_ratio": edge,
            "guessing_augmented": aug is not None,
            "sampling_and_draws_s": time.perf_counter() - t0, "processes": len(parts),
            "b_dtype": np.dtype(b.dtype).name,
        }},
    )
