"""Running coroutines from synchronous code, inside or outside a running event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Awaitable, TypeVar

T = TypeVar("T")


def _run(coro: Awaitable[T]) -> T:
    """``asyncio.run``, except that a Ctrl-C or SIGTERM (KeyboardInterrupt, raised in whichever task was running)
    stops it quietly: the tasks it leaves behind (one that raised it, a library's pending callbacks) are not
    reported on standard error as never retrieved or destroyed while pending; the caller says the stop in one
    line."""
    stopping = False

    def on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if stopping or isinstance(context.get("exception"), KeyboardInterrupt):
            return
        loop.default_exception_handler(context)

    with asyncio.Runner() as runner:
        runner.get_loop().set_exception_handler(on_error)
        try:
            return runner.run(coro)  # type: ignore[arg-type]
        except KeyboardInterrupt:
            import warnings

            stopping = True
            warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
            raise


def run_sync(coro: Awaitable[T]) -> T:
    """Run a coroutine to completion from synchronous code, also where an event loop is already running (Jupyter):
    there it runs on a fresh loop in a worker thread instead of failing like ``asyncio.run``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()  # type: ignore[arg-type]
