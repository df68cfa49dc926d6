"""The whole `benchfill diagnose` as the user waits: wall time and peak memory of the process tree, from a fresh
process (imports, loading, fit, checks, metrics, picture, JSON), next to PyMC's default NUTS as a whole process.

Cases (``--cases``, comma separated; default all):

    sim1000     12 x 1,000 simulated items, 4 rollouts   (also PyMC's whole process: import, compile, 4 x (1,000 tune
                                                          + 1,000 draws), its default convergence checks)
    oc          the real OpenCompass matrix, 12 x 41,871 (binary)
    suite       `benchfill suite` on it (11 benchmarks, one fit each)
    mmlu        MMLU-Pro, 12 of its 29 models spread by accuracy x 12,032 items, guessing c = 0.1
    oc_c25      the OpenCompass matrix with guessing c = 0.25

Every run is a subprocess. The wall time is the fastest of ``--repeat`` runs that nobody watches; then one more run
has its process tree (the command, its workers and its picture process) polled every 20 ms from /proc: peak RSS is
the largest sum of the tree's resident sets seen (pages shared between processes, e.g. after a fork, counted in
each, as the user's `top` would), peak PSS the same with shared pages split. (Polling smaps_rollup costs the
watched processes CPU time, so it stays out of the timed runs.) PyMC's memory is not measured. ``--code PATH`` runs another checkout of
benchfill (e.g. a `git worktree` of an older commit) with this environment, for before / after tables.

    python bench/diagnose_e2e.py --cases sim1000 --pymc          # the 40x claim, side by side
    python bench/diagnose_e2e.py --cases oc,suite,mmlu,oc_c25
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from proctree import TreePeak  # bench/ is on sys.path when a script here runs

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "data" / "real"
OC = REAL / "opencompass_12models_11benchmarks.csv.gz"
OC_ITEMS = REAL / "opencompass_12models_11benchmarks_items.csv"
MMLU = REAL / "mmlu_pro.csv.gz"
CLI = "import sys; from benchfill.cli import app; sys.argv[0] = 'benchfill'; app()"

PYMC_SCRIPT = """
import sys, numpy as np, pymc as pm
sys.path.insert(0, {repo!r})
from benchfill.importers import load_responses
from benchfill.irt.fit import build_pymc_model, with_population
from benchfill.irt.model import IRTSpec
resp = load_responses({path!r})
spec = with_population(resp, IRTSpec())  # the same model as benchfill's: the learned difficulty population
with build_pymc_model(resp, spec):
    idata = pm.sample(random_seed=0, progressbar=False)  # PyMC's defaults: 4 chains, 1,000 tune + 1,000 draws
print("divergences", int(idata.sample_stats["diverging"].sum()))
"""


def run(cmd: list[str], env: dict[str, str], timeout: float, cwd: Path, memory: bool = False) -> dict:
    """Run ``cmd`` in ``cwd`` (the checkout under test: ``python -c`` puts the working directory first on sys.path).
    ``memory``: poll the process tree's memory meanwhile (reading /proc/<pid>/smaps_rollup walks each process's
    page tables 50 times a second and costs the measured command CPU time, so timed runs do not poll)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = TreePeak(proc.pid) if memory else None
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        rc = "timeout"
    wall = time.perf_counter() - t0
    if peak is None:
        return {"wall_s": wall, "rss_mb": float("nan"), "pss_mb": float("nan"), "rc": rc, "out": out}
    peak.stop()
    return {"wall_s": wall, "rss_mb": peak.rss_kb / 1024, "pss_mb": peak.pss_kb / 1024, "rc": rc, "out": out}


def compile_bytecode(code: Path) -> None:
    """Write the checkout's bytecode before anything is timed, as a (non-editable) ``pip install`` does. Where
    the environment sets PYTHONDONTWRITEBYTECODE (this project's machine does), Python reads a module's ``.pyc``
    but never writes one, so every module changed since its last ``.pyc`` (all of them in a fresh worktree) was
    compiled from source in every timed run (the 41 modules a diagnose imports: 0.086 s of compile(), timed
    in-process, of the ~1.3 s sim 12 x 1,000 command), and unequally between two checkouts."""
    import compileall

    compileall.compile_dir(str(code / "benchfill"), quiet=1)


