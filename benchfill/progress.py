"""Progress: a heartbeat for long waits, the steps of long reads, the events of long-running calls.

Code that blocks for a while (the IRT fit waiting on its worker processes) calls :func:`beat` every fraction of a
second; whoever shows progress registers what a beat does with :func:`on_beat`. The command line's status line is
redrawn by these beats and by each new stage instead of by a thread of its own, so that no thread is alive when
the fit forks its workers (a lock held by another thread at fork time stays held forever in the child).

Reads that go step by step (``benchfill import`` over thousands of log files) call :func:`step` instead; the command
line draws a progress bar from it with :func:`on_step`.

A long-running call of the API reports what it is doing as :class:`Event` objects to the ``on_event`` it was given:
one callback type for every such call, a person's line in each event and the data beside it.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal

BEAT_S = 0.1  # seconds between beats while waiting

_on_beat: ContextVar[Callable[[], None] | None] = ContextVar("benchfill_on_beat", default=None)


def beat() -> None:
    """Tell whoever shows progress that the wait goes on (a no-op when nobody listens)."""
    fn = _on_beat.get()
    if fn is not None:
        fn()


@contextmanager
def on_beat(fn: Callable[[], None]) -> Iterator[None]:
    """Within the block, each :func:`beat` calls ``fn``."""
    token = _on_beat.set(fn)
    try:
        yield
    finally:
        _on_beat.reset(token)


# ---- steps: how far a long read has come ---------------------------------------------------------------------

_on_step: ContextVar[Callable[[int, int, str], None] | None] = ContextVar("benchfill_on_step", default=None)


def step(done: int, total: int, label: str = "") -> None:
    """Tell whoever shows progress that ``done`` of ``total`` steps are done (``label``: the one under way, e.g. a
    file's name); a no-op when nobody listens. The importers call it once per log file."""
    fn = _on_step.get()
    if fn is not None:
        fn(done, total, label)


@contextmanager
def on_step(fn: Callable[[int, int, str], None]) -> Iterator[None]:
    """Within the block, each :func:`step` calls ``fn(done, total, label)``."""
    token = _on_step.set(fn)
    try:
        yield
    finally:
        _on_step.reset(token)


# ---- events: what a long-running call reports --------------------------------------------------------------

EventKind = Literal["stage", "picture", "benchmark", "node", "answer"]


@dataclass(frozen=True)
class Event:
    """One progress report of a long-running call (``diagnose``, ``suite``, ``fill``, ``evaluate``, ``designers
    run``), given to its ``on_event``: what happened (``kind``), one line for a person (``message``) and the data a
    display may show (``payload``).

    The kinds: ``stage``, a stage starts (``message`` names it; diagnose's fit, checks, null, ...; designers' stages);
    ``picture``, the diagnosis picture is known (``payload``: a :class:`benchfill.diagnostics.picture.Picture`);
    ``benchmark``, a suite's benchmark is diagnosed (``payload``: its ``SuiteRow``); ``node``, a node of the fill's
    search has run (``message``: its name, ``payload``: the node's report as a dict: method, gap, round, calls,
    cost, ...); ``answer``, an evaluation graded an answer (``payload``: items and answers done and in all, and the
    call counters)."""

    kind: EventKind
    message: str = ""
    payload: Any = None


OnEvent = Callable[[Event], None]
"""The one progress callback type: ``on_event(event)``."""


def notify(on_event: OnEvent | None, kind: EventKind, message: str = "", payload: Any = None) -> None:
    """Give ``on_event`` an :class:`Event` (a no-op when it is None)."""
    if on_event is not None:
        on_event(Event(kind, message, payload))
