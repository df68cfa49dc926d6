"""A child tied to its parent by ``die_with_parent`` lives as long as the parent *process*, whichever thread started
it: Linux's PR_SET_PDEATHSIG fires when the thread that forked the child ends (prctl(2)), so the local llama.cpp
server or a vLLM engine started from an ``asyncio.to_thread`` worker, a ``ThreadPoolExecutor``, LangGraph's task
threads or a ``threading.Thread`` that returns used to be killed as soon as that thread ended. Each start path runs
in a parent process of its own, which the test then SIGKILLs: the child must still run a second after its starting
thread ended, and must end when the parent is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from procs import alive

from benchfill import forking

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc (Linux)")


def gone_within(pid: int, seconds: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if not alive(pid):
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


# ---- the helper itself -------------------------------------------------------------------------------------------


def test_on_a_lasting_thread_runs_here_on_the_main_thread_else_on_one_spawner():
    assert threading.current_thread() is threading.main_thread()
    assert forking.on_a_lasting_thread(threading.get_ident) == threading.get_ident()  # main: a direct call
    seen: list[object] = []

    def from_a_thread() -> None:
        seen.append(forking.on_a_lasting_thread(lambda: (threading.current_thread().name, threading.get_ident())))
        try:
            forking.on_a_lasting_thread(lambda: 1 / 0)
        except ZeroDivisionError as exc:
            seen.append(exc)
        # a job that itself asks for the lasting thread runs there at once (no deadlock on its own queue)
        seen.append(forking.on_a_lasting_thread(lambda: forking.on_a_lasting_thread(threading.get_ident)))

    for _ in range(2):  # two short-lived threads, one after the other: the same spawner serves both
        t = threading.Thread(target=from_a_thread)
        t.start()
        t.join(10)
    (name, ident), err, nested, (name2, ident2), err2, nested2 = seen
    assert name == name2 == "benchfill-spawner" and ident == ident2 == nested == nested2
    assert ident != threading.get_ident()
    assert isinstance(err, ZeroDivisionError) and isinstance(err2, ZeroDivisionError)


# ---- each start path, in a parent process the test kills -------------------------------------------------------

# Run as ``python -c PARENT <what> <starter> <arg>``: starts the child the way ``what`` says on the thread ``starter``
# names, that thread ends, and a second later it reports the child; then it waits to be killed.
PARENT = textwrap.dedent('''
    import asyncio, concurrent.futures, contextlib, json, os, sys, threading, time
    what, starter, arg = sys.argv[1:4]
    stack = contextlib.ExitStack()
    box = {}

    if what == "local-stand-in":  # local_server() around a stand-in child: no llama.cpp needed
        import benchfill.models.local_server as ls
        ls.missing_modules = lambda: []
        ls.server_command = lambda *a, **k: ["sleep", "120"]
        ls._wait_ready = lambda server, timeout_s: None

    def start():
        box["thread"] = threading.current_thread().name
        if what in ("local-stand-in", "local-real"):
            from benchfill.models.local_server import local_server
            box["server"] = server = stack.enter_context(
                local_server(arg if what == "local-stand-in" else None, n_threads=1))
            box["pid"] = server.process.pid
        elif what == "vllm-backend":  # the engine process, asked for directly
            from types import SimpleNamespace
            from benchfill.models.vllm_backend import VLLMBackend
            box["backend"] = backend = VLLMBackend(isolate=True)
            engine = backend.engine(SimpleNamespace(model="vllm/some/model", vllm_engine={}, seed=5))
            box["pid"] = engine.process.pid

    def status():
        if what in ("local-stand-in", "local-real"):
            server = box["server"]
            ok = server.alive()
            if ok and what == "local-real":
                import httpx
                ok = httpx.get(server.api_base + "/models", timeout=10).status_code == 200
            return ok, server.process.poll()
        if what == "vllm-backend":
            engine = box["backend"]._engine
            try:
                ok = engine.process.is_alive() and engine.model_defaults().get("temperature") == 0.7
            except Exception as exc:  # its pipe's end: the engine died
                return False, f"{type(exc).__name__}: {exc}"
            return ok, engine.process.exitcode

    if what == "vllm-client":  # the real path: ModelClient._vllm_batch asks for it on an asyncio.to_thread worker,
        # and a client may serve several asyncio.run (run_sync) calls, each shutting its executor down at its end
        from benchfill.models.client import ModelClient
        from benchfill.models.config import ModelConfig
        cfg = ModelConfig(model="vllm/some/model", temperature=0.6, max_tokens=64, rollouts=1, seed=5)
        client = ModelClient(arg)
        def ask(text):
            return asyncio.run(client.complete(cfg, [{"role": "user", "content": text}])).text
        box["first"] = ask("one")
        box["thread"] = "asyncio.to_thread"
        box["pid"] = client.vllm._engine.process.pid
        def status():
            try:
                return ask("two") == "two", client.vllm._engine.process.exitcode
            except Exception as exc:
                return False, f"{type(exc).__name__}: {exc}"
    elif starter == "main":
        start()
    elif starter == "thread":
        t = threading.Thread(target=start)
        t.start()
        t.join()
    elif starter == "to_thread":  # asyncio.run shuts its default executor down (its threads end) before returning
        async def go():
            await asyncio.to_thread(start)
        asyncio.run(go())
    elif starter == "executor":
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(start).result()
    elif starter == "langgraph":  # two tasks in one step: LangGraph runs them on a pool of its own for that step
        import operator
        from typing import Annotated, TypedDict
        from langgraph.graph import END, START, StateGraph
        class S(TypedDict):
            x: Annotated[list, operator.add]
        def node_a(s):
            start()
            return {"x": ["a"]}
        def node_b(s):
            time.sleep(0.2)
            return {"x": ["b"]}
        g = StateGraph(S)
        g.add_node("a", node_a)
        g.add_node("b", node_b)
        g.add_edge(START, "a")
        g.add_edge(START, "b")
        g.add_edge("a", END)
        g.add_edge("b", END)
        g.compile().invoke({"x": []})
    print(json.dumps({"pid": box["pid"], "thread": box["thread"]}), flush=True)
    time.sleep(1.0)
    ok, code = status()
    print(json.dumps({"alive": bool(ok), "code": code}), flush=True)
    time.sleep(600)  # until the test kills this process
''')


@pytest.fixture
def kill_after():
    """PIDs killed (SIGKILL) when the test ends, passed or failed: nothing it started is left running."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_parent(what: str, starter: str, arg: str, kill_after: list[int], *, env: dict[str, str] | None = None,
               timeout: float = 120.0, gone_s: float = 10.0) -> dict[str, object]:
    """Start the parent, read what it says of its child, SIGKILL it and time the child's end."""
    import json

    t0 = time.monotonic()
    parent = subprocess.Popen([sys.executable, "-c", PARENT, what, starter, arg], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    kill_after.append(parent.pid)
    assert parent.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(parent.stdout), daemon=True)  # type: ignore[union-attr]
    reader.start()
    while len(lines) < 2 and parent.poll() is None and time.monotonic() - t0 < timeout:
        time.sleep(0.05)
    if len(lines) < 2:
        parent.kill()
        _, err = parent.communicate(timeout=30)
        raise AssertionError(f"the parent said {lines!r} (rc {parent.returncode}): {err}")
    started, report = json.loads(lines[0]), json.loads(lines[1])
    child = int(started["pid"])
    kill_after.insert(0, child)
    out = {**started, **report, "up_s": round(time.monotonic() - t0, 2)}
    out["child_alive_before_kill"] = alive(child)
    assert alive(parent.pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=30)
    out["gone_after_parent_killed_s"] = gone_within(child, gone_s)
    print(out)
    return out


