"""The one error type that user-facing commands turn into a single clear line and exit code 2."""

from __future__ import annotations


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
