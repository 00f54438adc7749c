"""Tables as Markdown, LaTeX, CSV and HTML; one self-contained HTML page with the figures embedded; the figures as
PNG and PDF."""

from __future__ import annotations

import base64
import html
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from lbscale.report.numbers import SUB
from lbscale.report.parallel import can_fork, next_taken, start, stop_taking



def integral(df: pd.DataFrame) -> pd.DataFrame:
    """Float columns holding whole numbers only (batches, GPUs, seeds) as integers, for CSV."""
    out = df.copy()
    for c in out.columns:
        col = out[c]
        vals = col.dropna()
        if (pd.api.types.is_float_dtype(col) and len(vals) and np.isfinite(vals).all() and (vals.abs() < 2 ** 53).all()
                and (vals % 1 == 0).all()):
            out[c] = pd.array([None if pd.isna(v) else int(v) for v in col], dtype="Int64")
    return out


def _rows(df: pd.DataFrame) -> list[list]:
    """A table's rows as lists of its values (itertuples steps through string columns value by value)."""
    return df.to_numpy(dtype=object).tolist()


def markdown(df: pd.DataFrame) -> str:
    if df.empty:
        return "(no rows)\n"
    cols = [str(c) for c in df.columns]
    rows = [[str(v) for v in r] for r in _rows(df)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


_TEX = str.maketrans({"\\": "\\textbackslash{}", "~": "\\textasciitilde{}", "^": "\\textasciicircum{}",
                      "±": "$\\pm$", **{ch: "\\" + ch for ch in "&%$#_{}"}})


def _tex(v) -> str:
    """LaTeX text: every special character replaced in one pass (a replacement's own braces stay as they are)."""
    return str(v).translate(_TEX)


def latex(df: pd.DataFrame, caption: str = "") -> str:
    cols = list(df.columns)
    out = ["\\begin{table}[ht]", "\\centering", f"\\caption{{{_tex(caption)}}}" if caption else "",
           "\\begin{tabular}{" + "l" * max(len(cols), 1) + "}", "\\hline",
           " & ".join(_tex(c) for c in cols) + " \\\\", "\\hline"]
    out += [" & ".join(_tex(v) for v in r) + " \\\\" for r in _rows(df)]
    out += ["\\hline", "\\end{tabular}", "\\end{table}"]
    return "\n".join(x for x in out if x) + "\n"


NOWRAP = ("Trial", "Batch size", "Variant")  # names a line break would cut in two (b256-sgd-none-p2- / s0)


def html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p>(no rows)</p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    keep = [str(c) in NOWRAP for c in df.columns]
    body = "".join("<tr>" + "".join(f"<td{' class=id' if k else ''}>{html.escape(str(v))}</td>"
                                    for v, k in zip(r, keep)) + "</tr>"
                   for r in _rows(df))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
         "th{background:#eee}img{max-width:100%}.note{color:#555;font-size:90%}td.id{white-space:nowrap;text-align:left}"
         "li{margin:0.3em 0}")


def _img(name: str, png: bytes) -> str:
    data = base64.b64encode(png).decode()
    return f"<img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>"


def html_list(lines: list[str]) -> str:
    """The verdict's lines as a list, a line that starts with SUB (two spaces) nested under the one above it."""
    out, open_sub = ["<ul>"], False
    for line in lines:
        sub = line.startswith(SUB)
        if sub and not open_sub:
            out.append("<ul>")
        elif not sub and open_sub:
            out.append("</ul></li>")
        if not sub and out[-1] not in ("<ul>", "</ul></li>"):
            out.append("</li>")
        out.append(f"<li>{html.escape(line.strip())}" + ("</li>" if sub else ""))
        open_sub = sub
    out.append("</ul></li></ul>" if open_sub else "</li></ul>")
    return "".join(out)


