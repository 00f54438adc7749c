"""The report's figures (matplotlib, Agg): each function draws one figure from a Study and returns it."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lbscale.analysis.intervals import LEVEL  # noqa: E402
from lbscale.report.load import Study  # noqa: E402
from lbscale.report.numbers import estimate_cell, estimate_text, tick, whole  # noqa: E402
from lbscale.report.scaling import scaling_series, speedup_efficiency  # noqa: E402
from lbscale.report.scaling_model import series_rows  # noqa: E402
from lbscale.report.critical_batch import arm_models, unstable  # noqa: E402
from lbscale.report import steps_model  # noqa: E402
from lbscale.report.tables import batch_label, metric_label  # noqa: E402
from lbscale.report.tuned import whole_split  # noqa: E402
from lbscale.results import FINISHED  # noqa: E402

# the figures that take longest to draw (several panels or dozens of bars), drawn first (`render.figures_drawn`)
LONGEST_FIRST = ("training-curves", "time-split", "time-to-target", "speedup")

plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "font.size": 10})


def _legend(ax, **kw):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def _log_y(ax):
    """A log y axis with plain numbers (40, 20, 10; 0.013, not 0.012980000000000002 or 1.3e-2), and enough of
    them: 1, 2, 5 per decade over a decade or more, every integer multiple over less (never one lone label)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    narrow = lo > 0 and hi / lo < 10
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=tuple(range(1, 10)) if narrow else (1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tick(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _gpu_axis(ax, gpus):
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(k) for k in gpus))
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(k) for k in ticks])
    ax.minorticks_off()


def _room(fig, left=0.85, right=0.3, bottom=0.6, top=0.4, between=0.9, legend=0.0):
    """Fixed margins in inches around and between a figure's panels (one row), `legend` inches more on the right
    for a legend placed outside the last panel: what tight_layout would find by measuring every label, a pass as
    costly as drawing the figure. Saved figures are cropped to their ink, so generous room costs nothing; a label
    that still reaches past the canvas is found by `render.save_figure`, which then measures."""
    w, h = fig.get_size_inches()
    n = fig.axes[0].get_subplotspec().get_gridspec().ncols if fig.axes else 1
    width = (w - left - right - legend - between * (n - 1)) / n
    fig.subplots_adjust(left=left / w, right=1 - (right + legend) / w, bottom=bottom / h, top=1 - top / h,
                        wspace=between / width)


def _variants(t: pd.DataFrame):
    return t.groupby(t["variant"].fillna("-"), sort=True)


def _batch_axis(ax, batches):
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(b) for b in batches))
    ax.set_xticks(ticks)
    ax.set_xticklabels([batch_label(b) for b in ticks])
    ax.minorticks_off()


def metric_vs_batch(study: Study, metric: str, compare: pd.DataFrame | None = None):
    """Final metric vs global batch: mean ± std over seeds, one line per variant, diverged batches marked at the
    worst end of the axis (the bottom for accuracy, the top for a loss); the paper's figure of the same metric."""
    label = metric_label(metric)
    higher = study.task.higher_is_better(metric)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    t = study.trials[study.trials["state"].isin(FINISHED)]
    col = f"final_{metric}"
    marks = []  # (batches, style): drawn once the data has set the axis
    for variant, g in _variants(t):
        ok = g[g["state"] == "completed"]
        stats = ok.groupby("global_batch")[col].agg(["mean", "std"]) if col in ok else pd.DataFrame()
        line = ax.errorbar(stats.index, stats["mean"], yerr=stats["std"].fillna(0), marker="o", capsize=3,
                           label=variant) if len(stats) else None
        div = g[g["state"] == "diverged"]["global_batch"].unique()
        if len(div):
            marks.append((div, {"color": line[0].get_color() if line else None, "label": f"{variant}: diverged"}))
    column = "metric" if higher else "loss"  # a published table's metric is an accuracy or F1, its loss a loss
    if compare is not None and column in compare:
        diverged = (compare["diverged"].fillna(False).astype(bool) if "diverged" in compare
                    else pd.Series(False, index=compare.index))  # not every table has the column
        ok = compare[~diverged]
        arms = ok.groupby(ok["dataset"].fillna("-")) if "dataset" in ok else [("-", ok)]
        for arm, rows in arms:  # one line per data arm (full / nf / rf) where the table names them
            ax.plot(rows["global_batch"], rows[column], "s--", color="gray",
                    label="paper" if arm == "-" else f"paper: {arm}")
        if diverged.any():
            marks.append((compare[diverged]["global_batch"], {"color": "gray", "label": "paper: diverged"}))
    worst = ax.get_ylim()[0 if higher else 1] if ax.has_data() else 0
    for batches, style in marks:
        ax.scatter(batches, [worst] * len(batches), marker="x", s=80, zorder=5, **style)
    _batch_axis(ax, list(t["global_batch"]) + (list(compare["global_batch"]) if compare is not None else []))
    ax.set_xlabel("global batch [images]")
    ax.set_ylabel(f"{label} (final, {metric})")
    ax.set_title(f"{label} vs global batch")
    _legend(ax, fontsize=8)
    return fig


