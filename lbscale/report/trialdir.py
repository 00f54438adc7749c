"""One trial directory as data: its files parsed (orjson where it can), its row of `Study.trials`, and its epoch
and evaluation records as columns (`read_trials`, a list of directories at a time, so that a forked child can take
part of a large study: `parallel.shared`). The records' columns come from the copy a trial writes as it ends
(`lbscale.train.columns`: metrics.columns.json) where it was made from the metrics.jsonl on disk, else from
metrics.jsonl itself, by the same function."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:  # three to four times faster than json on large result sets; optional
    import orjson
except ImportError:
    orjson = None

from lbscale.analysis.gns import GNS_FILE
from lbscale.results import CONFIG, GRID, METRICS, SUMMARY, TRIAL_YAML, read_json
from lbscale.sweep.state import trial_state
from lbscale.train.columns import (COLUMNS, EVALUATED, array, digest, is_metric, parse_records, read_bytes,
                                   read_columns)
from lbscale.train.pruning import RUNGS_FILE

HP = "hp_"  # the trials' column prefix of a searched hyperparameter (grid.json's "search")


def _json(path: str):
    """A result file's content (None where it does not exist), parsed by orjson where it can: what orjson refuses
    (NaN, which the standard parser takes, or a corrupt file) goes to `results.read_json`, whose parser and errors
    are the store's."""
    if orjson is not None:
        data = read_bytes(path)
        if data is None:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return read_json(Path(path))


def is_trial_listing(path: str, names) -> bool:
    """A trial directory, from its listing `names`: one of trial.yaml, config.json or summary.json exists."""
    return any(n in names and os.path.exists(f"{path}/{n}") for n in (TRIAL_YAML, CONFIG, SUMMARY))


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


def _trial_files(d: str, names) -> tuple[dict, dict, dict, dict]:
    """summary.json, config.json, grid.json and the noise scale's file of a trial ({} where absent); the listing
    `names` says which exist, so an absent one costs no failed open."""
    def read(name):
        return (_json(f"{d}/{name}") if name in names else None) or {}

    return read(SUMMARY), read(CONFIG), read(GRID), read(GNS_FILE)


def _rungs(d: str, names) -> dict:
    """A trial's rungs.json as its row's columns: its halving group, the metric compared and, per rung reached,
    (rung, step, samples trained, value, examples evaluated, decision) in a tuple (None without the file)."""
    published = (_json(f"{d}/{RUNGS_FILE}") if RUNGS_FILE in names else None) or {}
    samples = published.get("rung_samples") or []
    records = tuple((r["rung"], r["step"], samples[r["rung"] - 1] if r["rung"] <= len(samples) else None,
                     r.get("value"), r.get("evaluated"), r.get("decision")) for r in published.get("rungs", []))
    return {"prune_group": published.get("group"), "rung_metric": published.get("metric"),
            "rung_records": records or None}


def _timing(summary: dict, timing: dict, epochs: int) -> dict:
    """A trial's epochs and seconds: done, per epoch, in total and by part (data, compute, the exposed
    all-reduce, the wait for slower ranks), from what its `epochs` epoch records say (`columns.record_timing`),
    and its summary's figures beside them. Time per epoch is the one definition (`summary.epoch_seconds`) over
    the records, so that summaries written by an older lbscale, whose mean included the first epoch, are read the
    same way as new ones; summary.json's where no records are."""
    if epochs:
        epoch_s, estimated = timing["epoch_seconds"], timing["epoch_seconds_estimated"]
    else:
        epoch_s, estimated = summary.get("mean_epoch_seconds"), bool(summary.get("epoch_seconds_estimated"))
    return {
        "epochs_done": timing["epochs_done"], "steps": summary.get("steps"),
        "epoch_seconds": epoch_s, "epoch_seconds_estimated": estimated,
        "images_per_second": summary.get("images_per_second"),
        "total_train_seconds": summary.get("total_train_seconds") or timing["train_seconds"],
        "wall_seconds": summary.get("wall_seconds"), "startup_seconds": summary.get("startup_seconds"),
        "import_seconds": summary.get("import_seconds"),
        **{k: timing[k] for k in ("data_seconds", "compute_seconds", "comm_seconds", "imbalance_seconds",
                                  "comm_share")},
    }


