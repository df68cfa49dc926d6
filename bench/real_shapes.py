"""Truths from real benchmark shapes: does the diagnosis cover the true DDM, max gap and Top-5 sum?

Each shape's truth is an independent joint 1PL MAP (numpy + scipy, weak priors, tests/real_shapes.py) of the
full-rollout (~1,100 per cell) 12-model matrix in ../shared/data/real; benchmarks drawn from it at the paper's
rollouts (MATH-500 8, HumanEval+ 4, AIME 32) are diagnosed with ``benchfill.api.diagnose`` and the 90 % intervals,
posterior means, plug-ins and flags are compared with the truth. ``--thin`` instead diagnoses MATH-500's real data
in full and thinned to 4 rollouts per cell (without replacement) and compares the two; ``--thin-sim N`` does the
same on N matrices drawn from MATH-500's truth (1PL, or ``--truth 2pl``: an independent 2PL MAP) at the real
rollouts per cell, where the truth is known: the rates a posterior that is right about the data shows.

    python bench/real_shapes.py --shapes math500,humaneval,aime24 --replicates 10 --seed 0
    python bench/real_shapes.py --shapes humaneval --replicates 20 --prior paper   # a diagnose option
    python bench/real_shapes.py --thin --seeds 3
    python bench/real_shapes.py --thin-sim 12 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import real_shapes as R  # noqa: E402  (tests/real_shapes.py: the truth builder)

LABELS = {"ddm": "DDM", "max_gap": "max gap", "top5_sum": "Top-5"}


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def print_coverage(res: R.CoverageResult, wall: float) -> None:
    """One shape's table: truth, flags called for, mean posterior mean, mean plug-in, interval coverage, raised."""
    t = R.truth(res.shape)
    n = len(res.replicates)
    print(f"\n== {R.SHAPES[res.shape].label} ({res.shape}): {res.n_models} models x {res.n_items} items "
          f"({res.dropped} dropped: {t.dropped_all_correct} all-correct, {t.dropped_none_correct} none-correct), "
          f"{res.rollouts} rollouts, {n} replicates, b SD {t.b.std():.2f}, range [{t.b.min():.2f}, {t.b.max():.2f}]")
    print(f"{'metric':<8} {'truth':>7} {'called':>6} {'post mean':>9} {'plug-in':>8} {'90% width':>9} "
          f"{'coverage':>8} {'raised':>7}")
    for k in R.METRICS:
        print(f"{LABELS[k]:<8} {res.truth[k]:>7.3f} {_yes(res.called[k]):>6} {res.mean_posterior(k):>9.3f} "
              f"{res.mean_plug_in(k):>8.3f} {res.mean_width(k):>9.3f} {res.coverage(k):>8.0%} "
              f"{round(res.flag_rate(k) * n):>3d}/{n:<3d}")
    raised, called = res.called_raised()
    ws = res.wall_s
    print(f"flags the truth calls for raised: {raised}/{called}; unsolved items per draw: {res.mean_unsolved():.1f}; "
          f"diagnose {sum(ws) / n:.1f} s mean ({min(ws):.1f}-{max(ws):.1f}), shape total {wall:.0f} s")


def print_thin(res: R.ThinResult) -> None:
    """The full real matrix against its thinned copies."""
    print(f"\n== real {R.SHAPES[res.shape].label}: {res.n_models} models x {res.n_items} items, full rollouts vs "
          f"thinned to {res.rollouts} (without replacement), {len(res.runs)} seeds"
          + (", degenerate items left out" if res.drop_degenerate else ""))
    print(f"full data ({res.full_wall_s:.0f} s):")
    for k in R.METRICS:
        print(f"  {LABELS[k]:<8} posterior mean {res.full_mean[k]:.3f} [{res.full_q05[k]:.3f}, {res.full_q95[k]:.3f}]"
              f"  plug-in {res.full_plug_in[k]:.3f}  flag {_yes(res.full_flags[k])}")
    print(f"{'seed':>4} {'metric':<8} {'post mean':>9} {'90% interval':>16} {'plug-in':>8} {'in full 90%':>11} "
          f"{'covers full':>11} {'flag':>4}")
    for run in res.runs:
        for k in R.METRICS:
            print(f"{run.seed:>4} {LABELS[k]:<8} {run.mean[k]:>9.3f} [{run.q05[k]:.3f}, {run.q95[k]:.3f}] "
                  f"{run.plug_in[k]:>8.3f} {_yes(run.inside_full[k]):>11} {_yes(run.covers_full[k]):>11} "
                  f"{_yes(run.flags[k]):>4}")
    for k in R.METRICS:
        print(f"  {LABELS[k]:<8} thinned mean inside the full 90 %: {res.inside_rate(k):.0%}; thinned 90 % covers the "
              f"full mean: {res.covers_rate(k):.0%}")
    print(f"thinned diagnose {sum(r.wall_s for r in res.runs) / len(res.runs):.1f} s mean")


