"""The optional JAX path on a GPU: ``benchfill.irt.fit.fit_irt`` with sampler "numpyro" (the PyMC reference model,
numpyro's NUTS through JAX) on a CUDA GPU against the same fit on the CPU, each checked against the exact "fast"
engine on the same data (issue 26).

What it times: each run is one ``fit_irt(resp, IRTSpec(), SamplerSettings(method="numpyro", ...))`` in a fresh
worker process whose JAX sees one platform only (``JAX_PLATFORMS=cuda`` or ``cpu``). Reported per run:

* ``wall_s``: the whole fit (learning the difficulty population, building the PyMC model, PyTensor -> JAX, JAX
  compilation, tuning + sampling, post-processing), as ``fit_irt`` measures it;
* ``compile_s``: the seconds JAX itself logged for tracing, lowering and XLA compilation inside the fit
  (``jax_log_compiles``; n/a where this JAX logs no timings), and ``wall_s - compile_s``;
* ``sampling_s``: PyMC's own ``sampling_time`` (numpyro's ``MCMC.run``, warm-up and its compilation included);
  ``ms_per_iteration``: that time less the compilation logged during it, over tune + draws (all chains: sequential
  chains add up, parallel or vectorized ones share it); ``steps_per_draw``: leapfrog steps per kept draw and chain
  (PyMC keeps no warm-up statistics, so the warm-up's steps are not counted anywhere);
* the chain method numpyro really used ("parallel" falls back to "sequential" on a single GPU), peak GPU memory;
* agreement with the fast engine (``--reference`` or computed here on the CPU): max |mean b difference|, the same
  in units of the fast engine's SD, the ratio of the posterior SDs of b (numpyro / fast: median, min, max), max
  |mean theta difference|; min ESS and max R-hat of the numpyro draws (bench/irt_speed.py's arviz helper).

Both samplers fit the same model: ``fit_irt`` learns the difficulty population once (issue 22, the default
``population="spline"``) and the PyMC model takes it as the prior of b (a flat variable plus the log density as a
potential, ``benchfill.irt.fit.population_variable``); theta ~ N(0, 1) in both. The learned population is printed
per run so a difference between machines shows.

Runs are ``PLATFORM:CASE:TUNE:DRAWS[:CHAIN_METHOD]`` (PLATFORM gpu|cpu, CASE math500|sim; CHAIN_METHOD, when given,
is passed to numpyro through ``pm.sample(nuts_sampler_kwargs=...)``: a variant, not what ``fit_irt`` does). A run
with fewer draws than the reference is labelled a timing run: its per-step time is the comparison, not its posterior.
The cases: ``math500`` is the bundled MATH-500 matrix (examples/, 12 models spread by accuracy x 500 items, ~1,100
binomial rollouts per cell), ``sim`` a simulated matrix (``--sim JxIxR``, theta, b ~ N(0, 1), R rollouts).

Needs the ``[numpyro]`` extra (pymc, numpyro, jax) and, for ``gpu`` runs, a CUDA build of jaxlib; it also runs on the
CPU alone, to check it without a GPU:

    python bench/gpu_irt.py --runs cpu:math500:100:100,cpu:sim:50:50 --sim 20x200x1 --out /tmp/gpu_irt
    python bench/gpu_irt.py --save-reference ref.npz --sim 200x2000x1    # the fast engine's reference only
    python bench/gpu_irt.py --reference ref.npz --out "$OUT"              # on a CUDA machine: the default runs

Writes ``gpu_irt.json`` (one record per run, rewritten after each) and ``gpu_irt.txt`` (the table) to ``--out``;
``--render a.json b.json`` prints the table of saved runs again.

Measured once on one H200 machine (16 CPU cores; jax 0.11.2, numpyro 0.21.0, pymc 5.28.5; two calls, their runs
given in the table): MATH-500 12 x 500, 4 x (1000 + 1000): GPU 76.6 s (compile 24.1 s; one GPU, so numpyro ran the
chains sequentially), GPU with vectorized chains 35.3 s (17.7 s), that machine's CPU 30.7 s (4.9 s); none converged
(max R-hat 2.1-2.5, on theta; min bulk ESS 5), posterior means of b within 0.10-0.12 of the fast engine. The
simulated 200 x 2,000 binary matrix: the full fit on the GPU ran past 110 s; 4 x (100 + 100) took 41.2 s
(sequential) and 35.4 s (vectorized), 86.5 and 57.0 ms per iteration against 294 ms on the CPU (4 x (25 + 25));
max |mean b difference| 0.024-0.028, posterior SD ratio median 1.00.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MATH500 = REPO / "examples" / "math500.responses.csv.gz"
DEFAULT_RUNS = ("gpu:math500:1000:1000,cpu:math500:1000:1000,gpu:math500:1000:1000:vectorized,gpu:sim:100:100,"
                "gpu:sim:100:100:vectorized,cpu:sim:25:25")  # ~5 min on an H200 machine; a full sim fit takes longer
PLATFORMS = {"gpu": "cuda", "cpu": "cpu"}


# ------------------------------------------------------------------------------------------------ data


def case_key(case: str, sim: str) -> str:
    """The reference's key for a case: ``math500`` or ``sim200x2000x1``."""
    return case if case == "math500" else f"sim{sim}"


