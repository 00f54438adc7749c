"""The report's figures (matplotlib, Agg): each function draws one figure from a Study and returns it."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lbscale.report.load import Study  # noqa: E402
from lbscale.report.scaling import fit_critical_batch, scaling_series, speedup_efficiency  # noqa: E402
from lbscale.report.scaling_model import series_rows  # noqa: E402
from lbscale.report.tables import batch_label, metric_label  # noqa: E402
from lbscale.results import FINISHED  # noqa: E402

plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "font.size": 10})


def _legend(ax, **kw):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def _log_y(ax):
    """A log y axis with plain numbers (40, 20, 10), not powers."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _gpu_axis(ax, gpus):
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(k) for k in gpus))
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(k) for k in ticks])
    ax.minorticks_off()


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
        _legend(a, fontsize=8)
    fig.tight_layout()
    return fig


def steps_to_target(steps: pd.DataFrame, metric: str, target: float, compare: pd.DataFrame | None = None):
    """Steps to target vs global batch (log-log), the perfect-scaling line and the fitted S_min (1 + B_noise/B)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    reached = steps.dropna(subset=["steps"])
    for variant, g in reached.groupby(reached["variant"].fillna("-"), sort=True):
        per = g.groupby("global_batch")["steps"].mean()
        line = ax.plot(per.index, per.values, "o", label=variant)[0]
        b0, s0 = per.index[0], per.values[0]
        ax.plot(per.index, s0 * b0 / per.index.values, ":", color=line.get_color(), label=f"{variant}: perfect scaling")
        fit = fit_critical_batch(g["global_batch"], g["steps"])
        if fit:
            xs = np.geomspace(per.index.min(), per.index.max(), 50)
            ax.plot(xs, fit.steps(xs), "-", color=line.get_color(),
                    label=f"{variant}: fit, B_noise = {fit.b_noise:,.0f}")
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


def training_curves(study: Study, metric: str):
    """The metric per epoch, one line per global batch (mean over seeds), one panel per variant."""
    ep = study.epochs[~study.epochs["partial"]] if len(study.epochs) else study.epochs
    variants = sorted(study.trials["variant"].fillna("-").unique())
    curves = (ep.assign(variant=ep["variant"].fillna("-")).groupby(["variant", "global_batch", "epoch"])[metric]
              .mean() if len(ep) and metric in ep else pd.Series(dtype=float))
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants), 3.8), squeeze=False)
    for ax, variant in zip(axes[0], variants):
        if variant in curves.index.get_level_values(0):
            for b, per in curves.loc[variant].groupby(level=0):
                ax.plot(per.index.get_level_values(1), per.values, label=batch_label(b))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric_label(metric))
        ax.set_title(f"Training curves: {variant}")
        _legend(ax, title="global batch", fontsize=8)
    fig.tight_layout()
    return fig


def lr_schedules(study: Study):
    """The LR schedule each variant runs at each global batch, per epoch (the trial's own plan, replayed)."""
    import json
    from pathlib import Path

    from lbscale.config import FIELDS, TrialConfig
    from lbscale.train.plan import Plan

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    t = study.trials.dropna(subset=["steps_per_epoch", "peak_lr"]).drop_duplicates(["variant", "global_batch",
                                                                                  "warmup"])
    warmups = t["warmup"].nunique(dropna=True) > 1
    for _, r in t.iterrows():
        described = json.loads((Path(r["results"]) / r["trial"] / "config.json").read_text())
        # the schedule's fields as the trial ran them, not validated again: an older trial may hold an option
        # that today's validation refuses (e.g. --momentum with lamb), and its schedule is still what it ran
        cfg = TrialConfig(**{k: v for k, v in described["config"].items() if k in FIELDS and v is not None})
        policy = Plan(**described["plan"]).policy(cfg)
        spe = policy.steps_per_epoch
        steps = np.unique(np.linspace(0, policy.total_steps - 1, min(400, policy.total_steps)).astype(int))
        warm = f" warm-up {r['warmup']}" if warmups else ""
        ax.plot(steps / spe, [policy.lr(int(s)) for s in steps],
                label=f"{r['variant']} {batch_label(r['global_batch'])}{warm}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("learning rate")
    ax.set_title("LR schedules")
    _legend(ax, fontsize=7, ncol=2)
    return fig


def time_split(study: Study):
    """Training seconds computing, waiting for data and waiting for the gradient all-reduce (stacked in that
    order), per (variant, global batch), mean over seeds. Trials of an lbscale that did not time the all-reduce
    apart (it is in their compute) add no communication bar."""
    t = study.trials[study.trials["state"].isin(FINISHED)]
    parts = t[["compute_seconds", "data_seconds", "comm_seconds"]].apply(pd.to_numeric, errors="coerce")
    recorded = bool(parts["comm_seconds"].notna().any())
    per = parts.fillna({"comm_seconds": 0.0}).groupby([t["variant"].fillna("-"), t["global_batch"]]).mean()
    fig, ax = plt.subplots(figsize=(max(6.4, 0.45 * len(per) + 2), 4.2))
    x = np.arange(len(per))
    comm = "communication (exposed all-reduce wait)" if recorded else "communication (not recorded)"
    bottom = np.zeros(len(per))
    for column, label in (("compute_seconds", "compute"), ("data_seconds", "waiting for data"),
                          ("comm_seconds", comm)):
        ax.bar(x, per[column], bottom=bottom, label=label)
        bottom = bottom + per[column].to_numpy()
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v} {batch_label(b)}" for v, b in per.index], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("training time per trial [s]")
    ax.set_title("Compute, data wait and communication (mean over seeds)")
    _legend(ax, fontsize=8)
    fig.tight_layout()
    return fig


# --- a tuned study (a hyperparameter search per batch): from `tuned.best_trials` and `tuned.tuned_fits` ----------

def _interval(lo, hi, fmt="{:.0f}") -> str:
    return "" if lo is None or hi is None or pd.isna(lo) or pd.isna(hi) else f" [{fmt.format(lo)}, {fmt.format(hi)}]"


def steps_to_result(best: pd.DataFrame, fits: pd.DataFrame, metric: str, target: float):
    """Steps to target of the best trial per batch (log-log), one line per variant; the fitted
    S_min (1 + B_noise / B), B_noise with its bootstrap interval marked, and perfect scaling from the smallest batch."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    reached = best[best["reached"].astype(bool)]
    fits = fits.set_index("variant") if "variant" in fits else fits
    for variant, g in reached.groupby(reached["variant"].fillna("-"), sort=True):
        g = g.sort_values("global_batch")
        b, s = g["global_batch"].to_numpy(float), g["steps_to_target"].to_numpy(float)
        line = ax.plot(b, s, "o-", label=f"{variant}: best trial")[0]
        ax.plot(b, s[0] * b[0] / b, ":", color=line.get_color(), label=f"{variant}: perfect scaling")
        f = fits.loc[variant] if variant in fits.index else None
        if f is not None and pd.notna(f["b_noise"]) and pd.notna(f["s_min"]):
            xs = np.geomspace(b.min(), b.max(), 50)
            ax.plot(xs, f["s_min"] * (1 + f["b_noise"] / xs), "-", color=line.get_color(), alpha=0.6,
                    label=f"{variant}: fit, B_noise = {f['b_noise']:.0f}{_interval(f['b_noise_lo'], f['b_noise_hi'])}")
            ax.axvline(f["b_noise"], color=line.get_color(), ls="--", lw=1)
            if pd.notna(f["b_noise_lo"]) and pd.notna(f["b_noise_hi"]):
                ax.axvspan(f["b_noise_lo"], f["b_noise_hi"], color=line.get_color(), alpha=0.12)
    if len(reached):
        _batch_axis(ax, best["global_batch"])
        marked = list(reached["global_batch"]) + [b for b in fits.get("b_noise", []) if pd.notna(b) and b > 0]
        ax.set_xlim(min(marked) / 1.25, max(marked) * 1.25)  # an interval wider than the batches is clipped
    else:
        ax.text(0.5, 0.5, "no batch reached the target", ha="center", transform=ax.transAxes)
    _log_y(ax)
    ax.set_xlabel("global batch [images]")
    ax.set_ylabel("optimizer steps to target (best trial)")
    ax.set_title(f"Steps to {metric_label(metric)} {target:g}, best trial per batch")
    _legend(ax, fontsize=7)
    return fig


def optimal_lr(best: pd.DataFrame, fits: pd.DataFrame, lr: str = "peak_lr"):
    """The best trial's peak LR vs batch (log-log) per variant, the fitted c B^alpha with alpha's interval, and
    the linear (slope 1) and square-root (slope 0.5) rules through the geometric centre of the points."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    pts = best.dropna(subset=[lr])
    pts = pts[(pts[lr] > 0) & (pts["global_batch"] > 0)]
    fits = fits.set_index("variant") if "variant" in fits else fits
    for variant, g in pts.groupby(pts["variant"].fillna("-"), sort=True):
        g = g.sort_values("global_batch")
        line = ax.plot(g["global_batch"], g[lr], "o", label=f"{variant}: best trial")[0]
        f = fits.loc[variant] if variant in fits.index else None
        if f is not None and pd.notna(f["alpha"]) and pd.notna(f["c"]):
            xs = np.geomspace(g["global_batch"].min(), g["global_batch"].max(), 50)
            ax.plot(xs, f["c"] * xs ** f["alpha"], "-", color=line.get_color(),
                    label=f"{variant}: alpha = {f['alpha']:.2f}{_interval(f['alpha_lo'], f['alpha_hi'], '{:.2f}')}")
    if len(pts):
        b0 = float(np.exp(np.log(pts["global_batch"].to_numpy(float)).mean()))
        lr0 = float(np.exp(np.log(pts[lr].to_numpy(float)).mean()))
        xs = np.geomspace(pts["global_batch"].min(), pts["global_batch"].max(), 50)
        ax.plot(xs, lr0 * (xs / b0), "--", color="gray", label="linear rule (slope 1)")
        ax.plot(xs, lr0 * (xs / b0) ** 0.5, ":", color="gray", label="square-root rule (slope 0.5)")
        _batch_axis(ax, pts["global_batch"])
    else:
        ax.text(0.5, 0.5, "no best trial with a peak LR", ha="center", transform=ax.transAxes)
    _log_y(ax)
    ax.set_xlabel("global batch [images]")
    ax.set_ylabel("peak LR of the best trial")
    ax.set_title("Optimal learning rate vs global batch")
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
