"""One trial directory as data: its files parsed (orjson where it can), its row of `Study.trials`, and its epoch
and evaluation records as columns (`read_trials`, a list of directories at a time, so that a forked child can take
part of a large study: `parallel.shared`)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter, methodcaller
from pathlib import Path

import numpy as np

try:  # three to four times faster than json on large result sets; optional
    import orjson
except ImportError:
    orjson = None

from lbscale.analysis.gns import GNS_FILE
from lbscale.errors import LbscaleError
from lbscale.results import CONFIG, GRID, METRICS, SUMMARY, TRIAL_YAML, read_json
from lbscale.sweep.state import trial_state
from lbscale.train.summary import epoch_records, epoch_seconds, steady_epochs

HP = "hp_"  # the trials' column prefix of a searched hyperparameter (grid.json's "search")
EVALUATED = ("step", "epoch", "elapsed_seconds", "kind")  # the evaluation records' keys Study.steps keeps, and metrics
_PARTIAL = methodcaller("get", "partial")
_READ = os.O_RDONLY | getattr(os, "O_BINARY", 0)


def _read(path: str) -> bytes | None:
    """A file's bytes (None where it does not exist): os.read, without a file object's layers."""
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) > size:  # grown since (a running trial appends records): read to the end
            data += b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
        return data
    finally:
        os.close(fd)


def _json(path: str):
    """A result file's content (None where it does not exist), parsed by orjson where it can: what orjson refuses
    (NaN, which the standard parser takes, or a corrupt file) goes to `results.read_json`, whose parser and errors
    are the store's."""
    if orjson is not None:
        data = _read(path)
        if data is None:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return read_json(Path(path))


def _jsonl(path: str) -> list[dict]:
    """The records of a JSON-lines file ([] where it does not exist), parsed in one call: a report may read
    200,000 records. What orjson refuses goes to the standard parser, and a corrupt line is named."""
    if orjson is not None:
        data = _read(path)
        if data is None:
            return []
        try:  # one line per record: the newlines become the array's commas (a blank line makes ",,": below)
            return orjson.loads(b"[" + data.strip().replace(b"\n", b",") + b"]")
        except orjson.JSONDecodeError:
            pass
        try:
            return orjson.loads(b"[" + b",".join(line for line in data.splitlines() if line.strip()) + b"]")
        except orjson.JSONDecodeError:
            pass  # NaN (a diverged epoch's loss) is not strict JSON: the standard parser takes it
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        return json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        pass
    for n, line in enumerate(text.splitlines(), 1):  # name the bad line
        if line.strip():
            try:
                json.loads(line)
            except ValueError as e:
                raise LbscaleError(f"{path}:{n}: not valid JSON ({e})") from None
    raise LbscaleError(f"{path}: not valid JSON lines")


def is_trial_listing(path: str, names) -> bool:
    """A trial directory, from its listing `names`: one of trial.yaml, config.json or summary.json exists."""
    return any(n in names and os.path.exists(f"{path}/{n}") for n in (TRIAL_YAML, CONFIG, SUMMARY))


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


def _trial_files(d: str, names) -> tuple[dict, dict, dict, dict]:
    """summary.json, config.json, grid.json and the noise scale's file of a trial ({} where absent); the listing
    `names` says which exist, so an absent one costs no failed open."""
    def read(name):
        return (_json(f"{d}/{name}") if name in names else None) or {}

    return read(SUMMARY), read(CONFIG), read(GRID), read(GNS_FILE)


def _total(records: list[dict], key: str, default=0.0):
    """sum(r.get(key, default) for r in records), in C where every record has the key (the same additions in the
    same order: the same number)."""
    try:
        return sum(map(itemgetter(key), records))
    except KeyError:
        return sum(r.get(key, default) for r in records)


def _present(records: list[dict], key: str) -> list:
    """[r[key] for r in records if key in r], in C where every record has it."""
    try:
        return list(map(itemgetter(key), records))
    except KeyError:
        return [r[key] for r in records if key in r]


def _timing(summary: dict, records: list[dict]) -> dict:
    """A trial's epochs and seconds: done, per epoch (`_epoch_seconds`), in total and by part (data, compute, the
    exposed all-reduce, the wait for slower ranks) from its epoch records, and its summary's figures beside them."""
    epoch_s, estimated = _epoch_seconds(summary, records)
    # an lbscale before the all-reduce wait was timed apart counted it in compute: unknown (NaN), not 0
    comm = _present(records, "comm_seconds")
    # the wait for slower ranks, apart from the collective since lbscale records it; before, it was in comm
    imbalance = _present(records, "imbalance_seconds")
    # the exposed all-reduce share of the training time over the epochs epoch_seconds averages (the full ones
    # after the first): what the scaling model's base step carries
    steady = [r for r in steady_epochs(records) if "comm_seconds" in r and r.get("train_seconds")] if comm else []
    return {
        "epochs_done": len(records) - sum(map(bool, map(_PARTIAL, records))), "steps": summary.get("steps"),
        "epoch_seconds": epoch_s, "epoch_seconds_estimated": estimated,
        "images_per_second": summary.get("images_per_second"),
        "total_train_seconds": summary.get("total_train_seconds") or _total(records, "train_seconds", 0),
        "wall_seconds": summary.get("wall_seconds"),
        "data_seconds": _total(records, "data_seconds"), "compute_seconds": _total(records, "compute_seconds"),
        "comm_seconds": sum(comm) if comm else math.nan, "imbalance_seconds": sum(imbalance) if imbalance else math.nan,
        "comm_share": float(np.mean([r["comm_seconds"] / r["train_seconds"] for r in steady])) if steady else math.nan,
    }