def print_thin_sim(res: R.SimulatedThinResult) -> None:
    """The thinning check on matrices drawn from a known truth: the rates a posterior right about the data has."""
    print(f"\n== simulated {R.SHAPES[res.shape].label} ({res.truth_model.upper()} truth), {len(res.sims)} full "
          f"matrices at the real rollouts per cell, each thinned to {res.rollouts}")
    print(f"{'seed':>4} {'metric':<8} {'full mean':>9} {'full 90%':>16} {'thinned':>8} {'thinned 90%':>16}")
    for sim in res.sims:
        run = sim.runs[0]
        for k in R.METRICS:
            print(f"{run.seed:>4} {LABELS[k]:<8} {sim.full_mean[k]:>9.3f} [{sim.full_q05[k]:.3f}, {sim.full_q95[k]:.3f}] "
                  f"{run.mean[k]:>8.3f} [{run.q05[k]:.3f}, {run.q95[k]:.3f}]")
    for k in R.METRICS:
        truth = res.covers_truth_rate(k)
        print(f"  {LABELS[k]:<8} thinned mean inside the full 90 %: {res.inside_rate(k):.0%}; thinned 90 % covers the "
              f"full mean: {res.covers_rate(k):.0%}" + ("" if truth is None else f", the truth: {truth:.0%}")
              + f"; thinned minus full mean {res.shift(k):+.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="math500,humaneval,aime24", help=f"comma separated: {', '.join(R.SHAPES)}")
    ap.add_argument("--replicates", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="first replicate's seed (replicates use seed, seed+1, ...)")
    ap.add_argument("--rollouts", type=int, default=None, help="rollouts per cell (default: the paper's per shape)")
    ap.add_argument("--prior", dest="population", default=None, help="passed to diagnose(prior=...) only when given (spline, normal, paper)")
    ap.add_argument("--tune", type=int, default=R.FAST_DIAGNOSE["tune"])
    ap.add_argument("--draws", type=int, default=R.FAST_DIAGNOSE["draws"])
    ap.add_argument("--chains", type=int, default=R.FAST_DIAGNOSE["chains"])
    ap.add_argument("--thin", action="store_true", help="the real-data thinning check (MATH-500) instead")
    ap.add_argument("--seeds", type=int, default=3, help="--thin: thinning seeds (seed, seed+1, ...)")
    ap.add_argument("--thin-sim", type=int, default=0, metavar="N",
                    help="the thinning check on N matrices drawn from MATH-500's truth at its real rollouts instead")
    ap.add_argument("--truth", choices=R.TRUTH_MODELS, default="1pl", help="--thin-sim: the truth's model")
    ap.add_argument("--drop-degenerate", action="store_true",
                    help="--thin: leave out the items no model ever got right (or wrong) in the full data")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON lines here")
    args = ap.parse_args()
    if not (R.SHARED_DATA / "real").is_dir():
        sys.exit(f"no real data at {R.SHARED_DATA / 'real'}")
    kwargs: dict[str, Any] = {"tune": args.tune, "draws": args.draws, "chains": args.chains}
    if args.population is not None:
        kwargs["prior"] = args.population
    import benchfill

    print(f"benchfill from {Path(benchfill.__file__).parent}; diagnose options: {kwargs}")
    out = []
    if args.thin_sim:
        sim = R.simulated_thin_check("math500", 4, args.thin_sim, args.seed, args.truth, kwargs)
        print_thin_sim(sim)
        out.append(sim.model_dump_json())
    elif args.thin:
        res = R.thin_check("math500", 4, range(args.seed, args.seed + args.seeds), kwargs,
                           drop_degenerate=args.drop_degenerate)
        print_thin(res)
        out.append(res.model_dump_json())
    else:
        for shape in args.shapes.split(","):
            shape = shape.strip()
            if shape not in R.SHAPES:
                sys.exit(f"unknown shape {shape!r}: one of {', '.join(R.SHAPES)}")
            clock = time.perf_counter()
            res = R.coverage(shape, args.rollouts, args.replicates, args.seed, kwargs)
            print_coverage(res, time.perf_counter() - clock)
            out.append(res.model_dump_json())
            sys.stdout.flush()
    if args.json is not None:
        args.json.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
