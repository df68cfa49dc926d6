"""Work split over forked processes, where forking is safe.

A fork copies only the forking thread: a lock another thread holds at that moment stays held forever in the child.
So work is forked only while this process runs no other thread (the command line's status line runs none, see
:class:`benchfill.cli_support.StatusLine`); otherwise it runs here, or, for the IRT chains, through a fork server.

A child that must end with this process (:func:`die_with_parent`) and may outlive the call that starts it (the
local llama.cpp server, a vLLM engine, a symbolic-maths worker) is started through :func:`on_a_lasting_thread`:
Linux's ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the process (prctl(2): "the
parent" is the creating thread), so a child started on a short-lived thread (an ``asyncio.to_thread`` worker, whose
executor ``asyncio.run`` shuts down at its end; a ``ThreadPoolExecutor``'s thread; LangGraph's node threads; a
``threading.Thread`` that returns) would be sent its death signal as soon as that thread ends.
"""

from __future__ import annotations

import os
import threading
from functools import partial
from typing import Any, Callable, Generic, Sequence, TypeVar

P = TypeVar("P")
R = TypeVar("R")


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS / Windows
        return max(1, os.cpu_count() or 1)


def start_method() -> str | None:
    """How worker processes start: "fork" when this process runs no other thread (nothing can hold a lock across
    the fork; OpenBLAS stops its own pool in its at-fork handler), else "forkserver" (children forked from a
    single-threaded server, the work pickled to them); None where neither exists."""
    import multiprocessing as mp

    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else None


def die_with_parent(parent: int | None = None, signum: int | None = None) -> None:  # pragma: no cover - a child
    """In a child process: nothing outlives its parent. On Linux the kernel is asked to send ``signum`` (default
    SIGKILL) when the parent ends, however it ends (``prctl(PR_SET_PDEATHSIG)``; it survives exec). The kernel's
    "parent" is the *thread* that forked the child: a child that may outlive the thread starting it must be started
    through :func:`on_a_lasting_thread`. ``parent``: the PID the child expects as its parent; if the parent already
    ended before the request (the race between fork and prctl), the child ends now. Elsewhere a no-op; the callers'
    pipes still see EOF when the parent ends."""
    import signal

    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signum or signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent is not None and os.getppid() != parent:
        os._exit(0)


_SPAWNER: tuple[threading.Thread, Any] | None = None  # this process's spawner thread and its job queue
_SPAWNER_LOCK = threading.Lock()


def _spawner_reset() -> None:  # pragma: no cover - runs in a forked child
    # a forked child has no spawner thread (only the forking thread is copied), and the lock may have been held
    global _SPAWNER, _SPAWNER_LOCK
    _SPAWNER, _SPAWNER_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_spawner_reset)


def _spawn_loop(jobs: Any) -> None:
    while True:
        fn, future = jobs.get()
        if not future.set_running_or_notify_cancel():  # pragma: no cover - nobody cancels these futures
            continue
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)
        del fn, future  # hold nothing of a finished job (a started process object) while waiting for the next


def on_a_lasting_thread(fn: Callable[[], R]) -> R:
    """``fn()`` on a thread that lasts as long as this process, its result returned (its exception raised) here:
    on this thread when it is the main thread (exactly as a direct call), else on one daemon thread kept for the
    purpose (``benchfill-spawner``, started on first use, and again in a forked child), one job at a time.

    Start through here any child tied to this process by :func:`die_with_parent` that may outlive the calling
    thread. The kernel sends ``PR_SET_PDEATHSIG``'s signal when the thread that forked the child ends; the main
    thread and the spawner end only with the process (a SIGKILLed process included), so the guarantee "the child
    ends with this process, however it ends" holds whichever thread asks. Why not the alternatives: a death signal
    set only from the main thread, with the parent-PID check or a pipe watchdog for the rest, cannot reach a child
    that runs someone else's program after an exec (llama.cpp's server, vLLM's own engine processes), and a watchdog
    polls where the kernel's signal is immediate. The spawner, once started, is one more thread of this process
    (so :func:`start_method` says ``forkserver`` from then on): it cannot end while a child it started may run.
    Where no thread can be started any more (interpreter shutdown), ``fn()`` runs on this thread."""
    global _SPAWNER
    here = threading.current_thread()
    if here is threading.main_thread() or (_SPAWNER is not None and here is _SPAWNER[0]):  # a job's own job: here
        return fn()
    import concurrent.futures
    import queue

    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            jobs: Any = queue.SimpleQueue()
            thread = threading.Thread(target=_spawn_loop, args=(jobs,), name="benchfill-spawner", daemon=True)
            try:
                thread.start()
                _SPAWNER = (thread, jobs)
            except RuntimeError:  # pragma: no cover - "can't create new thread at interpreter shutdown"
                pass
        spawner = _SPAWNER
    if spawner is None:  # pragma: no cover
        return fn()
    future: concurrent.futures.Future[R] = concurrent.futures.Future()
    spawner[1].put((fn, future))
    return future.result()


