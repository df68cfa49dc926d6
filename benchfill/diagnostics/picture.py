"""The diagnosis picture (matplotlib, no pyplot) and the process that draws it while the command works.

This module imports numpy and, when drawing, matplotlib: nothing else of benchfill's, so that a painter forked at
the start of a command has little to import besides matplotlib.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

VERDICT_COLOURS = {"flag": "#c62828", "at floor": "#9a6700", "ok": "#2e7d32"}
METRIC_LABELS = (("ddm", "DDM"), ("max_gap", "max gap"), ("top5_sum", "Top-5"))


@dataclass(frozen=True)
class Picture:
    """What the diagnosis picture shows, and nothing else (small enough to send to another process)."""

    d: np.ndarray  # (I,) normalised difficulties, sorted
    gaps: list[tuple[float, float, float]]  # (lo, hi, mid) of the largest gaps, largest first
    title: str
    population: tuple[np.ndarray, np.ndarray] | None = None  # (d, density per unit d) of the difficulty population
    population_label: str = ""
    verdicts: tuple[tuple[str, str], ...] = ()  # (line, verdict) per metric: its figures and its verdict

    @classmethod
    def of(cls, source: str, n_models: int, d: np.ndarray, gaps: Sequence[Any], posterior: dict[str, Any] | None,
           plug_in: dict[str, float], preview: bool = False, n_gaps: int = 5,
           population: tuple[np.ndarray, np.ndarray] | None = None, population_label: str = "",
           verdicts: Mapping[str, str] | None = None, thresholds: Mapping[str, float] | None = None,
           model: str = "") -> "Picture":
        """The picture of a diagnosis: ``d`` (I,) its normalised difficulties, ``gaps`` its largest gaps (objects
        with lo, hi, mid), ``posterior`` its metrics' posterior summaries (objects with mean, sd, q05, q95; None
        for a MAP preview), ``plug_in`` its plug-in ddm, max_gap and top5_sum; ``population`` the difficulty
        population as (d, density) on the normalised axis; ``verdicts`` metric -> flag / at floor / ok and
        ``thresholds`` metric -> the flag threshold, for the verdict lines; ``model`` the IRT model (its
        guessing rate too: the verdicts depend on it)."""
        d = np.sort(np.asarray(d, dtype=float))
        tag = " [MAP preview]" if preview else ""
        title = (f"{Path(source).name}: {n_models} models x {len(d)} items{', ' + model if model else ''}{tag}\n"
                 f"paper's plug-in: DDM {plug_in['ddm']:.3f}   max gap {plug_in['max_gap']:.3f}   "
                 f"Top-5 {plug_in['top5_sum']:.3f}")
        lines = verdict_lines(posterior, plug_in, verdicts or {}, thresholds or {})
        return cls(d, [(g.lo, g.hi, g.mid) for g in list(gaps)[:n_gaps]], title, population, population_label,
                   lines)


def model_label(kind: str, guessing: float | None) -> str:
    """The IRT model as the picture names it: "1PL", "1PL, c = 0.25"."""
    return kind.upper() + (f", c = {guessing:g}" if guessing else "")


def verdict_lines(posterior: Mapping[str, Any] | None, plug_in: Mapping[str, float], verdicts: Mapping[str, str],
                  thresholds: Mapping[str, float]) -> tuple[tuple[str, str], ...]:
    """One (line, verdict) per metric with a verdict: the posterior mean ± SD and 90 % interval (the plug-in for a
    MAP preview), the threshold and the verdict, in fixed-width columns (the picture prints them in a monospaced
    font, coloured by verdict)."""
    out = []
    for key, label in METRIC_LABELS:
        if key not in verdicts:
            continue
        p = (posterior or {}).get(key)
        figure = (f"{p.mean:.3f} ± {p.sd:.3f}  90 % [{p.q05:.3f}, {p.q95:.3f}]" if p is not None
                  else f"{plug_in[key]:.3f} (plug-in, no posterior)      ")
        threshold = f">= {thresholds[key]:.2f}" if key in thresholds else ""
        verdict = verdicts[key]
        out.append((f"{label:<8}{figure}  {threshold:>8}  {verdict.upper() if verdict == 'flag' else verdict}",
                    verdict))
    return tuple(out)


def population_on_axis(curve: Sequence[tuple[float, float]], b_min: float, b_max: float
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """(b, density) pairs of a difficulty population -> (d, density per unit d) on the axis d = (b - b_min) / span."""
    if not curve or not b_max > b_min:
        return None
    b, dens = np.asarray(curve, dtype=float).T
    span = b_max - b_min
    return (b - b_min) / span, dens * span


def picture_figure(pic: Picture):
    """The picture as a matplotlib Figure: ECDF of normalised difficulty against the uniform, items on the axis
    (the rug), largest gaps shaded; above the axes the title and each metric's figures and verdict, below them
    the legend (outside the axes, so it covers no data)."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global figure state
    from matplotlib.lines import Line2D

    d, n = pic.d, len(pic.d)
    fig = Figure(figsize=(7.5, 6.0), dpi=120)
    top = 0.89 - 0.03 * len(pic.verdicts)  # the title, one line per verdict and the plug-in line above the axes
    ax = fig.add_axes((0.09, 0.19, 0.80, top - 0.19))
    for k, (lo, hi, mid) in enumerate(pic.gaps):
        ax.axvspan(lo, hi, color="tab:red", alpha=0.18, lw=0, label="largest gaps" if k == 0 else None)
        ax.text(mid, 1.01, str(k + 1), ha="center", va="bottom", fontsize=8, color="tab:red",
                transform=ax.get_xaxis_transform())
    ax.plot([0, 1], [0, 1], color="0.4", ls="--", lw=1, label="uniform target")
    ax.step(np.concatenate([[0], d, [1]]), np.concatenate([[0], np.arange(1, n + 1) / n, [1]]), where="post",
            color="tab:blue", lw=1.6, label="ECDF of d (a step's height: the items at that d)")
    ax.plot(d, np.full(n, -0.03), "|", color="k", ms=10, alpha=0.6 if n < 500 else 0.15)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], ls="", marker="|", color="k", ms=10, alpha=0.6))  # the rug's own may be faint
    labels.append("items (rug)")
    if pic.population is not None:  # the prior the difficulties were given, beside their ECDF
        x, dens = pic.population
        keep = (x >= -0.01) & (x <= 1.01)
        twin = ax.twinx()
        twin.fill_between(x[keep], dens[keep], color="tab:green", alpha=0.15, lw=0)
        twin.plot(x[keep], dens[keep], color="tab:green", lw=1.0, label=f"population: {pic.population_label}")
        twin.set_ylim(0, 1.25 * float(dens[keep].max()) if keep.any() else 1.0)
        twin.set_ylabel("population density (per unit d)", color="tab:green", fontsize=8)
        twin.tick_params(axis="y", labelsize=7, colors="tab:green")
        ax.set_zorder(twin.get_zorder() + 1)  # the ECDF and the rug over the population's shading
        ax.patch.set_visible(False)
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.set_xlim(-0.01, 1.01)
    ax.set_ylim(-0.06, 1.06)
    ax.set_xlabel("normalised difficulty d (0 = easiest item, 1 = hardest)")
    ax.set_ylabel("share of items with difficulty <= d")
    title, _, plug_in = pic.title.partition("\n")
    fig.text(0.5, 0.985, title, ha="center", va="top", fontsize=9.5)
    y = 0.955
    for line, verdict in pic.verdicts:
        fig.text(0.09, y, line, ha="left", va="top", fontsize=8.5, family="monospace",
                 color=VERDICT_COLOURS.get(verdict, "black"), fontweight="bold" if verdict == "flag" else "normal")
        y -= 0.03
    if plug_in:
        fig.text(0.09, y, plug_in, ha="left", va="top", fontsize=8, color="0.35")
    # below the x label, outside the axes: it cannot hide the rug or the ECDF
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.005), ncol=3, fontsize=7.5,
               frameon=False)
    return fig


