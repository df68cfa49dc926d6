"""Symbolic grading off the event loop, in a worker process with a real timeout (issue 24): a pathological comparison
ends within the limit on the main thread, on another thread and inside a running event loop; the worker is
replaced after a timeout; the loop keeps running while a grade waits; no worker outlives its close."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from procs import alive, process_table

from benchfill.data import Item
from benchfill.models import grading, symbolic
from benchfill.models.grading import Grader, MathOutcome, grade, is_form_failure

LIMIT = 1.0  # the timeout these tests grade under (the default, grading.SYMBOLIC_TIMEOUT, is 5 s)
MARGIN = 1.5  # what killing the worker may add, on a loaded machine
# a real pathological pair: math-verify expands both powers (measured here: exponent 30 takes 10 s, 40 takes 30 s,
# 80 was still running when stopped at 15 s), and sympy's simplify is slower still
SLOW = ("(x+y+z)^{80}", "(x+y+z+1)^{80}")
EASY = ("x^2+2x+1", "(x+1)^2")  # equal, but only symbolically: it needs the worker
SLOW_VALUE = "\\prod_{n=1}^{3000} (1+\\frac{1}{n^2})"  # a closed form whose value sympy works out exactly: > 20 s

pytestmark = pytest.mark.timeout(120)  # a regression fails here rather than hanging (SLOW would run for minutes)


def children() -> dict[int, str]:
    """This process's child processes (pid -> state letter; a zombie, "Z", is one not yet waited for)."""
    return {pid: state for pid, (parent, state) in process_table().items() if parent == os.getpid()}


