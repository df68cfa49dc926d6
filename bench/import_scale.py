"""`benchfill import` of a leaderboard-sized folder, as the user waits: wall time and peak memory of a fresh process.

Writes a synthetic folder of lm-evaluation-harness ``--log_samples`` output (``--layout lm-eval``: per model
``<org>__<model>/results_<date>.json`` + ``samples_<task>_<date>.jsonl``) or of the Open LLM Leaderboard's details
(``--layout openllm``: the same sample files, no results file), in the real files' structure
(tests/leaderboard_logs.py, after the fixtures in tests/fixtures/importers/lmeval), then runs
``benchfill import FORMAT FOLDER --out responses.csv`` as a whole fresh process once per ``--code`` checkout and
checks that the response file holds exactly the counts written.

Peak memory: ``ru_maxrss`` of the command's process (the kernel's high-water mark, read with ``wait4``: exact, no
polling) and the peak RSS of its process tree polled every 20 ms from /proc (bench/proctree.py, as
bench/diagnose_e2e.py measures). The wall time is of that same run (the poller costs it a little CPU).

Before the files are written the disk they need is estimated from one model's folder and checked against the free
space (``--dry-run`` stops there). ``--large`` is 2,000 models x 12,000 items (about 28 GB of logs).

    python bench/import_scale.py                                       # 300 models x 2,000 items, 10 tasks
    python bench/import_scale.py --models 1000 --items 4000 --items-out
    git archive HEAD benchfill | tar -x -C /tmp/bf-old                 # an older version, read-only git
    python bench/import_scale.py --code before=/tmp/bf-old --code after=.
    python bench/import_scale.py --large --dry-run
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from proctree import TreePeak  # bench/ is on sys.path when a script here runs

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from leaderboard_logs import write_leaderboard  # noqa: E402  (tests/leaderboard_logs.py: the log writer)

CLI = "import sys; from benchfill.cli import app; sys.argv[0] = 'benchfill'; app()"


def run_measured(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> dict:
    """Run ``cmd``; wall time, its own peak RSS (``wait4``'s ru_maxrss) and the tree's polled peak RSS."""
    log = tempfile.TemporaryFile(mode="w+")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=str(cwd), stdout=log, stderr=subprocess.STDOUT, text=True)
    peak = TreePeak(proc.pid)
    deadline = t0 + timeout
    status, usage = None, None
    while status is None:
        pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status, usage = st, ru
        elif time.perf_counter() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            status = -9
        else:
            time.sleep(0.01)
    wall = time.perf_counter() - t0
    proc.returncode = 0  # reaped by wait4 above: keep Popen from waiting again
    peak.stop()
    log.seek(0)
    out = log.read()
    rc = os.waitstatus_to_exitcode(status) if status != -9 else "timeout"
    return {"wall_s": wall, "maxrss_mb": usage.ru_maxrss / 1024, "tree_rss_mb": peak.rss_kb / 1024, "rc": rc,
            "out": out}


def check_output(path: Path, written, n_cells: int) -> str:
    """The response file against the counts written: every (model, item) cell once, n_correct as drawn."""
    pos = {m: j for j, m in enumerate(written.models)}
    ipos = {i: k for k, i in enumerate(written.item_ids)}
    got = np.full(written.correct.shape, -1, dtype=np.int64)
    rows = 0
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        if next(reader) != ["model", "item_id", "n_correct", "n_trials", "task"]:
            return "bad header"
        for model, item, c, n, task in reader:
            rows += 1
            if n != "1" or task != item.split("/", 1)[0]:
                return f"row {rows + 1}: n_trials {n}, task {task} for {item}"
            got[pos[model], ipos[item]] = int(c)
    if rows != n_cells:
        return f"{rows} rows, expected {n_cells}"
    if not (got == written.correct).all():
        return f"{int((got != written.correct).sum())} cells differ"
    return "ok"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=300)
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--tasks", type=int, default=10, help="the items are split over this many tasks (files)")
    ap.add_argument("--large", action="store_true", help="2,000 models x 12,000 items in 20 tasks")
    ap.add_argument("--layout", choices=["lm-eval", "openllm"], default="lm-eval")
    ap.add_argument("--code", action="append", default=[], metavar="LABEL=PATH",
                    help="a benchfill checkout to run (repeatable; default: this one)")
    ap.add_argument("--items-out", action="store_true", help="also pass --items-out (the item texts)")
    ap.add_argument("--dir", type=Path, default=None, help="write the logs here (kept afterwards)")
    ap.add_argument("--dry-run", action="store_true", help="estimate the disk needed and stop")
    ap.add_argument("--timeout", type=float, default=1800.0)
    args = ap.parse_args()
    if args.large:
        args.models, args.items, args.tasks = 2000, 12000, 20
    codes = [(c.partition("=")[0], Path(c.partition("=")[2]).resolve()) if "=" in c else (c, Path(c).resolve())
             for c in args.code] or [("this checkout", REPO)]
    tmp = Path(tempfile.mkdtemp(prefix="benchfill-import-"))
    root = args.dir or tmp / "logs"
    try:
        probe = write_leaderboard(tmp / "probe", args.models, args.items, args.tasks, args.layout,
                                  only_models=range(1))
        need = probe.bytes * args.models
        free = shutil.disk_usage(tmp).free
        print(f"{args.models} models x {args.items} items in {args.tasks} tasks ({args.layout}): "
              f"{args.models * args.tasks} samples files, about {need / 1e9:.2f} GB of logs; {free / 1e9:.0f} GB "
              f"free at {tmp}", file=sys.stderr, flush=True)
        shutil.rmtree(tmp / "probe")
        if args.dry_run:
            return
        if need * 1.1 + 2e9 > free:
            sys.exit(f"not enough disk: need about {need / 1e9:.1f} GB (+ the response files)")
        t0 = time.perf_counter()
        written = write_leaderboard(root, args.models, args.items, args.tasks, args.layout)
        gen_s = time.perf_counter() - t0
        print(f"wrote {written.files} samples files, {written.bytes / 1e9:.2f} GB in {gen_s:.1f} s",
              file=sys.stderr, flush=True)
        rows = []
        for label, code in codes:
            out = tmp / f"responses-{len(rows)}.csv"
            cmd = [sys.executable, "-c", CLI, "import", args.layout, str(root), "--out", str(out)]
            if args.items_out:
                cmd += ["--items-out", str(tmp / f"items-{len(rows)}.jsonl")]
            env = dict(os.environ, PYTHONPATH=str(code), LITELLM_LOCAL_MODEL_COST_MAP="True")
            res = run_measured(cmd, env, code, args.timeout)
            check = check_output(out, written, args.models * args.items) if res["rc"] == 0 else "-"
            if res["rc"] != 0:
                print(f"[{label}] exit {res['rc']}:\n{res['out'][-3000:]}", file=sys.stderr)
            print(f"{label}: {res['wall_s']:.1f} s, peak RSS {res['maxrss_mb']:.0f} MB (tree, polled: "
                  f"{res['tree_rss_mb']:.0f} MB), output {check}", file=sys.stderr, flush=True)
            rows.append((label, code, res, check))
            out.unlink(missing_ok=True)
        print(f"\n{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.models} models x "
              f"{args.items} items, {args.tasks} tasks, {written.files} samples files "
              f"({written.bytes / 1e9:.2f} GB, {args.layout} layout){' --items-out' if args.items_out else ''}\n")
        print("| code | wall s | peak RSS MB (ru_maxrss) | peak RSS MB (tree, polled 20 ms) | output | exit |")
        print("|---|---|---|---|---|---|")
        for label, code, r, check in rows:
            print(f"| {label} ({code}) | {r['wall_s']:.1f} | {r['maxrss_mb']:.0f} | {r['tree_rss_mb']:.0f} | "
                  f"{check} | {r['rc']} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
