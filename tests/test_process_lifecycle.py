"""Nothing outlives a killed command (issue 27): a command stopped by SIGINT, SIGTERM or SIGKILL leaves no process
of its tree running and no shared-memory file of its own; a rerun completes (and sweeps what a SIGKILL left)."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from procs import alive, process_table

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"


def children_of(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc: each process's parent)."""
    parent = {p: pp for p, (pp, _) in process_table().items()}
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def shared_files(pid: int) -> list[str]:
    return glob.glob(os.path.join(SHM, f"benchfill-b-{pid}-*"))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A benchmark whose fit runs its chains in worker processes over a shared array (12 x 3,000; its whole
    diagnose 2.3 s on a quiet 2-core machine)."""
    from benchfill.irt.simulate import simulate_responses

    rng = np.random.default_rng(3)
    r = simulate_responses(np.linspace(-2, 2, 12), rng.normal(0, 1.5, 3000), 4, seed=3)
    path = tmp_path_factory.mktemp("big") / "big.csv"
    r.to_long().to_csv(path, index=False)
    return path


@pytest.fixture
def reap():
    """Commands a test starts (each in its own session): any still running when the test ends, passed or failed,
    is killed with its process group, so a failed test leaves no server behind."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchfill.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def watch_until(proc: subprocess.Popen, ready, timeout: float = 120.0) -> set[int]:
    """Descendants seen while waiting for ``ready()`` (polled every 0.05 s)."""
    seen: set[int] = set()
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        seen |= children_of(proc.pid)
        if ready():
            return seen | children_of(proc.pid)
        time.sleep(0.05)
    raise AssertionError(f"never ready (rc {proc.poll()}): {proc.stderr.read() if proc.stderr and proc.poll() is not None else ''}")


@pytest.mark.slow
@pytest.mark.parametrize("signum,extra", [(signal.SIGINT, 0.3), (signal.SIGTERM, 0.1), (signal.SIGTERM, 1.5),
                                          (signal.SIGKILL, 0.5)])
