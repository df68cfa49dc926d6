"""Symbolic maths in worker processes, with a real wall-clock timeout.

A symbolic comparison (math-verify, sympy) can run for minutes on a pathological expression ("(x+y+z)^{80}" against
"(x+y+z+1)^{80}"), and no Python thread can be stopped from outside: math-verify's own timeout is a
``signal.alarm``, which works only on the main thread, and sympy has none. So such work runs here, in a child
process, and the caller waits at most ``timeout`` seconds for the answer (``Connection.poll``, which holds on any
thread and inside a running event loop); a worker that overruns is killed and a fresh one is started for the next
call.

:class:`Pool` keeps up to ``size`` workers, started lazily (on the first call that needs one: a program that never
needs symbolic maths starts none), reused from call to call, forked where :func:`benchfill.forking.start_method`
says that is safe (no other thread runs) and otherwise a fresh interpreter, and ended with their parent however it
ends (:func:`benchfill.forking.die_with_parent`) or, at the latest, at interpreter exit (:meth:`Pool.close`). A
worker's start (its imports and warm-up) is not counted in any call's timeout. The function a worker runs is sent by reference
(pickled by its module and name), so it must be a module-level function of an importable module. Where no worker
can start (Windows, where a fresh interpreter cannot be handed the pipe; a sandbox without processes; a worker that
cannot import its ``preload``), :meth:`Pool.call` raises :class:`WorkerUnavailable`, tried once per process (until
:meth:`Pool.close`): the caller then does the work itself.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from benchfill.forking import die_with_parent, start_method

Status = Literal["ok", "error", "timed_out", "failed"]
STARTUP_TIMEOUT = 120.0  # seconds a worker may take to start (its imports, on a loaded machine); not a call's time


@dataclass(frozen=True)
class Outcome:
    """What one call in a worker came to.

    Attributes:
        status: ``ok`` (``value`` is the function's result), ``error`` (the function raised: ``error`` says what;
            the worker lives on), ``timed_out`` (no answer within the timeout: the worker was killed) or ``failed``
            (the worker died, or the result could not be sent back).
        value: the function's result when ``ok``; None otherwise.
        error: what went wrong, for the other statuses.
    """

    status: Status
    value: Any = None
    error: str | None = None


class WorkerUnavailable(RuntimeError):
    """No worker process could be started here (no way to start one, or it did not come up in time)."""


def _serve(conn: Any, parent: int, preload: Sequence[str], warmup: Callable[[], Any] | None = None
           ) -> None:  # pragma: no cover - runs in the worker
    """The worker: import ``preload``, run ``warmup`` and say ``ready`` (or, when that fails, say why and end), then
    answer
    ``(fn, args)`` with ``("ok", fn(*args))`` or ``("error", message)`` until ``None`` or the pipe's end. Ctrl-C is
    its parent's business (a forked worker shares the terminal's process group): it is ignored here."""
    import importlib
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)
    for name in preload:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            conn.send(("error", f"cannot import {name}: {type(exc).__name__}: {exc}"))
            return
    try:
        if warmup is not None:
            warmup()
    except BaseException as exc:
        conn.send(("error", f"warm-up failed: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        except Exception as exc:  # a function this process cannot import
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        if msg is None:
            return
        fn, args = msg
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(reply)
        except Exception as exc:  # an unpicklable result
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


_BOOT = ("import sys; from multiprocessing.connection import Connection; c = Connection(int(sys.argv[1])); "
         "sys.path[:] = c.recv(); from benchfill.models.symbolic import _serve; _serve(c, int(sys.argv[2]), *c.recv())")


class _Exec:
    """A worker in a fresh interpreter (``python -c``), where forking is not safe: unlike multiprocessing's fork
    server or spawn, it never imports the user's ``__main__`` again (an unguarded script would run a second time);
    its own session, so the terminal's Ctrl-C reaches only the parent; the pipe's end is its one inherited fd."""

    def __init__(self, child: Any) -> None:
        import subprocess
        import sys

        fd = child.fileno()
        self.popen = subprocess.Popen([sys.executable, "-c", _BOOT, str(fd), str(os.getpid())], pass_fds=(fd,),
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        self.pid: int | None = self.popen.pid

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        self.popen.kill()

    def join(self, timeout: float | None = None) -> None:
        import subprocess

        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


class _Worker:
    """One worker process and its end of the pipe: forked where that is safe (:func:`benchfill.forking.start_method`
    says ``fork``: it starts at once, with this process's imports), else a fresh interpreter (:class:`_Exec`)."""

    def __init__(self, preload: Sequence[str], warmup: Callable[[], Any] | None = None) -> None:
        import multiprocessing as mp

        self.conn, child = mp.Pipe()
        self.process: Any = None
        try:
            if start_method() == "fork" and not mp.current_process().daemon:
                self.process = mp.get_context("fork").Process(
                    target=_serve, args=(child, os.getpid(), tuple(preload), warmup), daemon=True,
                    name="benchfill-symbolic")
                self.process.start()
            else:
                import sys

                self.process = _Exec(child)
                self.conn.send([p for p in sys.path if isinstance(p, str)])  # where this process finds benchfill
                self.conn.send((tuple(preload), warmup))  # warmup: pickled by reference, imported there
        except Exception as exc:
            self.kill()
            raise WorkerUnavailable(f"cannot start a worker process: {type(exc).__name__}: {exc}") from exc
        finally:
            child.close()
        why = f"the worker process did not start within {STARTUP_TIMEOUT:g} s"
        try:
            if self.conn.poll(STARTUP_TIMEOUT):
                kind, value = self.conn.recv()
                why = "" if kind == "ready" else f"the worker process: {value}"
        except (EOFError, OSError):
            why = "the worker process ended as it started"
        if why:
            self.kill()
            raise WorkerUnavailable(why)

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Outcome:
        try:
            self.conn.send((fn, args))
            if not self.conn.poll(timeout):
                return Outcome("timed_out", error=f"no answer within {timeout:g} s")
            kind, value = self.conn.recv()
        except (EOFError, OSError) as exc:
            return Outcome("failed", error=f"the worker process died ({type(exc).__name__})")
        except Exception as exc:  # a result this process cannot unpickle
            return Outcome("failed", error=f"{type(exc).__name__}: {exc}")
        if kind == "ok":
            return Outcome("ok", value)
        return Outcome("error", error=str(value))

    def stop(self) -> None:
        """End it politely (a ``None`` message), killing it if it does not end within a second."""
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(1.0)
        self.kill()

    def kill(self) -> None:
        """End it now (SIGKILL) and wait for it: no zombie is left behind. Idempotent."""
        if self.process is not None and self.process.pid is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(10.0)
        self.conn.close()


_SPAWNER: tuple[int, Any] | None = None  # (the process it belongs to, the queue of the thread that starts workers)
_SPAWNER_LOCK = threading.Lock()


def _spawn_loop(jobs: Any) -> None:
    while True:
        fn, future = jobs.get()
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)


