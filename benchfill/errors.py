"""The one error type that user-facing commands turn into a single clear line and exit code 2."""

from __future__ import annotations

from typing import Any


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