def trial_row(d: Path, names, timing: dict, epochs: int) -> dict:
    """One trial's row; `timing` is what its `epochs` epoch records say (`columns.record_timing`), `names` its
    directory's listing."""
    summary, config, grid, gns = _trial_files(str(d), names)
    cfg = config.get("config") or {}
    plan = config.get("plan") or {}
    state = summary.get("status", "failed") if summary else trial_state(d)["state"]  # liveness only if needed
    search = grid.get("search") or {}
    pruned = summary.get("pruned_at") or {}
    target = summary.get("target") if summary.get("target") is not None else cfg.get("target")
    target_metric = summary.get("target_metric") or cfg.get("target_metric")
    row = {
        "results": str(d.parent), "trial": d.name, "sweep": grid.get("sweep") or d.parent.name, "state": state,
        "task": config.get("task"),
        "global_batch": grid.get("global_batch") or plan.get("global_batch") or cfg.get("global_batch"),
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
        "started": config.get("started"),  # warm (forked, torch imported) or fresh: whose start-up the model takes
        "slurm_job": config.get("slurm_job"),  # the base ran inside a SLURM job: its K-process jobs start by srun
        "epochs": cfg.get("epochs"), **_timing(summary, timing, epochs),
        "diverged_step": (summary.get("diverged_at") or {}).get("step"),
        "target_metric": target_metric, "target": _hardest(target, target_metric), "targets": _joined(target),
        "steps_to_target": summary.get("steps_to_target"), "epochs_to_target": summary.get("epochs_to_target"),
        "seconds_to_target": summary.get("seconds_to_target"), "stopped": summary.get("stopped"),
        "batch_schedule": cfg.get("batch_schedule"),
        "prune": cfg.get("prune"), "pruned_rung": pruned.get("rung"), "pruned_step": pruned.get("step"),
        "pruned_metric": pruned.get("metric"), "pruned_value": pruned.get("value"), **_rungs(str(d), names),
        "num_classes": config.get("num_classes"),
        "point": grid.get("point"), "tune": grid.get("tune"), "momentum": search.get("momentum", cfg.get("momentum")),
        "gns_b_simple": (gns or summary.get("gns") or {}).get("b_simple"),
        # gns.json's: where it was measured (`checkpoint`: lbscale gns, `target`: --gns-at-target) and at which step
        "gns_source": gns.get("source") if gns else None, "gns_step": gns.get("step") if gns else None,
        "gns_b_simple_lo": gns.get("b_simple_lo") if gns else None,  # its interval (an open end: None)
        "gns_b_simple_hi": gns.get("b_simple_hi") if gns else None,
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


@dataclass
class Part:
    """What `read_trials` read: the trials' rows, and their epoch records and evaluations as columns, with each
    trial's count of them."""
    rows: list[dict]
    epochs: dict
    epoch_counts: list[int]
    evaluations: dict
    evaluation_counts: list[int]


def _digest(path: str, names) -> dict:
    """A trial's records as the report reads them (`columns.digest`): from the copy the trial wrote where it
    is valid (`columns.read_columns`), else from metrics.jsonl itself ([] where there is none)."""
    data = read_bytes(f"{path}/{METRICS}") if METRICS in names else None
    if data is None:
        return digest([])
    if COLUMNS in names:
        copy = read_columns(f"{path}/{COLUMNS}", data)
        if copy is not None:
            return copy
    return digest(parse_records(data, f"{path}/{METRICS}"))


def _joined_columns(parts: list[tuple[dict, int]]) -> dict:
    """Consecutive trials' columns as one: keys in the order they first appear, NaN where a trial's records lack
    a key (as DataFrame.from_records fills it), each column inferred from all its values (`array`). Where every
    trial's values are an array of one type (packed in its copy, `columns._pack`), they are joined as they are (NaN
    where a trial lacks a float key): the same column without a value passing through Python."""
    keys = dict.fromkeys(k for cols, _ in parts for k in cols)
    out = {}
    for k in keys:
        pieces = [(cols.get(k), n) for cols, n in parts if n]  # a trial without records adds nothing
        given = {v.dtype if isinstance(v, np.ndarray) else None for v, _ in pieces if v is not None}
        missing = any(v is None for v, _ in pieces)
        # integers beside NaN stay Python values (`array` keeps such a list): pandas makes them float64 on its own,
        # but joined with another chunk's strings or booleans (`load._merged`) they stay integers, whole
        if len(given) == 1 and (kind := given.pop()) is not None and (kind == np.float64 or not missing):
            out[k] = np.concatenate([np.full(n, math.nan) if v is None else v for v, n in pieces])
            continue
        values = []
        for v, n in pieces:
            values += [math.nan] * n if v is None else v.tolist() if isinstance(v, np.ndarray) else v
        out[k] = array(values)
    return out


def _evaluated(columns: dict) -> dict:
    """The columns of epoch records that are evaluations (`Study.steps` has no other record keys)."""
    return {k: v for k, v in columns.items() if k in EVALUATED or is_metric(k)}


def read_trials(candidates: list[Path]) -> Part:
    """The trial directories among `candidates`, in order (`Study.trials`' rows, `Study.epochs`' records and
    `Study.steps`' evaluations with their samples seen)."""
    rows, epochs, evals, seen, epoch_counts, eval_counts = [], [], [], [], [], []
    for d in candidates:
        path = str(d)
        names = os.listdir(path)
        if not is_trial_listing(path, names):
            continue
        t = _digest(path, names)
        rows.append(trial_row(d, names, t["timing"], t["epoch_count"]))
        epochs.append((t["epochs"], t["epoch_count"]))
        evals.append((t["evaluations"], t["evaluation_count"]))  # None: its evaluations are its epoch records
        seen.append(({"samples_seen": t["samples_seen"]}, t["evaluation_count"]))
        epoch_counts.append(t["epoch_count"])
        eval_counts.append(t["evaluation_count"])
    epoch_columns = _joined_columns(epochs)
    if all(columns is None for columns, _ in evals):  # every trial's evaluations are its epoch records (equal
        # counts alone are not: one trial's partial epoch, another's step evaluation): the same columns
        evaluated = _evaluated(epoch_columns)
    else:
        evaluated = _joined_columns([(_evaluated(e) if columns is None else columns, n)
                                     for (columns, n), (e, _) in zip(evals, epochs)])
    seen_column = _joined_columns(seen).get("samples_seen", [])
    return Part(rows, epoch_columns, epoch_counts, {**evaluated, "samples_seen": seen_column}, eval_counts)
