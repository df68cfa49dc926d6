"""Search efficiency of BenchFill in the SIMULATED world (issue: fill the gaps).

For each benchmark x seed: fill 3 gaps sequentially with BenchFill and with the budget-matched baseline (same
number of children, no difficulty feedback), and compute the oracle. Prints one table: mean Top-3 gap-sum reduction
of each, BenchFill's share of the oracle's reduction, mean |d - t| of the chosen items, mean rounds and panel calls
per filled gap.

    python bench/search_efficiency.py                      # 3 benchmarks x 20 seeds x 3 gaps
    python bench/search_efficiency.py --seeds 3 --jobs 2   # quicker
    python bench/search_efficiency.py --adaptive           # + a second table: full vs adaptive labelling
    python bench/search_efficiency.py --adaptive --prescreen hash   # + adaptive with the text pre-screen
    python bench/search_efficiency.py --arms adaptive@adaptive_rollout_factor=2,adaptive_budget=0.7

With ``--adaptive`` each benchmark x seed also runs BenchFill with ``[fill] labelling = "adaptive"`` (issue 17) on
the same benchmark, seed and simulated world; ``--prescreen F`` adds the arm ``adaptive+F`` (``[fill] prescreen =
F``); ``--arms`` adds arms ``adaptive[+F][@key=value,...]`` with other ``[fill]`` settings. A second table compares
each arm with full labelling: panel calls per filled gap, rounds per gap, the chosen item's TRUE |d - t| (its
SIMULATED latent b on the scale, not only the estimate), the estimated |d - t|, the chosen item's posterior SD on d,
and the Top-3 reduction.

Benchmarks: MATH-500 (bundled, ~4 rollouts per cell), AIME 2024 and AIME 2025 (../shared/data, ~4 rollouts; skipped,
with the reason, where ../shared is absent), each with 12 models spread evenly by accuracy. AIME item texts come
from ../shared/data/items (line k = item_id k; that order is NOT verified to match the response files, so a text
pre-screen fitted on them may be fitting noise); the simulated panel never reads a text.
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
    """name -> (responses, items with texts or None for stand-ins)."""
    out = {"MATH-500": (REPO / "examples" / "math500_k4.responses.csv.gz", REPO / "examples" / "math500.items.jsonl")}
    for name, file, texts in (("AIME24", "aime2024_k4.csv.gz", "aime2024.jsonl"),
                              ("AIME25", "aime2025_k4.csv.gz", "aime2025.jsonl")):
        if (SHARED / "real" / file).exists():
            out[name] = (SHARED / "real" / file, SHARED / "items" / texts)
        else:
            print(f"skipped {name}: {SHARED / 'real' / file} not found (the AIME rows need ../shared/data)")
    return out


def texts_by_line(responses: Path, texts: Path | None, folder: Path) -> Path:
    """Items for a response file: line k of ``texts`` as item_id k (stand-ins where there is no text)."""
    from benchfill.data import load_responses

    r = load_responses(responses)
    rows = [json.loads(line) for line in texts.read_text().splitlines() if line.strip()] if texts else []
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "items.jsonl"
    out = []
    for k, i in enumerate(r.item_ids):
        row = rows[int(i)] if str(i).isdigit() and int(i) < len(rows) else None
        question = (row.get("problem") or row.get("question")) if row else f"Stand-in item {i}."
        out.append(json.dumps({"id": i, "question": question, "answer": str(row["answer"]) if row else str(k)}))
    path.write_text("\n".join(out) + "\n")
    return path


def arm_config(folder: Path, arm: str) -> Path:
    """The config of one arm: ``full`` is the example config; ``adaptive[+F][@key=value,...]`` sets labelling =
    "adaptive", prescreen = F and the other [fill] keys given."""
    if arm == "full":
        return CONFIG
    import re

    head, _, sets = arm.partition("@")
    _, _, prescreen = head.partition("+")
    lines = ['labelling = "adaptive"'] + ([f'prescreen = "{prescreen}"'] if prescreen else [])
    lines += [kv.strip() for kv in sets.split(",") if kv.strip()]
    text = CONFIG.read_text()
    for key in ["labelling", "prescreen"] + [kv.split("=")[0].strip() for kv in lines[1:]]:
        text = re.sub(rf"(?m)^{key}\s*=.*$", "", text)
    path = folder / ("fill_sim_" + re.sub(r"[^A-Za-z0-9_.]+", "_", arm) + ".toml")
    path.write_text(text.replace("[fill]", "[fill]\n" + "\n".join(lines), 1))
    return path


def one_run(args: tuple) -> dict:
    from benchfill.graphs.run import simulated_gap_figures

    name, responses, items, seed, workdir = args[:5]
    labelling = args[5] if len(args) > 5 else "full"
    extra = list(args[6]) if len(args) > 6 else []
    out = Path(workdir) / f"{name}-{seed}-{labelling.replace('@', '_').replace(',', '_').replace('=', '')}"
    config = arm_config(Path(workdir), labelling)
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
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    ap.add_argument("--adaptive", action="store_true", help="also run adaptive labelling (second table)")
    ap.add_argument("--prescreen", choices=["hash", "minilm"], default=None,
                    help="also run adaptive labelling with this text pre-screen")
    ap.add_argument("--arms", nargs="*", default=[], help="more arms: adaptive[+F][@key=value,...]")
    ap.add_argument("--cv", nargs="*", default=[], choices=["hash", "minilm"],
                    help="also print the pre-screen's 10-fold CV Spearman on each benchmark (its first seed's scale)")
    ap.add_argument("--only", nargs="*", default=None, help="benchmarks to run (default: all)")
    ap.add_argument("--allow-floor-gaps", action="store_true", help="pass --allow-floor-gaps to fill")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="benchfill-search-"))
    jobs = []
    for name, (responses, items) in benchmarks().items():
        if args.only and name not in args.only:
            continue
        items_path = items if name == "MATH-500" else texts_by_line(responses, items, work / name)
        arms = ["full"] + (["adaptive"] if args.adaptive else []) + (
            [f"adaptive+{args.prescreen}"] if args.prescreen else []) + list(args.arms)
        for labelling in arms:
            jobs += [(name, str(responses), str(items_path), seed, str(work), labelling,
                      ("--allow-floor-gaps",) if args.allow_floor_gaps else ())
                     for seed in range(args.first_seed, args.first_seed + args.seeds)]
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_run, jobs))
    errors = [r for r in results if "error" in r]
    for r in errors:
        print(f"run {r['name']} seed {r['seed']} ({r['labelling']}) failed: {r['error']}")
    adaptive = [r for r in results if "error" not in r and r["labelling"] != "full"]
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
    if args.cv:
        cv_table(jobs, work, args.cv)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))


def cv_table(jobs: list[tuple], work: Path, featurisers: list[str]) -> None:
    """The text pre-screen's 10-fold CV Spearman against each benchmark's b (the scale of its first full run: 12
    models; the b the fill's pre-screen is fitted on)."""
    from benchfill.data import load_items
    from benchfill.graphs.prescreen import cv_spearman, item_text
    from benchfill.irt.scale import Scale

    print("\nText pre-screen, 10-fold CV (pooled out-of-fold predictions vs the scale's b)\n")
    print(f"{'benchmark':<10} {'featuriser':<10} {'items':>5} {'Spearman':>8} {'RMSE':>6} {'SD of b':>7} {'s':>5}")
    for name, _, items, seed, _, labelling, *_ in jobs:
        folder = work / f"{name}-{seed}-full"
        if labelling != "full" or seed != jobs[0][3] or not (folder / "diagnosis.scale.npz").exists():
            continue
        sc = Scale.load(folder / "diagnosis.scale.npz")
        by_id = {it.id: it for it in load_items(items)}
        texts = [item_text(by_id[i]) for i in sc.item_ids]
        for f in featurisers:
            start = time.perf_counter()
            r = cv_spearman(texts, sc.b_mean, f)
            print(f"{name:<10} {f:<10} {r.n_items:>5} {r.spearman:>8.3f} {r.rmse:>6.2f} {r.sd_b:>7.2f} "
                  f"{time.perf_counter() - start:>5.0f}")


def adaptive_table(full: list[dict], adaptive: list[dict]) -> None:
    """Full vs each adaptive arm over the same benchmarks and seeds (only benchmark x seed pairs every arm finished)."""
    arms = ["full"] + list(dict.fromkeys(r["labelling"] for r in adaptive))
    runs = full + adaptive
    done = set.intersection(*({(r["name"], r["seed"]) for r in runs if r["labelling"] == a} for a in arms))
    print(f"\nLabelling, SIMULATED world: full vs adaptive BenchFill on the same benchmarks and seeds "
          f"({len(done)} benchmark x seed pairs x 3 gaps; means per filled gap; true |d-t| from the simulated "
          f"latent b; "
          f"+- one standard error over gaps)\n")
    width = max(9, *(len(a) for a in arms))
    header = (f"{'benchmark':<10} {'labelling':<{width}} {'panel calls/gap':>15} {'rounds':>6} {'true |d-t|':>16} "
              f"{'est |d-t|':>9} {'SD of d':>8} {'Top-3 %':>8} {'filled':>7}  vs full")
    print(header)
    print("-" * len(header))
    names = list(dict.fromkeys(n for n, _ in sorted(done)))
    for name in names + (["all"] if len(names) > 1 else []):
        ref = None
        for arm in arms:
            rs = [r for r in runs if r["labelling"] == arm and (r["name"], r["seed"]) in done
                  and (name == "all" or r["name"] == name)]
            rows = [g for r in rs for g in r["chosen"]]
            if not rows:
                continue
            calls = float(np.mean([g["calls"] for g in rows]))
            true = np.array([g["true_dev"] for g in rows])
            red = np.mean([r["summary"]["methods"]["benchfill"]["top3_reduction"] for r in rs])
            note = ""
            if ref is None:
                ref = (calls, float(true.mean()))
            else:
                fewer, smaller = 1 - calls / ref[0], 1 - true.mean() / ref[1]
                note = (f"{abs(fewer):.0%} {'fewer' if fewer >= 0 else 'more'} calls, true |d-t| "
                        f"{abs(smaller):.0%} {'smaller' if smaller >= 0 else 'larger'}")
            print(f"{name:<10} {arm:<{width}} {calls:>15.0f} {np.mean([g['rounds'] for g in rows]):>6.2f} "
                  f"{true.mean():>8.4f} +-{true.std(ddof=1) / np.sqrt(len(true)) if len(true) > 1 else 0:.4f} "
                  f"{np.mean([g['dev'] for g in rows]):>9.4f} {np.mean([g['sd'] for g in rows]):>8.4f} "
                  f"{100 * red:>8.1f} {len(rows):>4}/{3 * len(rs)}  {note}")


if __name__ == "__main__":
    main()
