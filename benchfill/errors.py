"""The one error type that user-facing commands turn into a single clear line and exit code 2."""

from __future__ import annotations

import difflib
from typing import Any, Iterable


class InputError(ValueError):
    """Bad user input: names the file, the row (1-based, header = row 1) and the rule broken.

    The CLI prints ``str(err)`` as one line and exits with code 2; nothing is written.
    """

    def __init__(self, path: str, rule: str, row: int | None = None) -> None:
        self.path = str(path)
        self.rule = rule
        self.row = row
        where = f"{self.path}: row {row}" if row is not None else self.path
        super().__init__(f"{where}: {rule}")


def did_you_mean(word: str, choices: Iterable[Any]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or '' (the tail of an InputError's rule)."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def field_path(loc: tuple[Any, ...], top: str = "<top level>") -> str:
    """A pydantic error location as the user wrote it: ``panel[3].temperature``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or top


def from_validation_error(source: str, exc: Any, top: str = "<top level>") -> InputError:
    """The first error of a pydantic ``ValidationError`` as one InputError line: ``field: what is wrong``."""
    err = exc.errors()[0]
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "unknown field"
    return InputError(str(source), f"{field_path(tuple(err.get('loc', ())), top)}: {msg}")
