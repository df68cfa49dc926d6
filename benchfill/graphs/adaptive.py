"""Adaptive labelling: place each child with few panel answers and spend them where they decide the
search.

With ``[fill] labelling = "full"`` (the paper's setting) every panel model answers every valid child ``rollouts``
times. With ``"adaptive"`` a round's children are labelled together in steps; after each step every child's
posterior of b is recomputed exactly (:func:`benchfill.irt.placement.place_items`: quadrature over b with the
abilities fixed), and the rule below decides who gets the next answers.

The rule (all on the normalised axis d; target t; interval I_i = d_i +- z sd_i, z = ``adaptive_z``):

- distance bounds: L_i = the smallest |x - t| over I_i (0 when t lies inside), U_i = the largest;
- window that could win: w = min over children with at least ``adaptive_min_answers`` answers (and over the
  gap's placed children of earlier rounds) of U_j: some child is surely no farther from t than w;
- a child stops, for good, when
  * ``dropped``: it has ``adaptive_min_answers`` answers and L_i > w (clearly farther from t than some other child);
  * ``precise``: z sd_i <= ``adaptive_precision`` (its interval is narrow enough);
  * ``cap``: it has the full panel's answers (every model ``rollouts`` times: today's cost per child);
  * ``budget``: the round's budget is spent and it is not the round's best child (below);
- who is answered next (best-arm, LUCB-style: which child is nearest t?): every open child still under
  ``adaptive_min_answers`` answers (screening); once all are screened, the round's best child (the nearest
  estimate among those not dropped) while open, and its challenger (the other open child with the smallest L_i),
  ``adaptive_batch`` answers each. When the round has spent ``adaptive_budget`` x (children x full panel) answers,
  only the best child goes on (to ``cap`` or ``precise``) and the other open children stop (``budget``): the answers
  dropped children did not need go to the children nearest the target, and the child the search would choose always
  ends with its full panel's answers (or a narrow interval);
- which models answer: the ``adaptive_batch`` models with the largest expected Fisher information at the child's
  current posterior, E_b[I_j(b)] with b ~ N(mean, sd) (Gauss-Hermite), I_j(b) = ((1-c) s (1-s))^2 / (P (1-P)),
  s = sigmoid(theta_j - b), P = c + (1 - c) s, theta_j the posterior-mean ability; one answer per model per step
  unless fewer models have answers left. A model may answer one child up to ``adaptive_rollout_factor`` x its
  rollouts times (the child never more than the full panel's answers in all). With the default 1 every call adaptive
  labelling makes is one full labelling would make; with 2 the child nearest the target gets its full panel's worth
  of answers from the models that place it best (a tighter interval, but the search's stop rule, an ESTIMATE within
  the tolerance, then fires less often and a gap takes more rounds: README, adaptive labelling). A model's k-th
  answer to a child is rollout k (sample index k): no (child, model, rollout) is ever asked twice, and rollouts
  below the model's ``rollouts`` are the very calls full labelling would make (the same cache key);
- the optional text pre-screen (``[fill] prescreen``, :mod:`benchfill.graphs.prescreen`) orders the work: children
  are screened in waves of ceil(K / 2), the predicted nearest to t first, and a child's first answers come from the
  models most informative at its predicted b; the placement, and so every stop and drop, reads the answers alone.

Every decision is a pure function of the answers received so far (ties broken by index), so a node re-run after a
crash, whose answers come from the call cache, takes the same decisions and makes no call twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generator, Sequence

import numpy as np

from benchfill.irt.placement import place_items
from benchfill.irt.scale import Scale
from benchfill.models.config import FillParams

# Ask = answers for a batch of (child index, model index, rollout index): 1 correct, 0 wrong, None not a trial
Ask = Callable[[list[tuple[int, int, int]]], list[int | None]]

_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(9)
_GH_W = _GH_W / _GH_W.sum()


def expected_information(theta: np.ndarray, b_mean: float, b_sd: float, c: float = 0.0) -> np.ndarray:
    """(J,) expected Fisher information about b of one answer by each model, b ~ N(b_mean, b_sd)."""
    b = b_mean + b_sd * _GH_X  # (G,)
    s = 1.0 / (1.0 + np.exp(-(np.asarray(theta, float)[:, None] - b[None, :])))  # (J, G)
    p = c + (1.0 - c) * s
    info = ((1.0 - c) * s * (1.0 - s)) ** 2 / np.maximum(p * (1.0 - p), 1e-300)
    return info @ _GH_W


def pick_models(info: np.ndarray, left: np.ndarray, size: int) -> list[int]:
    """``size`` model indices for one child's next answers: the most informative models with answers left, one
    each; repeats (again by information) only when fewer models have answers left. Ties: smaller index."""
    order = sorted(range(len(info)), key=lambda j: (-info[j], j))
    left = left.copy()
    picks: list[int] = []
    while len(picks) < size and left.sum() > 0:
        for j in order:
            if len(picks) >= size:
                break
            if left[j] > 0:
                picks.append(j)
                left[j] -= 1
    return picks


def distance_bounds(d: np.ndarray, d_sd: np.ndarray, target: float, z: float) -> tuple[np.ndarray, np.ndarray]:
    """(L, U): the smallest and largest |x - t| over each interval d +- z sd."""
    lo, hi = d - z * d_sd, d + z * d_sd
    inside = (lo <= target) & (target <= hi)
    L = np.where(inside, 0.0, np.minimum(np.abs(lo - target), np.abs(hi - target)))
    U = np.maximum(np.abs(lo - target), np.abs(hi - target))
    return L, U


@dataclass
class AdaptiveResult:
    """The outcome of one round's adaptive labelling.

    Attributes:
        n_correct, n_trials: (K, J) counts per child and model (columns in the scale's model order).
        asked: (K, J) answers asked (rollouts used; >= n_trials when some answer was not a trial).
        status: per child ``dropped`` / ``precise`` / ``cap`` / ``budget``.
        notes: per child, why it stopped (one line).
        steps: the schedule: per step the batch [(child, model, rollout), ...] and the open children.
    """

    n_correct: np.ndarray
    n_trials: np.ndarray
    asked: np.ndarray
    status: list[str]
    notes: list[str]
    steps: list[dict] = field(default_factory=list)

    @property
    def answers(self) -> np.ndarray:
        return self.asked.sum(1)


def screening_order(predicted_b: np.ndarray | None, scale: Scale, target: float, n_children: int) -> list[int]:
    """The order in which children are screened: by the pre-screen's predicted |d - t| (ties: index), or index
    order without a pre-screen."""
    if predicted_b is None:
        return list(range(n_children))
    dist = np.abs(scale.normalise(np.asarray(predicted_b, float)) - target)
    return sorted(range(n_children), key=lambda i: (float(dist[i]), i))


# Schedule = the rule step by step: it yields each step's batch, is sent the batch's answers, returns the result
Schedule = Generator[list[tuple[int, int, int]], list[int | None], AdaptiveResult]


def adaptive_label(scale: Scale, target: float, caps: Sequence[int], n_children: int, ask: Ask,
                   params: FillParams, incumbent_u: float = np.inf, predicted_b: np.ndarray | None = None,
                   predicted_sd: float = 1.0) -> AdaptiveResult:
    """Label ``n_children`` children of one round adaptively, ``ask`` answering each step's batch (the arguments:
    :func:`adaptive_schedule`, whose steps this drives)."""
    schedule = adaptive_schedule(scale, target, caps, n_children, params, incumbent_u, predicted_b, predicted_sd)
    try:
        batch = next(schedule)
        while True:
            batch = schedule.send(ask(batch))
    except StopIteration as done:
        return done.value


def adaptive_schedule(scale: Scale, target: float, caps: Sequence[int], n_children: int, params: FillParams,
                      incumbent_u: float = np.inf, predicted_b: np.ndarray | None = None,
                      predicted_sd: float = 1.0) -> Schedule:
    """The adaptive labelling of ``n_children`` children of one round (the rule in the module docstring), step by
    step: it yields each step's batch of (child, model, rollout), is sent their answers (1 correct, 0 wrong, None not
    a trial) and returns the :class:`AdaptiveResult`. Whoever answers drives it: :func:`adaptive_label` with a
    function, the fill's label node by awaiting the panel.

    Args:
        scale: the benchmark's scale (abilities fixed; ``scale.models`` is the column order).
        target: t on the normalised axis.
        caps: (J,) each model's rollouts: a child's cap is their sum (full labelling's answers per child); one
            model may answer one child up to ``adaptive_rollout_factor`` x its rollouts times.
        incumbent_u: the smallest U of the gap's children placed in earlier rounds (inf if none).
        predicted_b, predicted_sd: the text pre-screen's predicted b of each child (logits) and its error SD
            (:mod:`benchfill.graphs.prescreen`), or None. It orders the work only: children are screened in waves
            of ceil(K / 2), the predicted nearest to t first, and a child with no answer yet gets the models most
            informative at N(predicted b, predicted_sd) instead of the scale's population; the placement (and so every
            stop and drop) uses the answers alone.
    """
    J = len(scale.models)
    K = n_children
    cap_total = int(np.sum(caps))
    caps_arr = np.asarray(caps, dtype=np.int64) * params.adaptive_rollout_factor  # per model and child
    theta = np.asarray(scale.theta_draws, float).mean(0)
    z, batch, min_answers = params.adaptive_z, params.adaptive_batch, params.adaptive_min_answers
    k = np.zeros((K, J), dtype=np.int64)
    n = np.zeros((K, J), dtype=np.int64)
    asked = np.zeros((K, J), dtype=np.int64)
    status = ["open"] * K
    budget = int(np.ceil(params.adaptive_budget * K * cap_total))
    notes = [""] * K
    steps: list[dict] = []
    order = screening_order(predicted_b, scale, target, K)
    wave = K if predicted_b is None else max(1, -(-K // 2))
    while True:
        placed = place_items(scale, k, n)
        d, d_sd, b, b_sd = placed.d, placed.d_sd, placed.b_mean, placed.b_sd
        L, U = distance_bounds(d, d_sd, target, z)
        answers = asked.sum(1)
        screened = answers >= min(min_answers, cap_total)
        w = float(min([incumbent_u] + [U[i] for i in range(K) if screened[i]]))
        for i in range(K):
            if status[i] != "open":
                continue
            if answers[i] >= cap_total:
                status[i], notes[i] = "cap", f"full panel: {answers[i]} answers"
            elif z * d_sd[i] <= params.adaptive_precision:
                status[i], notes[i] = "precise", (f"interval +-{z * d_sd[i]:.4f} <= {params.adaptive_precision} "
                                                  f"after {answers[i]} answers")
            elif screened[i] and L[i] > w:
                status[i], notes[i] = "dropped", (f"dropped after {answers[i]} answers: |d - t| >= {L[i]:.4f} "
                                                  f"> {w:.4f}, the distance some child surely beats")
        open_ = [i for i in range(K) if status[i] == "open"]
        if not open_:
            break
        screening = [i for i in order if status[i] == "open" and not screened[i]][:wave]
        spent = int(asked.sum())
        if screening:
            chosen = screening
        else:
            # the round's best so far (nearest estimate among the children not dropped) must end well measured
            best = min((i for i in range(K) if status[i] != "dropped"), key=lambda i: (abs(d[i] - target), i))
            rest = [i for i in open_ if i != best]
            challenger = [min(rest, key=lambda i: (L[i], i))] if rest else []
            if spent < budget:
                chosen = ([best] if status[best] == "open" else []) + challenger
            elif status[best] == "open":
                chosen = [best]
            else:
                for i in open_:
                    status[i], notes[i] = "budget", (f"round budget ({budget} answers) spent after {answers[i]} "
                                                     f"answers; not the round's nearest child")
                break
        plan: list[tuple[int, int, int]] = []
        for i in chosen:
            size = batch if not screening else min(batch, max(1, min_answers - int(answers[i])))
            if predicted_b is not None and answers[i] == 0:  # the pre-screen designs a child's first answers
                info = expected_information(theta, float(predicted_b[i]), predicted_sd, scale.guessing)
            else:
                info = expected_information(theta, float(b[i]), float(b_sd[i]), scale.guessing)
            size = min(size, cap_total - int(asked[i].sum()))
            for j in pick_models(info, caps_arr - asked[i], size):
                plan.append((i, j, int(asked[i, j])))
                asked[i, j] += 1
        outcomes = yield plan
        for (i, j, _), o in zip(plan, outcomes):
            if o is not None:
                n[i, j] += 1
                k[i, j] += int(o)
        steps.append({"open": open_, "batch": plan, "window": None if not np.isfinite(w) else w})
    return AdaptiveResult(k, n, asked, status, notes, steps)
