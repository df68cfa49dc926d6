"""Speed and accuracy of 1PL IRT samplers, side by side, in one table.

Peers: PyMC's default NUTS (the reference), nutpie and numpyro on the same PyMC model, py-irt (Pyro SVI, a point
estimate: no ESS / R-hat), and ours ("fast": difficulties integrated out by quadrature, independence MH on the 12
abilities, exact conditional draws of every difficulty). Times: the fit, and "cold" = the fit plus the one-off
import of the method's libraries. Memory: peak PSS of the fitting process and its workers. Data: 12 models x {1,000, 5,000} simulated items (4 rollouts,
Binomial counts) and the real 12 x 41,871 OpenCompass matrix (binary).

Every fit runs in its own subprocess (clean peak memory, a hard time limit). A peer whose time, extrapolated
linearly in the number of items from its smaller runs, would exceed the budget (15 min) is skipped and says so.

    python bench/irt_speed.py                         # everything (PyMC on 5,000 items alone takes ~10 min)
    python bench/irt_speed.py --sizes 1000 --no-real  # quick
    python bench/irt_speed.py --skip-slow             # only peers expected to finish in < 2 min per fit

py-irt needs torch; installing it into the project's environment would downgrade typer / rich / pandas, so it is
looked for in ``--pyirt-python`` (or $BENCHFILL_PYIRT_PYTHON), an interpreter of a separate environment with
py-irt installed (``python -m venv /tmp/pyirt && /tmp/pyirt/bin/pip install py-irt``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from proctree import TreePeak  # bench/ is on sys.path when a script here runs

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "data" / "real" / "opencompass_12models_11benchmarks.csv.gz"
METHODS = ("pymc", "nutpie", "numpyro", "py-irt", "fast")
J = 12


# ------------------------------------------------------------------------------------------------ data


def make_data(spec: str):
    """``sim:ITEMS:ROLLOUTS:SEED`` (theta, b ~ N(0, 1), Binomial counts) or ``real:PATH`` (12 models spread by
    accuracy) -> ResponseMatrix."""
    from benchfill.data import ResponseMatrix, select_models
    from benchfill.importers import load_responses

    kind, _, rest = spec.partition(":")
    if kind == "sim":
        items, rollouts, seed = (int(x) for x in rest.split(":"))
        rng = np.random.default_rng(seed)
        theta = np.sort(rng.normal(size=J))
        b = rng.normal(size=items)
        n = np.full((J, items), rollouts)
        y = rng.binomial(n, 1.0 / (1.0 + np.exp(-(theta[:, None] - b[None, :]))))
        return ResponseMatrix([f"m{j:02d}" for j in range(J)], [f"q{i}" for i in range(items)], y, n, spec)
    resp = load_responses(rest)
    return resp.subset(models=select_models(resp, J))


def mcmc_diagnostics(theta: np.ndarray, b: np.ndarray, chunk: int = 2000) -> dict[str, float]:
    """min bulk / tail ESS and max R-hat over all parameters (arviz), items in chunks to bound memory."""
    import arviz as az
    import xarray as xr

    ess_b, ess_t, rhat = [], [], []
    blocks = [("theta", theta)] + [("b", b[:, :, i : i + chunk]) for i in range(0, b.shape[2], chunk)]
    for name, arr in blocks:
        ds = xr.Dataset({name: (("chain", "draw", "k"), np.asarray(arr, dtype=float))})
        ess_b.append(float(az.ess(ds, method="bulk")[name].min()))
        ess_t.append(float(az.ess(ds, method="tail")[name].min()))
        rhat.append(float(az.rhat(ds)[name].max()))
    return {"ess_bulk": min(ess_b), "ess_tail": min(ess_t), "rhat": max(rhat)}


# ------------------------------------------------------------------------------------------------ workers


# libraries each method imports on its first fit; their import time is reported apart from the fit
METHOD_IMPORTS = {"pymc": ["pymc"], "nutpie": ["pymc", "nutpie"], "numpyro": ["pymc", "numpyro", "jax"],
                  "fast": [], "map": ["pymc"]}


class TreeMemory:
    """Peak proportional set size (PSS) of this process plus its children (:class:`proctree.TreePeak`): unlike
    ru_maxrss it counts forked workers and pages they share (each shared page once). Linux only; elsewhere it
    reports this process's ru_maxrss."""

    def __enter__(self) -> "TreeMemory":
        self.peak_kb = 0
        self._tree = TreePeak(os.getpid()) if Path("/proc/self/smaps_rollup").exists() else None
        return self

    def __exit__(self, *exc) -> None:
        if self._tree is not None:
            self._tree.stop()
            self.peak_kb = self._tree.pss_kb
        else:
            self.peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker(method: str, data: str, out: str) -> None:
    """Fit one (method, data) pair; print one JSON line; save posterior-mean b to ``out`` (.npz).

    Times reported: ``import_s``, the one-off import of the method's libraries (a process that fits several
    benchmarks pays it once), and ``wall_s``, the fit itself (PyMC compiles its model inside it)."""
    import importlib

    import benchfill.irt.fast  # noqa: F401  (registers "fast")
    from benchfill.irt.fit import fit_irt
    from benchfill.irt.model import IRTSpec, SamplerSettings

    resp = make_data(data)
    t = time.perf_counter()
    for name in METHOD_IMPORTS.get(method, []):
        importlib.import_module(name)
    import_s = time.perf_counter() - t
    with TreeMemory() as mem:
        t = time.perf_counter()
        fit = fit_irt(resp, IRTSpec(), SamplerSettings(method=method))
        wall = time.perf_counter() - t
    np.savez(out, b_mean=np.asarray(fit.b_mean, dtype=float))
    res = {"wall_s": wall, "import_s": import_s, "peak_mem_mb": mem.peak_kb / 1024,
           "divergences": fit.divergences, "n_items": len(resp.item_ids), "engine": fit.extra.get("fast", {}).get("engine")}
    res.update(mcmc_diagnostics(fit.theta, fit.b))
    print(json.dumps(res))


