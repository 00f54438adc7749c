"""The figure files as matplotlib itself would draw them: `render.save_figure` draws each figure once and skips
work matplotlib repeats on every draw (placing each title above the tick labels and offset text, placing the axis
labels again for the PDF), so its pixels and the PDF's text positions are compared here with a figure built the
same way and drawn by matplotlib's own code, on the report's figures and on the cases where matplotlib moves a
title (an offset text under it, tick labels at the top, a twin axes)."""

import re
import zlib

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lbscale.report import ReportOptions, load_results  # noqa: E402
from lbscale.report.sections import build  # noqa: E402
from lbscale.report.render import drawn, save_figure  # noqa: E402
from tests.fixtures.make_results import make_study  # noqa: E402
from tests.report.make_tuned import make_tuned_study  # noqa: E402


def _room(made):
    """Room around the axes for a lifted title and the labels: a figure whose drawing touches the canvas's edge
    is saved another way (savefig's own "tight" box)."""
    fig, _ = made
    fig.subplots_adjust(left=0.15, right=0.85, top=0.8, bottom=0.15, wspace=0.4)
    return made


def _offset_under_title():
    """A y axis whose tick labels need an offset ("1e6" at its top left) under a title as wide as the axes:
    matplotlib lifts the title above the offset text."""
    fig, ax = _room(plt.subplots(figsize=(5, 4)))
    ax.plot([0, 1], [1e6, 1e6 + 1])
    ax.set_title("a title as wide as the axes it stands on")
    return fig


def _offset_beside_title():
    """The same offset text beside a short title, which it does not touch: the title stays."""
    fig, ax = _room(plt.subplots(figsize=(5, 4)))
    ax.plot([0, 1], [1e6, 1e6 + 1])
    ax.set_title("short")
    return fig


def _ticks_on_top():
    fig, ax = _room(plt.subplots(figsize=(5, 4)))
    ax.plot([0, 1], [0, 1])
    ax.xaxis.tick_top()
    ax.set_title("ticks on top")
    return fig


def _twins():
    fig, ax = _room(plt.subplots(figsize=(5, 4)))
    ax.plot([0, 1], [0, 1])
    ax.twinx().plot([0, 1], [1e6, 1e6 + 1])
    ax.set_title("a title its twin's offset text lifts, wide")
    return fig


def _panels():
    fig, axes = _room(plt.subplots(1, 3, figsize=(9, 4)))
    for i, ax in enumerate(axes):
        ax.plot([0, 1], [10 ** (3 * i), 10 ** (3 * i) + 1])
        ax.set_title(f"panel {i} with a title of some length")
        ax.set_xlabel("x")
        ax.set_ylabel("y")
    return fig


def _axis_off():
    """An axes turned off: matplotlib's placement still sets and measures its y offset text ("1e7"), and lifts a
    title over it."""
    fig, ax = _room(plt.subplots(figsize=(5, 4)))
    ax.plot([0, 1], [1e7, 1e7 + 1])
    ax.axis("off")
    ax.set_title("a left title over an axes turned off", loc="left")
    return fig


def _hidden_title():
    """A hidden (empty) centre title beside a left one: matplotlib measures the hidden one at the origin and
    lifts every title."""
    fig, ax = _room(plt.subplots(figsize=(5, 4)))
    ax.plot([0, 1], [0, 1])
    ax.set_title("left", loc="left")
    ax.title.set_visible(False)
    return fig


CASES = {"offset under title": _offset_under_title, "offset beside title": _offset_beside_title,
         "ticks on top": _ticks_on_top, "twins": _twins, "panels": _panels, "axis off": _axis_off,
         "hidden title": _hidden_title}


@pytest.fixture(scope="module")
def report_figures(tmp_path_factory):
    """The report's figures (functions that build them) of a grid study and of a tuned study."""
    tmp = tmp_path_factory.mktemp("studies")
    figures = {}
    for name, make in (("grid", make_study), ("tuned", make_tuned_study)):
        study = load_results([make(tmp / name)])
        built = build(study, ReportOptions(out=tmp / f"{name}-report", formats=("md",)))
        figures.update({f"{name}: {n}": f for n, f in built.figures.items()})
    return figures


def _pixels(fig) -> np.ndarray:
    """The figure as matplotlib draws it (every title and label placed by matplotlib)."""
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def _title_heights(fig) -> list:
    return [ax.title.get_position()[1] for ax in fig.axes]


