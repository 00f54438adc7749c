"""`lbscale report`: the papers' tables and figures from one or more sweeps, with published numbers beside them.

`load_results` (the Study as DataFrames) is the entry point for notebooks; `write_report` writes the tables
(Markdown, LaTeX, CSV, one self-contained HTML page) and the figures (PNG and PDF) into a fresh directory, the
verdict and its figure first. A tuned study (a hyperparameter search per batch) is reported by its best trial per
batch, the optimal LR's exponent and the critical batch (`report.tuned`); a rule-based one by the papers' tables.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pandas as pd

from lbscale.errors import LbscaleError
from lbscale.report.load import Study, load_results
from lbscale.results import FINISHED, group_readable
from lbscale.sweep.state import count_line
from lbscale.task import Task
from lbscale.report.render import FORMATS, figures_drawn, html_page, integral, latex, markdown, prepare_figures

__all__ = ["load_results", "write_report", "published", "Study", "FORMATS"]

def published_tables() -> dict:
    """The published tables shipped in the package (lbscale/published/*.csv), by name."""
    from importlib.resources import files

    folder = files("lbscale") / "published"
    return {p.name.removesuffix(".csv"): p for p in folder.iterdir() if p.name.endswith(".csv")}


def published(name_or_file: str) -> tuple[pd.DataFrame, str]:
    """A published table: a CSV file, or the NAME of one shipped with lbscale (sat4-lamb, bigearthnet-lars, ...)."""
    path = Path(name_or_file)
    if not path.is_file():
        shipped = published_tables()
        if name_or_file not in shipped:
            raise LbscaleError(f"--compare: no file or published table {name_or_file!r} "
                               f"(known: {', '.join(sorted(shipped))})")
        path = shipped[name_or_file]
    text = path.read_text()
    source = next((line[1:].strip().removeprefix("source:").strip() for line in text.splitlines()
                   if line.startswith("# source:")), str(path))
    try:
        df = pd.read_csv(io.StringIO(text), comment="#")
    except (ValueError, pd.errors.ParserError) as e:
        raise LbscaleError(f"{path}: not a readable CSV ({e})") from None
    if "global_batch" not in df:
        raise LbscaleError(f"{path}: needs a global_batch column")
    if "gpus" not in df:
        df["gpus"] = float("nan")
    return df, source


@dataclass
class ReportOptions:
    out: Path | None = None
    formats: tuple = FORMATS
    metric: str = "auto"
    compare: str | None = None
    target: object = None  # a number, several ("0.9,0.95" or a list), or None: the trials' own
    allreduce: Path | None = None  # `lbscale bench allreduce`'s fit: predict the scaling series' time per epoch
    predict_gpus: str | None = None  # "128,1024": where to predict (default: doubling up to 1,024)
    gpu_budget: int | None = None  # with allreduce: the fastest configuration within this many GPUs
    deadline: float | None = None  # with allreduce: the cheapest configuration (GPU-hours) within these hours


def _metric(study: Study, metric: str) -> str:
    task = study.task
    if task is None:
        tasks = sorted(study.trials["task"].dropna().unique())
        if not tasks:
            raise LbscaleError("no trial has started yet (no config.json): nothing to report")
        raise LbscaleError(f"the results mix tasks ({', '.join(tasks)}): report them separately")
    if metric == "auto":  # the test split's figures where the trials have them, as the papers report
        test = task.primary_on("test")
        has_test = f"final_{test}" in study.trials and study.trials[f"final_{test}"].notna().any()
        return test if has_test else task.primary_metric
    task.check_target_metric(metric, splits=("val", "test"), option="--metric")  # does this task produce it?
    return metric


def parse_targets(target) -> list[float]:
    """--target as given: None, a number, '0.90,0.95' or a list; LbscaleError where it is not numbers."""
    if target is None:
        return []
    items = target.split(",") if isinstance(target, str) else (target if isinstance(target, (list, tuple))
                                                                else [target])
    try:
        values = sorted({float(t) for t in items if str(t).strip()})
    except ValueError:
        values = []
    if not values:  # ',,' fell back to the trials' own target (a value that is not finite: Task.check_target)
        raise LbscaleError(f"--target {target}: expected a number or several, like 0.9,0.95")
    return values


def _targets(study: Study, metric: str, target) -> list[float]:
    """The targets of the report, easiest first (a loss: highest first): --target, else the trials' own for
    `metric` where they agree. The last is the headline's."""
    given, option = parse_targets(target), "--target"
    if not given:
        own = study.trials.dropna(subset=["targets"]) if "targets" in study.trials else study.trials.iloc[0:0]
        own = own[own["target_metric"] == metric]["targets"].unique()
        given, option = (parse_targets(own[0]) if len(own) == 1 else []), "the trials' own target"
    for t in given:
        Task.check_target(metric, t, option)
    return given[::-1] if metric.endswith("loss") else given


def _target(study: Study, metric: str, target) -> float | None:
    targets = _targets(study, metric, target)
    return targets[-1] if targets else None


def headline(study: Study, metric: str, tolerance: float = 0.01) -> str:
    """Per variant: the best mean metric (highest, or lowest for a loss: the task says), and the largest batch
    that stays within `tolerance` of it."""
    from lbscale.report.tables import batch_label, metric_label

    t = study.trials[study.trials["state"] == "completed"]
    col = f"final_{metric}"
    if col not in t or t[col].dropna().empty:
        return "no completed trial yet"
    parts = []
    arms = t["variant"].fillna("-")  # warm-up arms apart where the study has several, as its tables keep them
    if study.varies("warmup"):
        arms = arms + " warm-up " + t["warmup"].fillna("-").astype(str)
    for variant, g in t.groupby(arms, sort=True):
        g = g.dropna(subset=[col])
        if g.empty:
            parts.append(f"{variant}: no completed trial with {metric}")
            continue
        per = g.groupby("global_batch").agg(mean=(col, "mean"), n=(col, "size"), seeds=("seed", "nunique"))
        means = per["mean"]
        if study.task.higher_is_better(metric):
            best_b, ok = means.idxmax(), means[means >= means.max() - tolerance]
        else:
            best_b, ok = means.idxmin(), means[means <= means.min() + tolerance]
        n, seeds = int(per.at[best_b, "n"]), int(per.at[best_b, "seeds"])
        basis = ("1 seed" if n == 1 else f"mean of {n} seeds" if seeds == n else
                 f"mean of {n} trials of {seeds} seed{'s' if seeds > 1 else ''}")
        value = f"{metric_label(metric).lower()} {means[best_b]:.3f} at {batch_label(best_b)} ({basis})"
        if len(means) == 1:
            parts.append(f"{variant}: {value}; one batch completed, none to compare it with")
        else:
            parts.append(f"{variant}: best {value}, holds within {tolerance:g} up to {batch_label(ok.index.max())} "
                         f"({len(means)} batches completed)")
    return "; ".join(parts)


@dataclass
class Built:
    """What a report shows, in order: the verdict and its figure (`lead`) first, then the tables, then the
    other figures."""
    metric: str
    target: float | None
    source: str | None
    verdict: list[str]  # one line per variant (tuned) or the headline (rule-based)
    metric_line: str
    tables: list  # functions that make them (or the tables), in order: `write_report` makes them while figures draw
    figures: dict  # name -> a function that draws the figure (or the figure), the lead figure first
    lead: str | None
    prediction: str | None = None  # with --allreduce: the scaling model's headline
    outcome: str | None = None  # the command's closing line's figures (default: the verdict's lines)


def _scaling(study: Study, model, compare=None, reached=None, o: ReportOptions | None = None
             ) -> tuple[list, dict, str | None, str | None]:
    """The scaling section: given an all-reduce fit (`scaling_model`), it opens with time to target and GPU-hours
    (`report.gpus`, from `reached`: (per-batch optima, per-trial steps) or None) and its recommendation line;
    then the scaling table, its figures and the model's table right after it, its points in the figures and its
    headline; nothing for a study run at one GPU count without a fit. Returns (tables, figures, the model's
    headline, the recommendation)."""
    from lbscale.report import gpus, plots, tables
    from lbscale.report.scaling_model import predict_scaling, prediction_line, scaling_model_table

    if model is None and study.trials["gpus"].nunique() < 2:  # one GPU count: no series, no empty frames
        return [], {}, None, None
    ts, figs, predicted, line, advice = [], {}, None, None, None
    if model is not None and reached is not None:
        ts, figs, advice = gpus.section(study, *reached, model, o.gpu_budget if o else None,
                                        o.deadline if o else None, compare=compare)
    ts = ts + [partial(tables.scaling_table, study)]
    if model is not None:
        predicted, notes = predict_scaling(study.trials, model.doc, model.gpus)
        ts.append(partial(scaling_model_table, study, predicted, notes, model))
        line = prediction_line(predicted)
    figs.update({"time-vs-gpus": partial(plots.time_vs_gpus, study, compare, predicted),
                 "speedup": partial(plots.speedup, study, predicted)})
    return ts, figs, line, advice


def tuned_study(path, why: str):
    """A tuned study as its report reads it by default: (study, the evaluations' metric, its hardest target or None,
    whether higher is better); one line, ending in `why`, where the results are not a tuned study."""
    from lbscale.report import tuned_tables

    study = load_results([path])
    if not study.tuned:
        raise LbscaleError(f"{path}: not a tuned study (no search per batch): {why}")
    m = tuned_tables.step_metric(study, _metric(study, "auto"))
    targets = _targets(study, m, None)
    return study, m, targets[-1] if targets else None, study.task.higher_is_better(m)


def tuned_critical_batch(path) -> pd.DataFrame:
    """A tuned study's critical batch per variant, as its report's verdict has it (variant, b_crit, b_crit_lo,
    b_crit_hi, b_crit_kind, target): for a branch study's figure. One line where it is not one."""
    from lbscale.report import tuned, tuned_tables

    study, m, target, maximize = tuned_study(path, "no B_crit to draw")
    if target is None:
        raise LbscaleError(f"{path}: its trials have no target: no B_crit")
    outcomes = tuned.trial_outcomes(study.trials, study.steps, m, target, maximize)
    fits = tuned.fits_of(outcomes, target, maximize, level=tuned_tables.LEVEL)
    return fits[["variant", "b_crit", "b_crit_lo", "b_crit_hi", "b_crit_kind"]].assign(target=target)


def _build(study: Study, o: ReportOptions, model=None) -> Built:
    from lbscale.report import gpus, plots, tables
    from lbscale.report.schedules import schedule_table

    metric = _metric(study, o.metric)
    if study.tuned:
        return _build_tuned(study, o, metric, model)
    compare, source = published(o.compare) if o.compare else (None, None)
    target = _target(study, tables.per_epoch(study, metric), o.target)
    ts = [partial(tables.accuracy_table, study, metric, compare), partial(tables.lr_table, study, metric, compare),
          partial(tables.time_table, study, compare), partial(tables.time_split_table, study)]
    for axis in ("variant", "warmup"):
        if study.trials[axis].fillna("-").nunique() > 1:
            ts.append(partial(tables.axis_table, study, axis, metric))
    steps = None
    if target is not None:
        steps = tables.target_steps(study, tables.per_epoch(study, metric), target, study.task)
        ts.append(partial(tables.target_table, study, tables.per_epoch(study, metric), target, steps))
        arms = schedule_table(study, tables.per_epoch(study, metric), target, steps)
        if arms is not None:
            ts.append(arms)
    reached = None
    if steps is not None:
        reached = (gpus.reached_per_batch(steps), gpus.study_steps(steps), None)
    scaling, scaling_figs, prediction, advice = _scaling(study, model, compare, reached, o)
    ts += scaling
    models = tables.arm_models(steps) if steps is not None else {}  # one fit per variant: the table's and figure's
    if steps is not None or study.trials["gns_b_simple"].notna().any():
        ts.append(partial(tables.critical_batch_table, study, steps if steps is not None else pd.DataFrame(),
                          models))
    ts.append(partial(tables.trials_table, study))
    figs = {"metric-vs-batch": partial(plots.metric_vs_batch, study, metric, compare), **scaling_figs,
            "training-curves": partial(plots.training_curves, study, tables.per_epoch(study, metric)),
            "lr-schedules": partial(plots.lr_schedules, study),
            "time-split": partial(plots.time_split, study)}
    if steps is not None:
        figs["steps-to-target"] = partial(plots.steps_to_target, steps, tables.per_epoch(study, metric), target,
                                          compare if o.compare and "epochs_to_target" in compare else None, models)
    line = f"Metric: {metric} (final, after the last epoch){'' if target is None else f'; target {target:g}'}"
    return Built(metric, target, source, [headline(study, metric)] + ([advice] if advice else []), line, ts, figs,
                 "metric-vs-batch", prediction)


def _joined(*lines) -> str | None:
    kept = [x for x in lines if x]
    return "; ".join(kept) if kept else None


def _build_tuned(study: Study, o: ReportOptions, metric: str, model=None) -> Built:
    """A tuned study: the best trial per batch (`report.tuned`), LR* ~ B^alpha and the critical batch with their
    bootstrap intervals; the rule-based tables that average over seeds would average over search points here."""
    from lbscale.report import estimates, gpus, noise_scale, plots, tables, tuned, tuned_tables

    if o.compare:
        raise LbscaleError("--compare: published tables are rule-based; a tuned study (a search per batch) "
                           "has no row to put beside them")
    m = tuned_tables.step_metric(study, metric)
    targets = _targets(study, m, o.target)
    target = targets[-1] if targets else None  # the hardest: the headline's
    maximize = study.task.higher_is_better(m)
    outcomes = tuned.trial_outcomes(study.trials, study.steps, m, target, maximize)
    best = tuned.best_trials(study.trials, study.steps, m, target, maximize)
    models: dict = {}
    fits = tuned.fits_of(outcomes, target, maximize, level=tuned_tables.LEVEL, models=models)
    optima = tuned.optima_of(outcomes, target, maximize)
    by_target = {}  # the easier targets: B_crit per target (McCandlish et al.: it grows as the target tightens)
    for t in targets[:-1]:
        easier = tuned.trial_outcomes(study.trials, study.steps, m, t, maximize)
        by_target[t] = (tuned.fits_of(easier, t, maximize, level=tuned_tables.LEVEL), tuned.optima_of(easier, t,
                                                                                                       maximize))
    searches = {v: {"points": int(g["points"].max()), "seeds": int(g["seeds"].max())}
                for v, g in optima.groupby(optima["variant"].fillna("-"))} if len(optima) else {}
    view = tuned.budget_view(study.trials, study.steps, m, maximize, tuned_tables.epoch_budgets(study))
    reached = (optima, gpus.per_trial_of(outcomes), models) if target is not None else None
    scaling, scaling_figs, prediction, advice = _scaling(study, model, None, reached, o)
    winners = study.trials[study.trials["trial"].isin(best["trial"])]  # search points are not seeds
    every = pd.concat([f.assign(target=t) for t, (f, _) in {**by_target, target: (fits, optima)}.items()],
                      ignore_index=True) if by_target else fits
    at_target = noise_scale.gns_at_target(study.steps, best, study.trials) if target is not None else None
    ts = [partial(tuned_tables.best_trial_table, study, best, m, target, optima),
          partial(tuned_tables.fits_table, study, every, target, at_target),
          partial(tuned_tables.budget_table, view, m), partial(tables.time_table, study, trials=winners),
          partial(tables.time_split_table, study), *scaling, partial(tables.trials_table, study)]
    rounds = tuned_tables.study_rounds(study)
    if rounds:
        ts.insert(2, partial(tuned_tables.rounds_table, rounds))
    three = estimates.section(study, fits, at_target, target, m)
    if three is not None:
        ts.insert(2, partial(estimates.estimates_table, three, target, m))
    figs = {}
    reached = target is not None and bool(optima["reached"].any()) if len(optima) else False
    if reached:
        figs["steps-to-result"] = partial(plots.steps_to_result, optima, outcomes, fits, m, target,
                                          {t: o for t, (_, o) in by_target.items()})
    if three is not None:
        figs["critical-batch-estimates"] = partial(estimates.figure, three, target, m)
    figs.update({"optimal-lr": partial(plots.optimal_lr, optima, outcomes, fits),
                 "budget": partial(plots.budget, view, m)})
    if target is not None and not reached:  # nothing reached the target: the budget figure leads
        figs = {"budget": figs.pop("budget"), **figs}
    figs.update({"training-curves": partial(plots.best_curves, study, best, m), **scaling_figs,
                 "time-split": partial(plots.time_split, study, winners, "each batch's best trial")})
    line = (f"Metric: {m} (every evaluation, steps and epochs; best trial per batch)"
            + ("" if target is None else f"; target {target:g}"))
    lines = tuned_tables.verdict(fits, m, target, searches, at_target) \
        + tuned_tables.ratio_lines(tuned.arm_ratios(models))
    chance = tuned_tables.chance_line(*tuned.pruned_at_chance(study.trials, study.task))
    if chance:
        lines.append(chance)
    if by_target:
        lines.append(tuned_tables.per_target_line({**{t: f for t, (f, _) in by_target.items()}, target: fits}, m))
    if advice:
        lines.append(advice)
    share = tuned_tables.eval_share_line(study.epochs)
    if share:
        lines.append(share)
    if rounds:
        lines.append(tuned_tables.rounds_line(rounds))
    return Built(m, target, None, lines, line, ts, figs, next(iter(figs)), _joined(prediction, advice),
                 tuned_tables.headline(fits, target))


def write_report(paths, o: ReportOptions) -> tuple[Path, str]:
    """Load, build and write the report atomically (a temp dir renamed into place); returns (dir, summary line)."""
    from lbscale.report.scaling_model import scaling_model

    bad = [f for f in o.formats if f not in FORMATS]
    if bad:
        raise LbscaleError(f"--format: {bad[0]!r} is not one of {', '.join(FORMATS)}")
    model = scaling_model(o.allreduce, o.predict_gpus)  # a bad file stops the report before anything is written
    out = Path(o.out) if o.out else Path("reports") / Path(paths[0]).resolve().name
    _check_replaceable(out)
    study = load_results(paths, meanwhile=prepare_figures)  # matplotlib is imported while a child reads
    inside = [p for p in map(Path, paths) if out.resolve() == p.resolve() or p.resolve() in out.resolve().parents]
    if inside and o.out is None:
        raise LbscaleError(f"{out}: inside the results; give --out to write there")
    b = _build(study, o, model)
    counts = study.trials["state"].value_counts().to_dict()
    header = [f"Results: {', '.join(study.sources)}", count_line(list(study.trials["state"])), b.metric_line] \
        + ([f"Published numbers: {b.source}"] if b.source else [])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    group_readable(tmp, directory=True)  # renamed into place as the report: readable as mkdir would make it
    try:
        (tmp / "figures").mkdir()
        (tmp / "tables").mkdir()
        (tmp / MARK).write_text("written by lbscale report: the next report into this folder replaces it\n")
        from lbscale.report.plots import LONGEST_FIRST  # imported by _build already: matplotlib is loaded

        # a child process draws while this one makes the tables
        with figures_drawn(b.figures, tmp / "figures", first=LONGEST_FIRST):
            b.tables = [t() if callable(t) else t for t in b.tables]
            for t in b.tables:
                if "csv" in o.formats:
                    integral(t.tidy).to_csv(tmp / "tables" / f"{t.name}.csv", index=False)
                if "latex" in o.formats:
                    (tmp / "tables" / f"{t.name}.tex").write_text(latex(t.display, t.title))
            if "md" in o.formats:
                (tmp / "report.md").write_text(_markdown(study, header, b))
        pngs = {name: (tmp / "figures" / f"{name}.png").read_bytes() for name in b.figures}
        if "html" in o.formats:
            (tmp / "report.html").write_text(html_page("lbscale report", b.verdict, header, b.tables, pngs, b.lead))
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
    figures = b.outcome or "; ".join(b.verdict)
    return out, f"report of {len(study.trials)} trials ({finished} finished{pruned}): {figures}; {prediction}" \
                f"written to {out}"


MARK = ".lbscale-report"  # written into every report: the folder may be replaced by the next one
PAGES = ("report.md", "report.html")
KINDS = {"figures": (".png", ".pdf"), "tables": (".csv", ".tex")}  # what a report writes into its two folders


def _check_replaceable(out: Path) -> None:
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


def _markdown(study: Study, header: list[str], b: Built) -> str:
    """report.md: the verdict and its figure first, then the run's facts, the tables and the other figures."""
    md = [f"# Report: {', '.join(Path(p).name for p in study.sources)}", "", "## Verdict", ""]
    md += b.verdict if len(b.verdict) == 1 else [f"- {line}" for line in b.verdict]
    if b.lead:
        md += ["", f"![{b.lead}](figures/{b.lead}.png)"]
    md += [""] + [f"- {h}" for h in header]
    for t in b.tables:
        md += ["", f"## {t.title}", "", markdown(t.display).rstrip()] + [f"\n_{n}_" for n in t.notes]
    md += ["", "## Figures", ""] + [f"![{n}](figures/{n}.png)" for n in b.figures if n != b.lead]
    return "\n".join(md) + "\n"