def trial_row(d: Path, names, records: list[dict]) -> dict:
    """One trial's row; `records` are its epoch records only (step evaluations are not epochs), `names` its
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
        "epochs": cfg.get("epochs"), **_timing(summary, records),
        "diverged_step": (summary.get("diverged_at") or {}).get("step"),
        "target_metric": target_metric, "target": _hardest(target, target_metric), "targets": _joined(target),
        "steps_to_target": summary.get("steps_to_target"), "epochs_to_target": summary.get("epochs_to_target"),
        "seconds_to_target": summary.get("seconds_to_target"), "stopped": summary.get("stopped"),
        "batch_schedule": cfg.get("batch_schedule"),
        "pruned_rung": pruned.get("rung"), "pruned_step": pruned.get("step"),
        "point": grid.get("point"), "tune": grid.get("tune"), "momentum": search.get("momentum", cfg.get("momentum")),
        "gns_b_simple": (gns or summary.get("gns") or {}).get("b_simple"),
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


def measured(records: list[dict], per_epoch: list[dict]) -> tuple[list[dict], list]:
    """A trial's evaluations: its full epoch records, then its step records; and beside each its `samples_seen`,
    the training samples seen so far: an epoch record's the sum of its epochs' `samples`, a step record's its own
    (an lbscale before `samples_seen` called the step records' cumulative count `samples`)."""
    out, seen_out, seen = [], [], 0
    for r in per_epoch:
        seen = seen + r["samples"] if seen is not None and r.get("samples") is not None else None
        if not r.get("partial"):
            out.append(r)
            seen_out.append(seen)
    steps = [r for r in records if r.get("kind") == "step"]
    return out + steps, seen_out + [r["samples_seen"] if "samples_seen" in r else r.get("samples") for r in steps]


def array(values: list):
    """A column as pandas infers it from a list, the common cases (all floats, all integers) in one numpy call;
    pandas' own inference (several times slower) for anything else."""
    kinds = set(map(type, values))
    if kinds == {float}:
        return np.array(values, dtype=np.float64)
    if kinds == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return values


def first_seen(records: list[dict]) -> list[str]:
    """Every key of the records, in the order it first appears (DataFrame.from_records' column order)."""
    return list(dict.fromkeys(chain.from_iterable(records)))


def columns(records: list[dict], keys) -> dict:
    """The records' values of each key in `keys` (in that order) as one column (`array`), NaN where a record
    lacks the key, as DataFrame.from_records fills it."""
    cols = {}
    for k in keys:
        try:
            cols[k] = array(list(map(itemgetter(k), records)))
        except KeyError:
            cols[k] = array([r.get(k, math.nan) for r in records])
    return cols


def is_metric(column: str) -> bool:
    return column.startswith(("val_", "test_")) or column in ("train_loss", "gns_b_simple")


@dataclass
class Part:
    """What `read_trials` read: the trials' rows, and their epoch records and evaluations as columns, with each
    trial's count of them."""
    rows: list[dict]
    epochs: dict
    epoch_counts: list[int]
    evaluations: dict
    evaluation_counts: list[int]


def read_trials(candidates: list[Path]) -> Part:
    """The trial directories among `candidates`, in order (`Study.trials`' rows, `Study.epochs`' records and
    `Study.steps`' evaluations with their samples seen)."""
    rows, epochs, evals, seen, epoch_counts, eval_counts = [], [], [], [], [], []
    same = True  # every trial's evaluations are its epoch records: no partial epoch, no step evaluation
    for d in candidates:
        path = str(d)
        names = os.listdir(path)
        if not is_trial_listing(path, names):
            continue
        records = _jsonl(f"{path}/{METRICS}") if METRICS in names else []
        per_epoch = epoch_records(records)
        rows.append(trial_row(d, names, per_epoch))
        evaluated, samples = measured(records, per_epoch)
        same = same and len(evaluated) == len(per_epoch) == len(records)  # full epochs + partial + steps
        epochs += per_epoch
        evals += evaluated
        seen += samples
        epoch_counts.append(len(per_epoch))
        eval_counts.append(len(evaluated))
    epoch_columns = columns(epochs, first_seen(epochs))
    if same:  # the same records (equal counts alone are not: one trial's partial epoch, another's step evaluation)
        evaluated = {k: v for k, v in epoch_columns.items() if k in EVALUATED or is_metric(k)}
    else:  # Study.steps has no other record keys
        evaluated = columns(evals, [k for k in first_seen(evals) if k in EVALUATED or is_metric(k)])
    return Part(rows, epoch_columns, epoch_counts, {**evaluated, "samples_seen": array(seen)}, eval_counts)
