"""How the whole `benchfill diagnose` grows with models and items (issue 26): wall time and peak memory of the
process tree (RSS, and PSS, which counts a page the forked workers share once), from a fresh process, on a grid of simulated leaderboard-shaped matrices, with the growth rates.

Truth. The abilities and difficulties come from the real MMLU-Pro matrix (29 models x 12,032 items, binary;
../shared/data/real/mmlu_pro.csv.gz), fitted by the independent numpy/scipy MAP of ``tests/real_shapes.py``: a
panel of J models draws its abilities from a normal with the fitted abilities' mean and SD (so J can exceed 29),
and I items resample the fitted difficulties (so the real, skewed shape is kept). Answers are binary, 1PL, no
guessing; ``--observed 0.6`` leaves each cell unasked with probability 0.4 (a sparse leaderboard; every item keeps
at least 2 models). Without ../shared the difficulties are N(0, 2.5^2) instead, and the table says so.

    python bench/scale_growth.py                                  # J in 12, 48, 192 x I in 2,000, 8,000
    python bench/scale_growth.py --models 12,48 --items 2000 --observed 0.6
    python bench/scale_growth.py --models 12,48,192,768 --items 2000,8000,32000 --timeout 900
    python bench/scale_growth.py --models 1000 --items 5000 --code /tmp/base --repeat 2   # before / after, alternating

The growth rate in models is the log-log slope of wall time (and memory) against J at each I, and in items
against I at each J (1.0 = linear). Each row is one whole command; the machine is shared and noisy, so the table
prints the load average beside each run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from diagnose_e2e import CLI, REPO, compile_bytecode, run  # bench/ on sys.path, as the other scripts

MMLU = REPO.parent / "shared" / "data" / "real" / "mmlu_pro.csv.gz"


def real_truth() -> tuple[float, float, np.ndarray, str]:
    """(ability mean, ability SD, difficulties, source) from the MAP fit of MMLU-Pro, or a stand-in."""
    if not MMLU.exists():
        return 0.0, 1.5, np.random.default_rng(0).normal(0.0, 2.5, 12_032), "stand-in N(0, 2.5^2) (no ../shared)"
    sys.path.insert(0, str(REPO / "tests"))
    from real_shapes import fit_map_1pl

    from benchfill.data import read_responses

    resp = read_responses(MMLU)
    fit = fit_map_1pl(resp.n_correct, resp.n_trials)
    solved = resp.n_correct.sum(0)
    keep = (solved > 0) & (solved < resp.n_trials.sum(0))  # items with a finite MLE
    return float(fit.theta.mean()), float(fit.theta.std()), fit.b[keep], "MMLU-Pro MAP (29 x 12,032)"


def simulate(path: Path, J: int, I: int, observed: float, truth: tuple[float, float, np.ndarray, str],
             seed: int = 0) -> None:
    """A binary J x I long CSV drawn from the truth (see the module docstring)."""
    mean, sd, b_pool, _ = truth
    rng = np.random.default_rng(seed)
    theta = rng.normal(mean, sd, J)
    b = rng.choice(b_pool, size=I, replace=True)
    y = rng.random((J, I)) < 1.0 / (1.0 + np.exp(-(theta[:, None] - b[None, :])))
    asked = rng.random((J, I)) < observed
    asked[rng.integers(J, size=I), np.arange(I)] = True  # every item at least two models
    asked[(rng.integers(J - 1, size=I) + 1 + np.argmax(asked, 0)) % J, np.arange(I)] = True
    jj, ii = np.nonzero(asked)
    with open(path, "w") as fh:
        fh.write("model,item_id,n_correct,n_trials\n")
        fh.writelines(f"m{j:04d},q{i},{int(y[j, i])},1\n" for j, i in zip(jj.tolist(), ii.tolist()))


def measure(csv: Path, J: int, I: int, observed: float, code: Path, tmp: Path, timeout: float) -> dict:
    """One whole ``diagnose`` of ``csv`` by the checkout ``code`` in a fresh process, its tree's memory polled."""
    env = dict(os.environ, PYTHONPATH=str(code), LITELLM_LOCAL_MODEL_COST_MAP="True")
    out = tmp / f"d_{J}x{I}.json"
    cmd = [sys.executable, "-c", CLI, "diagnose", str(csv), "--json", str(out)]
    load = os.getloadavg()[0]
    res = run(cmd, env, timeout, code, memory=True)
    info: dict = {}
    if res["rc"] == 0:
        d = json.loads(out.read_text())
        info = {"timings": d.get("timings", {}), "checks": {c["name"]: c["passed"] for c in d.get("checks", [])}}
    else:
        print(f"[{J} x {I}, {code}] exit {res['rc']}: {res['out'][-1500:]}", file=sys.stderr)
    return {"models": J, "items": I, "observed": observed, "wall_s": res["wall_s"], "rss_mb": res["rss_mb"],
            "pss_mb": res["pss_mb"], "rc": res["rc"], "load": load, **info}


def slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of log y on log x (nan with fewer than 2 points)."""
    if len(x) < 2:
        return float("nan")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="12,48,192")
    ap.add_argument("--items", default="2000,8000")
    ap.add_argument("--observed", type=float, default=1.0, help="share of cells asked (default 1: dense)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--code", type=Path, default=None,
                    help="another benchfill checkout, run beside this one on the same files (alternating)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each cell (and each checkout)")
    args = ap.parse_args()
    Js = [int(x) for x in args.models.split(",")]
    Is = [int(x) for x in args.items.split(",")]
    truth = real_truth()
    print(f"truth: {truth[3]}; abilities N({truth[0]:.2f}, {truth[1]:.2f}^2); {args.observed:.0%} of cells observed",
          flush=True)
    checkouts = [("this", REPO)] + ([("other", args.code.resolve())] if args.code else [])
    for _, code in checkouts:
        compile_bytecode(code)
    tmp = Path(tempfile.mkdtemp(prefix="benchfill-growth-"))
    rows = []
    for I in Is:
        for J in Js:
            csv = tmp / f"sim_{J}x{I}.csv"
            simulate(csv, J, I, args.observed, truth)
            for rep in range(args.repeat):
                for name, code in checkouts:
                    row = measure(csv, J, I, args.observed, code, tmp, args.timeout)
                    rows.append({**row, "code": str(code), "repeat": rep})
                    failed = [k for k, v in row.get("checks", {}).items() if v is False]  # None: not applicable
                    # RSS counts the pages forked workers share once in each process; PSS splits them
                    label = f" [{name}]" if args.code else ""
                    print(f"{J:>5} x {I:>6}{label}: {row['wall_s']:7.1f} s  RSS {row['rss_mb']:7.0f} MB"
                          f"  PSS {row['pss_mb']:7.0f} MB  (load {row['load']:.1f})"
                          f"  fit {row.get('timings', {}).get('fit', float('nan')):.1f} s"
                          f"  null {row.get('timings', {}).get('null', float('nan')):.1f} s"
                          f"  checks not passing: {', '.join(failed) or 'none'}", flush=True)
    rows_here = [r for r in rows if r["code"] == str(REPO)]
    ok = [r for r in rows_here if r["rc"] == 0 and r["repeat"] == 0]
    print("\ngrowth (log-log slope; 1.0 = linear):")
    for I in Is:
        pts = [r for r in ok if r["items"] == I]
        print(f"  in models at I = {I:,}: time {slope([r['models'] for r in pts], [r['wall_s'] for r in pts]):.2f},"
              f" memory {slope([r['models'] for r in pts], [r['rss_mb'] for r in pts]):.2f}")
    for J in Js:
        pts = [r for r in ok if r["models"] == J]
        print(f"  in items at J = {J:,}: time {slope([r['items'] for r in pts], [r['wall_s'] for r in pts]):.2f},"
              f" memory {slope([r['items'] for r in pts], [r['rss_mb'] for r in pts]):.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