PYIRT_SCRIPT = r"""
import json, sys, time, resource
import numpy as np
from py_irt.config import IrtConfig
from py_irt.training import IrtModelTrainer
from py_irt.dataset import Dataset
path, out = sys.argv[1], sys.argv[2]
t = time.perf_counter()
ds = Dataset.from_jsonlines(path)
cfg = IrtConfig(model_type="1pl", epochs=2000, priors="vague", lr=0.1, lr_decay=0.9999, log_every=10**9)
trainer = IrtModelTrainer(config=cfg, data_path=None, dataset=ds, verbose=False)
trainer.train(device="cpu")
wall = time.perf_counter() - t
p = trainer.best_params
ids = p["item_ids"]  # index -> item id
diff = np.asarray(p["diff"], dtype=float)
np.savez(out, b_mean=diff, item_ids=np.array([str(ids[k]) for k in range(len(diff))]))
print(json.dumps({"wall_s": wall, "import_s": 0.0, "peak_mem_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def pyirt_python(arg: str | None) -> tuple[str | None, str]:
    """An interpreter that can import py_irt, or (None, reason)."""
    candidates = [c for c in (arg, os.environ.get("BENCHFILL_PYIRT_PYTHON"), sys.executable) if c]
    for py in candidates:
        if shutil.which(py) is None and not Path(py).exists():
            continue
        ok = subprocess.run([py, "-c", "import py_irt"], capture_output=True, text=True)
        if ok.returncode == 0:
            return py, ""
    return None, ("py-irt not importable here (its torch dependency would downgrade typer/rich/pandas in the "
                  "project env); pass --pyirt-python PATH to a separate env with `pip install py-irt`")


def write_pyirt_jsonl(resp, path: Path) -> None:
    """py-irt reads binary responses per subject; a model's k-th rollout becomes pseudo-subject "model#k"."""
    with open(path, "w") as fh:
        R = int(resp.n_trials.max())
        rng = np.random.default_rng(0)
        for j, m in enumerate(resp.models):
            # spread each cell's correct answers over its rollouts at random (the counts are exchangeable)
            hits = np.zeros((R, resp.n_correct.shape[1]), dtype=np.int8)
            mask = np.zeros_like(hits, dtype=bool)
            for i in range(resp.n_correct.shape[1]):
                n, k = int(resp.n_trials[j, i]), int(resp.n_correct[j, i])
                order = rng.permutation(n)
                hits[order[:k], i] = 1
                mask[:n, i] = True
            for r in range(R):
                row = {resp.item_ids[i]: int(hits[r, i]) for i in np.flatnonzero(mask[r])}
                fh.write(json.dumps({"subject_id": f"{m}#{r}", "responses": row}) + "\n")


# ------------------------------------------------------------------------------------------------ driver


