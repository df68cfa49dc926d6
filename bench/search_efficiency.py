"""Search efficiency of BenchFill in the SIMULATED world (issue: fill the gaps).

For each benchmark x seed: fill 3 gaps sequentially with BenchFill and with the budget-matched baseline (same
number of children, no difficulty feedback), and compute the oracle. Prints one table: mean Top-3 gap-sum reduction
of each, BenchFill's share of the oracle's reduction, mean |d - t| of the chosen items, mean rounds and panel calls
per filled gap.

    python bench/search_efficiency.py                      # 3 benchmarks x 20 seeds x 3 gaps
    python bench/search_efficiency.py --seeds 3 --jobs 2   # quicker
    python bench/search_efficiency.py --adaptive           # + a second table: full vs adaptive labelling

With ``--adaptive`` each benchmark x seed also runs BenchFill with ``[fill] labelling = "adaptive"`` (issue 17) on
the same benchmark, seed and simulated world, and a second table compares it with full labelling: panel calls per
filled gap, the chosen item's TRUE |d - t| (its SIMULATED latent b on the scale, not only the estimate), the
estimated |d - t|, the chosen item's posterior SD on d, and the Top-3 reduction.

Benchmarks: MATH-500 (bundled, ~4 rollouts per cell), AIME 2024 and AIME 2025 (../shared/data, ~4 rollouts), each
with 12 models spread evenly by accuracy. Item texts are stand-ins where the simulated world needs no real text.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
CONFIG = REPO / "examples" / "fill_sim.toml"


def benchmarks() -> dict[str, tuple[Path, Path | None]]:
    out = {"MATH-500": (REPO / "examples" / "math500_k4.responses.csv.gz", REPO / "examples" / "math500.items.jsonl")}
    for name, file in (("AIME24", "aime2024_k4.csv.gz"), ("AIME25", "aime2025_k4.csv.gz")):
        if (SHARED / "real" / file).exists():
            out[name] = (SHARED / "real" / file, None)
        else:
            print(f"skipped {name}: {SHARED / 'real' / file} not found")
    return out


def stand_in_items(responses: Path, folder: Path) -> Path:
    """Items for a response file whose texts are not needed (simulated world): one per item id."""
    from benchfill.data import load_responses

    r = load_responses(responses)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps({"id": i, "question": f"Stand-in item {i}.", "answer": str(k)}) + "\n"
                            for k, i in enumerate(r.item_ids)))
    return path


def adaptive_config(folder: Path) -> Path:
    """The same config with ``labelling = "adaptive"`` in its [fill] table."""
    path = folder / "fill_sim_adaptive.toml"
    import re

    text = re.sub(r"(?m)^labelling\s*=.*$", "", CONFIG.read_text())
    path.write_text(text.replace("[fill]", '[fill]\nlabelling = "adaptive"', 1))
    return path


def one_run(args: tuple) -> dict:
    from benchfill.graphs.run import simulated_gap_figures

    name, responses, items, seed, workdir = args[:5]
    labelling = args[5] if len(args) > 5 else "full"
    extra = list(args[6]) if len(args) > 6 else []
    out = Path(workdir) / f"{name}-{seed}-{labelling}"
    config = CONFIG if labelling == "full" else adaptive_config(Path(workdir))
    cmd = [sys.executable, "-m", "benchfill.cli", "fill", items, "--responses", responses, "--config", str(config),
           "--out", str(out), "--models", "12", "--gaps", "3", "--seed", str(seed), "--sampler", "map"]
    cmd += (["--compare"] if labelling == "full" else []) + extra
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"name": name, "seed": seed, "labelling": labelling, "error": proc.stderr[-500:]}
    summary = json.loads((out / "summary.json").read_text())
    con = sqlite3.connect(out / "memory.sqlite")
    panel_calls = {m: con.execute("select coalesce(sum(calls), 0) from usage where method = ? and node = 'label'",
                                  [m]).fetchone()[0] for m in ("benchfill", "baseline")}
    return {"name": name, "seed": seed, "labelling": labelling, "summary": summary, "panel_calls": panel_calls,
            "chosen": simulated_gap_figures(out), "wall_s": time.perf_counter() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    ap.add_argument("--adaptive", action="store_true", help="also run adaptive labelling (second table)")
    ap.add_argument("--only", nargs="*", default=None, help="benchmarks to run (default: all)")
    ap.add_argument("--allow-floor-gaps", action="store_true", help="pass --allow-floor-gaps to fill")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="benchfill-search-"))
    jobs = []
    for name, (responses, items) in benchmarks().items():
        if args.only and name not in args.only:
            continue
        items_path = items or stand_in_items(responses, work / name)
        for labelling in ("full", "adaptive") if args.adaptive else ("full",):
            jobs += [(name, str(responses), str(items_path), seed, str(work), labelling,
                      ("--allow-floor-gaps",) if args.allow_floor_gaps else ()) for seed in range(args.seeds)]
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_run, jobs))
    errors = [r for r in results if "error" in r]
    for r in errors:
        print(f"run {r['name']} seed {r['seed']} ({r['labelling']}) failed: {r['error']}")
    adaptive = [r for r in results if "error" not in r and r["labelling"] == "adaptive"]
    ok = [r for r in results if "error" not in r and r["labelling"] == "full"]
    print(f"\nSIMULATED world, {len(ok)} runs x 3 gaps ({time.perf_counter() - start:.0f} s, {args.jobs} jobs)\n")
    header = (f"{'benchmark':<10} {'BenchFill %':>11} {'baseline %':>10} {'oracle %':>9} {'BF/oracle':>9} "
              f"{'BF |d-t|':>9} {'base |d-t|':>10} {'rounds/gap':>10} {'panel calls/gap':>15} {'filled':>7}")
    print(header)
    print("-" * len(header))
    rows = {}
    for name in dict.fromkeys(r["name"] for r in ok):
        rs = [r for r in ok if r["name"] == name]
        rows[name] = rs
    rows["all"] = ok
    for name, rs in rows.items():
        bf = [r["summary"]["methods"]["benchfill"] for r in rs]
        base = [r["summary"]["methods"]["baseline"] for r in rs]
        orc = [r["summary"]["oracle"]["top3_reduction"] for r in rs]
        red_bf = np.mean([m["top3_reduction"] for m in bf])
        red_base = np.mean([m["top3_reduction"] for m in base])
        red_or = np.mean(orc)
        dev_bf = np.mean([g["deviation"] for m in bf for g in m["gaps"] if g["status"] == "filled"])
        dev_base = np.mean([g["deviation"] for m in base for g in m["gaps"] if g["status"] == "filled"])
        filled = sum(m["filled"] for m in bf)
        rounds = np.mean([g["rounds"] for m in bf for g in m["gaps"] if g["status"] == "filled"])
        calls = sum(r["panel_calls"]["benchfill"] for r in rs) / max(filled, 1)
        print(f"{name:<10} {100 * red_bf:>11.1f} {100 * red_base:>10.1f} {100 * red_or:>9.1f} "
              f"{red_bf / red_or:>9.2f} {dev_bf:>9.4f} {dev_base:>10.4f} {rounds:>10.2f} {calls:>15.0f} "
              f"{filled:>4}/{3 * len(rs)}")
    if adaptive:
        adaptive_table(ok, adaptive)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))


def adaptive_table(full: list[dict], adaptive: list[dict]) -> None:
    """Full vs adaptive labelling over the same benchmarks and seeds (only runs where both finished)."""
    done = {(r["name"], r["seed"]) for r in adaptive} & {(r["name"], r["seed"]) for r in full}
    print(f"\nLabelling, SIMULATED world: full vs adaptive BenchFill on the same benchmarks and seeds "
          f"({len(done)} pairs x 3 gaps; means per filled gap; true |d-t| from the simulated latent b)\n")
    header = (f"{'benchmark':<10} {'labelling':<9} {'panel calls/gap':>15} {'true |d-t|':>10} {'est |d-t|':>9} "
              f"{'SD of d':>8} {'Top-3 %':>8} {'filled':>7}")
    print(header)
    print("-" * len(header))
    names = list(dict.fromkeys(n for n, _ in sorted(done)))
    for name in names + ["all"]:
        calls = {}
        for labelling, rs in (("full", full), ("adaptive", adaptive)):
            rs = [r for r in rs if (r["name"], r["seed"]) in done and (name == "all" or r["name"] == name)]
            rows = [g for r in rs for g in r["chosen"]]
            if not rows:
                continue
            calls[labelling] = np.mean([g["calls"] for g in rows])
            red = np.mean([r["summary"]["methods"]["benchfill"]["top3_reduction"] for r in rs])
            print(f"{name:<10} {labelling:<9} {calls[labelling]:>15.0f} {np.mean([g['true_dev'] for g in rows]):>10.4f} "
                  f"{np.mean([g['dev'] for g in rows]):>9.4f} {np.mean([g['sd'] for g in rows]):>8.4f} "
                  f"{100 * red:>8.1f} {len(rows):>4}/{3 * len(rs)}")
        if len(calls) == 2:
            print(f"{'':<10} {'':<9} {'adaptive: ' + format(1 - calls['adaptive'] / calls['full'], '.0%') + ' fewer':>15}")


if __name__ == "__main__":
    main()
