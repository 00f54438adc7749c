"""The scaling model in the report (`lbscale report --allreduce FILE`): each scaling series' time per epoch
predicted from its measured point at the fewest GPUs and the fitted ring all-reduce (`analysis.allreduce_model`,
docs/scaling-model.md), at the GPU counts the series ran (beside the measurement) and at counts it did not.

`predict_scaling` is a pure DataFrame function (trials in, one row per series and GPU count out); the table,
the figures (`plots.time_vs_gpus`, `plots.speedup`) and the report's outcome line read its frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lbscale.analysis.allreduce_model import load_allreduce, predict_epoch_seconds
from lbscale.errors import LbscaleError
from lbscale.ranges import parse_ints
from lbscale.report.load import Study
from lbscale.report.scaling import scaling_series
from lbscale.report.numbers import number
from lbscale.report.tables import Table, batch_label
from lbscale.results import FINISHED

LARGEST_DEFAULT = 1024  # default predictions double up to here
MEANS = ("comm_share", "gradient_bytes", "train_samples")  # per-GPU-count means the base needs
COLUMNS = ["variant", "regime", "series_batch", "source", "gpus", "global_batch", "local_batch",
           "measured_epoch_seconds", "predicted_epoch_seconds", "ratio", "speedup", "efficiency",
           "comm_efficiency_loss", "step_seconds", "compute_seconds", "comm_seconds", "ring_seconds",
           "exposed_fraction", "steps_per_epoch", "buckets", "base_gpus", "gradient_bytes"]


@dataclass(frozen=True)
class ScalingModel:
    """The report's model input: the validated all-reduce file, its name as given, the GPU counts to predict."""

    doc: dict
    source: str
    gpus: list[int] | None  # None: `default_gpus` per series


def parse_gpus(text: str) -> list[int]:
    """`--predict-gpus 128,1024` as sorted distinct counts >= 1."""
    try:
        return sorted(set(parse_ints(str(text), "GPU counts")))
    except LbscaleError:
        raise LbscaleError(f"--predict-gpus {text}: expected GPU counts >= 1, like 128,1024") from None


def scaling_model(allreduce, predict_gpus: str | None) -> ScalingModel | None:
    """The report's options checked and the file loaded, before the results are read or anything written."""
    if allreduce is None:
        if predict_gpus:
            raise LbscaleError("--predict-gpus needs --allreduce FILE (the fit `lbscale bench allreduce` writes)")
        return None
    gpus = parse_gpus(predict_gpus) if predict_gpus else None
    return ScalingModel(load_allreduce(Path(allreduce)), str(allreduce), gpus)


def default_gpus(largest: int) -> list[int]:
    """GPU counts to predict where none are given: doubling from twice the largest measured up to 1,024; where
    that is more than five, twice the largest and every other count down from the top (..., 256, 1,024)."""
    counts = [2 * int(largest)]
    while counts[-1] * 2 <= LARGEST_DEFAULT:
        counts.append(counts[-1] * 2)
    if len(counts) > 5:
        counts = sorted({counts[0], *counts[::-1][::2]})
    return counts


def _key(regime: str) -> str:
    """What a series holds fixed (`scaling_series`): the local batch (weak) or the global batch (strong)."""
    return "local_batch" if regime == "weak" else "global_batch"


def series_name(variant, regime: str, per: pd.DataFrame) -> str:
    fixed = (f"local batch {int(per['local_batch'].iloc[0])}" if regime == "weak"
             else f"batch {batch_label(per['global_batch'].iloc[0])}")
    return f"{variant}, {regime} scaling ({fixed})"


def series_rows(predicted: pd.DataFrame | None, variant, regime: str, per: pd.DataFrame) -> pd.DataFrame:
    """The predicted frame's rows of the series (`scaling_series`'s variant, regime, per)."""
    if predicted is None or predicted.empty:
        return pd.DataFrame(columns=COLUMNS)
    return predicted[(predicted["variant"] == variant) & (predicted["regime"] == regime)
                     & (predicted["series_batch"] == per[_key(regime)].iloc[0])]


def _finite(v) -> bool:
    return v is not None and not pd.isna(v) and math.isfinite(float(v))


