"""What a verdict or a failed check means, and what to do next: one line each (the diagnosis' ``advice``).

Pure functions of the diagnosis' parts; the report assembles them and the terminal prints them after the warnings.
"""

from __future__ import annotations

from typing import Mapping, Sequence

# one line per check that failed: what it says about the figures, and the next step
CHECK_ADVICE = {
    "M1": "M1 failed: the chains disagree (R-hat), so the posterior summaries are not yet reliable; rerun with more "
          "--draws and --tune",
    "M2": "M2 failed: too few effective draws, so the intervals are noisy; rerun with more --draws",
    "M3": "M3 failed: the sampler diverged, so the posterior may be biased; rerun with --sampler fast (exact) or a "
          "higher target acceptance",
    "M4": "M4 failed: the fast engine's proposal fits the abilities' posterior poorly; the draws stay exact (it "
          "falls back to NUTS where needed), so act only if M1 or M2 fail too",
    "R1": "R1 failed: invalid counts, or items answered by fewer than 2 models or models answering fewer than 10 "
          "items (the check's details name them): such items are placed by one model, such models placed by a "
          "handful of answers; add answers or leave them out",
    "R2": "R2 failed: many items are solved by every model or by none; their b is bounded on one side only and the "
          "axis' ends rest on them: add stronger (or weaker) models",
    "R3": "R3 failed: some items' correctness does not rise with ability (misfit): check their gold answers and "
          "grading first; a 1PL cannot place such items well",
    "R4": "R4 failed: the 1PL predicts some models or items poorly; compare --robustness (1PL vs 2PL BIC) and, for "
          "multiple choice, --guessing (or --items with choices)",
}

METRIC_NAMES = {"ddm": "DDM", "max_gap": "max gap", "top5_sum": "Top-5 gap sum"}


def check_advice(failed: Sequence[str]) -> list[str]:
    """The advice line of each failed check, in the order given (names without advice are skipped)."""
    return [CHECK_ADVICE[name] for name in failed if name in CHECK_ADVICE]


def verdict_advice(verdicts: Mapping[str, str], thresholds: Mapping[str, float],
                   intervals: Mapping[str, tuple[float, float]] | None, top_gap_beyond_reach: bool) -> list[str]:
    """One line per metric whose verdict is not plainly ``ok``.

    Args:
        verdicts: metric -> ``flag`` / ``at floor`` / ``ok``.
        thresholds: metric -> the paper's flag threshold.
        intervals: metric -> its 90 % posterior interval (None: a MAP preview, no interval).
        top_gap_beyond_reach: the largest gap ends at items solved by no model or by every model.
    """
    out = []
    for key, verdict in verdicts.items():
        name, threshold = METRIC_NAMES.get(key, key), thresholds[key]
        lo, hi = intervals[key] if intervals and key in intervals else (None, None)
        straddles = lo is not None and hi is not None and lo < threshold <= hi
        if verdict == "flag":
            if key == "max_gap" and top_gap_beyond_reach:
                out.append(f"{name} flag: the largest gap ends at items no model solved (or every model did); "
                           f"stronger (or weaker) models would place them, and may close it")
            elif key == "ddm":
                out.append(f"{name} flag: the difficulties are far from uniform; `benchfill calibrate` prunes "
                           f"toward a target, `benchfill fill` adds items where they are missing")
            else:
                out.append(f"{name} flag: the benchmark has holes a hole-free benchmark of this design would not "
                           f"show; `benchfill fill` targets the gaps listed")
            if straddles:
                out.append(f"{name} flag is borderline: its 90 % interval [{lo:.3f}, {hi:.3f}] contains the "
                           f"threshold {threshold:g}; more rollouts or models would settle it")
        elif verdict == "at floor":
            out.append(f"{name} at floor: it reaches the threshold {threshold:g}, but so do hole-free benchmarks "
                       f"answered like this one; more rollouts or models would tell them apart")
        elif straddles:
            out.append(f"{name} ok, but borderline: its 90 % interval [{lo:.3f}, {hi:.3f}] contains the threshold "
                       f"{threshold:g}")
    return out


def _verdict_list(verdicts: Mapping[str, str]) -> str:
    return ", ".join(f"{METRIC_NAMES.get(k, k)} {v}" for k, v in verdicts.items())


def guessing_advice(c: float, delta: float, se: float, n_items: int, clear: bool, verdicts: Mapping[str, str],
                    verdicts_no_guessing: Mapping[str, str]) -> str:
    """The line saying which of c (the fit shown) and c = 0 the counts favour, and what the verdicts are under each.

    Args:
        c: the guessing rate of the fit shown.  delta, se: elpd(c) - elpd(c = 0) and its standard error, nats.
        n_items: items compared.  clear: the difference is large enough to act on.
        verdicts, verdicts_no_guessing: metric -> verdict under c and under c = 0.
    """
    fig = f"Δelpd = {delta:+.1f} ± {se:.1f} nats over {n_items} items, leave-one-item-out"
    same = dict(verdicts) == dict(verdicts_no_guessing)
    under = ("the verdicts are the same under both" if same else
             f"under c = {c:g} (above): {_verdict_list(verdicts)}; under c = 0: {_verdict_list(verdicts_no_guessing)}")
    if not clear:
        return (f"guessing c = {c:g} and c = 0 fit the counts about equally well ({fig}); {under}"
                + ("" if same else ": the verdicts that differ depend on the guessing rate, which these data "
                                   "cannot settle"))
    if delta > 0:
        return (f"the counts favour guessing c = {c:g} over c = 0 ({fig}): the figures above are the better "
                f"model's; {under}")
    return (f"the counts favour c = 0 (no guessing) over c = {c:g} ({fig}): rerun with --guessing 0 for the better "
            f"model's figures; {under}")