def run_one(method: str, data: str, resp, timeout_s: float, pyirt_py: str | None, tmp: Path) -> dict:
    out = tmp / f"{method}-{abs(hash(data))}.npz"
    t = time.perf_counter()
    try:
        if method == "py-irt":
            jl = tmp / f"pyirt-{abs(hash(data))}.jsonl"
            write_pyirt_jsonl(resp, jl)
            proc = subprocess.run([pyirt_py, "-c", PYIRT_SCRIPT, str(jl), str(out)], capture_output=True,
                                  text=True, timeout=timeout_s)
        else:
            proc = subprocess.run([sys.executable, __file__, "--worker", method, "--data", data, "--out", str(out)],
                                  capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout after {timeout_s / 60:.0f} min"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"status": f"failed: {tail[0][:120]}"}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["status"] = "ok"
    res["process_s"] = time.perf_counter() - t
    with np.load(out) as z:
        b = np.asarray(z["b_mean"], dtype=float)
        if method == "py-irt":  # py-irt's own item order -> the matrix order
            by_id = dict(zip(z["item_ids"].tolist(), b))
            b = np.array([by_id[k] for k in resp.item_ids])
    res["b_mean"] = b
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,5000", help="simulated item counts, comma-separated ('' for none)")
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--no-real", action="store_true", help="skip the real 12 x 41,871 matrix")
    ap.add_argument("--real", default=str(REAL))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--budget-min", type=float, default=15.0, help="skip a peer whose estimated time exceeds this")
    ap.add_argument("--skip-slow", action="store_true", help="budget of 2 minutes per fit instead")
    ap.add_argument("--pyirt-python", default=None)
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results as JSON")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.data, args.out)
        return 0

    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    budget = 120.0 if args.skip_slow else args.budget_min * 60
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    datasets = [f"sim:{int(s)}:{args.rollouts}:0" for s in args.sizes.split(",") if s.strip()]
    if not args.no_real:
        if Path(args.real).exists():
            datasets.append(f"real:{args.real}")
        else:
            console.print(f"[yellow]real matrix not found at {args.real}: skipped[/]")
    pyirt_py, pyirt_reason = pyirt_python(args.pyirt_python) if "py-irt" in methods else (None, "")
    seen: dict[str, list[tuple[int, float]]] = {m: [] for m in methods}  # (items, seconds) of finished runs
    results: list[dict] = []
    tmp = Path(tempfile.mkdtemp(prefix="irt_speed_"))
    for data in datasets:
        resp = make_data(data)
        n_items = len(resp.item_ids)
        label = (f"sim 12x{n_items:,} ({args.rollouts} rollouts)" if data.startswith("sim")
                 else f"{Path(data[5:]).name.split('.')[0]} 12x{n_items:,}")
        row_res: dict[str, dict] = {}
        for m in ["fast"] + [x for x in methods if x != "fast"] if "fast" in methods else methods:
            if m == "py-irt" and pyirt_py is None:
                row_res[m] = {"status": f"skipped: {pyirt_reason}"}
                continue
            if seen[m]:
                items0, t0 = max(seen[m])
                est = t0 * n_items / items0
                if est > budget:
                    row_res[m] = {"status": f"skipped: ~{est / 60:.0f} min estimated from {items0:,} items "
                                            f"(> {budget / 60:.0f} min budget)"}
                    continue
            console.print(f"[dim]{label}: {m} ...[/]")
            res = run_one(m, data, resp, budget * 1.5 if seen[m] else budget, pyirt_py, tmp)
            if res["status"] == "ok":
                seen[m].append((n_items, res["wall_s"]))
            row_res[m] = res
        ref_name = next((r for r in ("pymc", "nutpie", "numpyro") if row_res.get(r, {}).get("status") == "ok"), None)
        for m, res in row_res.items():
            rec = {"data": label, "method": m, **{k: v for k, v in res.items() if k != "b_mean"}}
            if res.get("status") == "ok" and ref_name and m != ref_name:
                rec["pearson_vs_ref"] = float(np.corrcoef(res["b_mean"], row_res[ref_name]["b_mean"])[0, 1])
                rec["max_abs_diff_vs_ref"] = float(np.abs(res["b_mean"] - row_res[ref_name]["b_mean"]).max())
            rec["reference"] = ref_name
            if res.get("status") == "ok" and row_res.get("fast", {}).get("status") == "ok" and m != "fast":
                fast_res = row_res["fast"]
                rec["fast_speedup"] = res["wall_s"] / fast_res["wall_s"]
                rec["fast_speedup_cold"] = ((res["wall_s"] + res["import_s"])
                                            / (fast_res["wall_s"] + fast_res["import_s"]))
            results.append(rec)
    shutil.rmtree(tmp, ignore_errors=True)

    table = Table(title="1PL IRT, 12 models, 4 chains x 1000 draws (PyMC/nutpie/numpyro: + 1000 tune); b Pearson vs "
                        "the reference (PyMC where run, else nutpie); 'cold' adds the one-off library imports")
    for col in ("data", "method", "fit s", "cold s", "min ESS bulk/tail", "max R-hat", "div", "Pearson b (ref)",
                "max |Δb|", "ours faster (fit / cold)", "peak MB"):
        table.add_column(col, justify="left" if col in ("data", "method") else "right")
    for r in results:
        if r["status"] != "ok":
            table.add_row(r["data"], r["method"], r["status"], *[""] * 8)
            continue
        ess = f"{r['ess_bulk']:.0f}/{r['ess_tail']:.0f}" if "ess_bulk" in r else "n/a (SVI)"
        rhat = f"{r['rhat']:.3f}" if "rhat" in r else "n/a"
        pear = f"{r['pearson_vs_ref']:.5f} ({r['reference']})" if "pearson_vs_ref" in r else (
            "reference" if r["method"] == r.get("reference") else "—")
        speed = f"{r['fast_speedup']:.1f}x / {r['fast_speedup_cold']:.1f}x" if "fast_speedup" in r else "—"
        method = r["method"] + (f" ({r['engine']})" if r.get("engine") else "")
        table.add_row(r["data"], method, f"{r['wall_s']:.1f}", f"{r['wall_s'] + r['import_s']:.1f}", ess, rhat,
                      str(r.get("divergences", "n/a")), pear,
                      f"{r['max_abs_diff_vs_ref']:.3f}" if "max_abs_diff_vs_ref" in r else "—", speed,
                      f"{r['peak_mem_mb']:.0f}")
    console.print(table)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
