"""Writing a report: the folder (replaced whole, atomically: a temp dir renamed into place, and only where it is
new, empty or an earlier report), the tables in each format, the figures and the Markdown and HTML pages."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from lbscale.errors import LbscaleError
from lbscale.report.load import Study, load_results
from lbscale.report.numbers import SUB
from lbscale.report.options import FORMATS, ReportOptions
from lbscale.report.render import figures_drawn, html_page, integral, latex, markdown, prepare_figures
from lbscale.report.sections import Built, build
from lbscale.results import FINISHED, group_readable, naming
from lbscale.sweep.state import count_line


def _fill(tmp: Path, study: Study, header: list[str], b: Built, formats) -> None:
    """The report's files into the fresh folder `tmp`: figures, tables in each format, the pages."""
    (tmp / "figures").mkdir()
    (tmp / "tables").mkdir()
    (tmp / MARK).write_text("written by lbscale report: the next report into this folder replaces it\n")
    from lbscale.report.plots import LONGEST_FIRST  # imported by build already: matplotlib is loaded

    # a child process draws while this one makes the tables
    with figures_drawn(b.figures, tmp / "figures", first=LONGEST_FIRST):
        b.tables = [t() if callable(t) else t for t in b.tables]
        for t in b.tables:
            if "csv" in formats:
                integral(t.tidy).to_csv(tmp / "tables" / f"{t.name}.csv", index=False)
            if "latex" in formats:
                (tmp / "tables" / f"{t.name}.tex").write_text(latex(t.display, t.title))
        if "md" in formats:
            (tmp / "report.md").write_text(page_markdown(study, header, b))
    pngs = {name: (tmp / "figures" / f"{name}.png").read_bytes() for name in b.figures}
    if "html" in formats:
        (tmp / "report.html").write_text(html_page("lbscale report", b.verdict, header, b.tables, pngs, b.lead))


def write_report(paths, o: ReportOptions) -> tuple[Path, str]:
    """Load, build and write the report atomically (a temp dir renamed into place); returns (dir, summary line)."""
    from lbscale.report.scaling_model import scaling_model

    bad = [f for f in o.formats if f not in FORMATS]
    if bad:
        raise LbscaleError(f"--format: {bad[0]!r} is not one of {', '.join(FORMATS)}")
    model = scaling_model(o.allreduce, o.predict_gpus)  # a bad file stops the report before anything is written
    out = Path(o.out) if o.out else Path("reports") / Path(paths[0]).resolve().name
    check_replaceable(out)
    study = load_results(paths, meanwhile=prepare_figures)  # matplotlib is imported while a child reads
    inside = [p for p in map(Path, paths) if out.resolve() == p.resolve() or p.resolve() in out.resolve().parents]
    if inside and o.out is None:
        raise LbscaleError(f"{out}: inside the results; give --out to write there")
    b = build(study, o, model)
    counts = study.trials["state"].value_counts().to_dict()
    header = [f"Results: {', '.join(study.sources)}", count_line(list(study.trials["state"])), b.metric_line] \
        + ([f"Published numbers: {b.source}"] if b.source else [])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    group_readable(tmp, directory=True)  # renamed into place as the report: readable as mkdir would make it
    try:
        with naming(out):  # a full disk under a figure's or a table's write: the one line names the report
            _fill(tmp, study, header, b, o.formats)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # pruned trials are counted apart whether or not results.FINISHED counts them as finished
    finished = sum(counts.get(s, 0) for s in FINISHED if s != "pruned")
    pruned = f", {counts['pruned']} pruned" if counts.get("pruned") else ""
    prediction = f"{b.prediction}; " if b.prediction else ""
    figures = b.outcome or "; ".join(line for line in b.verdict if not line.startswith(SUB))
    return out, f"report of {len(study.trials)} trials ({finished} finished{pruned}): {figures}; {prediction}" \
                f"written to {out}"


MARK = ".lbscale-report"  # written into every report: the folder may be replaced by the next one
PAGES = ("report.md", "report.html")
KINDS = {"figures": (".png", ".pdf"), "tables": (".csv", ".tex")}  # what a report writes into its two folders


def check_replaceable(out: Path) -> None:
    """A report replaces the folder `out` whole: refused unless `out` is new, empty, or a report (it holds the
    mark lbscale writes, or, written by an lbscale before the mark, a report page and nothing but what a report
    writes: dot-files aside), so that --out naming the results, their parent or a folder of one's own (a paper's
    figures/) never deletes it."""
    if out.is_symlink():
        raise LbscaleError(f"{out}: a symbolic link; --out replaces only a report folder itself: name it")
    if not out.exists():
        return
    if not out.is_dir():
        raise LbscaleError(f"{out}: not a report folder (a file); --out replaces only an earlier report: name a "
                           "new folder")
    try:
        entries = [p for p in out.iterdir() if not p.name.startswith(".")]
        if (out / MARK).exists() or not entries:
            return
        other = [p.name for p in entries if not (p.name in PAGES and p.is_file() or _report_folder(p))]
    except OSError as e:
        raise LbscaleError(f"{out}: cannot be read ({e.strerror}); name another --out") from None
    if other or not any((out / page).is_file() for page in PAGES):
        what = f"it holds {sorted(other)[0]!r}" if other else "no report page"
        raise LbscaleError(f"{out}: not a report folder ({what}); --out replaces only an earlier report: name a "
                           "new folder")


def _report_folder(p: Path) -> bool:
    """figures/ or tables/ holding only what a report writes there."""
    kinds = KINDS.get(p.name)
    return bool(kinds) and p.is_dir() and not p.is_symlink() and all(
        q.name.startswith(".") or (q.is_file() and q.suffix in kinds) for q in p.iterdir())


def page_markdown(study: Study, header: list[str], b: Built) -> str:
    """report.md: the verdict and its figure first, then the run's facts, the tables and the other figures."""
    md = [f"# Report: {', '.join(Path(p).name for p in study.sources)}", "", "## Verdict", ""]
    md += b.verdict if len(b.verdict) == 1 else [f"  - {line.strip()}" if line.startswith(SUB) else f"- {line}"
                                                 for line in b.verdict]
    if b.lead:
        md += ["", f"![{b.lead}](figures/{b.lead}.png)"]
    md += [""] + [f"- {h}" for h in header]
    for t in b.tables:
        md += ["", f"## {t.title}", "", markdown(t.display).rstrip()] + [f"\n_{n}_" for n in t.notes]
    md += ["", "## Figures", ""] + [f"![{n}](figures/{n}.png)" for n in b.figures if n != b.lead]
    return "\n".join(md) + "\n"
