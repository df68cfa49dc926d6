"""Search efficiency of BenchFill in the SIMULATED world (issue: fill the gaps).

For each benchmark x seed: fill 3 gaps sequentially with BenchFill and with the budget-matched baseline (same
number of children, no difficulty feedback), and compute the oracle. Prints one table: mean Top-3 gap-sum reduction
of each, BenchFill's share of the oracle's reduction, mean |d - t| of the chosen items, mean rounds and panel calls
per filled gap.

    python bench/search_efficiency.py                      # 3 benchmarks x 20 seeds x 3 gaps
    python bench/search_efficiency.py --seeds 3 --jobs 2   # quicker

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


def one_run(args: tuple[str, str, str, int, str]) -> dict:
    name, responses, items, seed, workdir = args
    out = Path(workdir) / f"{name}-{seed}"
    cmd = [sys.executable, "-m", "benchfill.cli", "fill", items, "--responses", responses, "--config", str(CONFIG),
           "--out", str(out), "--models", "12", "--gaps", "3", "--seed", str(seed), "--sampler", "map", "--compare"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"name": name, "seed": seed, "error": proc.stderr[-500:]}
    summary = json.loads((out / "summary.json").read_text())
    con = sqlite3.connect(out / "memory.sqlite")
    panel_calls = {m: con.execute("select coalesce(sum(calls), 0) from usage where method = ? and node = 'label'",
                                  [m]).fetchone()[0] for m in ("benchfill", "baseline")}
    return {"name": name, "seed": seed, "summary": summary, "panel_calls": panel_calls,
            "wall_s": time.perf_counter() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="benchfill-search-"))
    jobs = []
    for name, (responses, items) in benchmarks().items():
        items_path = items or stand_in_items(responses, work / name)
        jobs += [(name, str(responses), str(items_path), seed, str(work)) for seed in range(args.seeds)]
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_run, jobs))
    errors = [r for r in results if "error" in r]
    for r in errors:
        print(f"run {r['name']} seed {r['seed']} failed: {r['error']}")
    ok = [r for r in results if "error" not in r]
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
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
