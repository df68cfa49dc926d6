"""The diagnosis picture reads on its own: its legend lies outside the axes (it covers no item of the rug, no curve,
no gap number) and it prints each metric's figures and verdict, coloured by verdict, above the axes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from benchfill.diagnostics.null import THRESHOLDS
from benchfill.diagnostics.picture import VERDICT_COLOURS, Picture, picture_figure


def _picture(posterior=True, population=True) -> Picture:
    rng = np.random.default_rng(0)
    d = np.concatenate([[0.0, 1.0], rng.uniform(0, 0.8, 300), np.full(40, 0.97)])  # items up to the right end
    gaps = [SimpleNamespace(lo=0.8, hi=0.97, mid=0.885), SimpleNamespace(lo=0.0, hi=0.02, mid=0.01)]
    post = {k: SimpleNamespace(mean=m, sd=0.01, q05=m - 0.02, q95=m + 0.02)
            for k, m in (("ddm", 0.15), ("max_gap", 0.17), ("top5_sum", 0.25))} if posterior else None
    pop = (np.linspace(-0.1, 1.1, 50), np.full(50, 1.0)) if population else None
    return Picture.of("bench.csv", 12, d, gaps, post, {"ddm": 0.12, "max_gap": 0.17, "top5_sum": 0.26},
                      preview=not posterior, population=pop, population_label="spline",
                      verdicts={"ddm": "flag", "max_gap": "flag", "top5_sum": "ok"}, thresholds=THRESHOLDS,
                      model="1PL, c = 0.25")


def _drawn(pic: Picture):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = picture_figure(pic)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return fig, canvas.get_renderer()


@pytest.mark.parametrize("population", [True, False])
def test_the_legend_covers_no_data(population):
    fig, renderer = _drawn(_picture(population=population))
    assert len(fig.legends) == 1
    legend = fig.legends[0].get_window_extent(renderer)
    assert fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1 and fig.bbox.y0 <= legend.y0
    for ax in fig.axes:  # the data area and everything drawn around it (tick labels, x label, gap numbers)
        assert not legend.overlaps(ax.get_window_extent(renderer)), ax
        assert not legend.overlaps(ax.get_tightbbox(renderer)), ax
        assert not any(a.get_legend() for a in fig.axes)  # no second legend inside an axes
    rug = next(line for line in fig.axes[0].lines if line.get_marker() == "|")
    xy = fig.axes[0].transData.transform(np.column_stack(rug.get_data()))
    assert not any(legend.contains(x, y) for x, y in xy)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "items (rug)" in labels and ("population: spline" in labels) == population


def test_the_verdicts_are_printed_above_the_axes():
    fig, renderer = _drawn(_picture())
    texts = {t.get_text(): t for t in fig.texts}
    ddm = next(t for s, t in texts.items() if s.startswith("DDM"))
    assert "0.150 ± 0.010" in ddm.get_text() and "[0.130, 0.170]" in ddm.get_text()
    assert ddm.get_text().endswith("FLAG") and ddm.get_color() == VERDICT_COLOURS["flag"]
    top5 = next(t for s, t in texts.items() if s.startswith("Top-5"))
    assert top5.get_text().endswith("ok") and ">= 0.30" in top5.get_text()
    assert top5.get_color() == VERDICT_COLOURS["ok"]
    assert any(s.startswith("bench.csv: 12 models x 342 items, 1PL, c = 0.25") for s in texts)
    assert any(s.startswith("paper's plug-in: DDM 0.120") for s in texts)
    ax = fig.axes[0]
    boxes = [ax.get_window_extent(renderer)] + [t.get_window_extent(renderer) for t in ax.texts]  # gap numbers
    for t in fig.texts:
        box = t.get_window_extent(renderer)
        assert not any(box.overlaps(b) for b in boxes), t.get_text()
    for a, b in zip(fig.texts, fig.texts[1:]):  # one line under the other
        assert a.get_window_extent(renderer).y0 >= b.get_window_extent(renderer).y1 - 1


def test_a_map_preview_says_its_figure_is_the_plug_in():
    pic = _picture(posterior=False)
    assert "[MAP preview]" in pic.title
    assert [v for _, v in pic.verdicts] == ["flag", "flag", "ok"]
    assert all("plug-in, no posterior" in line for line, _ in pic.verdicts)
    fig, _ = _drawn(pic)
    assert sum("plug-in, no posterior" in t.get_text() for t in fig.texts) == 3


PAINTER_IGNORING_SIGTERM = """
import signal
from benchfill.diagnostics.picture import Painter
old = signal.signal(signal.SIGTERM, signal.SIG_IGN)
painter = Painter()
signal.signal(signal.SIGTERM, old)
proc = painter._proc
assert proc is not None, "no painter forked"
painter.close()
print(proc.exitcode)
"""


def test_the_painter_is_stopped_even_when_its_process_does_not_end_on_sigterm():
    """A command that fails right after forking its painter (a missing extra) stops the painter at once; a painter
    that survives SIGTERM (here: inherited as ignored) must not leave the command waiting for it forever, as one did
    on a loaded machine (tests/test_install_extras.py hung 300 s). In a fresh process: the painter forks only
    where no other thread runs."""
    import signal
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", PAINTER_IGNORING_SIGTERM], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == [str(-signal.SIGKILL)]