def _same_drawing(make, name: str):
    mine, theirs = make(), make()
    got = drawn(mine).copy()
    want = _pixels(theirs)
    assert got.shape == want.shape, name
    assert np.array_equal(got, want), f"{name}: {(got != want).any(axis=2).sum()} pixels differ"
    assert _title_heights(mine) == _title_heights(theirs), name
    plt.close(mine)
    plt.close(theirs)
    return theirs


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_figure_is_drawn_pixel_for_pixel_as_matplotlib_draws_it(case):
    theirs = _same_drawing(CASES[case], case)
    if case == "offset under title":  # the case where matplotlib moves the title: the comparison covers it
        assert theirs.axes[0].title.get_position()[1] > 1.01
    if case == "offset beside title":
        assert theirs.axes[0].title.get_position()[1] == 1.0


def test_every_report_figure_is_drawn_as_matplotlib_draws_it(report_figures):
    assert len(report_figures) >= 8
    for name, make in report_figures.items():
        _same_drawing(make, name)


def _pdf_text(path) -> list:
    """Every text a PDF matplotlib wrote draws, in drawing order: the matrix that places it (the six numbers of the
    `cm` before its BT ... ET) and its string's pieces."""
    texts = []
    for stream in re.findall(rb"stream\r?\n(.*?)\r?\nendstream", path.read_bytes(), re.S):
        try:
            stream = zlib.decompress(stream)
        except zlib.error:
            continue
        for matrix, block in re.findall(rb"((?:-?[\d.]+ ){6})cm\s*BT(.*?)ET", stream, re.S):
            texts.append(([float(v) for v in matrix.split()], b"".join(re.findall(rb"\((.*?)\)", block))))
    return texts


def test_the_pdf_places_every_text_where_matplotlib_places_it(report_figures, tmp_path):
    """save_figure's PDF against the same figure printed by savefig into the same box, every title and axis label
    placed by matplotlib's own drawing: the same texts, each within 0.05 pt (a PDF is in points; hinting at the
    PNG's resolution moves a measured extent by a fraction of a pixel)."""
    cases = {**CASES, **report_figures}
    for name, make in cases.items():
        mine, theirs = make(), make()
        save_figure(mine, tmp_path, "mine")
        theirs.savefig(tmp_path / "theirs.pdf", bbox_inches=_box(theirs))
        got, want = _pdf_text(tmp_path / "mine.pdf"), _pdf_text(tmp_path / "theirs.pdf")
        assert len(got) == len(want) > 0, name
        for (g, gs), (w_, ws) in zip(got, want):
            assert gs == ws, name
            assert len(g) == len(w_), (name, gs)
            np.testing.assert_allclose(g, w_, atol=0.05, err_msg=f"{name}: {gs}")
        plt.close(mine)
        plt.close(theirs)


def _crop(rgba: np.ndarray, dpi: float) -> tuple:
    """save_figure's crop of the canvas `rgba` (first row, first column, end row, end column): the ink's box with
    savefig's padding of a "tight" box; None where the ink touches the canvas's edge."""
    ink = (rgba != rgba[0, 0]).any(axis=2)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    h, w = ink.shape
    if rows[0] == 0 or cols[0] == 0 or rows[-1] == h - 1 or cols[-1] == w - 1:
        return None
    pad = round(matplotlib.rcParams["savefig.pad_inches"] * dpi)
    return max(rows[0] - pad, 0), max(cols[0] - pad, 0), min(rows[-1] + 1 + pad, h), min(cols[-1] + 1 + pad, w)


def _box(fig):
    """The box save_figure prints `fig` into, found by drawing it as matplotlib does: its crop of the canvas in
    inches, or "tight" where the drawing touches the canvas's edge or a title or legend reaches past it."""
    from matplotlib.transforms import Bbox

    fig.set_layout_engine(None)
    rgba = _pixels(fig)
    crop, dpi, h = _crop(rgba, fig.dpi), fig.dpi, rgba.shape[0]
    renderer, canvas = fig.canvas.get_renderer(), fig.bbox
    texts = [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title, ax.get_legend())
             if t is not None and t.get_visible() and (not hasattr(t, "get_text") or t.get_text())]
    outside = [b for b in (t.get_window_extent(renderer) for t in texts)
               if b.x0 < 0 or b.y0 < 0 or b.x1 > canvas.width or b.y1 > canvas.height]
    if crop is None or outside:  # a title or legend past the canvas: savefig's own box
        return "tight"
    y0, x0, y1, x1 = crop
    return Bbox.from_extents(x0 / dpi, (h - y1) / dpi, x1 / dpi, (h - y0) / dpi)