def assert_gone(pids: list[int]) -> None:
    left = {pid: state for pid, state in children().items() if pid in pids}
    assert not left, f"worker processes left behind: {left}"


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test: a limit of LIMIT seconds, empty memos, no worker before; after it, every worker it started is
    closed and gone (waited for: no zombie)."""
    pytest.importorskip("math_verify")
    if not os.path.isdir("/proc"):
        pytest.skip("needs /proc to see child processes")
    monkeypatch.setattr(grading, "SYMBOLIC_TIMEOUT", LIMIT)
    grading.close_symbolic_workers()
    grading._math_outcome_memo.cache_clear()
    grading._latex_value_memo.cache_clear()
    seen: set[int] = set()
    original = symbolic._Worker.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.add(self.pid)

    monkeypatch.setattr(symbolic._Worker, "__init__", recording)
    yield seen
    grading.close_symbolic_workers()
    grading._math_outcome_memo.cache_clear()
    grading._latex_value_memo.cache_clear()
    assert grading.symbolic_worker_pids() == []
    assert_gone(sorted(seen))


def timed(fn, *args):
    start = time.monotonic()
    value = fn(*args)
    return value, time.monotonic() - start


def warm() -> int:
    """Start a worker (its start is not part of any comparison's time) and return its pid."""
    assert grading.symbolic_outcome(*EASY) is MathOutcome.EQUAL
    [pid] = grading.symbolic_worker_pids()
    return pid


def test_pathological_comparison_times_out_on_the_main_thread():
    assert threading.current_thread() is threading.main_thread()
    warm()
    outcome, took = timed(grading.symbolic_outcome, *SLOW)
    assert outcome is MathOutcome.TIMED_OUT
    assert took < LIMIT + MARGIN, took


@pytest.mark.slow  # > 2 s: the full suite (CI) runs it, the fast lane does not
def test_pathological_comparison_times_out_on_another_thread():
    box = {}

    def run():
        warm()
        box["outcome"], box["took"] = timed(grading.symbolic_outcome, *SLOW)

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive()
    assert box["outcome"] is MathOutcome.TIMED_OUT
    assert box["took"] < LIMIT + MARGIN, box["took"]


@pytest.mark.slow  # > 2 s: the full suite (CI) runs it, the fast lane does not
def test_pathological_grade_times_out_inside_a_running_event_loop():
    item = Item(id="q", question="Expand.", answer=SLOW[0], format="math")
    response = f"So the answer is $\\boxed{{{SLOW[1]}}}$."

    async def main():
        await asyncio.to_thread(warm)
        direct, took_direct = timed(grade, item, response)  # the synchronous API, called on the loop itself
        grading._math_outcome_memo.cache_clear()
        await asyncio.to_thread(warm)
        start = time.monotonic()
        via_grader = await Grader().grade(item, response)
        return direct, took_direct, via_grader, time.monotonic() - start

    direct, took_direct, via_grader, took_grader = asyncio.run(main())
    for result, took in ((direct, took_direct), (via_grader, took_grader)):
        assert took < LIMIT + MARGIN, took
        # a documented outcome: a counted wrong answer (not a skip), the reason naming it, not a form failure
        assert result.label == "incorrect" and result.counted and result.score == 0.0
        assert result.method == "math" and result.extracted == SLOW[1]
        assert result.reason == f"symbolic comparison timed_out after {LIMIT:g} s: not shown equal"
        assert not is_form_failure(result) and not result.retryable


@pytest.mark.slow  # > 2 s: the full suite (CI) runs it, the fast lane does not
def test_a_closed_form_whose_value_takes_too_long_is_a_timed_out_numeric_answer():
    warm()
    result, took = timed(grade, Item(id="q", question="?", answer="3", format="numeric"), f"\\boxed{{{SLOW_VALUE}}}")
    assert took < LIMIT + MARGIN, took
    assert (result.label, result.method, result.extracted) == ("incorrect", "numeric", SLOW_VALUE)
    assert result.reason == f"symbolic comparison timed_out after {LIMIT:g} s: not shown equal"
    warm()
    value, took = timed(grading.latex_value, SLOW_VALUE)  # memoised: no second wait
    assert value is None and took < 0.1
    assert grading.latex_value("2\\sqrt{2}") == pytest.approx(2 * 2 ** 0.5)


@pytest.mark.slow  # > 2 s: the full suite (CI) runs it, the fast lane does not
def test_the_worker_is_replaced_after_a_timeout():
    first = warm()
    assert grading.symbolic_outcome(*SLOW) is MathOutcome.TIMED_OUT
    assert grading.symbolic_worker_pids() == []  # killed and dropped at once
    assert_gone([first])  # and waited for
    second = warm()  # the next ordinary comparison works, in a fresh worker
    assert second != first
    assert grading.symbolic_outcome("\\frac{1}{x}", "x") is MathOutcome.NOT_EQUAL
    assert grading.symbolic_worker_pids() == [second]  # reused


@pytest.mark.slow  # > 2 s: the full suite (CI) runs it, the fast lane does not
def test_the_event_loop_keeps_running_while_a_grade_waits_in_the_worker():
    item = Item(id="q", question="Expand.", answer=SLOW[0], format="math")

    async def main():
        await asyncio.to_thread(warm)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        result = await Grader().grade(item, f"\\boxed{{{SLOW[1]}}}")
        task.cancel()
        return result, ticks

    result, ticks = asyncio.run(main())
    assert result.reason is not None and "timed_out" in result.reason
    assert ticks >= 10, f"the loop ticked {ticks} times in the {LIMIT:g} s the grade waited"


def test_a_worker_started_on_a_thread_that_ended_still_serves():
    # the parent-death signal (benchfill.forking.die_with_parent) follows the thread that started a child: a worker
    # started on an executor's thread must not die when that thread is retired
    t = threading.Thread(target=warm)
    t.start()
    t.join()
    [pid] = grading.symbolic_worker_pids()
    time.sleep(0.3)
    assert children().get(pid) not in (None, "Z")
    assert grading.symbolic_outcome("\\sqrt{8}", "2\\sqrt{2}") is MathOutcome.EQUAL
    assert grading.symbolic_worker_pids() == [pid]


@pytest.mark.slow  # > 2 s: the full suite (CI) runs it, the fast lane does not
def test_no_worker_remains_after_close(fresh):
    pid = warm()
    assert pid in children()
    grading.close_symbolic_workers()
    assert grading.symbolic_worker_pids() == []
    assert_gone([pid])
    assert grading.symbolic_outcome(*EASY) is MathOutcome.EQUAL  # usable again: a fresh worker
    assert grading.symbolic_worker_pids() != [pid]


def test_cheap_answers_start_no_worker():
    cases = [(Item(id="q", question="?", answer="5", format="math"), "\\boxed{5}", "correct"),
             (Item(id="q", question="?", answer="\\frac{1}{2}", format="math"), "\\boxed{0.5}", "correct"),
             (Item(id="q", question="?", answer="12", format="numeric"), "The answer is 13.", "incorrect"),
             (Item(id="q", question="?", answer="x+1", format="math"), "\\boxed{x + 1}", "correct")]
    for item, response, label in cases:
        assert grade(item, response).label == label
    assert grading.symbolic_worker_pids() == []


@pytest.mark.slow  # > 2 s: the full suite (CI) runs it, the fast lane does not
def test_a_worker_that_dies_mid_comparison_fails_the_comparison_without_memoising_it():
    pid = warm()
    killer = threading.Timer(0.3, os.kill, args=(pid, 9))
    killer.start()
    try:
        assert grading.math_outcome(*SLOW) is MathOutcome.FAILED
    finally:
        killer.join()
    assert_gone([pid])
    result = grade(Item(id="q", question="?", answer=EASY[0], format="math"), f"\\boxed{{{EASY[1]}}}")
    assert result.label == "correct" and result.reason is None  # the next comparison gets a fresh worker
    assert grading._math_outcome_memo.cache_info().currsize == 1  # the failed one was not memoised


def test_where_no_worker_can_start_the_comparison_runs_here(monkeypatch):
    def cannot(self, *args, **kwargs):
        raise symbolic.WorkerUnavailable("no processes here")

    monkeypatch.setattr(symbolic._Worker, "__init__", cannot)
    assert grading.symbolic_outcome(*EASY) is MathOutcome.EQUAL
    assert grading.latex_value("\\sqrt{4}") == 2.0
    assert grading.symbolic_worker_pids() == []


@pytest.mark.parametrize("method", ["fork", "exec"])
def test_a_worker_that_cannot_import_its_preload_is_unavailable(monkeypatch, method):
    monkeypatch.setattr(symbolic, "start_method", lambda: "fork" if method == "fork" else None)
    pool = symbolic.Pool(("benchfill_no_such_module",))
    try:
        with pytest.raises(symbolic.WorkerUnavailable, match="cannot import benchfill_no_such_module"):
            pool.call(abs, -1, timeout=LIMIT)
        start = time.monotonic()
        with pytest.raises(symbolic.WorkerUnavailable):  # remembered: not tried again
            pool.call(abs, -1, timeout=LIMIT)
        assert time.monotonic() - start < 0.1
        assert pool.pids() == []
    finally:
        pool.close()


@pytest.mark.parametrize("method", ["fork", "exec"])
def test_pool_kills_an_overrunning_call_and_keeps_a_worker_whose_call_raised(monkeypatch, method):
    monkeypatch.setattr(symbolic, "start_method", lambda: "fork" if method == "fork" else None)
    pool = symbolic.Pool(size=1)
    try:
        assert pool.call(abs, -3, timeout=LIMIT) == symbolic.Outcome("ok", 3)
        [pid] = pool.pids()
        raised = pool.call(int, "x", timeout=LIMIT)
        assert raised.status == "error" and "ValueError" in (raised.error or "")
        assert pool.pids() == [pid]  # a call that raised leaves its worker be
        outcome, took = timed(lambda: pool.call(time.sleep, 60, timeout=LIMIT))
        assert outcome.status == "timed_out"
        assert took < LIMIT + MARGIN, took
        assert pool.pids() == []
        assert_gone([pid])
        assert pool.call(abs, -4, timeout=LIMIT).value == 4  # a fresh worker
    finally:
        pool.close()


PARENT = r"""
import sys, threading, time
from benchfill.models import grading
assert grading.symbolic_outcome("x^2+2x+1", "(x+1)^2").value == "equal"  # forked: no other thread runs yet
threading.Thread(target=grading.symbolic_outcome, args=("(x+y+z)^{80}", "(x+y+z+1)^{80}"), daemon=True).start()
time.sleep(0.5)  # that worker is busy now: the next comparison starts a second one, a fresh interpreter
t = threading.Thread(target=grading.symbolic_outcome, args=("\\sqrt{8}", "2\\sqrt{2}"))
t.start(); t.join()
print(grading.symbolic_worker_pids(), flush=True)
if sys.argv[1] == "hang":
    time.sleep(600)
"""


@pytest.mark.slow  # > 2 s each
@pytest.mark.parametrize("end", ["exit", "sigkill"])
def test_workers_end_with_their_parent(end):
    """However the parent ends (a normal exit, its exit hook; SIGKILL, die_with_parent), no worker outlives it: a
    forked one and one in a fresh interpreter, one of them busy."""
    assert grading.SYMBOLIC_WORKERS >= 2
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "hang" if end == "sigkill" else "exit"],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        pids = [int(p) for p in parent.stdout.readline().strip("[]\n").split(",")]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        cmdlines = [open(f"/proc/{p}/cmdline", "rb").read() for p in pids]
        assert sum(b"benchfill.models.symbolic" in c for c in cmdlines) == 1  # one forked, one exec'd
        if end == "sigkill":  # while one worker is busy with the pathological comparison
            parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 5
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if alive(p)]
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
