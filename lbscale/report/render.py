"""Tables as Markdown, LaTeX, CSV and HTML; one self-contained HTML page with the figures embedded."""

from __future__ import annotations

import base64
import html

import numpy as np
import pandas as pd

FORMATS = ("md", "latex", "csv", "html")


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


def markdown(df: pd.DataFrame) -> str:
    if df.empty:
        return "(no rows)\n"
    cols = [str(c) for c in df.columns]
    rows = [[str(v) for v in r] for r in df.itertuples(index=False)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


_TEX = {"\\": "\\textbackslash{}", "~": "\\textasciitilde{}", "^": "\\textasciicircum{}", "±": "$\\pm$",
        **{ch: "\\" + ch for ch in "&%$#_{}"}}


def _tex(v) -> str:
    """LaTeX text: every special character replaced in one pass (a replacement's own braces stay as they are)."""
    return "".join(_TEX.get(ch, ch) for ch in str(v))


def latex(df: pd.DataFrame, caption: str = "") -> str:
    cols = list(df.columns)
    out = ["\\begin{table}[ht]", "\\centering", f"\\caption{{{_tex(caption)}}}" if caption else "",
           "\\begin{tabular}{" + "l" * max(len(cols), 1) + "}", "\\hline",
           " & ".join(_tex(c) for c in cols) + " \\\\", "\\hline"]
    out += [" & ".join(_tex(v) for v in r) + " \\\\" for r in df.itertuples(index=False)]
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
                   for r in df.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
         "th{background:#eee}img{max-width:100%}.note{color:#555;font-size:90%}td.id{white-space:nowrap;text-align:left}"
         "li{margin:0.3em 0}")


def _img(name: str, png: bytes) -> str:
    data = base64.b64encode(png).decode()
    return f"<img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>"


def html_page(title: str, verdict: list[str], header: list[str], tables, figures: dict[str, bytes],
              lead: str | None = None) -> str:
    """One file to send to a group: the verdict and its figure (`lead`) first, then the header lines, the tables
    inline and the other figures, all as embedded PNGs."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><h2>Verdict</h2>"]
    if len(verdict) == 1:
        parts.append(f"<p>{html.escape(verdict[0])}</p>")
    elif verdict:
        parts.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in verdict) + "</ul>")
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