def html_page(title: str, verdict: list[str], header: list[str], tables, figures: dict[str, bytes],
              lead: str | None = None) -> str:
    """One file to send to a group: the verdict and its figure (`lead`) first, then the header lines, the tables
    inline and the other figures, all as embedded PNGs."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><h2>Verdict</h2>"]
    if len(verdict) == 1:
        parts.append(f"<p>{html.escape(verdict[0])}</p>")
    elif verdict:
        parts.append(html_list(verdict))
    if lead in figures:
        parts.append(_img(lead, figures[lead]))
    parts += [f"<p>{html.escape(line)}</p>" for line in header]
    for t in tables:
        parts.append(f"<h2>{html.escape(t.title)}</h2>{html_table(t.display)}")
        parts += [f"<p class='note'>{html.escape(n)}</p>" for n in t.notes]
    for name, png in figures.items():
        if name != lead:
            parts.append(f"<h2>{html.escape(name)}</h2>{_img(name, png)}")
    parts.append("</body></html>")
    return "\n".join(parts)


def prepare_figures() -> None:
    """Import what drawing the figures needs (the report's plots, pyplot, the PDF backend): once, in the process
    that later forks the figures' second drawer, rather than in each drawer."""
    import io

    import matplotlib.pyplot as plt

    import lbscale.report.plots  # noqa: F401

    fig, ax = plt.subplots(figsize=(2, 1.5))  # a figure's first drawing loads the fonts and fills font caches
    ax.plot([1, 2], [1, 2], "o-", label="x")
    ax.set_title("t")
    ax.legend(title="t", fontsize=8)
    fig.canvas.draw()
    fig.savefig(io.BytesIO(), format="pdf")
    plt.close(fig)


def save_figure(fig, folder: Path, name: str) -> None:
    """`name`.png and `name`.pdf of `fig`, cropped to what it draws (as savefig's bbox_inches="tight"), each
    drawn once: "tight" draws a figure twice per file, once to measure it. The Agg canvas is drawn once (`drawn`);
    its pixels give the box (what differs from the background, plus savefig's padding) and, cropped, the PNG; the
    PDF is printed into the same box, its titles where the canvas's drawing placed them (`_keep_titles`). A
    drawing that touches the canvas's edge, or a title or legend that reaches past it (`_spills`), may reach
    further than the canvas shows, where only the measuring draw finds its extent: such a figure is saved the
    classic way."""
    import matplotlib as mpl
    from matplotlib.image import imsave
    from matplotlib.transforms import Bbox

    png, pdf = folder / f"{name}.png", folder / f"{name}.pdf"
    rgba = drawn(fig)
    ink = (rgba != rgba[0, 0]).any(axis=2)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    h, w = ink.shape
    if (not len(rows) or rows[0] == 0 or cols[0] == 0 or rows[-1] == h - 1 or cols[-1] == w - 1
            or _spills(fig)):
        fig.savefig(png, bbox_inches="tight")
        fig.savefig(pdf, bbox_inches="tight")
        return
    dpi = fig.dpi
    pad = round(mpl.rcParams["savefig.pad_inches"] * dpi)
    y0, y1 = max(rows[0] - pad, 0), min(rows[-1] + 1 + pad, h)
    x0, x1 = max(cols[0] - pad, 0), min(cols[-1] + 1 + pad, w)
    # zlib level 3 rather than Pillow's 6: lossless either way, 27 ms against 44 ms on the largest figure
    imsave(png, np.ascontiguousarray(rgba[y0:y1, x0:x1]), format="png", dpi=dpi, pil_kwargs={"compress_level": 3})
    _keep_titles(fig)
    fig.savefig(pdf, bbox_inches=Bbox.from_extents(x0 / dpi, (h - y1) / dpi, x1 / dpi, (h - y0) / dpi))


def _spills(fig) -> bool:
    """Whether a title or legend of the drawn `fig` reaches past its canvas: a glyph wholly outside leaves no ink
    at the edge to show it (measured from the draw's own text layout, which costs nothing more)."""
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        for artist in (*_titles(ax), legend):
            if artist is None or not artist.get_visible() or (artist is not legend and not artist.get_text()):
                continue
            box = artist.get_window_extent(renderer)
            if box.x0 < 0 or box.y0 < 0 or box.x1 > fig.bbox.width or box.y1 > fig.bbox.height:
                return True
    return False


def drawn(fig) -> np.ndarray:
    """`fig` drawn on its Agg canvas (its RGBA pixels), as matplotlib draws it, with less work: matplotlib places
    each axes' title anew on every draw, above any tick labels at the top and above an offset text ("1e6") that
    would touch it, measuring every y tick label to do so (a tenth of a figure's drawing). Titles that nothing
    can lift (`_liftable`) are drawn where matplotlib starts them; after the draw, the test matplotlib would have
    made (`_would_lift`) says whether one of them should have moved, and then the figure is drawn again with
    matplotlib's placement."""
    fig.set_layout_engine(None)  # laid out when it was built (tight_layout's engine would draw before printing)
    fixed = [ax for ax in fig.axes if not _liftable(ax)]
    for ax in fixed:
        ax._autotitlepos = False
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    if any(_would_lift(ax, renderer) for ax in fixed):
        for ax in fixed:
            ax._autotitlepos = True
        fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())


def _titles(ax) -> tuple:
    """An axes' three titles (centre, left, right), as matplotlib places them together."""
    return ax.title, ax._left_title, ax._right_title