def time_vs_gpus(study: Study, compare: pd.DataFrame | None = None, predicted: pd.DataFrame | None = None):
    """Time per epoch vs GPUs (log-log) per scaling series, with the ideal 1/K line from the fewest GPUs; with
    `predicted` (`scaling_model.predict_scaling`), the model's time per epoch as hollow markers on a dashed line."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for variant, regime, per in scaling_series(study.trials[study.trials["state"].isin(FINISHED)]):
        name = f"{variant}, {regime} (local {int(per['local_batch'].iloc[0])})" if regime == "weak" else \
            f"{variant}, {regime} (batch {batch_label(per['global_batch'].iloc[0])})"
        line = ax.plot(per["gpus"], per["epoch_seconds"], "o-", label=name)[0]
        model = series_rows(predicted, variant, regime, per)
        k = np.union1d(per["gpus"], model["gpus"]).astype(float)
        k0, t0 = per["gpus"].iloc[0], per["epoch_seconds"].iloc[0]
        ax.plot(k, t0 * k0 / k, ":", color=line.get_color(), label="ideal 1/K")
        if len(model):
            ax.plot(model["gpus"], model["predicted_epoch_seconds"], "o--", mfc="none", color=line.get_color(),
                    label=f"{name}: model")
    if compare is not None and "epoch_seconds" in compare and compare["gpus"].notna().any():
        c = compare.dropna(subset=["epoch_seconds", "gpus"])
        ax.plot(c["gpus"], c["epoch_seconds"], "s--", color="gray", label="paper")
    if not ax.lines:
        ax.text(0.5, 0.5, "no series with two or more GPU counts", ha="center", transform=ax.transAxes)
    _gpu_axis(ax, [x for line in ax.lines for x in line.get_xdata()])
    _log_y(ax)
    ax.set_xlabel("GPUs (processes)")
    ax.set_ylabel("time per epoch [s]")
    ax.set_title("Time per epoch vs GPUs")
    _legend(ax, fontsize=8)
    return fig


def speedup(study: Study, predicted: pd.DataFrame | None = None):
    """Speedup and scaling efficiency vs GPUs per scaling series, the regime named (weak / strong); with
    `predicted`, the model's as hollow markers on a dashed line."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    ks = []
    for variant, regime, per in scaling_series(study.trials[study.trials["state"].isin(FINISHED)]):
        s, e = speedup_efficiency(per["gpus"], per["epoch_seconds"])
        name = f"{variant} ({regime} scaling)"
        line = a1.plot(per["gpus"], s, "o-", label=name)[0]
        a2.plot(per["gpus"], 100 * e, "o-", label=name)
        ks += list(per["gpus"])
        model = series_rows(predicted, variant, regime, per)
        if len(model):
            style = {"ls": "--", "marker": "o", "mfc": "none", "color": line.get_color(), "label": f"{name}: model"}
            a1.plot(model["gpus"], model["speedup"], **style)
            a2.plot(model["gpus"], 100 * model["efficiency"], **style)
            ks += list(model["gpus"])
    if ks:
        k = np.array(sorted(set(ks)), dtype=float)
        a1.plot(k, k / k[0], "k:", label="ideal")
    else:
        a1.text(0.5, 0.5, "no series with two or more GPU counts", ha="center", transform=a1.transAxes)
    if predicted is not None and len(predicted):  # predictions reach far past the measured counts
        _log_y(a1)
    a1.set_xlabel("GPUs (processes)")
    a1.set_ylabel("speedup of the time per epoch [x]")
    a1.set_title("Speedup vs fewest GPUs")
    a2.set_xlabel("GPUs (processes)")
    a2.set_ylabel("scaling efficiency [%]")
    a2.set_ylim(0, 110)
    a2.axhline(100, color="k", ls=":")
    a2.set_title("Scaling efficiency")
    for a in (a1, a2):
        _gpu_axis(a, ks)
    _legend(a1, fontsize=8)  # the same lines in both panels: one legend
    _room(fig)
    return fig


def _perfect_scaling(ax, batches: np.ndarray, steps: np.ndarray, color, variant) -> None:
    """Perfect scaling (steps x batch constant) from the smallest reached batch (the first; ascending) through the
    larger ones; none from a lone batch, which has nothing to draw."""
    if len(batches) > 1:
        ax.plot(batches, steps[0] * batches[0] / batches, ":", color=color, label=f"{variant}: perfect scaling")