def predict_series(variant, regime: str, per: pd.DataFrame, fit: dict, extra: list[int]) -> tuple[pd.DataFrame, str]:
    """One series' rows at its measured GPU counts and at `extra`, from its point at the fewest GPUs K0: seconds
    per step = time per epoch / (N / global batch) steps of a full pass; exposed comm per step = that times
    the exposed all-reduce share of the same epochs (comm_share; needed where K0 > 1). An LbscaleError names
    what the results lack; else (rows, the base's note)."""
    per = per.sort_values("gpus").reset_index(drop=True)
    b = per.iloc[0]
    k0, batch0, local0 = int(b["gpus"]), float(b["global_batch"]), float(b["local_batch"])
    if not _finite(b["gradient_bytes"]):
        raise LbscaleError("no gradient_bytes in config.json (trials of an lbscale before it recorded the "
                           "gradients' size): not predicted")
    if not _finite(b["train_samples"]):
        raise LbscaleError("no train_samples in config.json: not predicted")
    if k0 > 1 and not _finite(b["comm_share"]):
        raise LbscaleError(f"no comm_seconds at its base of {k0} GPUs (trials of an lbscale that counted the "
                           "all-reduce wait in compute): not predicted")
    n, grad = float(b["train_samples"]), float(b["gradient_bytes"])
    step = float(b["epoch_seconds"]) * batch0 / n
    # the exposed wait per step, from the same epochs as the step time (the full ones after the first)
    comm = float(b["comm_share"]) * step if _finite(b["comm_share"]) else None
    measured = dict(zip(per["gpus"].astype(int), per["epoch_seconds"].astype(float)))
    counts = sorted(set(measured) | set(extra))
    if regime == "strong":  # a fixed global batch over more GPUs than images cannot run
        too_many = [k for k in counts if batch0 / k < 1]
        counts = [k for k in counts if k not in too_many]
    rows = []
    for k in counts:
        p = predict_epoch_seconds(k, train_samples=n, local_batch=batch0 / k0, measured_gpus=k0, step_seconds=step,
                                  comm_seconds=comm, gradient_bytes=grad, alpha=fit["alpha_seconds"],
                                  beta=fit["beta_seconds_per_byte"], regime=regime)
        t = measured.get(k, math.nan)
        rows.append({"variant": variant, "regime": regime, "series_batch": b[_key(regime)],
                     "source": "measured" if k in measured else "predicted", "gpus": k,
                     "global_batch": batch0 * k / k0 if regime == "weak" else batch0,
                     "local_batch": local0 if regime == "weak" else local0 * k0 / k,
                     "measured_epoch_seconds": t, "predicted_epoch_seconds": p.epoch_seconds,
                     "ratio": p.epoch_seconds / t, "comm_efficiency_loss": p.comm_efficiency_loss,
                     "step_seconds": p.step_seconds, "compute_seconds": p.compute_seconds,
                     "comm_seconds": p.comm_seconds, "ring_seconds": p.ring_seconds,
                     "exposed_fraction": p.exposed_fraction, "steps_per_epoch": p.steps_per_epoch,
                     "buckets": p.buckets, "base_gpus": k0, "gradient_bytes": grad})
    frame = pd.DataFrame(rows)
    t0 = float(frame.loc[frame["gpus"] == k0, "predicted_epoch_seconds"].iloc[0])
    frame["speedup"] = t0 / frame["predicted_epoch_seconds"]
    frame["efficiency"] = frame["speedup"] / (frame["gpus"] / k0)
    first = frame.iloc[0]
    overlap = (f"exposed share of the ring f = {first['exposed_fraction']:.2f}" if k0 > 1 and comm is not None
               else "one GPU measured: f = 1, no overlap assumed")
    note = (f"base {k0} GPUs, {step:.3g} s per step of which {comm or 0.0:.3g} s exposed all-reduce wait; "
            f"{grad / 1e6:.1f} MB of gradients in {int(first['buckets'])} buckets; {overlap}")
    if regime == "strong" and too_many:
        note += (f"; not predicted at {', '.join(map(str, too_many))} GPUs: the global batch "
                 f"{batch_label(batch0)} would leave each GPU below one image")
    return frame[COLUMNS], note


