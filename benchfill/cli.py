"""The `benchfill` command line: thin wrappers that parse options, call the library and render results.

Every command turns :class:`benchfill.errors.InputError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

import typer
from rich.console import Console

from benchfill.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Benchmarks as empirical measures over difficulty.")
console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., object])


def friendly_errors(fn: F) -> F:
    """Bad input -> one clear line and exit 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted: everything saved so far is kept; rerun the same command to resume")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


# ---- commands are added below, one block each -------------------------------------------------------------


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
