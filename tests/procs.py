"""Processes as Linux's /proc shows them, for the tests of what outlives what (a helper module, not a test file)."""

from __future__ import annotations

import os


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first, then the parent's pid), or None for a
    process that is gone. The name is cut at its last ")", since a name may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    """Running (a zombie, waiting for its reaper, is not)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def process_table() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent's pid, state letter)."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := stat_fields(name)) is not None:
            out[int(name)] = (int(fields[1]), fields[0])
    return out
