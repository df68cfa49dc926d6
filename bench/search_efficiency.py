"""Search efficiency of BenchFill in the SIMULATED world and the REPLAY world of real answers (issue 23).

For each world x benchmark x seed: fill 3 gaps sequentially with BenchFill (full labelling), the budget-matched
baseline (same number of children, no difficulty feedback) and, with ``--adaptive``, BenchFill with adaptive
labelling; and the oracle. One table per world and benchmark, per method: the share of chosen items TRULY inside
their gap, their mean reported P(inside) (calibration: the two should agree), the share reported "filled"
(P(inside) >= 0.9) and how many of those are truly inside, the TRUE |d - t|, panel calls per gap (search +
confirmation), and the Top-3 gap-sum reduction measured with TRUE difficulties (and with the estimates, the
paper's Table 2 figure).

    python bench/search_efficiency.py                           # both worlds, 3 seeds, full + baseline
    python bench/search_efficiency.py --adaptive --seeds 5      # + adaptive labelling
    python bench/search_efficiency.py --world replay --only MATH-500

Truth. Simulated world: a child's latent b (the same 1PL the placement assumes; the benchmark's items are at their
fitted b). Replay world (``[sim] world = "replay"``, examples/fill_replay.toml): the panel answers with the real
models' pass rates over ~1,100 rollouts, the rewriter proposes real held-out items, and every item's true d is its
placement under unlimited equal labelling by the panel at those pass rates (``replay_truth.json``); the benchmark's
own items get theirs the same way, so
the true Top-3 reduction is computed on the true axis.

Benchmarks: simulated world: MATH-500 (bundled, ~4 rollouts per cell), AIME 2024 (../shared/data); replay world:
MATH-500 (bundled ~1,100-rollout matrix and its texts), HumanEval+ (../shared/data, stand-in texts: the replayed
panel never reads a text). Rows needing ../shared are skipped, with the reason, where it is absent. 12 models
spread evenly by accuracy throughout.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
CONFIGS = {"sim": REPO / "examples" / "fill_sim.toml", "replay": REPO / "examples" / "fill_replay.toml"}


def benchmarks(world: str) -> dict[str, tuple[Path, Path | None]]:
    """name -> (responses, items with texts or None for stand-ins) of one world."""
    if world == "sim":
        out = {"MATH-500": (REPO / "examples" / "math500_k4.responses.csv.gz",
                            REPO / "examples" / "math500.items.jsonl")}
        extra = (("AIME24", "aime2024_k4.csv.gz", "aime2024.jsonl"),)
    else:
        out = {"MATH-500": (REPO / "examples" / "math500.responses.csv.gz", REPO / "examples" / "math500.items.jsonl")}
        extra = (("HumanEval+", "humaneval_plus.csv.gz", None),)
    for name, file, texts in extra:
        if (SHARED / "real" / file).exists():
            out[name] = (SHARED / "real" / file, SHARED / "items" / texts if texts else None)
        else:
            print(f"skipped {world} {name}: {SHARED / 'real' / file} not found (that row needs ../shared/data)")
    return out


def texts_by_line(responses: Path, texts: Path | None, folder: Path) -> Path:
    """Items for a response file: line k of ``texts`` as item_id k (stand-ins where there is no text)."""
    from benchfill.importers import load_responses

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


def arm_config(folder: Path, world: str, arm: str) -> Path:
    """The config of one arm: ``full`` is the world's example config; ``adaptive[+F][@key=value,...]`` sets
    labelling = "adaptive", prescreen = F and the other [fill] keys given."""
    base = CONFIGS[world]
    if arm == "full":
        return base
    head, _, sets = arm.partition("@")
    _, _, prescreen = head.partition("+")
    lines = ['labelling = "adaptive"'] + ([f'prescreen = "{prescreen}"'] if prescreen else [])
    lines += [kv.strip() for kv in sets.split(",") if kv.strip()]
    text = base.read_text()
    for key in ["labelling", "prescreen"] + [kv.split("=")[0].strip() for kv in lines[1:]]:
        text = re.sub(rf"(?m)^{key}\s*=.*$", "", text)
    path = folder / (f"fill_{world}_" + re.sub(r"[^A-Za-z0-9_.]+", "_", arm) + ".toml")
    path.write_text(text.replace("[fill]", "[fill]\n" + "\n".join(lines), 1))
    return path


def true_benchmark_d(out: Path) -> np.ndarray:
    """The benchmark's own items on the true axis: replay: their placement under unlimited equal labelling;
    simulated: their fitted d (the simulated world's truth)."""
    diagnosis = json.loads((out / "diagnosis.json").read_text())
    truth = out / "replay_truth.json"
    if truth.exists():
        by_id = {r["id"]: r["d"] for r in json.loads(truth.read_text())["items"]}
        return np.array([by_id[it["item_id"]] for it in diagnosis["items"]])
    return np.array([it["d"] for it in diagnosis["items"]])


def one_run(args: tuple) -> dict:
    from benchfill.graphs.policy import oracle_insertions, top_k_reduction
    from benchfill.graphs.run import true_gap_figures

    world, name, responses, items, seed, workdir, arm, extra = args
    tag = re.sub(r"[^A-Za-z0-9]+", "_", f"{world}-{name}-{seed}-{arm}")
    out = Path(workdir) / tag
    config = arm_config(Path(workdir), world, arm)
    cmd = [sys.executable, "-m", "benchfill.cli", "fill", items, "--responses", responses, "--config", str(config),
           "--out", str(out), "--models", "12", "--gaps", "3", "--seed", str(seed), "--sampler", "map"]
    cmd += (["--compare"] if arm == "full" else []) + list(extra)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"world": world, "name": name, "seed": seed, "arm": arm, "error": proc.stderr[-500:]}
    summary = json.loads((out / "summary.json").read_text())
    d_true = true_benchmark_d(out)
    methods = {}
    for method in summary["methods"]:
        label = method if arm == "full" else arm
        rows = true_gap_figures(out, method)
        methods[label] = {"rows": rows, "top3_est": summary["methods"][method]["top3_reduction"],
                          "top3_true": top_k_reduction(d_true, [g["true_d"] for g in rows], 3),
                          "gaps": len(summary["methods"][method]["gaps"])}
    oracle = {"top3_est": summary["oracle"]["top3_reduction"],
              "top3_true": top_k_reduction(d_true, oracle_insertions(d_true, 3), 3)}
    return {"world": world, "name": name, "seed": seed, "arm": arm, "methods": methods, "oracle": oracle,
            "wall_s": time.perf_counter() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", choices=["sim", "replay", "both"], default="both")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    ap.add_argument("--adaptive", action="store_true", help="also run BenchFill with adaptive labelling")
    ap.add_argument("--prescreen", choices=["hash", "minilm"], default=None,
                    help="also run adaptive labelling with this text pre-screen")
    ap.add_argument("--arms", nargs="*", default=[], help="more arms: adaptive[+F][@key=value,...]")
    ap.add_argument("--cv", nargs="*", default=[], choices=["hash", "minilm"],
                    help="also print the pre-screen's 10-fold CV Spearman on each benchmark (its first seed's scale)")
    ap.add_argument("--only", nargs="*", default=None, help="benchmarks to run (default: all)")
    ap.add_argument("--allow-floor-gaps", action="store_true", help="pass --allow-floor-gaps to fill")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="benchfill-search-"))
    arms = ["full"] + (["adaptive"] if args.adaptive else []) + (
        [f"adaptive+{args.prescreen}"] if args.prescreen else []) + list(args.arms)
    jobs = []
    for world in (["sim", "replay"] if args.world == "both" else [args.world]):
        for name, (responses, items) in benchmarks(world).items():
            if args.only and name not in args.only:
                continue
            items_path = items if name == "MATH-500" else texts_by_line(responses, items, work / world / name)
            extra = ("--allow-floor-gaps",) if args.allow_floor_gaps else ()
            jobs += [(world, name, str(responses), str(items_path), seed, str(work), arm, extra)
                     for arm in arms for seed in range(args.first_seed, args.first_seed + args.seeds)]
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_run, jobs))
    for r in results:
        if "error" in r:
            print(f"run {r['world']} {r['name']} seed {r['seed']} ({r['arm']}) failed: {r['error']}")
    ok = [r for r in results if "error" not in r]
    print(f"\n{len(ok)} runs x 3 gaps ({time.perf_counter() - start:.0f} s, {args.jobs} jobs); per chosen item "
          f"(filled or near); +- one standard error over gaps\n")
    header = (f"{'world':<7} {'benchmark':<11} {'method':<18} {'truly inside':>12} {'mean P(in)':>10} "
              f"{'filled':>7} {'filled&in':>9} {'true |d-t|':>16} {'search calls':>12} {'confirm':>8} "
              f"{'Top-3 true %':>12} {'Top-3 est %':>11}")
    print(header)
    print("-" * len(header))
    for world, name in dict.fromkeys((r["world"], r["name"]) for r in ok):
        rs = [r for r in ok if r["world"] == world and r["name"] == name]
        labels = list(dict.fromkeys(m for r in rs for m in r["methods"]))
        for label in labels:
            ms = [r["methods"][label] for r in rs if label in r["methods"]]
            rows = [g for m in ms for g in m["rows"]]
            n_gaps = sum(m["gaps"] for m in ms)
            if not rows:
                print(f"{world:<7} {name:<11} {label:<18} no chosen item in {n_gaps} gaps")
                continue
            true = np.array([g["true_dev"] for g in rows])
            se = true.std(ddof=1) / np.sqrt(len(true)) if len(true) > 1 else 0.0
            filled = [g for g in rows if g["status"] == "filled"]
            print(f"{world:<7} {name:<11} {label:<18} {np.mean([g['truly_inside'] for g in rows]):>12.2f} "
                  f"{np.mean([g['p_inside'] for g in rows]):>10.2f} {len(filled):>3}/{n_gaps:<3} "
                  f"{sum(g['truly_inside'] for g in filled):>5}/{len(filled):<3} {true.mean():>8.4f} +-{se:.4f} "
                  f"{np.mean([g['calls'] for g in rows]):>12.0f} {np.mean([g['confirm_calls'] for g in rows]):>8.0f} "
                  f"{100 * np.mean([m['top3_true'] for m in ms]):>12.1f} {100 * np.mean([m['top3_est'] for m in ms]):>11.1f}")
        print(f"{world:<7} {name:<11} {'oracle':<18} {'':>12} {'':>10} {'':>7} {'':>9} {'':>16} {'':>12} {'':>8} "
              f"{100 * np.mean([r['oracle']['top3_true'] for r in rs]):>12.1f} "
              f"{100 * np.mean([r['oracle']['top3_est'] for r in rs]):>11.1f}")
    if args.cv:
        cv_table([j for j in jobs if j[0] == "sim"], work, args.cv)
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
    for world, name, _, items, seed, _, labelling, _ in jobs:
        folder = work / re.sub(r"[^A-Za-z0-9]+", "_", f"{world}-{name}-{seed}-full")
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



if __name__ == "__main__":
    main()
