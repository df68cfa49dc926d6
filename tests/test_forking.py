"""Work forked where forking is safe: the same results whichever process computes them, nothing forked while
another thread is alive, and the command line's status line runs no thread (so `diagnose` forks its workers)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import benchfill.irt.fast as fast
from benchfill.forking import ForkedCall, forked_map, start_method
from benchfill.irt.convergence import rank_diagnostics
from benchfill.irt.fit import fit_irt
from benchfill.irt.model import SamplerSettings
from benchfill.irt.simulate import simulate_responses

needs_fork = pytest.mark.skipif(start_method() is None, reason="no fork on this OS")


def _alive_thread():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    return stop, t


@needs_fork
def test_forked_map_gives_what_a_loop_gives_and_forks_only_without_threads():
    parts = [(k, np.arange(10) * k) for k in range(3)]

    def fn(p):
        return os.getpid(), float(p[1].sum())

    if threading.active_count() == 1:  # other tests may leave a thread alive in this process
        out = forked_map(fn, parts)
        assert [v for _, v in out] == [fn(p)[1] for p in parts]
        assert out[0][0] == os.getpid() and len({pid for pid, _ in out}) == 3  # two parts ran in children
    stop, t = _alive_thread()
    try:
        out = forked_map(fn, parts)
    finally:
        stop.set()
        t.join()
    assert {pid for pid, _ in out} == {os.getpid()}  # a thread alive: nothing forked
    assert [v for _, v in out] == [fn(p)[1] for p in parts]


@needs_fork
def test_a_part_whose_child_fails_is_redone_here():
    parent = os.getpid()

    def fn(k):
        if k == 1 and os.getpid() != parent:
            raise MemoryError("the child ran out")
        return k * 10

    assert forked_map(fn, [0, 1, 2]) == [0, 10, 20]


@needs_fork
def test_a_forked_call_runs_beside_this_process_and_falls_back_here():
    """Its result comes from a child started at once (where no thread is alive); a child that fails, or is killed,
    leaves the work to this process; close() ends a child whose result is not wanted; a thread alive: no child."""
    import signal
    import time

    parent = os.getpid()
    if threading.active_count() == 1:
        call = ForkedCall(lambda: (os.getpid(), 42))
        assert call.forked
        pid, value = call.result()
        assert value == 42 and pid != parent and not call.forked

        def fails():
            if os.getpid() != parent:
                raise MemoryError("the child ran out")
            return "here"

        assert ForkedCall(fails).result() == "here"
        killed = ForkedCall(lambda: (time.sleep(30), "child")[1] if os.getpid() != parent else "here")
        os.kill(killed._proc.pid, signal.SIGKILL)
        assert killed.result() == "here"
        slow = ForkedCall(lambda: time.sleep(30))
        child = slow._proc
        started = time.perf_counter()
        slow.close()
        assert not child.is_alive() and time.perf_counter() - started < 10 and not slow.forked
        slow.close()  # idempotent
    stop, t = _alive_thread()
    try:
        call = ForkedCall(lambda: os.getpid())
        assert not call.forked and call.result() == parent
    finally:
        stop.set()
        t.join()


def test_rank_diagnostics_split_over_processes_equal_one_process():
    rng = np.random.default_rng(3)
    draws = rng.normal(size=(4, 300, 37)).cumsum(1).astype(np.float32)  # autocorrelated, so ESS is not trivial
    one = rank_diagnostics(draws, processes=1)
    split = rank_diagnostics(draws, block=8, processes=3)
    for a, b in zip(one, split):
        np.testing.assert_array_equal(a, b)


def test_fast_fit_draws_do_not_depend_on_which_process_runs_which_chain(monkeypatch):
    """Each chain draws from its own stream (seed, chain number): one process, forked workers and workers from a
    fork server give the same draws, so a notebook (threads alive) and the command line (none) agree."""
    rng = np.random.default_rng(0)
    r = simulate_responses(np.sort(rng.normal(size=12)), rng.normal(size=60), 2, seed=0)
    settings = SamplerSettings(method="fast", chains=4, tune=100, draws=150, seed=5)
    monkeypatch.setattr(fast, "available_cores", lambda: 2)
    fits = {}
    for name, method, parallel in (("one", "fork", False), ("forked", "fork", True), ("served", "forkserver", True)):
        monkeypatch.setattr(fast, "start_method", lambda m=method: m)
        big = 0 if parallel else 10**12
        monkeypatch.setattr(fast, "PARALLEL_MIN_DRAWS", big)
        monkeypatch.setattr(fast, "FORK_MIN_DRAWS", big)
        monkeypatch.setattr(fast, "PARALLEL_MIN_KEYS", big)
        fits[name] = fit_irt(r, settings=settings)
    assert [f.extra["fast"]["processes"] for f in fits.values()] == [1, 2, 2]
    for name in ("forked", "served"):
        np.testing.assert_array_equal(fits["one"].theta, fits[name].theta)
        np.testing.assert_array_equal(fits["one"].b, fits[name].b)


@needs_fork
def test_painter_draws_the_same_picture_as_this_process(tmp_path, examples):
    import benchfill as bf
    from benchfill.diagnostics.picture import Painter, write_picture
    from benchfill.diagnostics.render import picture_of

    # the demo's 12-model, 4-rollout file: the picture is under test, not the fit (the 48-model, ~1,100-rollout
    # matrix took 16-40 s of the fast lane)
    dg = bf.diagnose(bf.load_responses(examples / "math500_k4.responses.csv.gz", models=12))
    pic = picture_of(dg)
    with Painter() as painter:
        forked = painter.forked
        painter.draw(pic)
        painter.write(tmp_path / "forked.png")
    write_picture(pic, tmp_path / "here.png")
    assert (tmp_path / "forked.png").read_bytes() == (tmp_path / "here.png").read_bytes()
    if threading.active_count() == 1:
        assert forked
    # a picture that cannot be written raises here, as when drawn in this process
    (tmp_path / "dir.png").mkdir()
    with Painter() as painter:
        painter.draw(pic)
        with pytest.raises(OSError):
            painter.write(tmp_path / "dir.png")


def test_the_early_picture_is_the_saved_diagnosis_picture():
    """The picture handed over as soon as the metrics are known (``on_picture``) is the one the finished
    diagnosis draws: same difficulties, gaps, title and verdicts."""
    import benchfill as bf
    from benchfill.diagnostics.render import picture_of

    rng = np.random.default_rng(4)
    r = simulate_responses(np.linspace(-2, 2, 8), rng.normal(0, 1.5, 120), 3, seed=4)
    early = []
    dg = bf.diagnose(r, draws=300, top_gaps=7, on_picture=early.append)
    assert len(early) == 1
    final = picture_of(dg, n_gaps=len(dg.gaps))
    np.testing.assert_array_equal(early[0].d, final.d)
    assert early[0].gaps == final.gaps and early[0].title == final.title
    assert early[0].verdicts == final.verdicts and len(final.verdicts) == 3


WATCH = """
import sys, threading
import benchfill.irt.fast as fast
import benchfill.forking as forking
from benchfill.cli_support import StatusLine
seen = []
real = fast._run_parallel
def watched(job, parts, out):
    seen.append((forking.start_method(), threading.active_count(), len(parts)))
    return real(job, parts, out)
