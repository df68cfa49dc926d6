"""What every `benchfill` command shares: the consoles and the wrapper that turns bad input into one line.

Rules every command follows (tested in ``tests/test_cli_friction.py``):

- text written by a model or a user (item text, model names, file names) is printed literally: never through rich
  markup (``lit`` / ``rich.text.Text``), so ``[/INST]`` or ``[/note]`` in an answer cannot break a table;
- bad input is one line on stderr and exit code 2, never a traceback; Ctrl-C is one line and exit code 130;
- output that is not a terminal (a pipe, a file) is laid out ``COLUMNS`` wide (default 200), not cut to 80;
- ``--json PATH|-`` writes the command's result as JSON to a file or, with ``-``, to standard output (the human
  tables then go to standard error, so the JSON stays parseable).
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from benchfill.errors import InputError, MissingExtra, extra_of

WIDE_DEFAULT = 200  # columns for output that is not a terminal, when COLUMNS does not say


def _width_for_pipes() -> int | None:
    """None on a terminal (rich measures it); else COLUMNS when set, else a wide default."""
    try:
        return max(40, int(os.environ["COLUMNS"]))
    except (KeyError, ValueError):
        return WIDE_DEFAULT


class _Console(Console):
    """A console that is as wide as the terminal, or COLUMNS / 200 wide when the output is not a terminal (rich's
    own fallback, 80, cut every table when piped or redirected). Decided at each print: tests swap stdout."""

    @property
    def width(self) -> int:  # type: ignore[override]
        if self._width is None and not self.is_terminal:
            return _width_for_pipes() or 80
        return super().width

    @width.setter
    def width(self, value: int) -> None:
        self._width = value

    @property
    def size(self):  # type: ignore[override]
        from rich.console import ConsoleDimensions

        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(_width_for_pipes() or 80, self._height or 25)
        return super().size

    @size.setter
    def size(self, new_size) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


console = _Console()
err_console = _Console(stderr=True)

F = TypeVar("F", bound=Callable[..., object])


def lit(value: Any) -> Text:
    """Model- or user-written text as a rich renderable that is printed literally (no markup)."""
    return Text(str(value))


def is_stdout(path: Any) -> bool:
    return path is not None and str(path) == "-"


def result_console(json_out: Any) -> Console:
    """Where the human-readable result goes: stdout, or stderr when the JSON itself goes to stdout."""
    return err_console if is_stdout(json_out) else console


def write_json_result(json_out: Path | str | None, obj: Any, *, note: Console | None = None) -> None:
    """``--json PATH|-``: write a result to PATH (parents created) or to stdout; say where (stderr for '-').
    ``obj`` is the command's pydantic result, written as its ``model_dump_json(indent=2, by_alias=True)`` (the one
    serialisation), or JSON text already made."""
    from pydantic import BaseModel

    from benchfill.io import atomic_write_text

    if json_out is None:
        return
    if isinstance(obj, BaseModel):
        text = obj.model_dump_json(indent=2, by_alias=True) + "\n"
    elif isinstance(obj, str):
        text = obj
    else:
        raise TypeError(f"--json writes a pydantic result or JSON text, not {type(obj).__name__}")
    try:
        atomic_write_text(Path(str(json_out)), text)
    except OSError as exc:
        raise InputError(str(json_out), f"cannot write the JSON ({exc.strerror or exc})") from None
    if not is_stdout(json_out):
        (note or console).print(f"wrote {json_out}", markup=False, highlight=False, soft_wrap=True)


def quiet_libraries() -> None:
    """Silence library noise that is not the user's business (math-verify's one-off 'Timeout is disabled ...':
    benchfill bounds grading time itself; the grader also does this itself, for library users)."""
    from benchfill.models import quiet_math_verify

    quiet_math_verify()


_MAIN_PID = os.getpid()


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT): stops the command, exit 130.

    A subclass, never ``KeyboardInterrupt`` itself, for a reason in CPython: a plain KeyboardInterrupt that is
    raised inside code run from a string (``exec``/``eval``: dataclasses, namedtuples and many imports build
    functions so) sets the interpreter's "unhandled Ctrl-C" flag even when a caller catches it, and the process
    then ends by re-raising SIGINT after its own clean exit (return code -2, whatever exit code it chose; seen
    when a SIGTERM arrived while local-server imported httpx). The flag's test is by exact type."""


class Terminated(Interrupted):
    """SIGTERM (a scheduler, ``kill``, a closed session): stops the command like Ctrl-C, exit 143."""


TERMINATED_EXIT = 143  # 128 + SIGTERM, what a shell reports for a process the signal ended
INTERRUPTED_EXIT = 130  # 128 + SIGINT


