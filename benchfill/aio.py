"""Running coroutines from synchronous code, inside or outside a running event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Awaitable, TypeVar

T = TypeVar("T")


STOP_GRACE_S = 5.0  # after Ctrl-C / SIGTERM: how long the loop's other tasks get to finish their cancellation


def _finish_tasks(loop: asyncio.AbstractEventLoop, grace_s: float | None) -> None:
    """Cancel the tasks still pending on ``loop`` and run it until they end (as ``asyncio.run`` does on exit),
    reporting their exceptions to the loop's handler; with ``grace_s``, at most that long: a task that does not end
    on cancellation (one that swallows it, or awaits something that will never come, seen once in a fill stopped by
    SIGTERM: the command waited for it for over an hour) is left pending, and the loop is closed without it."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not pending:
        return
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.wait(pending, timeout=grace_s))
    for task in pending:
        if task.done() and not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler({"message": "unhandled exception during shutdown",
                                         "exception": task.exception(), "task": task})


def _run(coro: Awaitable[T]) -> T:
    """``asyncio.run``, except that a Ctrl-C or SIGTERM (KeyboardInterrupt, raised in whichever task was running)
    stops it quietly and surely: the tasks it leaves behind (one that raised it, a library's pending callbacks) are
    not reported on standard error as never retrieved or destroyed while pending, and they get STOP_GRACE_S seconds
    to end on cancellation, not forever (:func:`_finish_tasks`); the caller says the stop in one line."""
    stopping = False

    def on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if stopping or isinstance(context.get("exception"), KeyboardInterrupt):
            return
        loop.default_exception_handler(context)

    loop = asyncio.new_event_loop()
    loop.set_exception_handler(on_error)
    asyncio.set_event_loop(loop)  # as asyncio.run: this thread's loop while it runs, none after
    try:
        return loop.run_until_complete(coro)
    except KeyboardInterrupt:
        import warnings

        stopping = True
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
        raise
    finally:
        grace = STOP_GRACE_S if stopping else None
        try:
            _finish_tasks(loop, grace)
            loop.run_until_complete(loop.shutdown_asyncgens())
            # the default executor's threads are joined, as asyncio.run does; after a stop, not beyond the grace
            loop.run_until_complete(asyncio.wait([loop.create_task(loop.shutdown_default_executor())],
                                                 timeout=grace))
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def run_sync(coro: Awaitable[T]) -> T:
    """Run a coroutine to completion from synchronous code, also where an event loop is already running (Jupyter):
    there it runs on a fresh loop in a worker thread instead of failing like ``asyncio.run``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()  # type: ignore[arg-type]
