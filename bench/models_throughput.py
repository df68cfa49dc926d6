"""Throughput of the model client against the local OpenAI-compatible stub (fixed 50 ms latency).

Not a timed test: run it by hand and read the table::

    python bench/models_throughput.py [--latency 0.05] [--scale 1.0]

For concurrency 1, 8 and 64 it reports, side by side:

- calls/s through ``ModelClient.complete`` (cache miss: cache lookup, semaphore, tenacity, litellm, HTTP, commit)
  against the ideal ``concurrency / latency``;
- the same calls through bare ``litellm.acompletion`` (no cache, no retry wrapper), and through a bare aiohttp
  POST (transport floor);
- per-call overhead beyond the stub's latency, as wall time at concurrency 1 and as client-process CPU time;
  benchfill's own overhead = its CPU per call minus bare litellm's;
- benchfill's own cost per call with the transport replaced by an instant reply (the framework overhead proper);
- the cache-hit path (a rerun) and the simulated-model path, per call.

The stub runs in a separate process so that its CPU does not count against the client.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchfill.models.client import ModelClient  # noqa: E402
from benchfill.models.config import ModelConfig, import_litellm  # noqa: E402


def start_stub(latency: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "openai_stub.py"), "--latency", str(latency)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()  # "PORT <n>"
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"stub did not start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}/v1"


def messages(i: int, tag: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"[{tag}] benchmark question number {i}: what is {i} + {i}?"}]


async def timed(n: int, fn) -> tuple[float, float]:
    """(wall seconds, client CPU seconds) for n calls of ``fn(i)`` launched at once."""
    w0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(fn(i) for i in range(n)))
    return time.perf_counter() - w0, time.process_time() - c0


async def bench_client(cfg: ModelConfig, n: int, tag: str, db: Path) -> dict[str, float]:
    client = ModelClient(db)
    await client.complete(cfg, messages(-1, tag))  # warm-up: litellm's first-call setup, HTTP pool
    miss_wall, miss_cpu = await timed(n, lambda i: client.complete(cfg, messages(i, tag)))
    assert client.stats.errors == 0, client.stats.first_errors
    hit_wall, hit_cpu = await timed(n, lambda i: client.complete(cfg, messages(i, tag)))
    assert client.stats.cached >= n
    await client.aclose()
    return {"wall": miss_wall, "cpu": miss_cpu, "hit_wall": hit_wall, "hit_cpu": hit_cpu}


async def bench_litellm(api_base: str, n: int, concurrency: int, tag: str) -> dict[str, float]:
    litellm = import_litellm()
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await litellm.acompletion(model="openai/stub", messages=messages(i, tag), api_base=api_base,
                                      api_key="sk-bench", max_retries=0, timeout=30, temperature=0.5)

    await one(-1)
    wall, cpu = await timed(n, one)
    return {"wall": wall, "cpu": cpu}


async def bench_aiohttp(api_base: str, n: int, concurrency: int, tag: str) -> dict[str, float]:
    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def one(i: int) -> None:
            async with sem:
                async with session.post(f"{api_base}/chat/completions",
                                        json={"model": "stub", "messages": messages(i, tag)}) as resp:
                    await resp.json()

        await one(-1)
        wall, cpu = await timed(n, one)
    return {"wall": wall, "cpu": cpu}


async def bench_null(n: int, concurrency: int, db: Path, repeats: int = 3) -> dict[str, float]:
    """benchfill's own path on a cache miss with the network call replaced by an instant canned reply: key hash,
    cache lookup, in-flight check, semaphore, tenacity, timeout guard, SQLite commit, accounting. Best of
    ``repeats`` (the machine is shared, so the minimum is the least disturbed measurement)."""
    from types import SimpleNamespace

    reply = SimpleNamespace(
        choices=[SimpleNamespace(message=SimpleNamespace(content="so \\boxed{1}", reasoning_content=None))],
        usage=SimpleNamespace(prompt_tokens=12, completion_tokens=4), _hidden_params={"response_cost": 0.0},
    )

    async def instant(messages, params):
        return reply

    best = {"wall": float("inf"), "cpu": float("inf")}
    for r in range(repeats):
        cfg = ModelConfig(model="openai/null", api_base="http://127.0.0.1:9/v1", api_key_env="BENCH_STUB_KEY",
                          max_concurrency=concurrency, temperature=0.5)
        client = ModelClient(db.with_name(f"{db.stem}-{r}.sqlite"))
        client._spec(cfg).call = instant  # the one private touch: swap the transport for a no-op
        wall, cpu = await timed(n, lambda i: client.complete(cfg, messages(i, f"null{r}")))
        await client.aclose()
        best = {"wall": min(best["wall"], wall), "cpu": min(best["cpu"], cpu)}
    return best


async def bench_sim(n: int, db: Path) -> dict[str, float]:
    from benchfill.data import Item
    from benchfill.models.requests import AnswerRequest
    from benchfill.models.sim import SimWorld

    world = SimWorld.from_abilities({"m": 0.5}, {}, seed=0)
    cfg = ModelConfig(model="sim/m")
    items = [Item(id=str(i), question=f"q{i}", answer=str(i), format="numeric") for i in range(n)]
    client = ModelClient(db, sim=world)
    wall, cpu = await timed(n, lambda i: client.complete(cfg, messages(i, "sim"), request=AnswerRequest(items[i])))
    await client.aclose()
    return {"wall": wall, "cpu": cpu}


async def main_async(latency: float, scale: float) -> None:
    stub, api_base = start_stub(latency)
    rows = []
    try:
        tmp = Path(tempfile.mkdtemp(prefix="benchfill-bench-"))
        for conc, n in ((1, 60), (8, 400), (64, 2000)):
            n = max(10, int(n * scale))
            cfg = ModelConfig(model="openai/stub", api_base=api_base, api_key_env="BENCH_STUB_KEY", timeout=30,
                              max_concurrency=conc, temperature=0.5)
            ours = await bench_client(cfg, n, f"c{conc}", tmp / f"c{conc}.sqlite")
            bare = await bench_litellm(api_base, n, conc, f"l{conc}")
            raw = await bench_aiohttp(api_base, n, conc, f"h{conc}")
            rows.append((conc, n, ours, bare, raw))
        null = {conc: await bench_null(max(100, int(2000 * scale)), conc, tmp / f"null{conc}.sqlite")
                for conc in (1, 64)}
        sim = await bench_sim(max(100, int(2000 * scale)), tmp / "sim.sqlite")
        sim_n = max(100, int(2000 * scale))
    finally:
        stub.terminate()
        stub.wait()

    ms = 1e3
    print(f"\nstub latency {latency * ms:.0f} ms, client on {os.cpu_count()} cores (stub in its own process)\n")
    head = (f"{'conc':>4} {'calls':>6} | {'ideal/s':>8} {'benchfill/s':>11} {'litellm/s':>9} {'aiohttp/s':>9} | "
            f"{'bf cpu/call':>11} {'litellm cpu':>11} {'aiohttp cpu':>11} {'bf own':>8} | {'hit/call':>9}")
    print(head)
    print("-" * len(head))
    for conc, n, ours, bare, raw in rows:
        ideal = conc / latency
        print(
            f"{conc:>4} {n:>6} | {ideal:>8.0f} {n / ours['wall']:>11.1f} {n / bare['wall']:>9.1f} "
            f"{n / raw['wall']:>9.1f} | {ours['cpu'] / n * ms:>8.2f} ms {bare['cpu'] / n * ms:>8.2f} ms "
            f"{raw['cpu'] / n * ms:>8.2f} ms {(ours['cpu'] - bare['cpu']) / n * ms:>5.2f} ms | "
            f"{ours['hit_wall'] / n * 1e6:>6.0f} us"
        )
    conc1 = rows[0]
    print(
        f"\nconcurrency 1, wall time beyond the {latency * ms:.0f} ms latency per call: benchfill "
        f"{(conc1[2]['wall'] / conc1[1] - latency) * ms:.2f} ms, bare litellm "
        f"{(conc1[3]['wall'] / conc1[1] - latency) * ms:.2f} ms, bare aiohttp "
        f"{(conc1[4]['wall'] / conc1[1] - latency) * ms:.2f} ms"
    )
    print(f"cache-hit path (a rerun): {conc1[2]['hit_cpu'] / conc1[1] * 1e6:.0f} us CPU per call at concurrency 1, "
          f"{rows[-1][2]['hit_cpu'] / rows[-1][1] * 1e6:.0f} us at 64")
    null_n = max(100, int(2000 * scale))
    print("benchfill's own overhead per call (cache miss, transport replaced by an instant reply, best of 3): "
          + ", ".join(f"{null[c]['cpu'] / null_n * 1e3:.2f} ms CPU / {null[c]['wall'] / null_n * 1e3:.2f} ms wall "
                      f"at concurrency {c}" for c in (1, 64)))
    print(f"simulated model (sim/...), miss incl. commit: {sim['wall'] / sim_n * 1e6:.0f} us per call")
    print("'bf own' = benchfill CPU per call minus bare litellm CPU per call; a difference of two noisy numbers on a "
          "shared machine (it can swing by +-2 ms run to run): the instant-reply line above is the clean measure.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the number of calls")
    args = parser.parse_args()
    os.environ.setdefault("BENCH_STUB_KEY", "sk-bench")
    asyncio.run(main_async(args.latency, args.scale))


if __name__ == "__main__":
    main()
