"""The diagnosis picture (matplotlib, no pyplot) and the process that draws it while the command works.

This module imports numpy and, when drawing, matplotlib: nothing else of benchfill's, so that a painter forked at
the start of a command has little to import besides matplotlib.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Picture:
    """What the diagnosis picture shows, and nothing else (small enough to send to another process)."""

    d: np.ndarray  # (I,) normalised difficulties, sorted
    gaps: list[tuple[float, float, float]]  # (lo, hi, mid) of the largest gaps, largest first
    title: str


def picture_figure(pic: Picture):
    """The picture as a matplotlib Figure: ECDF of normalised difficulty against the uniform, items on the axis,
    largest gaps shaded."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global figure state

    d, n = pic.d, len(pic.d)
    fig = Figure(figsize=(7.5, 5.0), dpi=120)
    ax = fig.subplots()
    for k, (lo, hi, mid) in enumerate(pic.gaps):
        ax.axvspan(lo, hi, color="tab:red", alpha=0.18, lw=0, label="largest gaps" if k == 0 else None)
        ax.text(mid, 1.01, str(k + 1), ha="center", va="bottom", fontsize=8, color="tab:red")
    ax.plot([0, 1], [0, 1], color="0.4", ls="--", lw=1, label="uniform target")
    ax.step(np.concatenate([[0], d, [1]]), np.concatenate([[0], np.arange(1, n + 1) / n, [1]]), where="post",
            color="tab:blue", lw=1.6, label="ECDF of d")
    ax.plot(d, np.full(n, -0.03), "|", color="k", ms=10, alpha=0.6 if n < 500 else 0.15, label="items")
    ax.set_xlim(-0.01, 1.01)
    ax.set_ylim(-0.06, 1.06)
    ax.set_xlabel("normalised difficulty d (0 = easiest item, 1 = hardest)")
    ax.set_ylabel("share of items with difficulty <= d")
    ax.set_title(pic.title, fontsize=9)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    return fig


def write_picture(pic: Picture, path: str | Path) -> Path:
    """Write the picture as a PNG (atomically)."""
    import io

    from benchfill.io import atomic_write_bytes

    buf = io.BytesIO()
    picture_figure(pic).savefig(buf, format="png")
    return atomic_write_bytes(path, buf.getvalue())


# ------------------------------------------------------------------------------------------------ the painter

def _paint(conn) -> None:  # pragma: no cover - runs in the painter process (tested through Painter)
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops this process
    try:  # the picture is needed last: the fit's workers go first when the cores are short
        os.nice(10)
    except OSError:  # pragma: no cover
        pass
    from matplotlib.backends import backend_agg  # noqa: F401  (the point: imported while the parent works)
    from matplotlib.figure import Figure  # noqa: F401

    try:
        job = conn.recv()
    except EOFError:
        return
    if job is None:
        return
    pic, path = job
    try:
        conn.send((True, str(write_picture(pic, path))))
    except Exception as exc:  # the parent draws it again itself, so the error reaches the user the usual way
        conn.send((False, f"{type(exc).__name__}: {exc}"))


class Painter:
    """Draws the diagnosis picture in a process forked at the start of a command, which imports matplotlib
    (~0.4 s) while this process loads the data and fits; at the end this process only sends the
    :class:`Picture`. Where it cannot fork without risk (another thread alive, no fork on this OS), or the child
    fails, the picture is drawn here as before. Use as a context manager: the child is stopped on exit."""

    def __init__(self, fork: bool = True) -> None:
        import multiprocessing as mp

        from benchfill.forking import start_method

        self._conn = self._proc = None
        self._sent = False
        self._job: tuple[Picture, Path] | None = None
        if not fork or start_method() != "fork":
            return
        ctx = mp.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_paint, args=(child,), name="benchfill-painter", daemon=True)
        try:
            self._proc.start()
        except OSError:  # pragma: no cover - e.g. out of processes: draw in this process
            self._conn = self._proc = None
        finally:
            child.close()

    @classmethod
    def here(cls) -> "Painter":
        """A painter that draws in this process."""
        return cls(fork=False)

    @property
    def forked(self) -> bool:
        return self._proc is not None

    def submit(self, pic: Picture, path: str | Path) -> None:
        """Start drawing ``pic`` into ``path``; :meth:`wait` for it."""
        self._job = (pic, Path(path))
        if self._proc is not None:
            try:
                self._conn.send((pic, str(path)))
                self._sent = True
            except OSError:
                self._sent = False

    def wait(self) -> Path:
        """The written picture's path (drawn here when the painter could not draw it)."""
        assert self._job is not None, "submit a picture first"
        pic, path = self._job
        if self._sent:
            self._sent = False
            try:
                ok, value = self._conn.recv()
                if ok:
                    return Path(value)
            except (EOFError, OSError):
                pass
        return write_picture(pic, path)

    def close(self) -> None:
        """Stop the painter: at once when it has nothing left to draw (e.g. the command failed before drawing)."""
        if self._proc is None:
            return
        if self._sent and self._conn.poll(10):  # drawing: let it finish rather than leave a temporary file behind
            self._conn.recv()
        self._proc.terminate()
        self._proc.join()
        self._conn.close()
        self._proc = self._conn = None

    def __enter__(self) -> "Painter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
