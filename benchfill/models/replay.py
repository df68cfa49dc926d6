"""The replay world: real models' answers replayed from a high-rollout response matrix, and a rewriter that proposes
real items held back from the benchmark. Everything it writes says REPLAY.

The simulated world (:mod:`benchfill.models.sim`) answers with the same 1PL the placement assumes, so it cannot show
what real items (their own discrimination, guessing, misfit) do to the search. The replay world can:

- the benchmark: the matrix's items minus a held-out pool (every ``1/holdout``-th item by accuracy, so the pool spans
  the difficulties), its counts thinned to ``rollouts`` answers per cell (a hypergeometric draw of real answers);
- panel: model m answers item i correctly with probability k_mi / n_mi, the real pass rate over the matrix's
  ~1,100 rollouts (``sim/<name>`` is the real model ``name``); answers are rendered in gradable form and graded by
  the real grader;
- rewriter: reads the target (0-10) and the parent from the call's typed :class:`RewriteRequest` (never from the
  prompt's text), aims at ``b_parent + step (b_target - b_parent) + noise z`` (without a target,
  ``b_parent + scatter z``) and proposes a pool item whose TRUE difficulty is among the ``choices`` nearest to that
  aim: a real item, its own text and answer;
- judge: a validity verdict (invalid for ``invalid_rate`` of children, at random: the pool items are real and valid).

An item's TRUE difficulty is where unlimited labelling by the panel would place it on the benchmark's scale: every
scale model answering it equally often at its real pass rate (:func:`equal_labelling_counts`), so each child's truth
is known and the panel behaves as the real models did. :func:`replay_truth` writes it to the run folder
(``replay_truth.json``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from benchfill.data import Item, ResponseMatrix
from benchfill.models.requests import RewriteRequest
from benchfill.models.sim import SimWorld, _rng, text_key

REPLAY_LABEL = "REPLAY"
REPLAY_BANNER = ("REPLAY: the panel replays real models' answers (their pass rates over the full response matrix) "
                 "and the rewriter proposes real items held back from the benchmark; no LLM was called")
TRUTH_FILE = "replay_truth.json"


@dataclass(frozen=True)
class ReplaySplit:
    """The benchmark and the rewriter's pool cut from one high-rollout matrix.

    Attributes:
        benchmark: the held-in items' responses, thinned to the benchmark's rollouts (J, I_in).
        full: the full matrix of the same models over every item (J, I): the pass rates and the truth.
        pool_ids: the held-out item ids (the rewriter's children).
    """

    benchmark: ResponseMatrix
    full: ResponseMatrix
    pool_ids: list[str]


def split_for_replay(responses: ResponseMatrix, holdout: float, rollouts: int, seed: int = 0) -> ReplaySplit:
    """Hold every ``round(1 / holdout)``-th item (by full-matrix accuracy, offset by ``seed``) out as the pool, and
    thin the rest to ``rollouts`` answers per cell (0: keep the counts as they are)."""
    step = max(2, int(round(1.0 / holdout)))
    order = np.argsort(-responses.accuracy_by_item(), kind="stable")
    pool_pos = np.sort(order[(np.arange(len(order)) + seed) % step == 0])
    pool_ids = [responses.item_ids[i] for i in pool_pos]
    keep = [i for i in responses.item_ids if i not in set(pool_ids)]
    held_in = responses.subset(items=keep)
    k, n = held_in.n_correct, held_in.n_trials
    if rollouts > 0:
        rng = np.random.default_rng(seed)
        take = np.minimum(n, rollouts)
        asked = take > 0
        thinned = np.zeros_like(k)
        # a draw of `take` of the cell's real answers without replacement
        thinned[asked] = rng.hypergeometric(k[asked], n[asked] - k[asked], take[asked])
        k, n = thinned, take
    bench = ResponseMatrix(list(held_in.models), list(held_in.item_ids), k.astype(np.int64), n.astype(np.int64),
                           responses.source, {**responses.meta, "replay": {"holdout": len(pool_ids),
                                                                           "rollouts": rollouts}})
    return ReplaySplit(benchmark=bench, full=responses, pool_ids=pool_ids)


class ReplayWorld(SimWorld):
    """The replay panel, rewriter and judge (the grader is the simulated world's: gold-in-response).

    Args:
        pass_rates: (J, I) real pass rates of ``models`` on ``items``.
        models: the real models' names (``sim/<name>`` answers as ``name``).
        items: every item of the matrix (benchmark and pool), with its text and answer.
        true_b: (I,) each item's true difficulty on the benchmark's scale, logits.
        pool_ids: ids of the items the rewriter may propose.
        choices: a child is one of this many pool items nearest to the rewriter's aim.
        Other arguments as :class:`~benchfill.models.sim.SimWorld`.
    """

    def __init__(self, pass_rates: np.ndarray, models: Sequence[str], items: Sequence[Item], true_b: np.ndarray,
                 pool_ids: Sequence[str], *, seed: int = 0, step: float = 0.5, noise: float = 0.3,
                 scatter: float = 0.8, invalid_rate: float = 0.1, b_range: tuple[float, float] = (-3.0, 3.0),
                 choices: int = 3) -> None:
        super().__init__({m: 0.0 for m in models}, {it.id: float(b) for it, b in zip(items, true_b)}, seed=seed,
                         step=step, noise=noise, scatter=scatter, invalid_rate=invalid_rate, b_range=b_range)
        self.models = list(models)
        self.rates = np.asarray(pass_rates, dtype=float)
        self.items = list(items)
        self.true_b = np.asarray(true_b, dtype=float)
        self.row = {text_key(it.question): i for i, it in enumerate(self.items)}
        pool = set(pool_ids)
        self.pool = np.array([i for i, it in enumerate(self.items) if it.id in pool])
        self.choices = choices

    def _index(self, item: Item) -> int:
        i = self.row.get(text_key(item.question))
        if i is None:
            raise KeyError(f"{REPLAY_LABEL}: item {item.id!r} is not an item of the replayed matrix")
        return i

    def latent_b(self, item: Item) -> float:
        i = self.row.get(text_key(item.question))
        return float(self.true_b[i]) if i is not None else super().latent_b(item)

    def p_correct(self, model: str, item: Item) -> float:
        """The real model's pass rate on the real item over the full matrix."""
        j = self.models.index(model.removeprefix("sim/"))
        return float(self.rates[j, self._index(item)])

    def _rewrite(self, model: str, request: RewriteRequest, key: str) -> str:
        parent = self.row.get(text_key(request.parent.question))
        parent_b = float(self.true_b[parent]) if parent is not None else 0.0
        rng = _rng(self.seed, "replay-rewrite", model, key)
        children, used = [], {parent}
        for _ in range(request.n_children):
            z = float(rng.standard_normal())
            if request.target is not None:
                aim = parent_b + self.step * (self.d_to_b(request.target / 10.0) - parent_b) + self.noise * z
            else:
                aim = parent_b + self.scatter * z
            free = np.array([i for i in self.pool if i not in used])
            if not len(free):
                break
            near = free[np.argsort(np.abs(self.true_b[free] - aim), kind="stable")[: self.choices]]
            pick = int(near[int(rng.integers(len(near)))])
            used.add(pick)
            it = self.items[pick]
            children.append({"question": it.question, "answer": it.answer,
                             "rationale": f"{REPLAY_LABEL}: the real item {it.id} (aimed at b = {aim:+.2f})"})
        return json.dumps({"children": children}, ensure_ascii=False)


def replay_truth(items: Sequence[Item], true_b: np.ndarray, pool_ids: Sequence[str], scale_d: np.ndarray
                 ) -> dict[str, Any]:
    """The replay's truth as JSON: per item its id, text key, true b and true d on the benchmark's axis, and
    whether it is in the pool."""
    pool = set(pool_ids)
    return {"label": REPLAY_BANNER, "items": [
        {"id": it.id, "text_key": text_key(it.question), "b": float(b), "d": float(d), "pool": it.id in pool}
        for it, b, d in zip(items, true_b, scale_d)]}


def load_truth(out: str | Path) -> dict[str, float] | None:
    """text key -> true d of a replay run folder (None when the run is not a replay)."""
    path = Path(out) / TRUTH_FILE
    if not path.exists():
        return None
    return {r["text_key"]: r["d"] for r in json.loads(path.read_text())["items"]}


def pass_rates(full: ResponseMatrix, models: Sequence[str], item_ids: Sequence[str]) -> np.ndarray:
    """(J, I) pass rates k / n of ``models`` on ``item_ids`` (0.5 where a cell has no answers: nothing is known)."""
    sub = full.subset(models=list(models), items=list(item_ids))
    return np.where(sub.n_trials > 0, sub.n_correct / np.maximum(sub.n_trials, 1), 0.5)


def equal_labelling_counts(full: ResponseMatrix, models: Sequence[str], item_ids: Sequence[str]
                           ) -> tuple[np.ndarray, np.ndarray]:
    """(J, I) counts of unlimited equal labelling: each model answers each item N times (N = the largest count of a
    cell, ~1,100 here) with its real pass rate as the share right; cells nobody answered stay unasked.

    The panel labels a child with the same number of rollouts from every model, and the benchmark's own items were
    measured so too (thinned to the same count per cell), so this is the limit a child's placement tends to. The
    matrix's own counts are not: they differ by model (MATH-500's 12 scale models: 8 to 1,100 rollouts), and a real
    item that is not exactly a 1PL item has a different place under a different weighting of the models. Measured
    (MATH-500's held-out items placed as children in groups of 16, 128 replayed rollouts per model): against a
    truth placed from the matrix's counts
    the 90 % intervals covered 70-77 % of true difficulties (6 replicates; z-scores of SD 3.9), against this one 97 %."""
    sub = full.subset(models=list(models), items=list(item_ids))
    n = np.where(sub.n_trials > 0, int(sub.n_trials.max(initial=0)), 0).astype(np.int64)
    k = np.rint(pass_rates(full, models, item_ids) * n).astype(np.int64)
    return k, n


def build_world(full: ResponseMatrix, items_by_id: Mapping[str, Item], pool_ids: Sequence[str], scale: Any,
                sim: Any, seed: int) -> tuple[ReplayWorld, dict[str, Any]]:
    """The replay world for a run on ``scale`` and its truth (:func:`replay_truth`): every item's true b is its
    placement under unlimited equal labelling by the scale's models (:func:`equal_labelling_counts`)."""
    from benchfill.irt.placement import place_items

    models = list(scale.models)
    ids = [i for i in full.item_ids if i in items_by_id]
    k, n = equal_labelling_counts(full, models, ids)
    true_b = place_items(scale, k.T, n.T).b_mean
    items = [items_by_id[i] for i in ids]
    kwargs = {} if sim is None else dict(step=sim.step, noise=sim.noise, scatter=sim.scatter,
                                         invalid_rate=sim.invalid_rate)
    world = ReplayWorld(pass_rates(full, models, ids), models, items, true_b, pool_ids, seed=seed,
                        b_range=(scale.b_min, scale.b_max), **kwargs)
    return world, replay_truth(items, true_b, pool_ids, scale.normalise(true_b))