def _on_sigint(signum, frame) -> None:  # pragma: no cover - exercised in a subprocess by the tests
    if os.getpid() != _MAIN_PID:
        if signum == signal.SIGTERM:  # a forked worker asked to stop (the pool's terminate() does so): it ends
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        # Ctrl-C reaches a forked worker (the IRT chains) too: it stays quiet, the parent stops the pool; no
        # ForkPoolWorker traceback
        signal.signal(signum, signal.SIG_IGN)
        return
    raise Terminated if signum == signal.SIGTERM else Interrupted


def install_sigint_handler() -> None:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt (:class:`Interrupted`; SIGTERM: :class:`Terminated`) in the command's
    process only, so every ``finally`` runs (shared arrays unlinked, workers stopped, nothing partial written);
    forked workers inherit a handler that ignores them (the terminal sends SIGINT to the whole process group), so
    they print no tracebacks, and they end with the command (:func:`benchfill.forking.die_with_parent`)."""
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    try:
        signal.signal(signal.SIGINT, _on_sigint)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # a command with its own handler keeps it
            signal.signal(signal.SIGTERM, _on_sigint)
    except ValueError:  # pragma: no cover - not the main thread (an embedding application)
        pass


class StatusLine:
    """A one-line status (spinner, stage, seconds so far) redrawn by the caller, not by a thread: by each
    :meth:`stage` and by each :func:`benchfill.progress.beat` inside the block. rich's own status runs a refresh
    thread, and while any thread is alive the IRT fit cannot fork its workers (it starts them through a fork
    server instead, ~1 s slower)."""

    def __init__(self, con: Console, text: str) -> None:
        from rich.live import Live
        from rich.spinner import Spinner

        self._text, self._started = text, 0.0
        self._spinner = Spinner("dots", text=text, style="status.spinner")
        self._live = Live(self._spinner, console=con, auto_refresh=False, transient=True)

    def __enter__(self) -> "StatusLine":
        import time

        from benchfill.progress import on_beat

        self._started = time.perf_counter()
        self._live.start(refresh=True)
        self._beats = on_beat(self.tick)
        self._beats.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._beats.__exit__(*exc)
        self._live.stop()

    def stage(self, text: str) -> None:
        """Name the stage now running (shown with the seconds since the start)."""
        self._text = text
        self.tick()

    def tick(self) -> None:
        import time

        self._spinner.update(text=lit(f"{self._text} ... ({time.perf_counter() - self._started:.1f} s)"))
        self._live.refresh()


def quiet_worker_start() -> None:
    """Start multiprocessing's helper processes (the fork server the IRT chains use when threads are running, and
    the resource tracker) with SIGINT ignored: a disposition that survives their exec, so Ctrl-C reaches only this
    process (which stops the workers) and no helper or worker prints a KeyboardInterrupt traceback."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return
    from multiprocessing import forkserver, resource_tracker

    try:
        mp.get_context("forkserver").set_forkserver_preload(["benchfill.irt.fast"])
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # pragma: no cover - not the main thread
        return
    # their standard error goes to /dev/null too (BENCHFILL_WORKER_STDERR=1 keeps it): a worker being started the
    # instant Ctrl-C stops the pool fails to attach to its already-removed semaphore and would print that; a
    # worker's real errors reach this process through the pool, not through its stderr
    quiet = os.environ.get("BENCHFILL_WORKER_STDERR", "") != "1"
    saved = None
    try:
        if quiet:
            sys.stderr.flush()
            saved = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        resource_tracker.ensure_running()
        forkserver.ensure_running()
    except Exception:  # pragma: no cover - the chains start it themselves then
        pass
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)
        signal.signal(signal.SIGINT, old)


def command_name(fn: Callable[..., object]) -> str:
    """A command's name as the user types it, from its function: ``import_`` -> ``benchfill import``,
    ``local_server`` -> ``benchfill local-server``, ``run_cmd`` of cli_designers -> ``benchfill designers run``."""
    name = fn.__name__.removesuffix("_cmd").rstrip("_").replace("_", "-")
    group = "designers " if fn.__module__.endswith("cli_designers") else ""
    return f"benchfill {group}{name}"


def _announce_stop(exc: KeyboardInterrupt, resume_hint: str | None) -> int:
    """Ctrl-C or SIGTERM: one line on stderr; returns the shell's exit code for that signal (130 / 143)."""
    stopped = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
    msg = stopped + (f": {resume_hint}" if resume_hint else "")
    err_console.print(msg, markup=False, highlight=False, soft_wrap=True)
    return TERMINATED_EXIT if isinstance(exc, Terminated) else INTERRUPTED_EXIT


def _report_stop(exc: KeyboardInterrupt, resume_hint: str | None) -> NoReturn:
    """:func:`_announce_stop`, then exit with its code."""
    raise typer.Exit(_announce_stop(exc, resume_hint)) from None