def steps_to_target(steps: pd.DataFrame, metric: str, target: float, compare: pd.DataFrame | None = None,
                    models: dict | None = None):
    """Steps to target vs global batch (log-log), the perfect-scaling line and the model's S_min (1 + B_crit / B)
    where B_crit has a two-sided interval (`models`: `critical_batch.arm_models(steps)` where already fitted)."""
    models = arm_models(steps) if models is None else models
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    reached = steps.dropna(subset=["steps"])
    for variant, g in reached.groupby(reached["variant"].fillna("-"), sort=True):
        per = g.groupby("global_batch")["steps"].mean()
        line = ax.plot(per.index, per.values, "o", label=variant)[0]
        _perfect_scaling(ax, per.index.to_numpy(float), per.to_numpy(float), line.get_color(), variant)
        model = models.get(variant)
        crit = model.estimates["b_crit"] if model is not None else None
        if crit is not None and crit.kind == "interval":
            xs = np.geomspace(per.index.min(), per.index.max(), 50)
            ax.plot(xs, model.steps(xs), "-", color=line.get_color(),
                    label=f"{variant}: model, B_crit = {estimate_cell(crit.value, crit.lo, crit.hi, crit.kind, whole)}")
    if compare is not None and "epochs_to_target" in compare:
        c = compare.dropna(subset=["epochs_to_target"])
        if "train_samples" in c:
            ax.plot(c["global_batch"], c["epochs_to_target"] * c["train_samples"] / c["global_batch"], "s--",
                    color="gray", label="paper")
    if len(reached):
        _batch_axis(ax, reached["global_batch"])
    _log_y(ax)
    ax.set_xlabel("global batch [images]")
    ax.set_ylabel("optimizer steps to target")
    ax.set_title(f"Steps to {metric_label(metric)} {target:g}")
    _legend(ax, fontsize=8)
    return fig


def _batch_colors(batches) -> dict:
    """One color per global batch, the same in every panel of a figure (the default cycle in batch order; a
    sequential map where there are more batches than the cycle has colors), so that one legend serves them."""
    from matplotlib.colors import to_hex

    batches = sorted(set(int(b) for b in batches))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if len(batches) > len(cycle):  # more batches than the cycle has colors: a sequential map, none repeated
        cycle = [to_hex(c) for c in plt.get_cmap("viridis")(np.linspace(0, 0.95, len(batches)))]
    return {b: cycle[i] for i, b in enumerate(batches)}


