"""What every `benchfill` command shares: the consoles and the wrapper that turns bad input into one line."""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from benchfill.errors import InputError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., object])


def friendly_errors(fn: F) -> F:
    """Bad input -> one clear line on stderr and exit 2, never a traceback; Ctrl-C -> a resume hint and exit 130."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted: everything saved so far is kept; rerun the same command to resume")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]