def load_case(case: str, sim: str, seed: int = 0):
    """The ResponseMatrix of a case, and the simulated difficulties (None for real data)."""
    if case == "math500":
        from benchfill.api import load_responses

        return load_responses(MATH500, models=12), None
    if case != "sim":
        raise SystemExit(f"unknown case {case!r} (math500 or sim)")
    from benchfill.irt.simulate import simulate_responses

    J, I, R = (int(x) for x in sim.lower().split("x"))
    rng = np.random.default_rng(seed)
    theta, b = np.sort(rng.normal(size=J)), rng.normal(size=I)
    return simulate_responses(theta, b, R, seed=seed + 1), b


def fingerprint(resp) -> list[int]:
    """Shape and count totals: the same data on both machines."""
    return [*resp.shape, int(resp.n_correct.sum()), int(resp.n_trials.sum())]


def population_summary(prior) -> str:
    return (f"{prior.kind} mu={prior.mu:.4f} sigma={prior.sigma:.4f} tails={prior.tail_lo:.3g}/{prior.tail_hi:.3g}"
            if prior is not None else "none")


# ------------------------------------------------------------------------------------------------ reference


def fast_reference(case: str, sim: str, chains: int, draws: int) -> dict:
    """The fast engine on ``case`` (this process, CPU): posterior means / SDs of b and theta."""
    from benchfill.irt.fit import fit_irt
    from benchfill.irt.model import IRTSpec, SamplerSettings

    resp, _ = load_case(case, sim)
    t = time.perf_counter()
    fit = fit_irt(resp, IRTSpec(), SamplerSettings(method="fast", chains=chains, draws=draws))
    return {"b_mean": np.asarray(fit.b_mean, float), "b_sd": np.asarray(fit.b_sd, float),
            "theta_mean": np.asarray(fit.theta_mean, float), "theta_sd": np.asarray(fit.theta_sd, float),
            "meta": {"wall_s": time.perf_counter() - t, "chains": chains, "draws": draws,
                     "engine": (fit.extra.get("fast") or {}).get("engine"), "fingerprint": fingerprint(resp),
                     "population": population_summary(fit.spec.prior),
                     "host": os.uname().nodename, "cpus": os.cpu_count()}}


def save_reference(path: Path, refs: dict[str, dict]) -> None:
    arrays: dict[str, np.ndarray] = {}
    for key, ref in refs.items():
        for name in ("b_mean", "b_sd", "theta_mean", "theta_sd"):
            arrays[f"{key}/{name}"] = ref[name]
        arrays[f"{key}/meta"] = np.array(json.dumps(ref["meta"]))
    np.savez(path, **arrays)


def load_reference(path: Path) -> dict[str, dict]:
    refs: dict[str, dict] = {}
    with np.load(path) as z:
        for name in z.files:
            key, _, field = name.rpartition("/")
            refs.setdefault(key, {})[field] = json.loads(str(z[name])) if field == "meta" else np.asarray(z[name])
    return refs


# ------------------------------------------------------------------------------------------------ worker