def _batch_legend(ax, colors: dict, extra=(), **kw):
    """One legend of the global batches (`_batch_colors`) beside the figure's last panel, outside the data; `extra`
    (handle, label) pairs after them."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c) for c in colors.values()] + [h for h, _ in extra]
    labels = [batch_label(b) for b in colors] + [label for _, label in extra]
    if handles:
        ax.legend(handles, labels, title="global batch", fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1),
                  borderaxespad=0, **kw)


def training_curves(study: Study, metric: str):
    """The metric per epoch, one line per global batch (mean over seeds), one panel per variant; one legend."""
    ep = study.epochs[~study.epochs["partial"]] if len(study.epochs) else study.epochs
    variants = sorted(study.trials["variant"].fillna("-").unique())
    curves = (ep.assign(variant=ep["variant"].fillna("-")).groupby(["variant", "global_batch", "epoch"])[metric]
              .mean() if len(ep) and metric in ep else pd.Series(dtype=float))
    colors = _batch_colors(curves.index.get_level_values(1) if len(curves) else [])
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants) + 1.2, 3.8), squeeze=False)
    for ax, variant in zip(axes[0], variants):
        if variant in curves.index.get_level_values(0):
            for b, per in curves.loc[variant].groupby(level=0):
                ax.plot(per.index.get_level_values(1), per.values, color=colors[int(b)], label=batch_label(b))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric_label(metric))
        ax.set_title(f"Training curves: {variant}")
    _batch_legend(axes[0][-1], colors)
    _room(fig, legend=1.2)
    return fig


def best_curves(study: Study, best: pd.DataFrame, metric: str):
    """A tuned study's training curves: the metric at every evaluation (steps and epochs) of each batch's best
    trial, over the training samples seen, one panel per variant (the other search points are not drawn). Where
    trials evaluated a subset of the split between whole-split evaluations, the line runs through every
    evaluation and the whole split's are ringed: the values the report's numbers rest on (`tuned.whole_split`)."""
    from matplotlib.lines import Line2D

    s = study.steps[study.steps["trial"].isin(best["trial"])] if len(best) and len(study.steps) else study.steps
    subsets = "subset" in s and bool(s["subset"].notna().any())
    variants = sorted(best["variant"].fillna("-").unique()) if len(best) else ["-"]
    colors = _batch_colors(best["global_batch"] if len(best) else [])
    room = 2.0 if subsets else 1.2  # the legend's, outside: "whole split (dots: a subset)" is its widest entry
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants) + room, 3.8), squeeze=False)
    for ax, variant in zip(axes[0], variants):
        rows = best[best["variant"].fillna("-") == variant].sort_values("global_batch") if len(best) else best
        for r in rows.itertuples():
            curve = s[(s["trial"] == r.trial) & (s["results"] == r.results)].dropna(subset=[metric])
            color = colors[int(r.global_batch)]
            ax.plot(curve["samples_seen"], curve[metric], ".-", ms=3, color=color,
                    label=f"{batch_label(r.global_batch)}")
            if subsets:
                whole = whole_split(curve)
                ax.plot(whole["samples_seen"], whole[metric], "o", mfc="none", ms=6, color=color)
        ax.set_xlabel("training samples seen")
        ax.set_ylabel(metric_label(metric))
        ax.set_title(f"Best trial per batch: {variant}")
    ring = [(Line2D([], [], ls="", marker="o", mfc="none", ms=6, color="black"), "whole split (dots: a subset)")]
    _batch_legend(axes[0][-1], colors, ring if subsets else ())
    _room(fig, legend=room)
    return fig


def _warmup(w) -> str:
    """A warm-up grid value as the tables write it: "-" where the trial has none, 5 not 5.0."""
    if w is None or (isinstance(w, float) and np.isnan(w)):
        return "-"
    return f"{w:g}" if isinstance(w, (int, float, np.number)) else str(w)


def lr_schedules(study: Study):
    """The LR schedule each variant runs at each global batch, per epoch (the trial's own plan, replayed)."""
    import json
    from pathlib import Path

    from lbscale.train.config import FIELDS, TrialConfig
    from lbscale.train.plan import Plan

    t = study.trials.dropna(subset=["steps_per_epoch", "peak_lr"]).drop_duplicates(["variant", "global_batch",
                                                                                  "warmup"])
    t = t.assign(batch=t["global_batch"].astype(int), kind=t["variant"].fillna("-"),
                 warm=[_warmup(w) for w in t["warmup"]]).sort_values(["batch", "kind", "warmup"], na_position="first")
    colors = _batch_colors(t["batch"])
    warmups = t["warm"].nunique() > 1  # trials without a warm-up value ("-") count as one more
    kinds = list(dict.fromkeys(zip(t["kind"], t["warm"] if warmups else [None] * len(t))))
    styles = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 3)), (0, (3, 1, 1, 1))]
    style = {k: styles[i % len(styles)] for i, k in enumerate(sorted(kinds, key=str))}
    room = 2.0 if len(colors) > 1 else 0.0  # the legend outside, on the right
    fig, ax = plt.subplots(figsize=(6.4 + room, 4.2))
    _room(fig, legend=room)
    for r in t.itertuples():
        described = json.loads((Path(r.results) / r.trial / "config.json").read_text())
        # the schedule's fields as the trial ran them, not validated again: an older trial may hold an option
        # that today's validation refuses (e.g. --momentum with lamb), and its schedule is still what it ran
        cfg = TrialConfig(**{k: v for k, v in described["config"].items() if k in FIELDS and v is not None})
        policy = Plan(**described["plan"]).policy(cfg)
        spe = policy.steps_per_epoch
        steps = np.unique(np.linspace(0, policy.total_steps - 1, min(400, policy.total_steps)).astype(int))
        warm = f" warm-up {r.warm}" if warmups else ""
        ax.plot(steps / spe, [policy.lr(int(s)) for s in steps], color=colors[r.batch],
                ls=style[(r.kind, r.warm if warmups else None)], label=f"{r.kind} {batch_label(r.batch)}{warm}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("learning rate")
    ax.set_title("LR schedules")
    # one entry per batch (color) and per variant and warm-up (line style), not one per line
    from matplotlib.lines import Line2D

    extra = [(Line2D([], [], color="black", ls=ls), f"{v}{f' warm-up {w}' if w is not None else ''}")
             for (v, w), ls in style.items()] if len(style) > 1 else []
    if len(colors) > 1:
        _batch_legend(ax, colors, extra)
    else:
        _legend(ax, fontsize=7)
    return fig


TIME_PARTS = {"compute_seconds": "compute", "data_seconds": "waiting for data",
              "comm_seconds": "communication (exposed all-reduce)", "imbalance_seconds": "waiting for slower ranks"}


def _bar_slot(groups: list[str]) -> float:
    """A bar's slot (inches) wide enough for its batch and for its share of its group's name (measured at 9 pt)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    nine = FontProperties(size=9)
    return max([0.45] + [(text_to_path.get_text_width_height_descent(g, nine, ismath=False)[0] / 72 + 0.2) / n
                         for g, n in pd.Series(groups).value_counts().items()])


def _stacked_parts(ax, x, per: pd.DataFrame, recorded: dict) -> list:
    """The time's parts stacked in `TIME_PARTS`' order, each in its own color; the legend's handles."""
    from matplotlib.patches import Patch

    bottom = np.zeros(len(per))
    handles = []
    for i, (column, name) in enumerate(TIME_PARTS.items()):
        color = f"C{i}"  # each part its own color, whether or not it has bars
        if recorded[column] or column in ("compute_seconds", "data_seconds"):
            bars = ax.bar(x, per[column], bottom=bottom, label=name, color=color)
            for bar, base in zip(bars, bottom):  # a stacked bar's bottom is no edge of the data: matplotlib
                if base:  # would end the axis there (a sticky edge), on the tallest stack with a 0 s part on top
                    bar.sticky_edges.y.clear()
            handles.append(bars)
            bottom = bottom + per[column].to_numpy()
        else:  # no trial timed it: its legend entry says so (in its color), and no bar of height 0 is drawn
            label = f"{name} (not recorded)"
            ax.bar([], [], label=label)
            handles.append(Patch(color=color, label=label))
    return handles


def _grouped_batch_axis(ax, x, batches: list, groups: list[str]) -> None:
    """Each bar's batch under it, its group's name once below them (not "lamb-sqrt 512" forty times, turned 60
    degrees: harder to read, and a third of the figure's drawing), a line between groups."""
    ax.xaxis.remove_overlapping_locs = False  # a group of one bar: its name's tick lies on its batch's
    ax.set_xticks(x, [batch_label(b) for b in batches], minor=True)
    ax.tick_params(axis="x", which="minor", labelsize=8)
    starts = [i for i in range(len(groups)) if i == 0 or groups[i] != groups[i - 1]]
    ax.set_xticks([(a + b - 1) / 2 for a, b in zip(starts, starts[1:] + [len(groups)])], [groups[a] for a in starts],
                  fontsize=9)
    ax.tick_params(axis="x", which="major", length=0, pad=14)
    ax.grid(False, axis="x")
    for a in starts[1:]:
        ax.axvline(a - 0.5, color="0.6", lw=0.8)


def time_split(study: Study, trials: pd.DataFrame | None = None, over: str = "seeds"):
    """Training seconds computing, waiting for data, waiting for the gradient all-reduce and waiting for slower
    ranks (stacked in that order), per (variant, warm-up where the grid varies it, global batch), the mean over
    `trials` (default: every trial, the seeds of each grid point; a tuned study passes each batch's best trial, so
    that search points are never averaged as if they were seeds). Trials of an lbscale that did not time the all-reduce
    (or the imbalance) apart add no such bar; where no trial did, the part has no bars at all and its legend entry
    says "(not recorded)"."""
    t = study.trials if trials is None else trials
    t = t[t["state"].isin(FINISHED)]
    columns = list(TIME_PARTS)
    parts = t.reindex(columns=columns).apply(pd.to_numeric, errors="coerce")
    recorded = {c: bool(parts[c].notna().any()) for c in columns}
    keys = [t["variant"].fillna("-")] + ([t["warmup"].map(_warmup)] if study.varies("warmup") else []) \
        + [t["global_batch"]]
    per = parts.fillna(0.0).groupby(keys).mean()
    title = f"Compute, data wait, communication and imbalance (mean over {over})"
    room = 3.3  # inches right of the axes for the legend (its longest entry ends "... (not recorded)")
    groups = [" warm-up ".join(map(str, k[:-1])) for k in per.index]  # the variant (and warm-up) under its bars
    slot = _bar_slot(groups)
    # the axes at least as wide as the title over them (about 0.09 inch a character at 12 pt): a title wider
    # than the canvas loses the glyphs that fall outside it
    fig, ax = plt.subplots(figsize=(max(6.4, slot * len(per) + 2, 0.09 * len(title) + 1.2) + room, 4.8))
    x = np.arange(len(per))
    handles = _stacked_parts(ax, x, per, recorded)
    _grouped_batch_axis(ax, x, [k[-1] for k in per.index], groups)
    ax.set_ylabel("training time per trial [s]")
    ax.set_title(title)
    # beside the axes, the gap in points (borderaxespad) rather than a share of the axes' width
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1, 1), borderaxespad=0.8)
    _room(fig, bottom=0.8, legend=room)  # the two rows of names below; the legend beside the bars, never on them
    return fig