def _liftable(ax) -> bool:
    """Whether something other than the axes' own y offset text may lift its titles (or they are placed by hand,
    or have no text): tick labels or the x label at the top, a twin, a child or title-aligned axes
    (matplotlib's `Axes._update_title_position`)."""
    titles = _titles(ax)
    if (ax._autotitlepos is False or not ax.axison or not any(t.get_text() for t in titles)
            or any(t.get_position()[1] != 1.0 for t in titles)):
        return True  # an axes turned off still has its offset text set and measured by matplotlib's placement
    aligned = getattr(ax.figure, "_align_label_groups", {}).get("title")  # fig.align_titles: matplotlib >= 3.9
    siblings = len(ax._twinned_axes.get_siblings(ax)) + (len(aligned.get_siblings(ax)) if aligned else 1)
    return bool(ax.child_axes or siblings > 2 or ax.xaxis.get_ticks_position() in ("top", "unknown")
                or ax.xaxis.get_label_position() == "top")


def _would_lift(ax, renderer) -> bool:
    """Whether matplotlib's placement would have moved a title of `ax` (not `_liftable`) from y = 1, as it tests
    it: the top of the axes, or an offset text that touches the title, above the title's lowest point."""
    top = ax.spines.get("outline", ax).get_window_extent().ymax
    offset = ax.yaxis.offsetText
    for title in _titles(ax):  # an empty title too (hidden, it measures at 0, 0)
        if title.get_text() and offset.get_visible() and offset.get_text():
            bb = offset.get_tightbbox(renderer)
            if bb.intersection(title.get_tightbbox(renderer), bb):
                top = bb.ymax
        if top < 0:
            return False
        if title.get_window_extent(renderer).ymin < top:
            return True
    return False


def _keep_titles(fig) -> None:
    """Each axes' titles where the last draw left them (where matplotlib starts them, at the top of the axes), for
    printing the PDF: matplotlib places them anew on every draw, measuring the y tick labels to do so. A title
    the draw lifted (over an offset text, tick labels at the top) is placed again by matplotlib: how far it goes
    depends on text measured at the PDF's resolution (a quarter of a point otherwise, with matplotlib 3.10), and a
    hidden title is measured at the canvas's origin. (The axis labels are left to matplotlib too: fixed where the
    canvas's drawing put them, a y label lands up to half a point off in the PDF.)"""
    for ax in fig.axes:
        if all(t.get_visible() and t.get_position()[1] == 1.0 for t in _titles(ax)):
            ax._autotitlepos = False


def _draw(figs: dict, folder: Path, name: str) -> None:
    import matplotlib.pyplot as plt

    fig = figs[name]() if callable(figs[name]) else figs[name]
    try:
        save_figure(fig, folder, name)
    finally:
        plt.close(fig)


def _draw_child(figs: dict, folder: Path, names: list, taken, conn) -> None:
    """The child's side of `figures_drawn`: its figures, then its exception (or None) to the parent, which raises
    it (as `parallel.shared`'s child sends its own): a full disk is then the parent's one line, never a traceback
    printed by the child."""
    error = None
    try:
        _draw_from(figs, folder, names, taken)
    except Exception as e:
        error = e
        stop_taking(taken, len(names))
    conn.send(error)
    conn.close()


def _draw_from(figs: dict, folder: Path, names: list, taken) -> None:
    """Draw the next figure nobody has taken (`taken`: the shared index of the next one) until none is left."""
    while (i := next_taken(taken, len(names))) is not None:
        _draw(figs, folder, names[i])


@contextmanager
def figures_drawn(figs: dict, folder: Path, first=()):
    """PNG and PDF of every figure (`save_figure`) by the end of the with-block; a value is the figure or a
    function that builds it, so that another process can build and draw it. Drawing is single-threaded and most
    of a large report's time: where a child may be forked (`parallel.can_fork`), it starts on the figures at
    once, and this process takes figures from the same list as soon as the block's own work is done. The names
    in `first` (those that take longest to draw) are drawn first, so that the two processes finish close together
    on the shorter ones."""
    import multiprocessing

    names = sorted(figs, key=lambda n: first.index(n) if n in first else len(first))  # longest first, in order
    if len(names) < 2 or not can_fork():
        yield
        for name in names:
            _draw(figs, folder, name)
        return
    fork = multiprocessing.get_context("fork")
    taken = fork.Value("i", 0)
    receive, send = fork.Pipe(duplex=False)
    child = fork.Process(target=_draw_child, args=(figs, folder, names, taken, send))
    start(child)
    send.close()
    error = None
    try:
        yield
        _draw_from(figs, folder, names, taken)
        try:
            error = receive.recv()  # before the join: the child ends once it has sent
        except EOFError:  # it died without a word: its exit code says so below
            pass
    except BaseException:
        child.terminate()
        raise
    finally:
        child.join()
        receive.close()
    if error is not None:
        raise error
    if child.exitcode != 0:
        raise RuntimeError(f"drawing figures in a child process failed (exit {child.exitcode})")


def save_figures(figs: dict, folder: Path) -> None:
    """PNG and PDF of every figure (`figures_drawn`)."""
    with figures_drawn(figs, folder):
        pass
