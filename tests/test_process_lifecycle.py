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

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"


def children_of(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc: each process's parent)."""
    parent: dict[int, int] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        parent[int(stat.split("/")[2])] = int(fields[1])
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def alive(pid: int) -> bool:
    """Running (a zombie, waiting for its reaper, is not)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2:].split()[0] != "Z"


def shared_files(pid: int) -> list[str]:
    return glob.glob(os.path.join(SHM, f"benchfill-b-{pid}-*"))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A benchmark whose fit runs its chains in worker processes over a shared array (~10 s on 2 cores)."""
    from benchfill.irt.simulate import simulate_responses

    rng = np.random.default_rng(3)
    r = simulate_responses(np.linspace(-2, 2, 12), rng.normal(0, 1.5, 3000), 4, seed=3)
    path = tmp_path_factory.mktemp("big") / "big.csv"
    r.to_long().to_csv(path, index=False)
    return path


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
    raise AssertionError(f"never ready (rc {proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}")


@pytest.mark.slow
@pytest.mark.parametrize("signum,extra", [(signal.SIGINT, 0.3), (signal.SIGTERM, 0.1), (signal.SIGTERM, 1.5),
                                          (signal.SIGKILL, 0.5)])
def test_a_stopped_diagnose_leaves_nothing_behind(tmp_path, big, signum, extra):
    out = tmp_path / "d.json"
    proc = start(["diagnose", str(big), "--json", str(out)], tmp_path)
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