class CompileLog(logging.Handler):
    """JAX's own timings of tracing, lowering and compilation (``jax_log_compiles``), with when each was logged."""

    PATTERN = re.compile(r"Finished (.+?) in ([0-9.eE+-]+) sec")

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[float, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = self.PATTERN.search(record.getMessage())
        if m:
            self.records.append((record.created, float(m.group(2))))

    def between(self, t0: float, t1: float) -> float:
        return sum(s for t, s in self.records if t0 <= t <= t1)


def per_iteration(res: dict, tune: int, draws: int, chains: int) -> dict:
    """``ms_per_iteration`` and ``steps_per_draw`` of a worker's record (see the module's docstring)."""
    out: dict[str, float] = {}
    if res.get("mcmc_s") is not None:
        out["ms_per_iteration"] = 1e3 * max(res["mcmc_s"] - (res.get("mcmc_compile_s") or 0.0), 0.0) / (tune + draws)
    if res.get("n_steps"):
        out["steps_per_draw"] = res["n_steps"] / (draws * chains)
    return out


def worker(args) -> None:
    """One numpyro fit on one platform; prints one JSON line and saves the posterior summaries to ``args.npz``."""
    import jax

    jax.config.update("jax_log_compiles", True)
    log = CompileLog()
    jax_logger = logging.getLogger("jax")
    jax_logger.addHandler(log)
    jax_logger.propagate = False  # no backend is started before the fit: pymc sets XLA_FLAGS (host devices) first

    import numpyro
    import pymc
    import pytensor
    from irt_speed import mcmc_diagnostics  # bench/ is on sys.path when a script here runs

    from benchfill.irt.fit import fit_irt
    from benchfill.irt.model import IRTSpec, SamplerSettings

    resp, _ = load_case(args.case, args.sim)
    seen: dict[str, object] = {}
    original_sample = pymc.sample

    def sample(*a, **kw):  # pm.sample as fit_irt calls it, timed; the chain method swapped in for a variant
        if args.chain_method:
            kw["nuts_sampler_kwargs"] = {**(kw.get("nuts_sampler_kwargs") or {}), "chain_method": args.chain_method}
        t0 = time.time()
        idata = original_sample(*a, **kw)
        t1 = time.time()
        seen.update(sample_call_s=t1 - t0, sample_compile_s=log.between(t0, t1),
                    sampling_s=float(idata.posterior.attrs.get("sampling_time", np.nan)),
                    n_steps=int(np.asarray(idata.sample_stats["n_steps"]).sum())
                    if "n_steps" in idata.sample_stats else None)
        return idata

    import pymc.sampling.jax as pmjax  # sets XLA_FLAGS (host devices) as pm.sample would, before any backend starts

    original_numpyro = pmjax._sample_numpyro_nuts

    def sample_numpyro(*a, **kw):  # numpyro's MCMC.run alone (PyMC's sampling_time): its compilation, as logged
        t0 = time.time()
        out = original_numpyro(*a, **kw)
        seen.update(mcmc_s=time.time() - t0, mcmc_compile_s=log.between(t0, time.time()))
        return out

    pymc.sample, pmjax._sample_numpyro_nuts = sample, sample_numpyro
    settings = SamplerSettings(method="numpyro", chains=args.chains, tune=args.tune, draws=args.draws, seed=args.seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.time()
        fit = fit_irt(resp, IRTSpec(), settings)
        t1 = time.time()
    pymc.sample, pmjax._sample_numpyro_nuts = original_sample, original_numpyro
    messages = [str(w.message) for w in caught]
    fell_back = any("not enough devices" in m for m in messages)
    method = args.chain_method or "parallel"
    compile_s = log.between(t0, t1) if log.records else None
    devices = jax.devices()
    res: dict[str, object] = {
        "platform": jax.default_backend(), "device": str(devices[0].device_kind), "n_devices": len(devices),
        "chain_method": method, "chain_method_used": "sequential" if fell_back and method == "parallel" else method,
        "wall_s": fit.wall_time_s, "population_s": fit.extra.get("population_s"), "compile_s": compile_s,
        "divergences": fit.divergences, "population": population_summary(fit.spec.prior),
        "fingerprint": fingerprint(resp), "settings": settings.as_dict(),
        "versions": {"jax": jax.__version__, "numpyro": numpyro.__version__, "pymc": pymc.__version__,
                     "pytensor": pytensor.__version__, "numpy": np.__version__, "python": sys.version.split()[0]},
        "cpus": os.cpu_count(), "warnings": sorted({m[:160] for m in messages})[:8], **seen,
    }
    res.update(per_iteration(res, args.tune, args.draws, args.chains))
    try:
        stats = devices[0].memory_stats() or {}
        res["peak_device_mb"] = stats.get("peak_bytes_in_use", 0) / 2**20 if stats else None
    except Exception:  # the CPU has none
        res["peak_device_mb"] = None
    res.update(mcmc_diagnostics(fit.theta, fit.b))
    theta_only = mcmc_diagnostics(fit.theta, fit.b[:, :, :0])  # where the worst mixing is: theta or b
    res.update(rhat_theta=theta_only["rhat"], ess_bulk_theta=theta_only["ess_bulk"])
    np.savez(args.npz, b_mean=fit.b_mean, b_sd=fit.b_sd, theta_mean=fit.theta_mean, theta_sd=fit.theta_sd)
    print(json.dumps(res, default=float))


# ------------------------------------------------------------------------------------------------ driver


def run_worker(run: str, args, tmp: Path, timeout_s: float) -> tuple[dict, dict | None]:
    parts = run.split(":")
    if len(parts) not in (4, 5) or parts[0] not in PLATFORMS:
        raise SystemExit(f"bad run {run!r}: PLATFORM:CASE:TUNE:DRAWS[:CHAIN_METHOD], PLATFORM gpu or cpu")
    platform, case, tune, draws = parts[0], parts[1], int(parts[2]), int(parts[3])
    chain_method = parts[4] if len(parts) == 5 else ""
    npz = tmp / (re.sub(r"[^A-Za-z0-9]+", "_", run) + ".npz")
    cmd = [sys.executable, __file__, "--worker", "--case", case, "--sim", args.sim, "--chains", str(args.chains),
           "--tune", str(tune), "--draws", str(draws), "--seed", str(args.seed), "--npz", str(npz)]
    if chain_method:
        cmd += ["--chain-method", chain_method]
    env = {**os.environ, "JAX_PLATFORMS": PLATFORMS[platform], "PYTHONUNBUFFERED": "1"}
    rec: dict = {"run": run, "platform": platform, "case": case, "tune": tune, "draws": draws, "chains": args.chains}
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        rec["status"] = f"timeout after {timeout_s:.0f} s"
        return rec, None
    rec["process_s"] = time.perf_counter() - t
    if proc.returncode != 0:
        tail = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()][-3:]
        rec["status"] = "failed: " + " | ".join(tail)[:400]
        rec["stderr_tail"] = (proc.stderr or "")[-3000:]
        return rec, None
    rec.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    rec["status"] = "ok"
    with np.load(npz) as z:
        return rec, {k: np.asarray(z[k], float) for k in z.files}


def compare(rec: dict, post: dict, ref: dict | None, ref_draws: int) -> None:
    """Agreement with the fast engine, into ``rec``."""
    if ref is None:
        return
    if list(ref["meta"]["fingerprint"]) != list(rec["fingerprint"]):
        rec["reference_note"] = f"different data: {ref['meta']['fingerprint']} vs {rec['fingerprint']}"
        return
    d = np.abs(post["b_mean"] - ref["b_mean"])
    ratio = post["b_sd"] / ref["b_sd"]
    rec.update(max_abs_db=float(d.max()), median_abs_db=float(np.median(d)),
               max_db_in_sd=float((d / ref["b_sd"]).max()), sd_ratio_median=float(np.median(ratio)),
               sd_ratio_min=float(ratio.min()), sd_ratio_max=float(ratio.max()),
               max_abs_dtheta=float(np.abs(post["theta_mean"] - ref["theta_mean"]).max()),
               reference_population=ref["meta"]["population"],
               timing_only=rec["draws"] < ref_draws)


def table_text(records: list[dict], title: str) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("run", "device / chains", "fit s", "compile s", "fit - compile s", "sampling s", "ms/iter",
                "steps/draw", "div", "max R-hat (θ)", "min ESS (θ)", "max |Δb|", "max |Δb|/sd", "sd ratio med [min, max]",
                "max |Δθ|"):
        table.add_column(col, justify="left" if col in ("run", "device / chains") else "right")
    f = lambda v, p=2: "—" if v is None else f"{v:.{p}f}"  # noqa: E731
    for r in records:
        if r.get("status") != "ok":
            table.add_row(r["run"], r.get("status", "?"), *[""] * 13)
            continue
        comp = r.get("compile_s")
        agree = ("timing run" if r.get("timing_only") else f(r.get("max_abs_db"), 3),
                 "" if r.get("timing_only") else f(r.get("max_db_in_sd"), 2),
                 "" if r.get("timing_only") or "sd_ratio_median" not in r else
                 f"{r['sd_ratio_median']:.3f} [{r['sd_ratio_min']:.2f}, {r['sd_ratio_max']:.2f}]",
                 "" if r.get("timing_only") else f(r.get("max_abs_dtheta"), 3))
        table.add_row(r["run"], f"{r['device']} / {r['chain_method_used']}", f(r["wall_s"], 1), f(comp, 1),
                      f(None if comp is None else r["wall_s"] - comp, 1), f(r.get("sampling_s"), 1),
                      f(r.get("ms_per_iteration"), 1), f(r.get("steps_per_draw"), 1), str(r["divergences"]),
                      f"{f(r.get('rhat'), 3)} ({f(r.get('rhat_theta'), 3)})",
                      f"{r.get('ess_bulk', float('nan')):.0f} ({r.get('ess_bulk_theta', float('nan')):.0f})", *agree)
    console = Console(width=260, record=True, emoji=False, markup=False)
    console.print(table)
    return console.export_text()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default=DEFAULT_RUNS, help="PLATFORM:CASE:TUNE:DRAWS[:CHAIN_METHOD], comma-separated")
    ap.add_argument("--sim", default="200x2000x1", help="the simulated case: MODELSxITEMSxROLLOUTS")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference", type=Path, help="the fast engine's results (.npz of --save-reference)")
    ap.add_argument("--save-reference", type=Path, help="compute the fast engine's results for the cases and stop")
    ap.add_argument("--ref-draws", type=int, default=1000, help="draws per chain of a computed reference")
    ap.add_argument("--cases", default="math500,sim", help="the cases of --save-reference")
    ap.add_argument("--out", type=Path, default=Path("runs/gpu_irt"))
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds one run may take")
    ap.add_argument("--total", type=float, default=0.0,
                    help="seconds for everything (0: no limit): a run gets at most what is left, none under 30 s")
    ap.add_argument("--render", type=Path, nargs="+", help="print the table of saved gpu_irt.json files and stop")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--tune", type=int, default=1000, help=argparse.SUPPRESS)
    ap.add_argument("--draws", type=int, default=1000, help=argparse.SUPPRESS)
    ap.add_argument("--chain-method", default="", help=argparse.SUPPRESS)
    ap.add_argument("--npz", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    start = time.perf_counter()
    if args.render:
        records = [r for path in args.render for r in json.loads(path.read_text())]
        for r in records:
            if r.get("status") == "ok":
                r.update(per_iteration(r, r["tune"], r["draws"], r["chains"]))
        table_text(records, f"fit_irt(sampler='numpyro') against the fast engine: {', '.join(map(str, args.render))}")
        return 0
    if args.save_reference:
        refs = {}
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            refs[case_key(case, args.sim)] = ref = fast_reference(case, args.sim, args.chains, args.ref_draws)
            print(f"fast {case_key(case, args.sim)}: {ref['meta']['wall_s']:.1f} s, {ref['meta']['population']}")
        save_reference(args.save_reference, refs)
        return 0

    refs = load_reference(args.reference) if args.reference else {}
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gpu_irt_"))
    records: list[dict] = []
    for run in [r.strip() for r in args.runs.split(",") if r.strip()]:
        case = run.split(":")[1]
        key = case_key(case, args.sim)
        timeout = args.timeout
        if args.total:
            timeout = min(timeout, args.total - (time.perf_counter() - start) - 10.0)
            if timeout < 30:
                records.append({"run": run, "status": f"skipped: too little of the {args.total:.0f} s left"})
                continue
        if key not in refs:  # the reference, computed here on the CPU once per case
            refs[key] = fast_reference(case, args.sim, args.chains, args.ref_draws)
            print(f"fast {key}: {refs[key]['meta']['wall_s']:.1f} s (reference computed here)", flush=True)
        print(f"[{time.perf_counter() - start:6.1f} s] {run} ...", flush=True)
        rec, post = run_worker(run, args, tmp, timeout)
        if post is not None:
            compare(rec, post, refs[key], int(refs[key]["meta"]["draws"]))
        rec["reference"] = {k: v for k, v in refs[key]["meta"].items() if k != "fingerprint"}
        records.append(rec)
        print(f"         {rec['status']}" + (f": fit {rec['wall_s']:.1f} s, compile {rec.get('compile_s') or 0:.1f} s,"
                                             f" max|Δb| {rec.get('max_abs_db', float('nan')):.3f}"
                                             if rec["status"] == "ok" else ""), flush=True)
        (args.out / "gpu_irt.json").write_text(json.dumps(records, indent=1, default=float) + "\n")
    title = (f"fit_irt(sampler='numpyro'), {args.chains} chains, against the fast engine (max |Δb|: posterior means of "
             f"b; sd ratio: numpyro / fast); sim = {args.sim}")
    text = table_text(records, title)
    (args.out / "gpu_irt.txt").write_text(text)
    shutil.rmtree(tmp, ignore_errors=True)
    (args.out / "gpu_irt.json").write_text(json.dumps(records, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