def predict_scaling(trials: pd.DataFrame, doc: dict, gpus: list[int] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Every scaling series of the finished trials predicted by the all-reduce fit `doc` at its measured GPU
    counts and at `gpus` (default: `default_gpus` of its largest): (one row per series and count, notes)."""
    t = trials[trials["state"].isin(FINISHED)]
    t = t.assign(**{c: pd.to_numeric(t[c], errors="coerce") for c in MEANS})
    frames, notes = [], []
    for variant, regime, per in scaling_series(t, means=MEANS):
        name = series_name(variant, regime, per)
        try:
            frame, note = predict_series(variant, regime, per, doc["fit"],
                                         gpus if gpus else default_gpus(int(per["gpus"].max())))
        except LbscaleError as e:
            notes.append(f"{name}: {e}")
            continue
        frames.append(frame)
        notes.append(f"{name}: {note}")
    if not frames and not notes:
        notes.append("no scaling series (two or more GPU counts at a fixed local or global batch) to base a "
                     "prediction on")
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)), notes


def fit_note(model: ScalingModel) -> str:
    """The model and its fit, in one line."""
    doc, fit = model.doc, model.doc["fit"]
    procs = fit.get("fitted_on_procs") or sorted({pt["procs"] for pt in doc["points"] if pt["procs"] >= 2})
    beta = fit["beta_seconds_per_byte"]
    bandwidth = f"bandwidth {1 / beta / 1e9:.3g} GB/s" if beta > 0 else "no bandwidth term (beta 0)"
    rms = fit.get("rms_relative_error")
    where = ", ".join(str(v) for v in (doc.get("system"), doc.get("backend")) if v)
    return (f"Model: the ring all-reduce of the gradients, T = buckets 2 (p-1) alpha + 2 (p-1)/p n beta, fitted by "
            f"`lbscale bench allreduce` in {model.source} ({where or 'system not named'}): alpha "
            f"{1e6 * fit['alpha_seconds']:.3g} us, {bandwidth}, fitted on {', '.join(map(str, procs))} processes"
            + (f", rms error {100 * rms:.0f}%" if isinstance(rms, (int, float)) else "")
            + "; the model and its assumptions: docs/scaling-model.md")


def scaling_model_table(study: Study, predicted: pd.DataFrame, notes: list[str], model: ScalingModel) -> Table:
    """The measured time per epoch beside the model's, and the model's at GPU counts not run."""
    disp = []
    for _, r in predicted.iterrows():
        local = float(r["local_batch"])
        disp.append({**({"Variant": r["variant"]} if study.varies("variant") else {}),
                     "Regime": f"{r['regime']} scaling", "Source": r["source"], "N. GPUs": int(r["gpus"]),
                     "Batch size": batch_label(r["global_batch"]),
                     "Local batch": int(local) if local.is_integer() else number(local),
                     "Measured [s] per epoch": number(r["measured_epoch_seconds"]),
                     "Predicted [s] per epoch": number(r["predicted_epoch_seconds"]),
                     "Pred./meas.": "-" if pd.isna(r["ratio"]) else f"{r['ratio']:.2f}",
                     "Efficiency": f"{100 * r['efficiency']:.0f}%",
                     "Comm. loss": f"{100 * r['comm_efficiency_loss']:.1f}%"})
    fit = model.doc["fit"]
    tidy = predicted.assign(alpha_seconds=fit["alpha_seconds"], beta_seconds_per_byte=fit["beta_seconds_per_byte"])
    return Table("scaling-model", "Scaling model: time per epoch predicted from the fewest GPUs and the fitted "
                 "all-reduce", pd.DataFrame(disp), tidy,
                 [fit_note(model), *notes,
                  "Weak scaling: the per-GPU batch and its compute per step stay, the steps per epoch fall as 1/K; "
                  "strong scaling: the global batch stays, the compute per step falls with the local batch "
                  "(linearly: optimistic where a small batch leaves a GPU idle); both: the exposed share f of the "
                  "ring, calibrated at the base, stays",
                  "Pred./meas.: predicted / measured time per epoch (1 at the base); Efficiency: the predicted "
                  "time per epoch against the base's, speedup / (K / K0); Comm. loss: the share of a step the "
                  "model spends waiting for the gradient all-reduce, 1 - compute / (compute + comm)"])


def prediction_line(predicted: pd.DataFrame) -> str:
    """The outcome line's part: the prediction at the largest GPU count (the first series that has it)."""
    if predicted.empty:
        return "scaling model: no prediction (see the scaling-model table's notes)"
    rows = predicted[predicted["source"] == "predicted"]
    rows = rows if len(rows) else predicted
    r = rows.loc[rows["gpus"].astype(int).idxmax()]
    return (f"predicted at {int(r['gpus'])} GPUs ({r['variant']}, {r['regime']} scaling): "
            f"{number(r['predicted_epoch_seconds'])} s per epoch, {100 * r['comm_efficiency_loss']:.0f}% lost to "
            "communication")
