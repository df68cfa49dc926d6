"""The metrics of designer evaluation, as pure functions: arrays and mappings in, frozen dataclasses out.

Shapes: D designers, J answerers, I_d core items of designer d. Count arrays are (J, I_d) ``n_correct`` /
``n_trials`` (rollouts; 0 trials = no gradable answer). Accuracies are shares in [0, 1]; IRT difficulties b are
logits (larger = harder); correlations are unitless.

- :func:`broken_rate` — non-core share of a suite (duplicates and failed calls are outside the suite).
- :func:`spec_alignment` — total variation distance between the quota targets and the realised labels, per axis.
- :func:`difficulty_summary` — mean IRT b on the joint scale, and 1 - mean correct.
- :func:`discrimination` — corrected item-rest point-biserial per item (Pearson over answerers of the item's
  pass rate with the answerer's pass rate on the designer's OTHER items), summarised.
- :func:`kendall_tau` — ranking preservation (answerer ranking on a suite vs on the seed benchmark).
- :func:`preference_tests` — self / family preference: difference in differences on the designer x answerer
  accuracy matrix, with item-bootstrap standard errors and a Bonferroni decision.
- :func:`preference_tests_logit` — the same on the logit scale, from the joint fit's disjoint interactions (self,
  family, and the family including self as their answer-weighted mean).
- :func:`self_ranking` — does a designer's suite rank its own model higher than the seed benchmark (else the joint
  fit's ability) does? Item-bootstrap interval and a one-sided bootstrap test.
- :func:`order_effect` — generation-order degradation: the linear change of the broken rate from the first to the
  last item of a designer's reply, with a bootstrap interval and a permutation test.
- :func:`correlation` — Spearman / Pearson across designers (designing vs answering ability; broken vs
  discrimination).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from benchfill.irt.checks import item_rest_correlations

OUTSIDE_SUITE = ("duplicate", "failed")


def _f(x: float | None) -> float | None:
    """JSON-safe float (NaN -> None)."""
    return None if x is None or not math.isfinite(float(x)) else float(x)


# ----------------------------------------------------------------------------------------------- validity


@dataclass(frozen=True)
class BrokenRate:
    """``rate`` = 1 - core / suite; ``by_status`` counts every record, including those outside the suite."""

    n_suite: int
    n_core: int
    rate: float
    by_status: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": _f(self.rate)}


def broken_rate(statuses: Iterable[str]) -> BrokenRate:
    """Non-core rate of one designer's records. ``clean`` is core; duplicates and failed calls are excluded."""
    counts = Counter(statuses)
    suite = sum(k for s, k in counts.items() if s not in OUTSIDE_SUITE)
    core = counts.get("clean", 0)
    return BrokenRate(suite, core, (1 - core / suite) if suite else float("nan"), dict(sorted(counts.items())))


# ----------------------------------------------------------------------------------------------- spec alignment