def simulate(path: Path, items: int = 1000, rollouts: int = 4, seed: int = 0) -> None:
    """12 models x ``items`` items, theta and b ~ N(0, 1), Binomial(rollouts) counts, long CSV."""
    rng = np.random.default_rng(seed)
    theta, b = np.sort(rng.normal(size=12)), rng.normal(size=items)
    y = rng.binomial(rollouts, 1 / (1 + np.exp(-(theta[:, None] - b[None, :]))))
    with open(path, "w") as fh:
        fh.write("model,item_id,n_correct,n_trials\n")
        for j in range(12):
            for i in range(items):
                fh.write(f"m{j:02d},q{i},{y[j, i]},{rollouts}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="sim1000,oc,suite,mmlu,oc_c25")
    ap.add_argument("--pymc", action="store_true", help="also PyMC's whole process on sim1000")
    ap.add_argument("--code", type=Path, default=None, help="benchfill checkout to run (default: this one)")
    ap.add_argument("--label", default="", help="name of this code version in the table")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (the table shows the fastest)")
    args = ap.parse_args()
    code = (args.code or REPO).resolve()
    compile_bytecode(code)
    env = dict(os.environ, PYTHONPATH=str(code), LITELLM_LOCAL_MODEL_COST_MAP="True")
    tmp = Path(tempfile.mkdtemp(prefix="benchfill-e2e-"))
    sim = tmp / "sim_12x1000_r4.csv"
    simulate(sim)
    py = sys.executable
    diag = [py, "-c", CLI, "diagnose"]
    cases = {
        "sim1000": ("sim 12 x 1,000, 4 rollouts", diag + [str(sim), "--json", str(tmp / "sim/diagnosis.json")]),
        "oc": ("OpenCompass 12 x 41,871", diag + [str(OC), "--json", str(tmp / "oc/diagnosis.json")]),
        "suite": ("suite, OpenCompass 11 benchmarks", [py, "-c", CLI, "suite", str(OC), "--items-table", str(OC_ITEMS),
                                                       "--out", str(tmp / "suite")]),
        "mmlu": ("MMLU-Pro 12 x 12,032, c = 0.1", diag + [str(MMLU), "--models", "12", "--guessing", "0.1",
                                                          "--json", str(tmp / "mmlu/diagnosis.json")]),
        "oc_c25": ("OpenCompass 12 x 41,871, c = 0.25", diag + [str(OC), "--guessing", "0.25",
                                                               "--json", str(tmp / "oc25/diagnosis.json")]),
    }
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in cases]
    if unknown:
        ap.error(f"--cases: unknown {', '.join(unknown)}; choose from {', '.join(cases)}")
    rows = []
    label = args.label or ("this checkout" if args.code is None else str(code))
    for key in wanted:
        name, cmd = cases[key]
        best = None
        for _ in range(args.repeat):  # timed runs, then one more that watches memory
            res = run(cmd, env, args.timeout, code)
            if res["rc"] != 0:
                print(f"[{key}] exit {res['rc']}:\n{res['out'][-3000:]}", file=sys.stderr)
            if best is None or res["wall_s"] < best["wall_s"]:
                best = res
        mem = run(cmd, env, args.timeout, code, memory=True)
        best = {**best, "rss_mb": mem["rss_mb"], "pss_mb": mem["pss_mb"], "polled_wall_s": mem["wall_s"]}
        rows.append((name, f"benchfill diagnose ({label})" if key != "suite" else f"benchfill suite ({label})", best))
        print(f"{name}: {best['wall_s']:.2f} s, peak RSS {best['rss_mb']:.0f} MB, PSS {best['pss_mb']:.0f} MB",
              file=sys.stderr, flush=True)
        if key == "sim1000" and args.pymc:
            script = tmp / "pymc_whole.py"
            script.write_text(PYMC_SCRIPT.format(repo=str(code), path=str(sim)))
            res = run([py, str(script)], env, args.timeout, code)  # timed: its memory is not measured
            if res["rc"] != 0:
                print(f"[pymc] exit {res['rc']}:\n{res['out'][-3000:]}", file=sys.stderr)
            rows.append((name, "PyMC default NUTS, whole process", res))
            print(f"pymc: {res['wall_s']:.1f} s", file=sys.stderr, flush=True)
    print(f"\n{os.cpu_count()} CPUs visible, affinity {len(os.sched_getaffinity(0))}; load average before the "
          f"last run {os.getloadavg()[0]:.1f}\n")
    print(f"wall: the fastest of {args.repeat} run(s) per case, not watched; memory: one more run, the process tree "
          "polled every 20 ms\n")
    print("| data | command (whole process) | wall s | peak RSS MB (tree) | peak PSS MB (tree) | ratio to PyMC | exit |")
    print("|---|---|---|---|---|---|---|")
    pymc_wall = {n: r["wall_s"] for n, c, r in rows if c.startswith("PyMC")}
    for name, cmd, r in rows:
        ratio = ""
        if name in pymc_wall and not cmd.startswith("PyMC"):
            ratio = f"**{pymc_wall[name] / r['wall_s']:.0f}x faster**"
        rss, pss = ("-", "-") if r["rss_mb"] != r["rss_mb"] else (f"{r['rss_mb']:.0f}", f"{r['pss_mb']:.0f}")
        print(f"| {name} | {cmd} | {r['wall_s']:.2f} | {rss} | {pss} | {ratio} | {r['rc']} |")


if __name__ == "__main__":
    main()
