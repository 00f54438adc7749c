"""A study as data: every trial under one or more results directories in three DataFrames.

`trials` has one row per trial (its grid position, plan, searched hyperparameters `hp_*`, state and summary
figures); `epochs` one row per (trial, epoch) record, partial epochs of diverged runs included; `steps` one row
per evaluation, the step evaluations (`"kind": "step"`) and the epoch records alike (`kind` says which), in the
shape of batch_science's measurements. Trials still running, interrupted, submitted, pruned or never started
(pending) are rows too, with their state: nothing is silently dropped.

    from lbscale.report import load_results
    study = load_results(["results/sat4-lamb"])
    study.trials.groupby(["global_batch", "gpus"]).final_val_top1.mean()
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

try:  # three to four times faster than json on large result sets; optional
    import orjson
except ImportError:
    orjson = None

from lbscale.analysis.gns import GNS_FILE
from lbscale.errors import LbscaleError
from lbscale.results import CONFIG, GRID, METRICS, SUMMARY, TRIAL_YAML, read_json
from lbscale.sweep.state import trial_state
from lbscale.task import TASKS
from lbscale.train.summary import epoch_records, epoch_seconds, steady_epochs


HP = "hp_"  # the trials' column prefix of a searched hyperparameter (grid.json's "search")
STEP_KEYS = ["results", "trial", "global_batch", "gpus", "variant", "warmup", "seed"]


@dataclass
class Study:
    trials: pd.DataFrame
    epochs: pd.DataFrame
    sources: list[str]
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    _varies: dict = field(default_factory=dict, repr=False)

    @property
    def tuned(self) -> bool:
        """A tuned study: some trial is a point of a hyperparameter search (grid.json's "point" / "search") that
        is a tuning, not an axis (`grid.search.tune: false`: each point its own curve, reported by rule)."""
        t = self.trials
        if "point" not in t:
            return False
        tune = t["tune"] if "tune" in t else pd.Series(True, index=t.index)
        return bool((t["point"].notna() & (tune.astype(object) != False)).any())  # noqa: E712

    def varies(self, axis: str) -> bool:
        """Does the grid vary this axis (variant, warm-up)? Tables ask per row, so it is cached."""
        if axis not in self._varies:
            self._varies[axis] = self.trials[axis].fillna("-").nunique() > 1
        return self._varies[axis]

    @property
    def task(self):
        tasks = [t for t in self.trials["task"].dropna().unique()]
        return TASKS[tasks[0]] if len(tasks) == 1 else None


def _jsonl(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = [line for line in text.splitlines() if line.strip()]
    joined = "[" + ",".join(lines) + "]"  # one parse per file: a report may read 200,000 records
    if orjson is not None:
        try:
            return orjson.loads(joined)
        except orjson.JSONDecodeError:
            pass  # NaN (a diverged epoch's loss) is not strict JSON: the standard parser takes it
    try:
        return json.loads(joined)
    except ValueError:
        pass
    for n, line in enumerate(text.splitlines(), 1):  # name the bad line
        if line.strip():
            try:
                json.loads(line)
            except ValueError as e:
                raise LbscaleError(f"{path}:{n}: not valid JSON ({e})") from None
    raise LbscaleError(f"{path}: not valid JSON lines")


def is_trial_dir(path: Path) -> bool:
    return any((path / name).exists() for name in (TRIAL_YAML, CONFIG, SUMMARY))


def find_trials(paths) -> list[Path]:
    """Trial directories: each path is one, or holds them one level down."""
    found = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise LbscaleError(f"{p}: no such results directory")
        if is_trial_dir(p):
            found.append(p)
        else:
            found += sorted(d for d in p.iterdir() if d.is_dir() and is_trial_dir(d))
    return found


def _epoch_seconds(summary: dict, records: list[dict]) -> tuple[float | None, bool]:
    """Time per epoch: the one definition (`lbscale.train.summary.epoch_seconds`, which summary.json's
    mean_epoch_seconds holds too) over the trial's records, so that summaries written by an older lbscale, whose
    mean included the first epoch, are read the same way as new ones; summary.json's where no records are."""
    if records:
        return epoch_seconds(records)
    return summary.get("mean_epoch_seconds"), bool(summary.get("epoch_seconds_estimated"))


def _variant(grid: dict, cfg: dict) -> str | None:
    """The curve a trial belongs to: its variant, prefixed by its dataset where the data is a grid axis
    (full / network-filtered / random-filtered arms: `nf:resnet18`)."""
    variant = grid.get("variant") or (f"{cfg['optimizer']}-{cfg['lr_scaling']}" if cfg else None)
    if grid.get("search") and grid.get("tune") is False:  # the points are an axis: each its own curve
        variant = " ".join([variant or "-", *(f"{k}={v}" for k, v in grid["search"].items())])
    return f"{grid['dataset']}:{variant}" if grid.get("dataset") else variant


def _joined(target) -> str | None:
    """A trial's targets as text ("0.9,0.95"): several since --target took a list."""
    if target is None:
        return None
    return ",".join(f"{float(t):g}" for t in (target if isinstance(target, (list, tuple)) else [target]))


def _hardest(target, metric: str | None) -> float | None:
    """The target a trial stops at: the highest (the lowest for a loss) of several."""
    if not isinstance(target, (list, tuple)):
        return target
    return (min if str(metric or "").endswith("loss") else max)(float(t) for t in target)


def _trial_row(d: Path, records: list[dict]) -> dict:
    """One trial's row; `records` are its epoch records only (step evaluations are not epochs)."""
    summary = read_json(d / SUMMARY) or {}
    config = read_json(d / CONFIG) or {}
    grid = read_json(d / GRID) or {}
    cfg = config.get("config") or {}
    plan = config.get("plan") or {}
    state = summary.get("status", "failed") if summary else trial_state(d)["state"]  # liveness only if needed
    task = config.get("task")
    search = grid.get("search") or {}
    pruned = summary.get("pruned_at") or {}
    epoch_seconds, estimated = _epoch_seconds(summary, records)
    full = [r for r in records if not r.get("partial")]
    data_s = sum(r.get("data_seconds", 0.0) for r in records)
    compute_s = sum(r.get("compute_seconds", 0.0) for r in records)
    # an lbscale before the all-reduce wait was timed apart counted it in compute: unknown (NaN), not 0
    comm = [r["comm_seconds"] for r in records if "comm_seconds" in r]
    comm_s = sum(comm) if comm else math.nan
    # the wait for slower ranks, apart from the collective since lbscale records it; before, it was in comm
    imbalance = [r["imbalance_seconds"] for r in records if "imbalance_seconds" in r]
    imbalance_s = sum(imbalance) if imbalance else math.nan
    # the exposed all-reduce share of the training time over the epochs epoch_seconds averages (the full ones
    # after the first): what the scaling model's base step carries
    steady = [r for r in steady_epochs(records) if "comm_seconds" in r and r.get("train_seconds")]
    comm_share = float(np.mean([r["comm_seconds"] / r["train_seconds"] for r in steady])) if steady else math.nan
    row = {
        "results": str(d.parent), "trial": d.name, "sweep": grid.get("sweep") or d.parent.name, "state": state,
        "task": task, "global_batch": grid.get("global_batch") or plan.get("global_batch") or cfg.get("global_batch"),
        "gpus": grid.get("gpus") or config.get("world_size") or summary.get("world_size"),
        "local_batch": plan.get("local_batch"), "accum_steps": plan.get("accum_steps"),
        "variant": _variant(grid, cfg), "dataset": grid.get("dataset"),
        "warmup": grid.get("warmup"), "seed": grid.get("seed", cfg.get("seed")),
        "optimizer": cfg.get("optimizer"), "lr_scaling": cfg.get("lr_scaling"),
        "base_lr": search.get("base_lr", cfg.get("base_lr")),
        "peak_lr": plan.get("peak_lr", summary.get("peak_lr")), "warmup_epochs": plan.get("warmup_epochs"),
        "warmup_steps": plan.get("warmup_steps"), "steps_per_epoch": plan.get("steps_per_epoch"),
        "epoch_samples": plan.get("epoch_samples"),
        "train_samples": plan.get("train_samples") or config.get("train_samples"),
        # what DDP all-reduces per step, for the scaling model; unknown (NaN) in an older lbscale's config.json
        "trainable_parameters": config.get("trainable_parameters", math.nan),
        "gradient_bytes": config.get("gradient_bytes", math.nan),
        "epochs": cfg.get("epochs"), "epochs_done": len(full), "steps": summary.get("steps"),
        "epoch_seconds": epoch_seconds, "epoch_seconds_estimated": estimated,
        "images_per_second": summary.get("images_per_second"),
        "total_train_seconds": summary.get("total_train_seconds") or sum(r.get("train_seconds", 0) for r in records),
        "wall_seconds": summary.get("wall_seconds"), "data_seconds": data_s, "compute_seconds": compute_s,
        "comm_seconds": comm_s, "imbalance_seconds": imbalance_s, "comm_share": comm_share,
        "diverged_step": (summary.get("diverged_at") or {}).get("step"),
        "target_metric": summary.get("target_metric") or cfg.get("target_metric"),
        "target": _hardest(summary.get("target") if summary.get("target") is not None else cfg.get("target"),
                           summary.get("target_metric") or cfg.get("target_metric")),
        "targets": _joined(summary.get("target") if summary.get("target") is not None else cfg.get("target")),
        "steps_to_target": summary.get("steps_to_target"), "epochs_to_target": summary.get("epochs_to_target"),
        "seconds_to_target": summary.get("seconds_to_target"), "stopped": summary.get("stopped"),
        "pruned_rung": pruned.get("rung"), "pruned_step": pruned.get("step"),
        "point": grid.get("point"), "tune": grid.get("tune"), "momentum": search.get("momentum", cfg.get("momentum")),
        "gns_b_simple": (read_json(d / GNS_FILE) or summary.get("gns") or {}).get("b_simple"),
        "error": summary.get("error"), "eval_split": summary.get("eval_split") or cfg.get("eval_split") or "val",
    }
    for k, v in {**(summary.get("final") or {}), **(summary.get("test") or {})}.items():
        if k.startswith(("val_", "test_")) or k == "train_loss":
            row[f"final_{k}"] = v  # final_test_*: the end-of-training test figures
    for k, v in (summary.get("best") or {}).items():
        row[f"best_{k}"] = v
    for k, v in search.items():
        row[f"{HP}{k}"] = v
    return row


def _measured(records: list[dict], per_epoch: list[dict]) -> list[dict]:
    """A trial's evaluations: its full epoch records, whose `samples` (trained in that epoch) summed become
    `samples_seen`, the training samples seen so far, as step records carry it, then its step records (an lbscale
    before `samples_seen` called the step records' cumulative count `samples`)."""
    out, seen = [], 0
    for r in per_epoch:
        seen = seen + r["samples"] if seen is not None and r.get("samples") is not None else None
        if not r.get("partial"):
            out.append({**r, "samples_seen": seen})
    steps = [r for r in records if r.get("kind") == "step"]
    return out + [r if "samples_seen" in r else {**r, "samples_seen": r.get("samples")} for r in steps]


def _evaluations(records: list[dict], owners: list[int], trials: pd.DataFrame) -> pd.DataFrame:
    """`Study.steps`: one row per evaluation (step evaluations and full epoch records; an epoch cut short
    evaluated nothing), ordered by step within each trial. `epoch` is fractional; `samples_seen` the training
    samples seen (an epoch record's: its epochs' samples summed, else epochs x the plan's epoch_samples, else steps
    x global batch); `elapsed_seconds` the trial's clock as written (training and epoch evaluations)."""
    base = STEP_KEYS + ["step", "epoch", "samples_seen", "elapsed_seconds", "kind"]
    if not records:
        return pd.DataFrame(columns=base)
    ev = pd.DataFrame.from_records(records)
    owner = trials.iloc[owners][["results", "trial"]].reset_index(drop=True)
    ev = pd.concat([owner, ev.drop(columns=[c for c in STEP_KEYS if c in ev])], axis=1)
    ev = ev.merge(trials[STEP_KEYS + ["epoch_samples"]], on=["results", "trial"], how="left")
    ev = ev.drop(columns=["samples"], errors="ignore")  # an epoch's own samples: its record in Study.epochs has it
    for c in ("step", "epoch", "samples_seen", "elapsed_seconds", "epoch_samples"):
        ev[c] = pd.to_numeric(ev[c], errors="coerce").astype(float) if c in ev else float("nan")
    batch = pd.to_numeric(ev["global_batch"], errors="coerce")
    ev["samples_seen"] = ev["samples_seen"].fillna(ev["epoch"] * ev["epoch_samples"]).fillna(ev["step"] * batch)
    ev["kind"] = ev["kind"].fillna("epoch") if "kind" in ev else "epoch"
    metrics = [c for c in ev if c.startswith(("val_", "test_")) or c in ("train_loss", "gns_b_simple")]
    ev = ev[base[:-2] + metrics + base[-2:]]
    return ev.sort_values(["results", "trial", "step", "elapsed_seconds"], kind="stable").reset_index(drop=True)


def load_results(paths) -> Study:
    """Every trial under `paths` (results directories or trial directories) as one Study."""
    dirs = find_trials(paths)
    if not dirs:
        raise LbscaleError(f"{', '.join(map(str, paths))}: no trials (directories with trial.yaml, config.json "
                           "or summary.json)")
    rows, epochs, owners, evals, eval_owners = [], [], [], [], []
    for i, d in enumerate(dirs):
        records = _jsonl(d / METRICS)
        per_epoch = epoch_records(records)
        rows.append(_trial_row(d, per_epoch))
        epochs += per_epoch
        owners += [i] * len(per_epoch)
        measured = _measured(records, per_epoch)
        evals += measured
        eval_owners += [i] * len(measured)
    trials = pd.DataFrame(rows)
    ep = pd.DataFrame.from_records(epochs)
    if not ep.empty:
        owner = trials.iloc[owners][["results", "trial"]].reset_index(drop=True)
        ep = pd.concat([owner, ep], axis=1)
    if not ep.empty:
        keys = ["results", "trial", "global_batch", "gpus", "variant", "warmup", "seed", "steps_per_epoch"]
        ep = ep.merge(trials[keys], on=["results", "trial"], how="left")
        ep["partial"] = ep["partial"].fillna(False).astype(bool) if "partial" in ep else False
    return Study(trials, ep, [str(p) for p in paths], _evaluations(evals, eval_owners, trials))


def is_number(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))