def total_variation(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """TVD = 1/2 sum |p - q| over the union of labels (both normalised first); 0 = identical, 1 = disjoint."""
    sp, sq = sum(p.values()), sum(q.values())
    if sp <= 0 or sq <= 0:
        return float("nan")
    keys = sorted(set(p) | set(q))  # a fixed order: a set's differs per process, and the sum's last bits with it
    return 0.5 * sum(abs(p.get(k, 0.0) / sp - q.get(k, 0.0) / sq) for k in keys)


@dataclass(frozen=True)
class AxisAlignment:
    axis: str
    tvd: float
    n: int
    target: dict[str, float]
    realized: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tvd": _f(self.tvd)}


def spec_alignment(targets: Mapping[str, Mapping[str, float]], labels: Mapping[str, Sequence[str]]
                   ) -> dict[str, AxisAlignment]:
    """Per axis, TVD between the target shares and the shares of the realised labels (off-list labels such as
    "unknown" or an invented category count fully against the designer)."""
    out = {}
    for axis, target in targets.items():
        seq = list(labels.get(axis, []))
        counts = Counter(seq)
        n = len(seq)
        realized = {k: v / n for k, v in sorted(counts.items())} if n else {}
        tv = total_variation(target, realized) if n else float("nan")
        out[axis] = AxisAlignment(axis, tv, n, dict(target), realized)
    return out


# ----------------------------------------------------------------------------------------------- difficulty


@dataclass(frozen=True)
class Difficulty:
    """``mean_b``/``sd_b``/``median_b``: IRT difficulty (logits, joint scale) of the core items;
    ``error_rate``: 1 - mean correct over all their graded answers; ``level_spearman``: Spearman of the
    declared level (L1-L5) with b (does the designer know what is hard?)."""

    n_items: int
    mean_b: float
    sd_b: float
    median_b: float
    error_rate: float
    level_spearman: float

    def as_dict(self) -> dict[str, Any]:
        return {k: (_f(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def difficulty_summary(b: np.ndarray, n_correct: np.ndarray, n_trials: np.ndarray,
                       levels: Sequence[str] | None = None) -> Difficulty:
    """b: (I,) difficulties of one designer's core items (NaN: not on the scale, left out); counts (J, I);
    levels: (I,) declared levels."""
    b = np.asarray(b, float)
    keep = np.isfinite(b)  # an item without a single gradable answer has no place on the scale
    if levels is not None:
        levels = [lv for lv, k in zip(levels, keep) if k]
    b = b[keep]
    total = n_trials.sum()
    err = 1.0 - n_correct.sum() / total if total else float("nan")
    rho = float("nan")
    if levels is not None and len(b) >= 3:
        lv = np.array([int(s[1]) if isinstance(s, str) and len(s) == 2 and s[0] == "L" and s[1].isdigit() else np.nan
                       for s in levels], float)
        rho = correlation(lv, b, "spearman").r
    if len(b) == 0:
        return Difficulty(0, float("nan"), float("nan"), float("nan"), err, rho)
    return Difficulty(len(b), float(b.mean()), float(b.std(ddof=1)) if len(b) > 1 else 0.0, float(np.median(b)),
                      float(err), rho)


# ----------------------------------------------------------------------------------------------- discrimination


@dataclass(frozen=True)
class Discrimination:
    """``mean``/``median`` over items whose point-biserial is defined; ``mean_all`` counts undefined items (no
    variance across answerers: everyone right or everyone wrong) as 0; ``n_defined`` of ``n_items``."""

    mean: float
    median: float
    mean_all: float
    n_defined: int
    n_items: int
    share_negative: float

    def as_dict(self) -> dict[str, Any]:
        return {k: (_f(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def item_discrimination(n_correct: np.ndarray, n_trials: np.ndarray) -> np.ndarray:
    """(I,) corrected item-rest point-biserial over answerers (NaN where undefined); counts (J, I)."""
    if n_correct.shape[1] < 2:
        return np.full(n_correct.shape[1], np.nan)
    return item_rest_correlations(np.asarray(n_correct), np.asarray(n_trials))


def discrimination(n_correct: np.ndarray, n_trials: np.ndarray) -> Discrimination:
    r = item_discrimination(n_correct, n_trials)
    ok = np.isfinite(r)
    n = len(r)
    if not ok.any():
        return Discrimination(float("nan"), float("nan"), float("nan"), 0, n, float("nan"))
    return Discrimination(float(r[ok].mean()), float(np.median(r[ok])), float(np.where(ok, r, 0.0).mean()),
                          int(ok.sum()), n, float((r[ok] <= 0).mean()))


# ----------------------------------------------------------------------------------------------- correlations


@dataclass(frozen=True)
class Correlation:
    method: str
    r: float
    p_value: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "r": _f(self.r), "p_value": _f(self.p_value), "n": self.n}


def correlation(x: ArrayLike, y: ArrayLike, method: Literal["spearman", "pearson", "kendall"] = "spearman"
                ) -> Correlation:
    """Correlation over the pairs where both are finite; NaN with fewer than 3 pairs or a constant side."""
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(xs) & np.isfinite(ys)
    n = int(ok.sum())
    if n < 3 or np.ptp(xs[ok]) == 0 or np.ptp(ys[ok]) == 0:
        return Correlation(method, float("nan"), float("nan"), n)
    fn = {"spearman": stats.spearmanr, "pearson": stats.pearsonr, "kendall": stats.kendalltau}[method]
    res = fn(xs[ok], ys[ok])
    return Correlation(method, float(res[0]), float(res[1]), n)


def kendall_tau(suite_accuracy: ArrayLike, seed_accuracy: ArrayLike) -> Correlation:
    """Ranking preservation: Kendall tau-b between answerers' accuracies on a suite and on the seed benchmark
    (1 = same ranking, -1 = reversed). Needs >= 3 answerers with both figures."""
    return correlation(suite_accuracy, seed_accuracy, "kendall")


def percentile_ranks(values: Sequence[float], higher_is_better: bool = True) -> np.ndarray:
    """Ranks scaled to [0, 1] (average ranks for ties; NaN stays NaN; one value -> 0.5)."""
    v = np.asarray(values, float)
    out = np.full(v.shape, np.nan)
    ok = np.isfinite(v)
    if ok.sum() == 1:
        out[ok] = 0.5
    elif ok.sum() > 1:
        r = stats.rankdata(v[ok] if higher_is_better else -v[ok])
        out[ok] = (r - 1) / (ok.sum() - 1)
    return out


# ----------------------------------------------------------------------------------------------- preference


def accuracy_matrix(counts: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """(D, J) accuracy of each answerer on each designer's items: sum correct / sum trials (NaN: no trials)."""
    rows = []
    for c, t in counts:
        tot = t.sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            rows.append(np.where(tot > 0, c.sum(1) / np.maximum(tot, 1), np.nan))
    return np.array(rows, float)


def did_self(A: np.ndarray, d: int, a: int, reference: Sequence[int] | None = None) -> np.ndarray:
    """Self-preference of designer ``d`` for its own answerer ``a`` on matrices A (..., D, J):
    (A[d,a] - mean_{d' != d} A[d',a]) - mean_{a' in reference} (A[d,a'] - mean_{d' != d} A[d',a']);
    ``reference``: the answerers compared against (default: every other answerer)."""
    others_d = [k for k in range(A.shape[-2]) if k != d]
    others_a = list(reference) if reference is not None else [k for k in range(A.shape[-1]) if k != a]
    gain = A[..., d, :] - np.nanmean(A[..., others_d, :], axis=-2)  # (..., J): how much easier d's items are
    return gain[..., a] - np.nanmean(gain[..., others_a], axis=-1)


def did_family(A: np.ndarray, d: int, in_group: Sequence[int], out_group: Sequence[int], control: Sequence[int]
               ) -> np.ndarray:
    """Family preference of designer ``d``: in-family answerers' gain on d's items (vs the control designers of
    other families) minus out-of-family answerers' gain; A (..., D, J)."""
    gain = A[..., d, :] - np.nanmean(A[..., list(control), :], axis=-2)
    return np.nanmean(gain[..., list(in_group)], axis=-1) - np.nanmean(gain[..., list(out_group)], axis=-1)


@dataclass(frozen=True)
class Preference:
    """One preference test. ``estimate``: difference in differences (accuracy points as a share, e.g. 0.12);
    ``se``: item-bootstrap standard error; ``ci_low``/``ci_high``: the normal (1 - alpha) interval;
    ``p_value``: two-sided normal p; ``detected``: p below alpha / number of tests (Bonferroni).
    ``kind``: ``self`` (the own answerer), ``family`` (the family's other answerers), ``family_incl_self`` (both,
    logit scale only); each relative to the answerers outside the family."""

    kind: Literal["self", "family", "family_incl_self"]
    designer: str
    family: str
    answerers: list[str]
    controls: list[str]
    estimate: float
    se: float
    ci_low: float
    ci_high: float
    p_value: float
    detected: bool
    n_tests: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {k: (_f(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass
class PreferenceInputs:
    """What the preference tests need: per designer (J, I_d) counts, names and families (from config only)."""

    designers: list[str]
    answerers: list[str]
    counts: list[tuple[np.ndarray, np.ndarray]]
    designer_family: dict[str, str]
    answerer_family: dict[str, str]
    self_answerer: dict[str, str | None] = field(default_factory=dict)


def bootstrap_matrices(counts: Sequence[tuple[np.ndarray, np.ndarray]], B: int, seed: int) -> np.ndarray:
    """(B, D, J) accuracy matrices, items resampled with replacement within each designer."""
    rng = np.random.default_rng(seed)
    out = np.full((B, len(counts), counts[0][0].shape[0] if counts else 0), np.nan)
    for d, (c, t) in enumerate(counts):
        n = c.shape[1]
        if n == 0:
            continue
        idx = rng.integers(0, n, size=(B, n))
        cs = c[:, idx].sum(-1).T  # (B, J)
        ts = t[:, idx].sum(-1).T
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, d, :] = np.where(ts > 0, cs / np.maximum(ts, 1), np.nan)
    return out


def preference_tests(inp: PreferenceInputs, *, B: int = 1000, alpha: float = 0.05, seed: int = 0) -> list[Preference]:
    """Self-preference for every designer with its own answerer on the panel (against the out-of-family answerers,
    as the logit test), and family preference for every designer with answerers of its family (the self answerer
    excluded: that is self-preference) and answerers and control designers of other families. Bonferroni over all
    tests run."""
    D, J = len(inp.designers), len(inp.answerers)
    if D < 2 or J < 2:
        return []
    with warnings.catch_warnings():
        # a designer without core items has a NaN row: its tests come out NaN ("not testable"), not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        return _preference_tests(inp, B, alpha, seed)


def _preference_tests(inp: PreferenceInputs, B: int, alpha: float, seed: int) -> list[Preference]:
    A = accuracy_matrix(inp.counts)
    boot = bootstrap_matrices(inp.counts, B, seed)
    jpos = {a: j for j, a in enumerate(inp.answerers)}
    raw: list[tuple[str, str, list[str], list[str], float, float]] = []
    for d, name in enumerate(inp.designers):
        fam = inp.designer_family[name]
        own = inp.self_answerer.get(name)
        in_group = [j for j, a in enumerate(inp.answerers) if inp.answerer_family[a] == fam and a != own]
        out_group = [j for j, a in enumerate(inp.answerers) if inp.answerer_family[a] != fam and a != own]
        if own is not None and own in jpos:
            a = jpos[own]
            # against the out-of-family answerers, as the logit test (a kin answerer's own bonus would cancel it)
            ref = out_group or None
            est = float(did_self(A, d, a, ref))
            se = float(np.nanstd(did_self(boot, d, a, ref), ddof=1))
            raw.append(("self", name, [own], [n for k, n in enumerate(inp.designers) if k != d], est, se))
        control = [k for k, other in enumerate(inp.designers) if k != d and inp.designer_family[other] != fam]
        if in_group and out_group and control:
            est = float(did_family(A, d, in_group, out_group, control))
            se = float(np.nanstd(did_family(boot, d, in_group, out_group, control), ddof=1))
            raw.append(("family", name, [inp.answerers[j] for j in in_group],
                        [inp.designers[k] for k in control], est, se))
    return _wald_tests([(k, n, inp.designer_family[n], who, ctl, est, se) for k, n, who, ctl, est, se in raw], alpha)


def _wald_tests(raw: Sequence[tuple[str, str, str, list[str], list[str], float, float]], alpha: float
                ) -> list[Preference]:
    """(kind, designer, family, answerers, controls, estimate, se) rows -> Preference: two-sided normal p, normal
    (1 - alpha) interval, detected = p < alpha / the number of testable rows (Bonferroni over every row)."""
    m = sum(1 for r in raw if math.isfinite(r[5]) and math.isfinite(r[6]) and r[6] > 0)
    z_ci = stats.norm.ppf(1 - alpha / 2)
    out = []
    for kind, name, fam, who, controls, est, se in raw:
        if math.isfinite(est) and math.isfinite(se) and se > 0:
            p = float(2 * stats.norm.sf(abs(est / se)))
            lo, hi = est - z_ci * se, est + z_ci * se
            detected = p < alpha / max(m, 1)
        else:
            p, lo, hi, detected = float("nan"), float("nan"), float("nan"), False
        out.append(Preference(kind, name, fam, who, controls, float(est), float(se),  # type: ignore[arg-type]
                              float(lo), float(hi), p, bool(detected), m))
    return out


# ----------------------------------------------------------------------------------------------- logit scale


@dataclass
class JointInputs:
    """Everything the joint item-level fit needs, per designer: (J, I_d) counts, declared levels (1-5 or None) and
    guessing c (I_d,); optionally the seed benchmark's items as one more group (``seed``)."""

    designers: list[str]
    answerers: list[str]
    counts: list[tuple[np.ndarray, np.ndarray]]
    levels: list[list[float | None]]
    guessing: list[np.ndarray]
    designer_family: dict[str, str]
    answerer_family: dict[str, str]
    self_answerer: dict[str, str | None] = field(default_factory=dict)
    seed_counts: tuple[np.ndarray, np.ndarray] | None = None
    seed_levels: list[float | None] | None = None
    seed_guessing: np.ndarray | None = None


def interaction_masks(inp: JointInputs) -> tuple[dict[str, np.ndarray], list[tuple[str, str, list[str]]]]:
    """The (J, I) 0/1 designs of the preference interactions, and (kind, designer, answerers) per term.

    The masks of one designer are disjoint, so each coefficient is relative to the same reference (d's items x the
    answerers with no term of d) and neither takes a share of the other's effect:

    - ``self:<d>`` = d's own answerer on d's items (when it is on the panel);
    - ``family:<d>`` = the OTHER answerers of d's family (own answerer excluded) on d's items, when there is one and
      the panel has an answerer outside the family (the reference).

    So both are relative to the out-of-family answerers; where d has no family term, self is relative to every other
    answerer (all outside the family unless the panel has no outsider)."""
    J = len(inp.answerers)
    sizes = [c.shape[1] for c, _ in inp.counts] + ([inp.seed_counts[0].shape[1]] if inp.seed_counts else [])
    offsets = np.r_[0, np.cumsum(sizes)]
    total = int(offsets[-1])
    masks: dict[str, np.ndarray] = {}
    terms: list[tuple[str, str, list[str]]] = []
    for d, name in enumerate(inp.designers):
        lo, hi = offsets[d], offsets[d + 1]
        if hi == lo:
            continue
        fam = inp.designer_family[name]
        own = inp.self_answerer.get(name)
        others = [j for j, a in enumerate(inp.answerers) if inp.answerer_family.get(a) == fam and a != own]
        outside = [j for j, a in enumerate(inp.answerers) if inp.answerer_family.get(a) != fam and a != own]
        if own is not None and own in inp.answerers:
            m = np.zeros((J, total))
            m[inp.answerers.index(own), lo:hi] = 1.0
            masks[f"self:{name}"] = m
            terms.append(("self", name, [own]))
        if others and outside:
            m = np.zeros((J, total))
            m[others, lo:hi] = 1.0
            masks[f"family:{name}"] = m
            terms.append(("family", name, [inp.answerers[j] for j in others]))
    return masks, terms


def joint_fit(inp: JointInputs, *, with_interactions: bool = True, slopes: bool = True):
    """The joint item-level fit (:func:`benchfill.designers.joint.fit_joint`) of every designer's core items (and
    the seed items) with designer-level difficulty, calibration slope and the preference interactions."""
    from benchfill.designers.joint import fit_joint

    cs = [c for c, _ in inp.counts]
    ts = [t for _, t in inp.counts]
    groups = [name for name, (c, _) in zip(inp.designers, inp.counts) for _ in range(c.shape[1])]
    levels = [lv for lvs in inp.levels for lv in lvs]
    guess = list(inp.guessing)
    if inp.seed_counts is not None and inp.seed_counts[0].shape[1]:
        cs.append(inp.seed_counts[0])
        ts.append(inp.seed_counts[1])
        k = inp.seed_counts[0].shape[1]
        groups += ["seed"] * k
        levels += list(inp.seed_levels) if inp.seed_levels is not None else [None] * k
        guess.append(inp.seed_guessing if inp.seed_guessing is not None else np.zeros(k))
    c = np.concatenate(cs, axis=1)
    t = np.concatenate(ts, axis=1)
    masks, _ = interaction_masks(inp) if with_interactions else ({}, [])
    return fit_joint(c, t, groups, levels=levels, guessing=np.concatenate(guess) if guess else None,
                     interactions=masks, answerers=inp.answerers, slopes=slopes)


def preference_tests_logit(inp: JointInputs, fit: Any, *, alpha: float = 0.05, combined: bool = True
                           ) -> list[Preference]:
    """Self / family preference on the logit scale from the joint fit: Wald z of each interaction (observed-
    information SE), Bonferroni over every row returned. ``estimate`` is in logits, relative to the out-of-family
    answerers on the same items, adjusted for every answerer's ability and every item's difficulty (see
    :func:`interaction_masks`); ``controls`` lists the other designers.

    With ``combined``, a designer with both a self and a family term gets a third row, ``family_incl_self``: the
    family's answerers own model included against the outsiders, i.e. the mean of the two coefficients weighted by
    the answerers they cover (1 and n_others: every answerer answers the same items, so this is the mean over the
    family's answer cells), with its SE from the fit's covariance. It is a fixed linear combination of one fit, not
    a refit with a pooled term: a pooled term would weight the answerers by their information (near-ceiling
    answerers count less), so its estimand would move with the panel's abilities."""
    _, terms = interaction_masks(inp)
    keys = list(fit.gamma)
    raw: list[tuple[str, str, str, list[str], list[str], float, float]] = []
    for kind, name, who in terms:
        fam, controls = inp.designer_family[name], [o for o in inp.designers if o != name]
        raw.append((kind, name, fam, who, controls, fit.gamma[f"{kind}:{name}"], fit.gamma_se[f"{kind}:{name}"]))
        if combined and kind == "family" and f"self:{name}" in fit.gamma:
            own = inp.self_answerer[name]
            assert own is not None  # a self term exists only for a designer whose own answerer is on the panel
            idx = [keys.index(f"self:{name}"), keys.index(f"family:{name}")]
            w = np.array([1.0, len(who)]) / (1 + len(who))
            est = float(w @ np.array([fit.gamma[keys[i]] for i in idx]))
            var = float(w @ fit.gamma_cov[np.ix_(idx, idx)] @ w)
            raw.append(("family_incl_self", name, fam, [own, *who], controls, est, math.sqrt(max(var, 0.0))))
    return _wald_tests(raw, alpha)


# ----------------------------------------------------------------------------------------------- self-ranking


@dataclass(frozen=True)
class SelfRanking:
    """Does designer d's suite rank its own model higher than a reference does? Ranks among the panel's answerers
    (1 = best; ties share their mean rank).

    Attributes:
        rank: the own answerer's rank by accuracy on d's core items; ``rank_ci`` its item-bootstrap (1 - alpha)
            percentile interval (d's items resampled).
        seed_rank: its rank by accuracy on the seed benchmark (None without seed accuracies).
        ability_rank: its rank by the joint fit's ability theta (every designer's items and the seed, each
            designer's self / family interactions taken out; None without a fit).
        others_rank: its rank by accuracy on the other designers' core items pooled (descriptive only: a designer
            that favours its own model lifts that model there, which moves everyone else's rank).
        reference: ``seed`` where there is a seed rank, else ``ability``; ``gain`` = reference rank - rank (> 0: d's
            suite lifts its creator), ``gain_ci`` its interval. The reference is held fixed: the interval is the
            sampling error of d's items only.
        p_value: one-sided bootstrap p of no gain, (1 + replicates with gain <= 0) / (1 + replicates); a model
            already first on the reference has no room to gain (p = 1). ``detected``: p below alpha / ``n_tests``
            (Bonferroni over the designers tested).
    """

    designer: str
    answerer: str
    n_items: int
    n_answerers: int
    rank: float
    rank_ci: tuple[float | None, float | None]
    seed_rank: float | None
    ability_rank: float | None
    others_rank: float | None
    reference: Literal["seed", "ability"] | None
    gain: float | None
    gain_ci: tuple[float | None, float | None]
    p_value: float
    detected: bool = False
    n_tests: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {**{k: (_f(v) if isinstance(v, float) else v) for k, v in asdict(self).items()},
                "rank_ci": [_f(x) for x in self.rank_ci], "gain_ci": [_f(x) for x in self.gain_ci]}


def rank_of(values: ArrayLike, j: int) -> float:
    """Rank of answerer ``j`` among the answerers with a finite value (1 = highest, ties averaged; NaN if its own
    value is not finite)."""
    v = np.asarray(values, float)
    ok = np.isfinite(v)
    if not ok[j]:
        return float("nan")
    return float(stats.rankdata(-v[ok])[int(ok[:j].sum())])


def _rank_on(c: np.ndarray, t: np.ndarray, j: int):
    """idx -> the rank of answerer j by accuracy on the items idx of (J, I) counts (a bootstrap statistic)."""
    return lambda idx: rank_of(accuracy_matrix([(c[:, idx], t[:, idx])])[0], j)


def self_ranking(inp: PreferenceInputs, seed_accuracy: Mapping[str, float | None] | None = None,
                 ability: Mapping[str, float] | None = None, *, B: int = 1000, seed: int = 0, alpha: float = 0.05
                 ) -> list[SelfRanking]:
    """The self-ranking test for every designer whose own answerer is on the panel (see :class:`SelfRanking`).

    Args:
        seed_accuracy: answerer -> accuracy on the seed benchmark (the preferred reference).
        ability: answerer -> the joint fit's theta (the reference without a seed rank)."""

    def per_answerer(m: Mapping[str, float | None] | None) -> np.ndarray | None:
        return None if not m else np.array([np.nan if (v := m.get(a)) is None else float(v) for a in inp.answerers])

    A = accuracy_matrix(inp.counts)
    sa, ab = per_answerer(seed_accuracy), per_answerer(ability)
    raw = []
    for d, name in enumerate(inp.designers):
        own = inp.self_answerer.get(name)
        if own is None or own not in inp.answerers:
            continue
        j = inp.answerers.index(own)
        c, t = inp.counts[d]
        others = [k for k in range(len(inp.designers)) if k != d and inp.counts[k][0].shape[1]]
        pooled = [(np.concatenate([inp.counts[k][0] for k in others], 1),
                   np.concatenate([inp.counts[k][1] for k in others], 1))] if others else []
        others_rank = _f(rank_of(accuracy_matrix(pooled)[0], j)) if pooled else None
        seed_rank = _f(rank_of(sa, j)) if sa is not None else None
        ability_rank = _f(rank_of(ab, j)) if ab is not None else None
        ref, ref_name = ((seed_rank, "seed") if seed_rank is not None else
                         (ability_rank, "ability") if ability_rank is not None else (None, None))
        rank = rank_of(A[d], j)
        reps = bootstrap_replicates(c.shape[1], _rank_on(c, t, j), B=B, seed=seed + d)
        lo, hi = _percentile_interval(reps, B, alpha)
        gain: float | None = None
        gain_ci: tuple[float | None, float | None] = (None, None)
        p = float("nan")
        if ref is not None and math.isfinite(rank):
            gain = ref - rank
            gain_ci = (None, None) if lo is None or hi is None else (ref - hi, ref - lo)
            if len(reps):
                p = float((1 + np.sum(ref - reps <= 0)) / (1 + len(reps)))
        raw.append(SelfRanking(name, own, int(c.shape[1]), int(np.isfinite(A[d]).sum()), rank, (lo, hi), seed_rank,
                               ability_rank, others_rank, ref_name, gain, gain_ci, p))  # type: ignore[arg-type]
    m = sum(math.isfinite(r.p_value) for r in raw)
    return [replace(r, detected=bool(math.isfinite(r.p_value) and r.p_value < alpha / max(m, 1)), n_tests=max(m, 1))
            for r in raw]


# ----------------------------------------------------------------------------------------------- calibration


def _level_num(s: Any) -> float | None:
    if isinstance(s, str) and len(s) == 2 and s[0] == "L" and s[1] in "12345":
        return float(s[1])
    if isinstance(s, (int, float)) and 1 <= s <= 5:
        return float(s)
    return None


@dataclass(frozen=True)
class Calibration:
    """Does the requested level L1-L5 predict the realised difficulty? ``spearman`` of declared level vs item b;
    ``slope`` (logits per level, from the joint fit's designer-level regression, with ``slope_se``);
    ``by_level``: {level: {n, mean_b, seed_mean_b, shift}}; ``mean_shift``: the mean over levels of (designer's
    mean b - the seed benchmark's mean b at that level); ``error``: the mean absolute shift (logits; None without a
    seed reference per level)."""

    spearman: float
    slope: float | None
    slope_se: float | None
    by_level: dict[str, dict[str, Any]]
    mean_shift: float | None
    error: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"spearman": _f(self.spearman), "slope": _f(self.slope), "slope_se": _f(self.slope_se),
                "by_level": self.by_level, "mean_shift": _f(self.mean_shift), "error": _f(self.error)}


def calibration(b: np.ndarray, levels: Sequence[Any], seed_by_level: Mapping[str, float] | None = None, *,
                slope: float | None = None, slope_se: float | None = None) -> Calibration:
    """b (I,) on the joint scale, levels (I,) declared ("L1".."L5"); seed_by_level: the seed items' mean b per
    level on the same scale."""
    b = np.asarray(b, float)
    lv = np.array([np.nan if _level_num(s) is None else _level_num(s) for s in levels], float)
    rho = correlation(lv, b, "spearman").r
    by, shifts = {}, []
    for L in range(1, 6):
        sel = (lv == L) & np.isfinite(b)
        if not sel.any():
            continue
        key = f"L{L}"
        mb = float(b[sel].mean())
        ref = seed_by_level.get(key) if seed_by_level else None
        shift = mb - ref if ref is not None else None
        if shift is not None:
            shifts.append(shift)
        by[key] = {"n": int(sel.sum()), "mean_b": mb, "seed_mean_b": _f(ref), "shift": _f(shift)}
    return Calibration(rho, slope, slope_se, by, float(np.mean(shifts)) if shifts else None,
                       float(np.mean(np.abs(shifts))) if shifts else None)


# ----------------------------------------------------------------------------------------------- generation order


@dataclass(frozen=True)
class OrderEffect:
    """Generation-order degradation of one designer.

    Attributes:
        n: suite items with a known place in a reply of at least two items.
        slope: the least-squares line of "broken" (0/1) on the relative position r in [0, 1] (0 = first item of
            the reply, 1 = last): the change of the broken rate from the first to the last item (a share; > 0 =
            quality falls the later an item is written).
        ci: seeded bootstrap-over-items (1 - alpha) percentile interval of ``slope``.
        p_value: two-sided permutation test of no order effect (positions shuffled against the outcomes).
        by_third: broken rate of the first, middle and last third of the replies (r < 1/3, <= 2/3, above).
    """

    n: int
    slope: float
    ci: tuple[float | None, float | None]
    p_value: float
    by_third: dict[str, dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "slope": _f(self.slope), "ci": [_f(self.ci[0]), _f(self.ci[1])],
                "p_value": _f(self.p_value), "by_third": self.by_third,
                "basis": "broken (0/1) on the item's place in its reply, 0 = first written, 1 = last"}


def _ols_slope(x: np.ndarray, y: np.ndarray) -> float:
    vx = float(np.var(x))
    return float(np.mean((x - x.mean()) * (y - y.mean())) / vx) if vx > 0 else float("nan")


def order_effect(position: Sequence[float], broken: Sequence[bool], *, B: int = 1000, seed: int = 0,
                 alpha: float = 0.05) -> OrderEffect:
    """Does a designer's quality fall with the item's place in its generation order?

    Args:
        position: each suite item's relative place in its reply (0 = first written, 1 = last).
        broken: whether the item is outside the core set.
    """
    r = np.asarray(position, float)
    y = np.asarray(broken, float)
    keep = np.isfinite(r)
    r, y = r[keep], y[keep]
    n = len(r)
    slope = _ols_slope(r, y) if n >= 3 else float("nan")
    ci = bootstrap_interval(n, lambda i: _ols_slope(r[i], y[i]), B=B, seed=seed, alpha=alpha) if n >= 3 \
        else (None, None)
    p = float("nan")
    if n >= 3 and math.isfinite(slope):
        rng = np.random.default_rng(seed + 1)
        null = np.array([_ols_slope(rng.permutation(r), y) for _ in range(B)])
        p = float((1 + np.sum(np.abs(null) >= abs(slope) - 1e-12)) / (B + 1))
    thirds = {}
    for name, sel in (("first", r < 1 / 3), ("middle", (r >= 1 / 3) & (r <= 2 / 3)), ("last", r > 2 / 3)):
        thirds[name] = {"n": int(sel.sum()), "broken_rate": _f(float(y[sel].mean())) if sel.any() else None}
    return OrderEffect(n, slope, ci, p, thirds)


# ----------------------------------------------------------------------------------------------- bootstrap


def bootstrap_interval(n: int, stat, *, B: int = 1000, seed: int = 0, alpha: float = 0.05
                       ) -> tuple[float | None, float | None]:
    """Percentile (1 - alpha) interval of ``stat(idx)`` over B resamples of range(n) with replacement (seeded);
    (None, None) when n < 2 or every replicate is undefined."""
    return _percentile_interval(bootstrap_replicates(n, stat, B=B, seed=seed), B, alpha)


def _percentile_interval(vals: np.ndarray, B: int, alpha: float) -> tuple[float | None, float | None]:
    """The (1 - alpha) percentile interval of bootstrap replicates; (None, None) when fewer than a tenth of the B
    replicates (at least 10) are defined."""
    if len(vals) < max(10, B // 10):
        return None, None
    return float(np.quantile(vals, alpha / 2)), float(np.quantile(vals, 1 - alpha / 2))


def bootstrap_replicates(n: int, stat, *, B: int = 1000, seed: int = 0) -> np.ndarray:
    """The finite values of ``stat(idx)`` over B seeded resamples of range(n) (empty when n < 2)."""
    if n < 2:
        return np.array([])
    rng = np.random.default_rng(seed)
    vals = np.array([stat(rng.integers(0, n, n)) for _ in range(B)], float)
    return vals[np.isfinite(vals)]