def _forked_child(fn: Callable[[Any], Any], part: Any, conn: Any, parent: int) -> None:  # pragma: no cover
    die_with_parent(parent)
    send_result(fn, part, conn)


def send_result(fn: Callable[[Any], Any], part: Any, conn: Any) -> None:  # pragma: no cover - runs in a child
    """In a forked child: send ``(True, fn(part))`` to the parent, or ``(False, error)``; the parent then does the
    work itself, so its own error, if any, reaches the user the usual way."""
    try:
        conn.send((True, fn(part)))
    except BaseException as exc:
        conn.send((False, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class ForkedCall(Generic[R]):
    """``fn()`` started now in a forked child (where fork is safe, see :func:`start_method`) and collected later by
    :meth:`result`, so this process goes on with other work meanwhile. Where fork is not safe, or the child fails
    (its error, its death), ``fn()`` runs in this process when the result is asked for, so its own error, if any,
    reaches the user the usual way. The child ends with this process however that ends (:func:`die_with_parent`);
    :meth:`close` ends it early where its result is not wanted. ``daemon``: a daemonic child (multiprocessing
    also ends it at this process's exit, but it cannot fork workers of its own)."""

    def __init__(self, fn: Callable[[], R], daemon: bool = False) -> None:
        import multiprocessing as mp

        self._fn = fn
        self._proc: Any = None
        self._recv: Any = None
        if start_method() != "fork":
            return
        ctx = mp.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_forked_child, args=(lambda _: fn(), None, send, os.getpid()),
                                 daemon=daemon)
        self._proc.start()
        send.close()

    @property
    def forked(self) -> bool:
        """Whether a child is computing the result (False: :meth:`result` will compute it here)."""
        return self._proc is not None

    def result(self) -> R:
        """The child's result (waiting for it), or ``fn()`` computed here."""
        if self._proc is None:
            return self._fn()
        try:
            ok, value = self._recv.recv()
        except (EOFError, OSError):
            ok, value = False, None
        self._reap(end=False)  # the child has sent its result (or died): it is ending by itself
        return value if ok else self._fn()

    def close(self) -> None:
        """End the child now if it still runs (its result no longer wanted); idempotent."""
        self._reap(end=True)

    def _reap(self, end: bool) -> None:
        if self._proc is None:
            return
        self._recv.close()
        if end and self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._proc = None


def forked_map(fn: Callable[[P], R], parts: Sequence[P]) -> list[R]:
    """``[fn(p) for p in parts]``: the first part in this process and each other one in a forked child, which
    sees this process's memory as it is (no pickling of the inputs; results are pickled back). One after another
    in this process when fork is not safe or there is one part; a part whose child fails is redone here."""
    if len(parts) < 2 or start_method() != "fork":
        return [fn(p) for p in parts]
    kids = [ForkedCall(partial(fn, part), daemon=True) for part in parts[1:]]
    return [fn(parts[0])] + [kid.result() for kid in kids]


def forked_ranges(fn: Callable[[tuple[int, int]], tuple[Any, ...]], n: int, processes: int) -> tuple[Any, ...]:
    """0..n cut into ``processes`` contiguous ranges (at most n), ``fn((lo, hi))`` for each, spread by
    :func:`forked_map`; ``fn`` returns a tuple of arrays over its range, and the result is each of them
    concatenated over the ranges, in order."""
    import numpy as np

    cuts = np.linspace(0, n, max(1, min(processes, n)) + 1).astype(int)
    parts = forked_map(fn, list(zip(cuts[:-1].tolist(), cuts[1:].tolist())))
    return tuple(np.concatenate(arrays) for arrays in zip(*parts))