STARTERS = ["main", "thread", "to_thread", "executor", pytest.param("langgraph", marks=pytest.mark.slow)]


@pytest.mark.parametrize("starter", STARTERS)
def test_a_local_server_started_on_any_thread_outlives_it_and_dies_with_its_process(tmp_path, starter, kill_after):
    """local_server() entered on a thread that then ends (a stand-in child for llama.cpp's server): the server
    still runs a second later, and ends (PDEATHSIG's SIGTERM) when its parent process is SIGKILLed."""
    model = tmp_path / "stand-in.gguf"
    model.write_bytes(b"GGUF")
    out = run_parent("local-stand-in", starter, str(model), kill_after)
    assert (out["thread"] == "MainThread") == (starter == "main")
    assert out["alive"] and out["child_alive_before_kill"], \
        f"the server died with the thread that started it ({out['thread']}): exit {out['code']}"
    assert out["gone_after_parent_killed_s"] is not None, "the server outlived its SIGKILLed parent"


def _local_reason() -> str | None:
    from benchfill.models.local_server import unavailable_reason

    return unavailable_reason()


@pytest.mark.slow  # > 2 s
@pytest.mark.skipif(_local_reason() is not None, reason=f"local LLM lane skipped: {_local_reason()}")
def test_the_real_local_server_started_on_a_thread_that_returns_keeps_serving_and_dies_with_its_process(
        kill_after):
    """The bundled llama.cpp server (up in ~1-2 s): entered on a threading.Thread that returns, it still answers
    /v1/models a second later, and ends when its parent is SIGKILLed (SIGTERM; uvicorn's shutdown)."""
    out = run_parent("local-real", "thread", "", kill_after, timeout=240, gone_s=15)
    assert out["alive"] and out["child_alive_before_kill"], \
        f"the server died with the thread that started it: exit {out['code']}"
    assert out["gone_after_parent_killed_s"] is not None, "the server outlived its SIGKILLed parent"