def _on_a_lasting_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on the main thread or on one daemon thread kept for the purpose. A child's
    :func:`~benchfill.forking.die_with_parent` signal comes when the *thread* that started it ends, not the
    process: a worker started on an executor's thread would be killed when that thread is retired."""
    global _SPAWNER
    if threading.current_thread() is threading.main_thread():
        return fn()
    import concurrent.futures
    import queue

    with _SPAWNER_LOCK:
        if _SPAWNER is None or _SPAWNER[0] != os.getpid():
            jobs: Any = queue.SimpleQueue()
            threading.Thread(target=_spawn_loop, args=(jobs,), name="benchfill-symbolic-start", daemon=True).start()
            _SPAWNER = (os.getpid(), jobs)
        jobs = _SPAWNER[1]
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    jobs.put((fn, future))
    return future.result()


class Pool:
    """Up to ``size`` worker processes for calls with a timeout (see the module docstring); thread-safe.

    Args:
        preload: modules each worker imports as it starts (before any call's timeout begins); a worker that cannot
            import one of them is not started.
        size: the most workers at once; a call that finds all of them busy waits for one.
        warmup: a module-level function each worker runs once after its imports, before it is used (a library's
            lazy set-up, so that the first call's timeout is not spent on it); one that raises: not started.
    """

    def __init__(self, preload: Sequence[str] = (), size: int = 1, warmup: Callable[[], Any] | None = None) -> None:
        self.preload = tuple(preload)
        self.warmup = warmup
        self.size = max(1, size)
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._starting = 0
        self._atexit = False
        self._unavailable: str | None = None  # why no worker could start (not tried again until close)

    def _forked(self) -> None:
        # a forked child inherits the parent's workers (and maybe a held lock): they are not its own
        if self._pid != os.getpid():
            for worker in self._all:
                worker.conn.close()  # this process's copy of the parent's end: the worker still sees the parent's
            self._pid, self._cond, self._idle, self._all = os.getpid(), threading.Condition(), [], set()
            self._starting, self._unavailable = 0, None

    def _acquire(self) -> _Worker:
        self._forked()
        with self._cond:
            if self._unavailable is not None:
                raise WorkerUnavailable(self._unavailable)
            while True:
                while self._idle and not self._idle[-1].process.is_alive():  # ended while idle (killed from outside)
                    dead = self._idle.pop()
                    self._all.discard(dead)
                    dead.kill()
                if self._idle or len(self._all) + self._starting < self.size:
                    break
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._starting += 1
            if not self._atexit:
                import atexit

                atexit.register(self.close)
                self._atexit = True
        try:
            worker = _on_a_lasting_thread(lambda: _Worker(self.preload, self.warmup))  # outside the lock: a start takes a while
        except BaseException as exc:
            with self._cond:
                self._starting -= 1
                if isinstance(exc, WorkerUnavailable):
                    self._unavailable = str(exc)
                self._cond.notify_all()
            raise
        with self._cond:
            self._starting -= 1
            self._all.add(worker)
        return worker

    def _release(self, worker: _Worker, alive: bool) -> None:
        with self._cond:
            if alive and worker in self._all:
                self._idle.append(worker)
            else:
                self._all.discard(worker)
            self._cond.notify()

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float) -> Outcome:
        """``fn(*args)`` in a worker, waiting at most ``timeout`` seconds for it (after the worker is up); a worker
        that overruns or dies is killed and dropped (the next call starts another). Raises
        :class:`WorkerUnavailable` when no worker can be started here."""
        worker = self._acquire()
        outcome = Outcome("failed", error="interrupted")
        try:
            outcome = worker.call(fn, args, timeout)
        finally:
            alive = outcome.status in ("ok", "error")
            if not alive:
                worker.kill()
            self._release(worker, alive)
        return outcome

    def pids(self) -> list[int]:
        """The process ids of the workers this pool holds now (idle or busy)."""
        self._forked()
        with self._cond:
            return sorted(w.pid for w in self._all if w.pid is not None)

    def close(self) -> None:
        """End every worker (an idle one politely, a busy one killed: its call reports ``failed``). The pool stays
        usable: a later call starts a fresh worker. Registered to run at interpreter exit."""
        self._forked()
        with self._cond:
            idle, busy = self._idle, [w for w in self._all if w not in self._idle]
            self._idle, self._all, self._unavailable = [], set(), None
            self._cond.notify_all()
        for worker in idle:
            worker.stop()
        for worker in busy:
            if worker.process.is_alive():
                worker.process.kill()  # its caller, woken by the pipe's end, joins and closes it