def test_the_png_is_the_drawing_cropped(tmp_path):
    """The PNG holds the canvas's pixels (lossless, whatever its compression), cropped to the ink plus padding."""
    fig, ref = _panels(), _panels()
    save_figure(fig, tmp_path, "f")
    png = (plt.imread(tmp_path / "f.png") * 255).round().astype(np.uint8)
    canvas = _pixels(ref)
    y0, x0, y1, x1 = _crop(canvas, ref.dpi)
    assert np.array_equal(png, canvas[y0:y1, x0:x1])
    ink = (canvas != canvas[0, 0]).any(axis=2)
    assert ink.sum() == ((png != png[0, 0]).any(axis=2)).sum()  # no ink cut off


def test_a_title_wider_than_the_canvas_is_saved_whole(tmp_path):
    """A title centred over axes narrower than it reaches 11.75 px past the canvas's left edge, where its first
    glyph falls wholly outside: no ink touches the edge, and cropping the canvas lost the "C" (the tuned time-split
    figure, seen in report.html). save_figure notices from the title's own extent and saves the figure whole."""
    fig = plt.figure(figsize=(9.7, 4.8), dpi=110)
    ax = fig.add_axes((0.85 / 9.7, 1.5 / 4.8, 5.25 / 9.7, 2.9 / 4.8))
    ax.bar([0, 1], [1, 2])
    ax.set_title("Compute, data wait, communication and imbalance (mean over each batch's best trial)")
    fig.canvas.draw()
    title = ax.title.get_window_extent(fig.canvas.get_renderer())
    assert title.x0 < 0  # the case: the title starts left of the canvas
    save_figure(fig, tmp_path, "f")
    assert plt.imread(tmp_path / "f.png").shape[1] > title.width


def test_every_report_figure_fits_its_canvas(report_figures):
    """The report's figures leave room for everything they draw (`plots._room`), so that each is saved from its one
    drawing: a figure whose ink touches the canvas's edge or whose title or legend reaches past it is drawn again
    to be measured (two more drawings). The time-split legend and the tuned training curves' legend, moved or
    widened, once did."""
    from lbscale.report.render import _spills

    for name, make in report_figures.items():
        fig = make()
        ink = (drawn(fig) != np.asarray(fig.canvas.buffer_rgba())[0, 0]).any(axis=2)
        rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
        assert rows[0] > 0 and cols[0] > 0 and rows[-1] < ink.shape[0] - 1 and cols[-1] < ink.shape[1] - 1, name
        assert not _spills(fig), name
        plt.close(fig)


CHILD_FAILS = """
import errno, sys, time
from pathlib import Path
from lbscale.report.parallel import can_fork
from lbscale.report.render import figures_drawn

def full():
    raise OSError(errno.ENOSPC, "No space left on device")

def broken():
    raise ValueError("a figure's own bug")

def fine():
    import matplotlib.pyplot as plt
    return plt.figure()

assert can_fork()
failing = {"full": full, "broken": broken}[sys.argv[2]]
try:
    with figures_drawn({"a": fine, "b": failing}, Path(sys.argv[1]), first=("b",)):
        time.sleep(1)  # the child takes "b" meanwhile
except Exception as e:
    print("raised", type(e).__name__, getattr(e, "errno", None))
"""


@pytest.mark.parametrize("failing, raised", [("full", "raised OSError 28"), ("broken", "raised ValueError None")])
def test_a_drawing_childs_failure_is_raised_by_the_parent_not_printed(tmp_path, failing, raised):
    # a clean interpreter: a child is forked only where torch is not loaded (parallel.can_fork)
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-c", CHILD_FAILS, str(tmp_path), failing], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(root), "MPLBACKEND": "Agg"}, timeout=120)
    assert p.stdout.strip() == raised, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "Process" not in p.stderr, p.stderr


def test_the_verdicts_detail_lines_nest_under_their_answer():
    from lbscale.report.render import html_list

    html = html_list(["a: B_crit ~ 40 [30, 55] at val_top1 0.8", "  knee", "  rests on", "b: not resolved", "c"])
    assert html == ("<ul><li>a: B_crit ~ 40 [30, 55] at val_top1 0.8<ul><li>knee</li><li>rests on</li></ul></li>"
                    "<li>b: not resolved</li><li>c</li></ul>")