def test_a_stopped_diagnose_leaves_nothing_behind(tmp_path, big, signum, extra):
    out = tmp_path / "d.json"
    # 4,000 draws a chain keep the workers running ~2.9 s on a quiet 2-core machine (the default 1,000: ~1.2 s, and
    # the whole command 2.3 s, so a signal 1.5 s in could come after the fit; one CI run saw exit 0 so)
    proc = start(["diagnose", str(big), "--json", str(out), "--draws", "4000"], tmp_path)
    seen = watch_until(proc, lambda: bool(shared_files(proc.pid)) and len(children_of(proc.pid)) >= 2)
    time.sleep(extra)  # a moment inside the workers' run
    seen |= children_of(proc.pid)
    assert seen, "the fit ran no worker process"
    os.kill(proc.pid, signum)  # the command only, as a scheduler or the OOM killer does: not its process group
    _, err = proc.communicate(timeout=60)
    time.sleep(2.0)  # grace: a child that ends with its parent has ended by now
    left = sorted(p for p in seen if alive(p))
    assert not left, f"still running after {signal.Signals(signum).name}: {left}"
    if signum == signal.SIGKILL:
        orphans = shared_files(proc.pid)  # nothing can unlink on SIGKILL: the next fit sweeps it
    else:
        assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum], err
        assert "Traceback" not in err, err
        assert not shared_files(proc.pid), "the shared array outlived the command"
        orphans = []
    assert not out.exists(), "a stopped diagnose wrote a partial JSON"
    again = subprocess.run([sys.executable, "-m", "benchfill.cli", "diagnose", str(big), "--json", str(out)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert out.exists() and not any(os.path.exists(f) for f in orphans)


@pytest.mark.slow
def test_a_fill_stopped_by_sigterm_or_sigkill_resumes_to_the_same_result(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_fill import make_benchmark, write_config

    items, resp = make_benchmark(tmp_path)
    cfg = write_config(tmp_path, max_rounds=2)
    base = ["fill", str(items), "--responses", str(resp), "--config", str(cfg), "--models", "6",
            "--gaps", "2"]
    ref = subprocess.run([sys.executable, "-m", "benchfill.cli", *base, "--out", str(tmp_path / "ref")],
                         capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr[-2000:]
    for signum in (signal.SIGTERM, signal.SIGKILL):
        run = tmp_path / f"run-{signum}"
        proc = start([*base, "--out", str(run)], tmp_path)
        seen = watch_until(proc, lambda: (run / "labels").exists())  # the search has started labelling
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=60)
        time.sleep(2.0)
        assert not [p for p in seen if alive(p)]
        if signum == signal.SIGTERM:
            assert proc.returncode == 143 and "Traceback" not in err, err
            assert "terminated (SIGTERM)" in err and "--resume" in err, err
        done = subprocess.run([sys.executable, "-m", "benchfill.cli", *base, "--out", str(run), "--resume"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        import json

        mine = json.loads((run / "summary.json").read_text())["methods"]["benchfill"]["gaps"]
        theirs = json.loads((tmp_path / "ref" / "summary.json").read_text())["methods"]["benchfill"]["gaps"]
        assert [g["chosen"] for g in mine] == [g["chosen"] for g in theirs]


# ---- designers run: the simulated world (tests/test_designers_cli.py's TINY), killed at seeded moments ----------

# quota shares that sum to 1: the run prints no warning, so a stopped run's whole output is its one line
DESIGNERS_QUOTAS = "total: 8\nformats: {numeric: 0.5, mcq: 0.25, math: 0.25}\ndifficulty: {L1: 0.4, L3: 0.3, L5: 0.3}\n"
# what an unbroken run writes that depends on its inputs only (report.json is compared without its timings)
DESIGNERS_SAME = ("plan.json", "suite.jsonl", "generation.json", "seed.json", "seed_responses.csv", "answers.jsonl",
                  "verdicts.jsonl", "matrix.csv", "core.jsonl")


def cli(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchfill.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=env)


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def report_content(path: Path) -> object:
    """report.json without what varies between two identical runs: timings, and the last bits of sums taken in
    set order (``total_variation`` sums over ``set(p) | set(q)``, whose order is the process's string hashing)."""
    def norm(x: object) -> object:
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items() if k != "wall_time_s"}
        if isinstance(x, list):
            return [norm(v) for v in x]
        return float(f"{x:.12g}") if isinstance(x, float) else x

    import json

    return norm(json.loads(path.read_text()))


@pytest.fixture(scope="module")
def designers_ref(tmp_path_factory, examples):
    """A card, the TINY config, and the run folder of one unbroken run (~20-30 s on 2 shared cores)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_designers_cli import TINY

    folder = tmp_path_factory.mktemp("designers")
    lines = (examples / "math500.items.jsonl").read_text().splitlines()
    (folder / "items.jsonl").write_text("".join(line + "\n" for line in lines[:24]))
    (folder / "cfg.toml").write_text(TINY)
    (folder / "q.yaml").write_text(DESIGNERS_QUOTAS)
    made = cli("designers", "card", folder / "items.jsonl", "--out", folder / "card.yaml", cwd=folder)
    assert made.returncode == 0, made.stderr[-2000:]
    args = ["designers", "run", "--card", str(folder / "card.yaml"), "--quotas", str(folder / "q.yaml"), "--config",
            str(folder / "cfg.toml"), "--seed-limit", "6", "--out"]
    ref = cli(*args, folder / "ref", cwd=folder)
    assert ref.returncode == 0, ref.stderr[-2000:]
    assert "warning" not in ref.stdout and "calls made 0" not in ref.stdout, ref.stdout
    return folder, args


@pytest.mark.slow
# the suite's time budget keeps three moments and signals (each case ~13-16 s); a SIGTERM while compiling (passed
# when it was run) behaves as the SIGINT in the report stage does
@pytest.mark.parametrize("signum,moment,extra", [
    # the report stage: the IRT fit (PyMC MAP), bootstraps; 0.3 s in (at 1.0 s one CI run found the report
    # already written, with the fit's compiled code cached)
    (signal.SIGINT, "verdicts.jsonl", 0.3),
    (signal.SIGTERM, "suite.jsonl", 0.0),  # just generated: the seed, answer and judge stages
    (signal.SIGKILL, "cc1plus", 0.0),  # PyTensor compiling the fit's C code (a cold compile cache): g++ children
], ids=["int-report", "term-after-generate", "kill-compiling"])
def test_a_stopped_designers_run_leaves_nothing_behind_and_resumes(tmp_path, designers_ref, signum, moment, extra,
                                                                   reap):
    folder, args = designers_ref
    out = tmp_path / "run"
    env = dict(os.environ)
    if moment == "cc1plus":  # a compile cache of its own: the fit's C code is compiled, in g++ processes
        env["PYTENSOR_FLAGS"] = ",".join(filter(None, [env.get("PYTENSOR_FLAGS"), f"compiledir={tmp_path / 'pt'}"]))
    proc = subprocess.Popen([sys.executable, "-m", "benchfill.cli", *args, str(out)], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    reap.append(proc)
    if moment == "cc1plus":
        seen = watch_until(proc, lambda: any(comm(p) == "cc1plus" for p in children_of(proc.pid)), timeout=300)
    else:
        seen = watch_until(proc, lambda: (out / moment).exists(), timeout=300)
    time.sleep(extra)
    seen |= children_of(proc.pid)
    assert proc.poll() is None, "the run ended before the chosen moment"
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the whole foreground process group
    else:
        os.kill(proc.pid, signum)  # the command only, as a scheduler or the OOM killer does
    stdout, err = proc.communicate(timeout=120)
    time.sleep(2.0)  # grace: a child that ends with its parent has ended by now
    left = sorted((p, comm(p)) for p in seen if alive(p))
    assert not left, f"still running after {signal.Signals(signum).name}: {left}"
    assert not shared_files(proc.pid)
    assert not (out / "report.json").exists(), "the report was written before the stop: the moment came too late"
    if signum != signal.SIGKILL:
        assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum], err
        said = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}[signum]
        assert err.strip() == f"{said}: finished stages and answers so far are kept; rerun the same command to " \
                              "continue", err
        assert stdout.strip() == "", stdout
        assert not list(out.glob(".*.tmp")), "a temporary file outlived the stop"
    # the rerun (the default compile cache: compiling again is not what is tested) continues to the same result
    again = cli(*args, out, cwd=folder)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "stages reused: plan" in " ".join(again.stdout.split()), again.stdout
    if moment != "suite.jsonl":  # every model call was made before the report stage: the rerun makes none
        assert "calls made 0," in again.stdout, again.stdout
    ref = folder / "ref"
    for name in DESIGNERS_SAME:
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    # every stage finished, with the unbroken run's inputs (the graph's last checkpoint)
    from benchfill.designers.pipeline import STAGES, stage_records

    assert list(stage_records(out)) and stage_records(out) == stage_records(ref)
    assert set(stage_records(out)) == set(STAGES)
    assert report_content(out / "report.json") == report_content(ref / "report.json")
    assert not list(out.glob(".*.tmp"))


# ---- local-server: llama.cpp's server (a child in its own session) ends with the command ------------------------


def local_reason() -> str | None:
    from benchfill.models.local_server import unavailable_reason

    return unavailable_reason()


LOCAL = local_reason()
needs_local = pytest.mark.skipif(LOCAL is not None, reason=f"local LLM lane skipped: {LOCAL}")


def read_lines(stream, into: list[str]):
    """Collect ``stream``'s lines in a thread (the command's stdout, read while the test watches it)."""
    import threading

    def pump() -> None:
        for line in stream:
            into.append(line)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def finish(proc: subprocess.Popen, reader) -> str:
    """Wait for ``proc`` (stdout read by ``reader``); its standard error."""
    proc.wait(timeout=60)
    reader.join(timeout=10)
    return proc.stderr.read() if proc.stderr else ""


def start_local_server(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, list[str], object]:
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}  # where its temporary log folder goes
    (tmp_path / "tmp").mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "benchfill.cli", "local-server", "--port", "0", "--threads", "1",
                             *extra], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    lines: list[str] = []
    return proc, lines, read_lines(proc.stdout, lines)


def llama_children(pid: int) -> dict[int, int]:
    """The command's llama.cpp server processes, with the port each was told to serve on."""
    out = {}
    for p in children_of(pid):
        try:
            argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"llama_cpp.server" in argv:
            out[p] = int(argv[argv.index(b"--port") + 1])
    return out


def gone_within(pids, seconds: float) -> float | None:
    """Seconds until none of ``pids`` runs, or None if some still run after ``seconds``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if not any(alive(p) for p in pids):
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


@needs_local
@pytest.mark.slow
@pytest.mark.parametrize("signum,moment", [(signal.SIGINT, "serving"), (signal.SIGKILL, "serving"),
                                           (signal.SIGTERM, "starting")])
def test_a_stopped_local_server_leaves_no_server_and_frees_its_port(tmp_path, signum, moment, reap):
    from benchfill.models.local_server import port_in_use

    proc, lines, reader = start_local_server(tmp_path)
    reap.append(proc)
    servers: dict[int, int] = {}

    def ready() -> bool:
        servers.update(llama_children(proc.pid))
        return bool(servers) and (moment == "starting" or any("serving" in line for line in lines))

    seen = watch_until(proc, ready, timeout=300)
    seen |= children_of(proc.pid)
    if moment == "starting":
        assert not any("serving" in line for line in lines), "the server was up before the chosen moment"
    else:
        port = int(next(line for line in lines if "serving" in line).split("127.0.0.1:")[1].split("/")[0])
        assert list(servers.values()) == [port] and port_in_use(port)
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)  # Ctrl-C reaches the terminal's process group; the server has its own session
    else:
        os.kill(proc.pid, signum)
    err = finish(proc, reader)
    took = gone_within(seen, 12.0)  # SIGTERM, then SIGKILL after 10 s (LocalServer.stop); PDEATHSIG's SIGTERM
    assert took is not None, f"still running after {signal.Signals(signum).name}: " \
                             f"{sorted((p, comm(p)) for p in seen if alive(p))}"
    time.sleep(2.0 - min(took, 2.0))  # the brief grace every test here gives
    assert not [p for p in seen if alive(p)]
    assert not any(port_in_use(port) for port in servers.values()), "the port is still taken"
    assert "Traceback" not in err, err
    if signum != signal.SIGKILL:  # a server's normal stop: one line, exit 0 (as `benchfill view`)
        assert proc.returncode == 0, err
        assert lines[-1].strip() == "stopped" and err.strip() == "", (lines, err)
    left = list((tmp_path / "tmp").iterdir())
    assert not left, f"its temporary log outlived it: {left}"


@needs_local
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_an_evaluate_stopped_mid_reply_then_its_local_server_stopped(tmp_path, examples, signum, reap):
    """`evaluate` against `benchfill local-server` (as tests/test_local_llm.py runs it), stopped while a reply is
    being written; then the server, still writing the abandoned reply, is stopped the same way."""
    import sqlite3

    from benchfill.models.local_server import port_in_use

    server, lines, reader = start_local_server(tmp_path)
    reap.append(server)
    watch_until(server, lambda: any("serving" in line for line in lines), timeout=300)
    srv = llama_children(server.pid)
    (port,) = srv.values()
    items = sorted((examples / "math500.items.jsonl").read_text().splitlines(), key=len)[:3]
    (tmp_path / "items.jsonl").write_text("".join(line + "\n" for line in items))
    (tmp_path / "local.toml").write_text(
        f'[defaults]\napi_base = "http://127.0.0.1:{port}/v1"\ntimeout = 120\nmax_retries = 1\nmax_concurrency = 2\n'
        '[[panel]]\nname = "smollm2"\nmodel = "hosted_vllm/smollm2-135m"\ntemperature = 0.7\nmax_tokens = 256\n'
        'rollouts = 2\n')
    out = tmp_path / "out"
    ev = start(["evaluate", str(tmp_path / "items.jsonl"), "--config", str(tmp_path / "local.toml"), "--out",
                str(out)], tmp_path)
    reap.append(ev)

    def replied() -> bool:  # one reply is in the call cache: the next ones are being written
        try:
            with sqlite3.connect(f"file:{out / 'calls.sqlite'}?mode=ro", uri=True, timeout=0.2) as con:
                return con.execute("SELECT count(*) FROM calls").fetchone()[0] >= 1
        except sqlite3.Error:
            return False

    seen = watch_until(ev, replied, timeout=300)
    t0 = time.monotonic()
    os.kill(ev.pid, signum)
    _, err = ev.communicate(timeout=60)
    print(f"evaluate ended {time.monotonic() - t0:.2f} s after {signal.Signals(signum).name}: {err.strip()!r}")
    if signum == signal.SIGTERM:
        assert ev.returncode == 143 and "Traceback" not in err, err
        assert err.strip().startswith("terminated (SIGTERM)") and len(err.strip().splitlines()) == 1, err
    assert gone_within(seen, 2.0) is not None
    assert not (out / "responses.csv").exists(), "a stopped evaluate wrote its responses"
    # the server outlives its client (it is not evaluate's child) and still answers
    assert server.poll() is None and all(alive(p) for p in srv) and port_in_use(port)
    t0 = time.monotonic()
    os.kill(server.pid, signum)
    finish(server, reader)
    took = gone_within(srv, 12.0)
    print(f"local-server ended {time.monotonic() - t0:.2f} s after {signal.Signals(signum).name} (rc "
          f"{server.returncode}), its llama.cpp server {took} s later; server output: {lines[-3:]}")
    assert took is not None, f"the llama.cpp server outlived `local-server` ({signal.Signals(signum).name})"
    assert not port_in_use(port)


def test_a_server_whose_parent_ended_before_its_exec_does_not_start():
    """The race between fork and prctl(PR_SET_PDEATHSIG): a child whose parent is not the one that forked it (it
    ended in between, the child was re-parented) ends before its exec instead of serving for ever."""
    import functools

    from benchfill.models.local_server import _die_with_parent

    t0 = time.monotonic()
    proc = subprocess.Popen(["sleep", "30"], preexec_fn=functools.partial(_die_with_parent, 1))  # 1: not its parent
    assert proc.wait(timeout=10) == 0 and time.monotonic() - t0 < 10
    mine = subprocess.Popen(["sleep", "30"], preexec_fn=functools.partial(_die_with_parent, os.getpid()))
    try:
        assert mine.poll() is None  # its real parent: it runs
    finally:
        mine.kill()
        mine.wait()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_caught_inside_code_built_from_a_string_keeps_the_commands_exit_code(signum):
    """CPython ends a process by re-raising SIGINT (return code -2, its own exit code ignored) when a plain
    KeyboardInterrupt was raised inside ``exec``/``eval`` of a string, even if a caller caught it: dataclasses and
    many imports run code so, and local-server, stopped while importing httpx, exited -2 after printing "stopped".
    The CLI's handlers raise subclasses, which that exact-type test does not see."""
    script = (
        "import os, signal, sys\n"
        "from benchfill.cli_support import install_sigint_handler\n"
        "install_sigint_handler()\n"
        "try:\n"
        f"    exec('os.kill(os.getpid(), {int(signum)})\\nfor _ in range(10**6): pass')\n"
        "except KeyboardInterrupt as exc:\n"
        "    print(type(exc).__name__)\n"
    )  # and it ends normally: exit code 0
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() == ("Terminated" if signum == signal.SIGTERM else "Interrupted")


def run_command_script(body: str) -> subprocess.CompletedProcess:
    """Run ``body`` (which defines ``command``, decorated with friendly_errors) in a fresh interpreter with the
    command's stop handlers installed, calling ``command()`` as the CLI does: typer.Exit becomes the exit code."""
    script = ("import atexit, os, signal, sys, typer\n"
              "from benchfill.cli_support import friendly_errors, install_sigint_handler\n"
              "install_sigint_handler()\n" + body
              + "try:\n    command()\nexcept typer.Exit as exc:\n    sys.exit(exc.exit_code)\n")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_a_stop_that_lands_while_a_class_is_built_is_still_one_line_and_its_exit_code():
    """A SIGTERM that arrives while an import defines a dataclass (local-server importing httpx, which imports
    rich.progress) reaches the command wrapped: Python 3.11 re-raises it from ``__set_name__`` as a RuntimeError.
    The command still says "terminated (SIGTERM)" in one line and exits 143, no traceback."""
    done = run_command_script(
        "class Field:\n"
        "    def __set_name__(self, owner, name):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        for _ in range(10**6): pass\n"
        "@friendly_errors\n"
        "def command():\n"
        "    class Task:\n"
        "        fields = Field()\n"
    )
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert done.stderr.strip() == "terminated (SIGTERM)", done.stderr


def test_a_stop_that_lands_while_an_extension_initialises_is_one_line_130_and_no_teardown():
    """Ctrl-C while an extension module initialises (seen: `designers run` importing pymc, whose matplotlib's
    ft2font was half built) reaches the command as ImportError("initialization failed") caused by the stop. The
    command says "interrupted" in one line and exits 130 after the exit handlers, without the interpreter's teardown,
    which aborted the process (SIGABRT) on the half-built module: here a module global's __del__ stands for that
    teardown and must not run, an atexit handler must."""
    done = run_command_script(
        "atexit.register(lambda: print('exit handlers ran', flush=True))\n"
        "class Teardown:\n"
        "    def __del__(self):\n"
        "        print('teardown ran', flush=True)\n"
        "kept = Teardown()\n"
        "@friendly_errors\n"
        "def command():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        for _ in range(10**6): pass\n"
        "    except KeyboardInterrupt as exc:\n"
        "        raise ImportError('initialization failed') from exc\n"
    )
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.strip() == "interrupted", done.stderr
    assert done.stdout.split() == ["exit", "handlers", "ran"], done.stdout


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_ends_the_event_loop_even_when_a_task_ignores_its_cancellation(signum):
    """After Ctrl-C / SIGTERM the loop's other tasks are cancelled and given STOP_GRACE_S to end, not forever: a
    task that swallows its cancellation (seen once: a fill stopped by SIGTERM waited for one for over an hour)
    is left behind, the stop reaches the caller, and nothing is printed about the abandoned task."""
    script = (
        "import asyncio, os, signal, sys, time\n"
        "import benchfill.aio as aio\n"
        "from benchfill.cli_support import install_sigint_handler\n"
        "install_sigint_handler()\n"
        "aio.STOP_GRACE_S = 0.5\n"
        "async def stubborn():\n"
        "    while True:\n"
        "        try:\n"
        "            await asyncio.sleep(10)\n"
        "        except asyncio.CancelledError:\n"
        "            continue\n"
        "async def main():\n"
        "    asyncio.get_running_loop().create_task(stubborn())\n"
        "    await asyncio.sleep(0.1)\n"
        f"    os.kill(os.getpid(), {int(signum)})\n"
        "    await asyncio.sleep(10)\n"
        "t = time.monotonic()\n"
        "try:\n"
        "    aio.run_sync(main())\n"
        "except KeyboardInterrupt as exc:\n"
        "    print(type(exc).__name__, round(time.monotonic() - t, 1))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    name, took = done.stdout.split()
    assert name == ("Terminated" if signum == signal.SIGTERM else "Interrupted")
    assert float(took) < 5.0
    assert done.stderr == "", done.stderr
