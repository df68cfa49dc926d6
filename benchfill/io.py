"""File side effects shared by every layer: atomic writes, so nothing already saved is ever half-overwritten.

Permission policy (one for every file a run writes: responses.csv, summary.json, diagnosis.*, the SQLite files):
files are created with mode ``0666 & ~umask`` — exactly what ``open()`` and SQLite give a new file, so 0644 under
the usual umask 022. A run folder is made private with the umask (``umask 077`` -> 0600), never by benchfill
choosing a mode of its own.

Targets that are not regular files are written directly, never replaced: ``-`` is standard output, and an
existing device, FIFO or socket (``/dev/stdout``, ``/dev/null``, a named pipe) is opened and written in place. A
symbolic link is followed, so the file it points to is replaced, not the link.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

STDOUT = "-"


def current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: read by setting and restoring it at once
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode every file benchfill writes gets: 0666 & ~umask (see the module docstring)."""
    return 0o666 & ~current_umask()


def _direct_target(path: Path) -> bool:
    """True for a path that must be written in place: '-' or an existing non-regular file (device, FIFO...)."""
    if str(path) == STDOUT:
        return True
    try:
        st = os.stat(path)  # follows links: /dev/stdout -> /proc/self/fd/1 -> a tty, a pipe or a file
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(st.st_mode)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and an atomic rename (mode
    0666 & ~umask); ``-`` and non-regular targets (devices, pipes) are written directly. Returns the path written
    (a symlink's target)."""
    with atomic_writer(path) as fh:
        fh.write(data)
    path = Path(path)
    return path if _direct_target(path) or not path.is_symlink() else Path(os.path.realpath(path))


@contextmanager
def atomic_writer(path: str | Path) -> Iterator[IO[bytes]]:
    """:func:`atomic_write_bytes` for data written piece by piece: a binary file handle whose content replaces
    ``path`` (a temporary file in the same folder, renamed) when the block ends; on an error nothing is replaced.
    ``-`` and non-regular targets are written directly, as there."""
    path = Path(path)
    if _direct_target(path):
        if str(path) == STDOUT:
            sys.stdout.flush()
            yield sys.stdout.buffer
            sys.stdout.buffer.flush()
        else:
            with open(path, "wb") as fh:
                yield fh
        return
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # name the file asked for, not the temporary one
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        os.fchmod(fd, file_mode())  # mkstemp creates 0600: every written file gets the one documented mode
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def fingerprint(*parts: Any) -> str:
    """A short digest of JSON-able ``parts`` (keys sorted, anything else by its ``str``): what a run's or a stage's
    inputs were, so that a rerun can tell whether they changed."""
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


def file_digest(path: str | Path | None) -> str | None:
    """A short digest of a file's bytes, or of a folder's files (their relative names and bytes, in a stable
    order: a folder of eval logs read by the importers); None for None or a path that does not exist."""
    if path is None:
        return None
    path = Path(path)
    if not path.exists():
        return None
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
        h.update(str(f.relative_to(path)).encode() if path.is_dir() else b"")
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
