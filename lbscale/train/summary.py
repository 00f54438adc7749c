"""A trial's records and summary: the record book that metrics.jsonl is written from (epoch, partial-epoch and
step-evaluation records), summary.json from the epoch records (final and best metrics, timing, steps to target),
and the one line `lbscale train` ends with. Torch-free at import (the report reads epoch records through it)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from lbscale.progress import record_line
from lbscale.results import CONFIG, METRICS, SUMMARY, read_json, read_jsonl, write_jsonl
from lbscale.task import Task

NO_TARGET = {"steps_to_target": None, "epochs_to_target": None, "seconds_to_target": None}


def epoch_records(records: list[dict]) -> list[dict]:
    """The per-epoch records of metrics.jsonl (partial ones included), without the step evaluations
    (`kind: step`, from --eval-every and successive halving's rungs)."""
    return [r for r in records if r.get("kind", "epoch") == "epoch"]


def steady_epochs(records: list[dict]) -> list[dict]:
    """The epochs a trial's pace is taken over: its full epoch records after the first, which carries start-up
    costs (compile, warm caches, DDP's bucket rebuild); the first where there is only one."""
    return steady_among(epoch_records(records))


def steady_among(epochs: list[dict]) -> list[dict]:
    """`steady_epochs` of records that are epoch records already (a report filters 200,000 of them once)."""
    full = [r for r in epochs if not r.get("partial")]
    return full[1:] if len(full) > 1 else full


def epoch_seconds(records: list[dict]) -> tuple[float | None, bool]:
    """Time per epoch, the one definition (summary.json, `lbscale train`'s outcome line and the report): the
    mean time of a full pass of the train split over the full epochs after the first, which carries start-up
    costs (the first where there is only one); else a partial epoch's pace extrapolated to a full pass
    (estimated: True). Records of lbscale before full_pass_seconds count their train_seconds."""
    records = epoch_records(records)
    steady = steady_among(records)
    if steady:
        return float(np.mean([r.get("full_pass_seconds", r["train_seconds"]) for r in steady])), False
    partial = [r for r in records if r.get("partial")]
    if partial:
        return float(partial[-1]["epoch_seconds_estimate"]), True
    return None, False


def summarize(records: list[dict], task: Task, status: str, error: str | None = None, **fields) -> dict:
    """The summary of a trial that ended with `status`; `fields` (steps, world size, ...) are added as they are.

    A partial last record (an epoch cut short by divergence) counts in the time, not in the metrics; where it
    is the only record, the time per epoch is its pace extrapolated to a whole epoch (`epoch_seconds_estimated`).
    Step evaluations count in neither (their figures are in metrics.jsonl; steps to target come from them)."""
    records = epoch_records(records)
    full = [r for r in records if not r.get("partial")]
    partial = records[-1] if records and records[-1].get("partial") else None
    metrics = sorted({k for r in full for k in r if k.startswith(("val_", "test_"))})
    best = {k: task.best(k, [r[k] for r in full if k in r]) for k in metrics}
    steady = steady_among(records)
    seconds, estimated = epoch_seconds(records)
    return {
        "status": status, "error": error, "epochs_completed": len(full),
        "final": full[-1] if full else None, "best": best, "partial_epoch": partial,
        "mean_epoch_seconds": seconds, "epoch_seconds_estimated": estimated,
        "images_per_second": (float(np.mean([r["images_per_second"] for r in steady])) if steady
                              else partial["images_per_second"] if partial else None),
        "total_train_seconds": float(sum(r["train_seconds"] for r in records)),
        **fields,
    }


class RecordBook:
    """metrics.jsonl of one trial: the records in order (epochs, partial epochs, step evaluations), each mirrored
    to TensorBoard (`scalars`) and the file rewritten by rank 0 as it grows; a checkpoint carries `records`."""

    def __init__(self, out: Path, is_main: bool, shown: list[str], epochs: int):
        from lbscale.train.tensorboard import ScalarLog

        self.out, self.is_main, self.shown, self.epochs = Path(out), is_main, shown, epochs
        self.scalars = ScalarLog()  # a writer on rank 0 with --tensorboard, once outputs may exist
        self.records: list[dict] = []

    def elapsed_at_epoch_start(self) -> float:
        """Training and epoch-evaluation seconds before the current epoch (step evaluations' time left out)."""
        return next((r["elapsed_seconds"] for r in reversed(epoch_records(self.records))), 0.0)

    def add(self, record: dict) -> dict:
        self.records.append(record)
        if record.get("kind") == "step":
            self.scalars.step(record)
        else:
            self.scalars.epoch(record)
        if self.is_main:
            write_jsonl(self.out / METRICS, self.records)
            if not record.get("partial"):
                record_line(self.line(record))
        return record

    def line(self, record: dict) -> str:
        """The log line of a record: the epoch's (loss, metrics, seconds, img/s) or a step evaluation's."""
        shown = ", ".join(f"{k} {record[k]:.4f}" for k in self.shown if record.get(k) is not None)
        if record.get("kind") == "step":
            subset = f" (subset of {record['subset']})" if record.get("subset") else ""
            return f"step {record['step']} (epoch {record['epoch']:.2f}/{self.epochs}): {shown}{subset}"
        return (f"epoch {record['epoch']}/{self.epochs}: train_loss {record['train_loss']:.4f}"
                f"{', ' + shown if shown else ''}, {record['train_seconds']:.1f} s, "
                f"{record['images_per_second']:,.0f} img/s")

    def epoch(self, epoch: int, step: int, train_loss: float, metrics: dict, timing: dict, eval_seconds: float,
              extra: dict) -> dict:
        """A whole epoch: its evaluation's metrics, its timing, the elapsed time after it."""
        elapsed = self.elapsed_at_epoch_start() + timing["train_seconds"] + eval_seconds
        return self.add({"epoch": epoch, "step": step, "train_loss": train_loss, **metrics, **timing,
                         "eval_seconds": eval_seconds, **extra, "elapsed_seconds": elapsed})

    def partial_epoch(self, epoch: int, step: int, fraction: float, train_loss: float, timing: dict) -> dict:
        """An epoch a divergence, pruning or the target cut short still has a time: steps done, seconds, img/s and
        the time a full pass would have taken at that pace (the papers' time per epoch of a diverged run)."""
        elapsed = self.elapsed_at_epoch_start() + timing["train_seconds"]
        return self.add({"epoch": epoch, "step": step, "partial": True, "epoch_fraction": fraction,
                         "train_loss": train_loss, **timing, "eval_seconds": 0.0, "elapsed_seconds": elapsed,
                         "epoch_seconds_estimate": timing["full_pass_seconds"]})

    def step_evaluation(self, step: int, epoch: float, samples_seen: int, metrics: dict, trained_seconds: float,
                        eval_seconds: float, subset: int | None) -> dict:
        """An evaluation inside an epoch; `samples_seen`: the training samples seen so far (all ranks)."""
        return self.add({"kind": "step", "step": step, "epoch": epoch, "samples_seen": samples_seen, **metrics,
                         "elapsed_seconds": self.elapsed_at_epoch_start() + trained_seconds,
                         "eval_seconds": eval_seconds, "subset": subset})


def trial_summary(book: RecordBook, task: Task, status: str, error: str | None, cfg, plan, progress, world_size: int,
                  wall_seconds: float, digests: list, test: dict | None, stopped: str | None, pruner,
                  gns) -> dict:
    """summary.json of a trial (`summarize` of its records) with what the trial knows besides them: its config
    (`TrialConfig`), plan, progress (steps, targets, divergence), pruner and noise-scale accumulator. A trial
    stopped at its target ends with the model of its last whole-split evaluation, mid-epoch or not: that is its
    `final`."""
    last = next((r for r in reversed(book.records) if not r.get("partial") and r.get("subset") is None
                 and (r.get("kind") == "step" or "train_loss" in r)), None) if stopped == "target" else None
    return summarize(book.records, task, status, error, steps=progress.step, eval_split=cfg.eval_split, test=test,
                     **({"final": last} if last else {}), targets=progress.target_hits or None,
                     diverged_at=progress.diverged_at if status == "diverged" else None,
                     on_divergence=cfg.on_divergence, wall_seconds=wall_seconds, startup_seconds=progress.startup,
                     import_seconds=progress.imports,
                     target_metric=cfg.target_metric,
                     target=cfg.target, **(progress.target_hit or NO_TARGET), world_size=world_size,
                     global_batch=plan.global_batch, peak_lr=plan.peak_lr, param_digests=digests, stopped=stopped,
                     pruned_at=pruner.records[-1] if pruner and status == "pruned" else None,
                     rungs=pruner.records if pruner else None,
                     gns={"source": "training", "every": cfg.gns_every, "skipped": gns.skipped, **gns.total.as_dict()}
                     if gns else None)


def epoch_timing(clock_timing: dict, images: int, ips: float | None, lr: float, train_samples: int,
                 step_evaluations: bool) -> dict:
    """An epoch record's timing fields from the clock's (the whole epoch's, a part before a preemption included)
    and the images trained in it (all ranks); images/s over the clock's time where no steady pace was measured.
    The time per epoch is that of a full pass of the train split, whatever the epoch left out (--last-batch
    drop, the N mod world samples of uneven shards) or did not reach (a divergence)."""
    timing = dict(clock_timing)
    if not step_evaluations:
        timing.pop("step_eval_seconds", None)
    if ips is None:
        ips = images / max(timing["train_seconds"], 1e-9)
    timing.update(images_per_second=ips, lr=lr, samples=images,
                  full_pass_seconds=timing["train_seconds"] * train_samples / max(images, 1))
    return timing


def outcome_line(out: Path) -> str | None:
    """The one line `lbscale train` ends with: status, headline metric, timing, where the files are."""
    summary, config = read_json(Path(out) / SUMMARY), read_json(Path(out) / CONFIG) or {}
    if not summary:
        return None
    metric, test = config.get("primary_metric"), summary.get("test")
    if test and metric:  # the papers' figure: the test split's, at the end of training
        metric = "test_" + metric.split("_", 1)[1]
    value = (test or summary.get("final") or {}).get(metric)
    shown = f" {metric} {value:.4f}" if value is not None else ""
    pace = summary.get("mean_epoch_seconds")
    timing = f", {pace:.1f} s per epoch" if pace else ""
    at = f"after {summary.get('epochs_completed', 0)} epochs"
    if summary.get("stopped") == "target":
        at = f"target reached at step {summary['steps_to_target']} ({summary['epochs_to_target']:.2f} epochs)"
    elif summary.get("pruned_at"):
        p = summary["pruned_at"]
        at = f"at rung {p['rung']} (step {p['step']}, {p['metric']} {p['value']:.4f}, kept {p['kept']} of {p['of']})"
    return f"trial {summary['status']}:{shown} {at}{timing}{_whole_subset(config)}; results in {out}"


def _whole_subset(described: dict) -> str:
    """Where --eval-subset is not smaller than the evaluation split, the loader takes the whole split (lbscale branch's
    default subset relies on it): said, since the step records then carry subset null, not the size asked."""
    asked, size = (described.get("config") or {}).get("eval_subset"), described.get("eval_samples")
    if not asked or size is None or asked < size:
        return ""
    return (f"; --eval-subset {asked:,} is not smaller than the {described.get('eval_split', 'evaluation')} split "
            f"({size:,} images): its step evaluations took the whole split")


def curve(trial: Path, metric: str) -> list[tuple[float, float]]:
    """(samples, value) at each evaluation of a trial: its step evaluations and its epoch ends (whole split)."""
    points, seen = {}, 0
    for r in read_jsonl(trial / METRICS):
        if r.get("kind") == "step":
            at = r.get("samples_seen")
        elif "epoch" in r and "samples" in r:
            seen += r["samples"]
            at = seen
        else:
            continue
        v = r.get(metric)
        if at is not None and v is not None and math.isfinite(v):
            points[float(at)] = float(v)
    return sorted(points.items())