def _stop_without_teardown(exc: KeyboardInterrupt, resume_hint: str | None) -> NoReturn:
    """:func:`_announce_stop`, then the exit handlers (``atexit``: multiprocessing's, logging's), then the process ends
    without the interpreter's teardown. An extension module whose initialisation the stop interrupted is left half
    built, and tearing it down was seen to abort the process (SIGABRT, "Fatal Python error: PyThreadState_Get" while
    finalizing: Ctrl-C during `designers run`'s import of pymc, in matplotlib's ft2font) instead of exiting 130."""
    import atexit

    code = _announce_stop(exc, resume_hint)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def friendly_errors(fn: F | None = None, *, resume_hint: str | None = None):
    """Bad input, or a package of a missing optional extra, -> one clear line on stderr and exit 2, never a
    traceback; Ctrl-C -> one line and exit 130 (with ``resume_hint`` only for commands that do resume)."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            quiet_libraries()
            try:
                return fn(*args, **kwargs)
            except InputError as exc:
                err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None
            except ModuleNotFoundError as exc:  # a package of an optional extra that is not installed: one line
                extra = extra_of(exc.name)
                if extra is None:
                    raise
                missing = MissingExtra(command_name(fn), extra, exc.name)
                err_console.print(f"[bold red]error:[/] {escape(str(missing))}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None
            except OSError as exc:  # a path that cannot be read or written (read-only folder, full disk): one line
                if exc.filename is None:
                    raise
                err_console.print(f"[bold red]error:[/] {escape(str(exc.filename))}: {escape(exc.strerror or str(exc))}",
                                  highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None
            except KeyboardInterrupt as exc:
                _report_stop(exc, resume_hint)
            except RuntimeError as exc:
                # a stop signal that lands while a dataclass is being defined (an import) reaches us wrapped:
                # Python 3.11 re-raises it from __set_name__ as RuntimeError("Error calling __set_name__ ...")
                if not isinstance(exc.__cause__, KeyboardInterrupt):
                    raise
                _report_stop(exc.__cause__, resume_hint)
            except ImportError as exc:
                # a stop signal that lands while an extension module initialises: it fails with ImportError
                # ("initialization failed", caused by the stop), half built
                if not isinstance(exc.__cause__, KeyboardInterrupt):
                    raise
                _stop_without_teardown(exc.__cause__, resume_hint)

        return wrapper  # type: ignore[return-value]

    return decorate(fn) if fn is not None else decorate


ABBREVIATIONS = {"app", "e.g", "i.e", "fig", "sec", "eq", "vs", "cf", "no"}  # "paper App. B" ends no sentence


def first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring (up to the first ". " or the end of its first paragraph), on one line."""
    para = " ".join((doc or "").strip().split("\n\n")[0].split())
    for m in re.finditer(r"\. ", para):
        word = para[: m.start()].rsplit(" ", 1)[-1].strip("(")
        if word.lower() not in ABBREVIATIONS:
            return para[: m.start() + 1]
    return para


def plain_help(*apps: typer.Typer) -> None:
    """Help text is printed as written: words in square brackets (``[fill]``) are not rich markup; boolean
    flags show no ``<bool>`` value placeholder (they take none); and the command list shows each command's whole
    first sentence, wrapped to the terminal (click cuts a summary it makes itself at the column's width, so an
    80-column terminal showed ~40 characters of each)."""
    for a in apps:
        a.rich_markup_mode = None  # type: ignore[assignment]
        for info in a.registered_commands:
            if info.short_help is None and info.callback is not None:
                info.short_help = first_sentence(info.help or info.callback.__doc__)
        for group in a.registered_groups:  # unset fields of a group hold typer's DefaultPlaceholder, not None
            if group.typer_instance is not None and not isinstance(group.short_help, str):
                help_text = group.typer_instance.info.help
                group.short_help = first_sentence(help_text if isinstance(help_text, str) else None)
    try:
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover
        return
    if getattr(TyperOption, "_benchfill_plain", False):
        return
    original = TyperOption.display_type_rich

    def display_type_rich(self, ctx):  # type: ignore[no-untyped-def]
        if getattr(self, "is_flag", False) and self.metavar is None:
            return None
        return original(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
    TyperOption._benchfill_plain = True  # type: ignore[attr-defined]


def _json_value_optional(args: list[str]) -> list[str]:
    """``--json`` with no value (last, or followed by another option) means ``--json -`` (standard output)."""
    out = list(args)
    for i, a in enumerate(out):
        if a == "--":
            break
        if a == "--json" and (i + 1 == len(out) or (out[i + 1].startswith("--") and out[i + 1] != "--")):
            out.insert(i + 1, "-")
    return out


try:
    from typer.core import TyperCommand as _TyperCommand
except ImportError:  # pragma: no cover
    import click as _click

    _TyperCommand = _click.Command  # type: ignore[misc,assignment]


class JsonFlagCommand(_TyperCommand):  # type: ignore[misc,valid-type]
    """A command whose ``--json`` takes an optional value: bare ``--json`` (as in earlier versions) = stdout."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        return super().parse_args(ctx, _json_value_optional(args))