# --- a tuned study (a hyperparameter search per batch): from `tuned.best_trials` and `critical_batch.fits_of` ---

def _by_variant(frame: pd.DataFrame):
    return frame.groupby(frame["variant"].fillna("-"), sort=True) if len(frame) else []


def _fit_of(fits: pd.DataFrame, variant):
    fits = fits.set_index("variant") if "variant" in fits else fits
    return fits.loc[variant] if variant in fits.index else None


def _trial_marks(ax, variant: str, o: pd.DataFrame) -> str:
    """Every trial of one variant on the steps figure: a dot where it reached the target, a caret at its last
    evaluation where it stopped short (censored), a cross where it was past the stability edge (diverged, or never
    learned above an LR that learned: the model reads it as a bound on lr*, not as censored steps); its colour."""
    hit = o[o["reached"].astype(bool)]
    color = ax.plot(hit["global_batch"], hit["steps_to_target"], ".", alpha=0.35,
                    label=f"{variant}: trials that reached it")[0].get_color()
    bad = unstable(o, o["peak_lr"].to_numpy(float) if "peak_lr" in o else None)
    bad = np.zeros(len(o), bool) if bad is None else bad
    miss = o[~o["reached"].astype(bool) & ~bad]
    ax.plot(miss["global_batch"], miss["last_step"], "^", mfc="none", color=color, alpha=0.5,
            label=f"{variant}: stopped before it (censored)" if len(miss) else None)
    edge = o[bad]
    ax.plot(edge["global_batch"], edge["last_step"], "x", color=color, alpha=0.5,
            label=f"{variant}: diverged or never learned (bounds its LR, not the steps)" if len(edge) else None)
    return color