def png_bytes(pic: Picture) -> bytes:
    """The picture as PNG data."""
    import io

    buf = io.BytesIO()
    picture_figure(pic).savefig(buf, format="png")
    return buf.getvalue()


def write_picture(pic: Picture, path: str | Path) -> Path:
    """Write the picture as a PNG (atomically)."""
    from benchfill.io import atomic_write_bytes

    return atomic_write_bytes(path, png_bytes(pic))


# ------------------------------------------------------------------------------------------------ the painter

def _paint(conn, parent_end, parent: int) -> None:  # pragma: no cover - runs in the painter process
    import signal

    from benchfill.forking import die_with_parent

    # the parent's end of the pipe, inherited at fork, is closed here: a parent that dies is then an EOF
    parent_end.close()
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops this process
    from matplotlib.backends import backend_agg  # noqa: F401  (the point: imported while the parent works)
    from matplotlib.figure import Figure  # noqa: F401

    from benchfill.forking import send_result

    try:
        pic = conn.recv()
    except EOFError:
        return
    send_result(png_bytes, pic, conn)


class Painter:
    """Draws the diagnosis picture in a process forked at the start of a command, which imports matplotlib
    (~0.4 s) while this process loads the data and fits; :meth:`draw` hands it the :class:`Picture` as soon as
    the metrics are known, :meth:`write` saves the PNG it drew. Where it cannot fork without risk (another thread
    alive, no fork on this OS), or the child fails, the picture is drawn here. Use as a context manager: the
    child is stopped on exit."""

    def __init__(self, fork: bool = True) -> None:
        import multiprocessing as mp

        from benchfill.forking import start_method

        self._conn = self._proc = None
        self._sent = False
        self._pic: Picture | None = None
        if not fork or start_method() != "fork":
            return
        ctx = mp.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_paint, args=(child, self._conn, os.getpid()), name="benchfill-painter",
                                 daemon=True)
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

    @property
    def has_picture(self) -> bool:
        return self._pic is not None

    def draw(self, pic: Picture) -> None:
        """Start drawing ``pic`` (in the painter's process, if there is one); :meth:`write` saves it."""
        self._pic = pic
        if self._proc is not None and self._conn is not None and not self._sent:
            try:
                self._conn.send(pic)
                self._sent = True
            except OSError:
                pass

    def write(self, path: str | Path) -> Path:
        """Write the drawn picture to ``path`` as a PNG (atomically); drawn here if the painter could not."""
        from benchfill.io import atomic_write_bytes

        assert self._pic is not None, "draw a picture first"
        if self._sent and self._conn is not None:
            self._sent = False
            try:
                ok, value = self._conn.recv()
                if ok:
                    return atomic_write_bytes(path, value)
            except (EOFError, OSError):
                pass
        return write_picture(self._pic, path)

    def close(self) -> None:
        """Stop the painter's process (at once: it holds nothing that is not already written or not wanted).

        By SIGKILL, not SIGTERM: the child inherits the command's Python SIGTERM handler, and a painter stopped
        right after its fork (a command that fails at once, e.g. for a missing extra) was seen to survive the
        SIGTERM, blocked in its pipe's read, so the command waited for it forever (3 of 4 runs on a loaded 2-core
        machine, tests/test_install_extras.py). The likely window: CPython clears the pending-signal flags in a
        fork's child (``PyOS_AfterFork_Child``), so a SIGTERM that lands before that is lost. SIGKILL cannot be
        caught, ignored or lost so."""
        if self._proc is None:
            return
        self._proc.kill()
        self._proc.join()
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def __enter__(self) -> "Painter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