fast._run_parallel = watched
fast.FORK_MIN_DRAWS = 0
ticks = []
real_tick = StatusLine.tick
def tick(self):
    ticks.append(1)
    real_tick(self)
StatusLine.tick = tick
from benchfill.cli import app
sys.argv = ["benchfill", "diagnose", sys.argv[1], "--json", sys.argv[2], "--draws", "400"]
try:
    app()
except SystemExit as exc:
    print("SEEN", seen, len(ticks), exc.code)
"""


@needs_fork
def test_diagnose_forks_its_workers_with_no_thread_alive(tmp_path):
    """The status line is redrawn by the stages and the fit's beats, not by a thread, so the fit's workers are
    forked (a fork server costs ~1 s); the picture's process and the M1/M2 split are forked the same way."""
    rng = np.random.default_rng(1)
    r = simulate_responses(np.linspace(-2, 2, 8), rng.normal(0, 1, 200), 2, seed=1)
    path = tmp_path / "r.csv"
    r.to_long().to_csv(path, index=False)
    script = tmp_path / "watch.py"
    script.write_text(WATCH)
    proc = subprocess.run([sys.executable, str(script), str(path), str(tmp_path / "d.json")], capture_output=True,
                          text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("SEEN")]
    assert line, proc.stdout + proc.stderr
    seen = eval(line[0].split(" ", 1)[1].rsplit(" ", 2)[0])
    ticks, code = (int(v) for v in line[0].rsplit(" ", 2)[1:])
    assert code == 0, proc.stderr
    assert seen and seen[0][0] == "fork" and seen[0][1] == 1 and seen[0][2] == 2, seen
    assert ticks >= 6  # one per stage at least
    assert (tmp_path / "d.png").stat().st_size > 10_000