def steps_to_result(optima: pd.DataFrame, outcomes: pd.DataFrame, fits: pd.DataFrame, metric: str, target: float,
                    easier: dict | None = None):
    """Steps to target per batch (log-log): every trial of the search (a dot where it reached the target; a
    caret at its last evaluation where it did not: censored, it would have needed more; a cross where it diverged
    or never learned past an LR that learned: it bounds the LR, not the steps), each batch's optimum,
    a batch no trial of which reached it marked at its budget; the model's curve (`steps_model.curve`, with its
    knee) with B_crit's interval shaded, or the bound the data allow (in the title); perfect scaling from the
    smallest reached batch.
    `easier`: {target: optima} of easier targets, each batch's optimum drawn as a lighter curve per target."""
    fig, ax = plt.subplots(figsize=(6.8, 4.4))
    bounds = []
    for t, opt in (easier or {}).items():
        for variant, g in _by_variant(opt[opt["reached"]] if len(opt) else opt):
            g = g.sort_values("global_batch")
            ax.plot(g["global_batch"], g["steps_star"], "s--", ms=4, alpha=0.6,
                    label=f"{variant}: optimum, {metric} {t:g}")
    for variant, o in _by_variant(outcomes):
        color = _trial_marks(ax, variant, o)
        opt = optima[(optima["variant"].fillna("-") == variant)] if len(optima) else optima
        got = opt[opt["reached"]].sort_values("global_batch")
        b, s = got["global_batch"].to_numpy(float), got["steps_star"].to_numpy(float)
        ax.plot(b, s, "o-", color=color, ms=7, label=f"{variant}: optimum of each batch")
        _perfect_scaling(ax, b, s, color, variant)
        f = _fit_of(fits, variant)
        if f is not None and f.get("b_crit_kind") == "none":  # no curve for a number the study does not resolve
            bounds.append(f"{variant}: B_crit not resolved by this study")
        elif f is not None and pd.notna(f.get("b_crit")) and pd.notna(f.get("s_min")) and len(b):
            xs = np.geomspace(b.min(), b.max(), 50)
            name = estimate_cell(f["b_crit"], f["b_crit_lo"], f["b_crit_hi"], f["b_crit_kind"], whole)
            knee = f.get("knee") if pd.notna(f.get("knee")) else 1.0
            ax.plot(xs, steps_model.curve(xs, f["s_min"], f["b_crit"], knee), "-", color=color, alpha=0.6,
                    label=f"{variant}: model, B_crit {name if f['b_crit_kind'] != 'interval' else '= ' + name}")
            if f["b_crit_kind"] == "interval":
                ax.axvline(f["b_crit"], color=color, ls="--", lw=1)
                ax.axvspan(max(f["b_crit_lo"], b.min() / 1.25), min(f["b_crit_hi"], b.max() * 1.25), color=color,
                           alpha=0.12)
            else:
                bounds.append(f"{variant}: " + estimate_text("B_crit", f["b_crit"], f["b_crit_lo"], f["b_crit_hi"],
                                                             f["b_crit_kind"], whole, LEVEL))
    if len(outcomes):
        _batch_axis(ax, outcomes["global_batch"])
    if not len(optima) or not optima["reached"].any():
        ax.text(0.5, 0.5, "no batch reached the target", ha="center", transform=ax.transAxes)
    if ax.has_data():
        _log_y(ax)
    ax.set_xlabel("global batch [images]")
    ax.set_ylabel("optimizer steps to target")
    ax.set_title("\n".join([f"Steps to {metric_label(metric)} {target:g}: every trial, and each batch's optimum",
                            *bounds]), fontsize=10)
    if len(ax.get_legend_handles_labels()[1]) > 6:  # a ladder of targets: beside the axes, not over the points
        fig.set_size_inches(10.4, 4.4)
        _legend(ax, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
        fig.tight_layout()
    else:
        _legend(ax, fontsize=7)
    return fig


def optimal_lr(optima: pd.DataFrame, outcomes: pd.DataFrame, fits: pd.DataFrame, lr: str = "peak_lr"):
    """The LR of every trial per batch (log-log; filled where it reached the target, hollow where not), the
    searched range as a band, each batch's optimum LR* (ringed where it sits on the edge of the search), the
    model's c B^alpha with alpha's interval, and the linear (slope 1) and square-root (slope 0.5) rules through the
    optima's geometric centre."""
    fig, ax = plt.subplots(figsize=(6.8, 4.4))
    for variant, o in _by_variant(outcomes[outcomes[lr] > 0] if len(outcomes) else outcomes):
        hit = o["reached"].astype(bool)
        line = ax.plot(o.loc[hit, "global_batch"], o.loc[hit, lr], ".", alpha=0.4,
                       label=f"{variant}: reached the target")[0]
        color = line.get_color()
        ax.plot(o.loc[~hit, "global_batch"], o.loc[~hit, lr], ".", mfc="none", color=color, alpha=0.4,
                label=f"{variant}: did not" if (~hit).any() else None)
        opt = optima[optima["variant"].fillna("-") == variant].sort_values("global_batch")
        ax.fill_between(opt["global_batch"], opt["lr_lo"], opt["lr_hi"], color=color, alpha=0.08, step="mid",
                        label=f"{variant}: searched range")
        got = opt[opt["reached"]]
        ax.plot(got["global_batch"], got["lr_star"], "o", color=color, ms=7, label=f"{variant}: optimum LR*")
        edge = got[got["edge"].notna()]
        ax.plot(edge["global_batch"], edge["lr_star"], "o", ms=13, mfc="none", mec="red",
                label="edge of the search" if len(edge) else None)
        f = _fit_of(fits, variant)
        if f is not None and f.get("alpha_kind") == "interval" and pd.notna(f.get("c")) and len(got):
            xs = np.geomspace(got["global_batch"].min(), got["global_batch"].max(), 50)
            ax.plot(xs, f["c"] * xs ** f["alpha"], "-", color=color,
                    label=f"{variant}: model, alpha = "
                          f"{estimate_cell(f['alpha'], f['alpha_lo'], f['alpha_hi'], 'interval', '{:.2f}'.format)}")
    got = optima[optima["reached"]] if len(optima) else optima
    if len(got):
        b0 = float(np.exp(np.log(got["global_batch"].to_numpy(float)).mean()))
        lr0 = float(np.exp(np.log(got["lr_star"].to_numpy(float)).mean()))
        xs = np.geomspace(got["global_batch"].min(), got["global_batch"].max(), 50)
        ax.plot(xs, lr0 * (xs / b0), "--", color="gray", lw=1, label="linear rule (slope 1)")
        ax.plot(xs, lr0 * (xs / b0) ** 0.5, ":", color="gray", lw=1, label="square-root rule (slope 0.5)")
    if len(outcomes):
        _batch_axis(ax, outcomes["global_batch"])
        _log_y(ax)
    else:
        ax.text(0.5, 0.5, "no trial with a learning rate", ha="center", transform=ax.transAxes)
    ax.set_xlabel("global batch [images]")
    ax.set_ylabel("peak learning rate")
    ax.set_title("Learning rate per batch: the search and its optimum")
    _legend(ax, fontsize=7)
    return fig


def budget(view: pd.DataFrame, metric: str):
    """The best metric any trial reached within each epoch budget vs batch, one line per (variant,) budget."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    variants = view["variant"].fillna("-").nunique() > 1
    for (variant, b), g in view.groupby([view["variant"].fillna("-"), "budget"], sort=True):
        g = g.sort_values("global_batch")
        ax.plot(g["global_batch"], g["best_value"], "o-",
                label=(f"{variant}, " if variants else "") + f"{b:g} epoch{'' if b == 1 else 's'}")
    if len(view):
        _batch_axis(ax, view["global_batch"])
    ax.set_xlabel("global batch [images]")
    ax.set_ylabel(f"best {metric_label(metric)}")
    ax.set_title(f"Best {metric_label(metric)} within an epoch budget")
    _legend(ax, fontsize=8, title="budget")
    return fig


def time_to_target(grid: pd.DataFrame, fronts: dict, per_gpu: float | None, compare: pd.DataFrame | None = None):
    """How many GPUs: left, time to target vs GPUs (log-log) per (variant, basis), the best batch per GPU count
    (filled where the step was measured, hollow where predicted, the interval as error bars) and the
    fixed-per-GPU-batch weak-scaling line dashed, with the ideal 1/K of the per-epoch view dotted (what time per
    epoch alone would promise); right, time to target vs GPU-hours, every configuration and the Pareto front."""
    from lbscale.report.time_to_target import best_per_gpus

    fig, (ax, pax) = plt.subplots(1, 2, figsize=(12.0, 4.4))
    hours = bool(grid["seconds"].max() >= 3600) if len(grid) else True  # a short study reads in seconds
    scale, unit = (3600.0, "h") if hours else (1.0, "s")
    for (variant, basis), g in grid.groupby(["variant", "basis"], sort=False):
        best = best_per_gpus(g)
        if not len(best):
            continue
        name = f"{variant}" + ("" if basis == "study" else f", {basis}")
        shown = best["seconds"] / scale
        err = np.vstack([shown - best["seconds_lo"].fillna(best["seconds"]) / scale,
                         best["seconds_hi"].fillna(best["seconds"]).clip(upper=best["seconds"] * 1e3) / scale - shown])
        line = ax.errorbar(best["gpus"], shown, yerr=np.maximum(err, 0), fmt="-", capsize=2,
                           label=f"{name}: best batch")[0]
        color = line.get_color()
        m = best["step_source"] == "measured"
        ax.plot(best["gpus"][m], shown[m], "o", color=color, label=f"{name}: measured step" if m.any() else None)
        ax.plot(best["gpus"][~m], shown[~m], "o", mfc="none", color=color)
        weak = g[g["per_gpu"] == per_gpu].dropna(subset=["seconds"]).sort_values("gpus") if per_gpu else g.iloc[0:0]
        if len(weak) > 1:
            ax.plot(weak["gpus"], weak["seconds"] / scale, "s--", mfc="none", color=color, alpha=0.7,
                    label=f"{name}: weak scaling ({per_gpu:,.0f}/GPU)")
            k0, t0 = weak["gpus"].iloc[0], weak["seconds"].iloc[0] / scale
            ideal = "per-epoch ideal 1/K" not in ax.get_legend_handles_labels()[1]
            ax.plot(weak["gpus"], t0 * k0 / weak["gpus"], ":", color=color, alpha=0.7,
                    label="per-epoch ideal 1/K" if ideal else None)
        done = g.dropna(subset=["seconds"])
        pax.plot(done["gpu_hours"], done["seconds"] / scale, ".", color=color, alpha=0.35)
        front = fronts.get((variant, basis))
        if front is not None and len(front):
            pax.plot(front["gpu_hours"], front["seconds"] / scale, "o-", color=color, label=f"{name}: Pareto front")
            for r in front.iloc[[0, -1]].itertuples():
                pax.annotate(f"{batch_label(r.global_batch)} x {int(r.gpus)} GPU{'s' if r.gpus > 1 else ''}",
                             (r.gpu_hours, r.seconds / scale),
                             fontsize=7, xytext=(4, 4), textcoords="offset points")
    if compare is not None and "total_seconds" in compare:
        c = compare.dropna(subset=["total_seconds", "gpus"])
        ax.plot(c["gpus"], c["total_seconds"] / scale, "s", color="gray", label="paper (different hardware)")
    _gpu_axis(ax, [x for line in ax.lines for x in line.get_xdata()])
    _log_y(ax)
    ax.set_xlabel("GPUs (processes)")
    ax.set_ylabel(f"time to target [{unit}]")
    ax.set_title("Time to target vs GPUs")
    _legend(ax, fontsize=7)
    pax.set_xscale("log")
    _log_y(pax)
    pax.set_xlabel("GPU-hours to target")
    pax.set_ylabel(f"time to target [{unit}]")
    pax.set_title("Time vs cost: the Pareto front")
    _legend(pax, fontsize=7)
    _room(fig)
    return fig