FAKE_VLLM = textwrap.dedent('''
    class SamplingParams:
        def __init__(self, n=1, max_tokens=16, seed=None, **kw):
            self.n, self.max_tokens, self.seed = n, max_tokens, seed
            for k, v in kw.items():
                setattr(self, k, v)

    class _Out:
        def __init__(self, text):
            self.text, self.token_ids, self.finish_reason = text, [1, 2], "stop"

    class _Req:
        def __init__(self, text):
            self.prompt_token_ids, self.outputs = [1, 2, 3], [_Out(text)]

    class LLM:
        def __init__(self, model, **kw):
            self.model = model

        def get_default_sampling_params(self):
            return SamplingParams(temperature=0.7)

        def chat(self, messages, sampling_params=None, use_tqdm=True, **kw):
            return [_Req(conv[-1]["content"]) for conv in messages]
''')


@pytest.fixture
def fake_vllm_env(tmp_path) -> dict[str, str]:
    """An environment whose Python (the parent, and the engine process it spawns) imports a stand-in ``vllm``."""
    pkg = tmp_path / "fakevllm"
    pkg.mkdir()
    (pkg / "vllm.py").write_text(FAKE_VLLM)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(pkg), os.environ.get("PYTHONPATH")) if p)}


@pytest.mark.parametrize("starter", ["main", "thread", "to_thread"])
def test_a_vllm_engine_started_on_any_thread_outlives_it_and_dies_with_its_process(tmp_path, starter, kill_after,
                                                                                     fake_vllm_env):
    """VLLMBackend's engine process (spawned; a stand-in vllm module, no GPU) asked for on a thread that then ends:
    it still answers a second later, and ends (SIGTERM) when its parent process is SIGKILLed."""
    out = run_parent("vllm-backend", starter, "", kill_after, env=fake_vllm_env)
    assert out["alive"] and out["child_alive_before_kill"], \
        f"the engine died with the thread that started it ({out['thread']}): exit {out['code']}"
    assert out["gone_after_parent_killed_s"] is not None, "the engine outlived its SIGKILLed parent"


@pytest.mark.slow  # ~2 s
def test_a_model_client_keeps_its_vllm_engine_from_one_asyncio_run_to_the_next(tmp_path, kill_after, fake_vllm_env):
    """The path the models layer takes: ModelClient._vllm_batch asks for the engine on an asyncio.to_thread worker;
    a client used by two asyncio.run calls (run_sync from a script or a notebook) still has its engine in the
    second, and the engine ends when the parent is SIGKILLed."""
    out = run_parent("vllm-client", "to_thread", str(tmp_path / "calls.sqlite"), kill_after, env=fake_vllm_env)
    assert out["alive"] and out["child_alive_before_kill"], \
        f"the engine died after the first asyncio.run: {out['code']}"
    assert out["gone_after_parent_killed_s"] is not None, "the engine outlived its SIGKILLed parent"
