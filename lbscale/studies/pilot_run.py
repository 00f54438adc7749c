"""The pilot of `lbscale design` (kept in RESULTS-pilot/, reused by a rerun with the same inputs), run through the
normal trial path:
1. a timing run of the middle batch (`sweep --estimate`'s): seconds per step, per evaluation, the start-up; from
   it the pilot's epochs, so that its trials fit max(10% of the budget, 3 minutes); and one of the smallest batch
   the design may choose, whose steps' fixed cost the larger batches' pace does not show;
2. three LRs (a factor sqrt(10) apart) at the middle batch, evaluated on the whole val split several times an
   epoch (as many as cost half its training, 1 to 8), a fourth past the edge where the best is at one;
3. where the best's curve still rose at its end, that trial trained on from its checkpoint (up to twice its
   epochs, with what the pilot has left past the next stage): the plateau, and so the target, lie further on;
4. three LRs at the largest batch, around the middle batch's best moved by the square-root rule.
This module runs those trials; the pilot's shape (its epochs, what it spent, how its stages read) is
analysis/pilot.py's.
"""

from __future__ import annotations

import math
import shutil
import socket
import time
from pathlib import Path

from lbscale.analysis import pilot as p
from lbscale.analysis.curves import plateau
from lbscale.errors import LbscaleError
from lbscale.results import SUMMARY, read_json, write_json
from lbscale.studies.design_inputs import DEFAULT_LR, DesignOptions
from lbscale.sweep.lock import LOCK
from lbscale.train.summary import curve

PILOT_FILE = "pilot.json"


def lr_name(batch: int, lr: float) -> str:
    return f"b{batch}-lr{lr:.4g}"


class PilotRun:
    """The pilot's trials in `folder`, through the normal trial path: each stage trained (those not yet finished),
    its wall time spent on the record (`PilotRecord.spend`) and the record written."""

    def __init__(self, o: DesignOptions, facts: p.DataFacts, folder: Path, wall: float):
        self.o, self.facts, self.folder, self.wall = o, facts, folder, wall
        self.record: p.PilotRecord | None = None

    def trial(self, batch: int, lr: float, epochs: int, out: Path, evals: int = 2):
        """A pilot trial: constant LR `lr` at `batch`, the whole val split evaluated `evals` times an epoch (the
        last at its end), no target."""
        from lbscale.sweep.plan import SweepTrial
        from lbscale.train.config import load_config
        from lbscale.train.optim import OPTIMIZERS
        from lbscale.train.plan import resolve_plan

        o, facts = self.o, self.facts
        extra = {"momentum": 0.9} if OPTIMIZERS[o.optimizer].has_momentum else {}
        cfg = load_config(None, data=str(o.data), model=o.model, optimizer=o.optimizer, **extra,
                          base_lr=float(f"{lr:.4g}"), ref_batch=batch, lr_scaling="none", global_batch=batch,
                          schedule="constant", augment=False, last_batch="keep", epochs=epochs, seed=o.seed,
                          eval_batch=p.EVAL_BATCH, eval_every_samples=max(1, facts.train // evals), out=str(out))
        return SweepTrial(out.name, 1, 1, cfg, resolve_plan(cfg, 1, facts.train), sweep="pilot")

    def timing(self, batch: int, lr: float) -> p.Timing:
        """The pace at `batch`, timed as `sweep --estimate` times a trial shape (warm-started, as the pilot's trials
        run); one line where the model does not run on this data."""
        from lbscale.sweep.estimate import time_shape

        t, _ = time_shape(self.trial(batch, lr, 1, self.folder / "timing"), warm=True,
                          what=f"design: the pilot's timing run at batch {batch}")
        return p.Timing(t.step_seconds, t.eval_seconds, t.eval_samples, t.startup)

    def small_pace(self, mid: int, lr: float) -> dict | None:
        """A step's seconds at SMALLEST (at the middle batch's LR moved by the square-root rule); None where the
        middle batch is no larger."""
        if p.SMALLEST >= mid:
            return None
        t = self.timing(p.SMALLEST, lr * math.sqrt(p.SMALLEST / mid))
        return {"batch": p.SMALLEST, "step_seconds": t.step_seconds}

    def start(self, inputs: dict) -> p.PilotRecord:
        """The kept pilot's record where it measured these inputs (a rerun reuses it); else a new one, timed now."""
        if self.o.fresh and self.folder.exists():  # all of it but the lock this design holds
            for child in self.folder.iterdir():
                if child.name != LOCK:
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        kept = read_json(self.folder / PILOT_FILE)
        if kept and kept.get("inputs") != inputs:
            changed = sorted(k for k in inputs if kept["inputs"].get(k) != inputs[k])
            raise LbscaleError(f"{self.folder}: holds a pilot of other inputs ({', '.join(changed)} differ); --fresh "
                               "measures again there, or give another --results")
        if kept:
            self.record = p.PilotRecord.from_json(kept)
            if not self.record.small_timed:  # kept from before the smallest batch was timed: timed now, once
                t0 = time.monotonic()
                self.record.small, self.record.small_timed = self.small_pace(self.record.mid, self.record.lr), True
                self.spent(time.monotonic() - t0)
            return self.record
        self.folder.mkdir(parents=True, exist_ok=True)
        mid, largest = p.pilot_batches(self.facts.train)
        lr = self.o.lr if self.o.lr is not None else DEFAULT_LR[self.o.optimizer]
        t0 = time.monotonic()
        timing = self.timing(mid, lr)
        small = self.small_pace(mid, lr)
        used = time.monotonic() - t0
        epochs = p.pilot_epochs(timing, self.facts, mid, p.pilot_limit(self.wall) - used)
        if epochs is None:
            need = p.pilot_seconds_needed(timing, self.facts, mid, used)
            raise LbscaleError(f"--wall: the pilot needs about {need / 60:.1f} min for {p.MIN_PILOT_EPOCHS} epochs a "
                               f"trial at this pace ({timing.step_seconds:.3g} s a step at batch {mid}); give --wall "
                               f"of at least {math.ceil(need / p.PILOT_SHARE / 60)}m, or a smaller model or train "
                               "split")
        self.record = p.PilotRecord(inputs, mid, largest, lr, epochs, p.pilot_evals(timing, self.facts, mid), timing,
                                    socket.gethostname(), small=small)
        self.spent(used)
        return self.record

    def spent(self, seconds: float, stage: str | None = None) -> None:
        self.record.spend(seconds, stage)
        write_json(self.folder / PILOT_FILE, self.record.to_json())

    def run(self, plans: list, stage: str) -> None:
        """Train `plans` (those not yet finished, nor cut by the limit before) within the pilot's limit: none starts
        past it, a running one is stopped there, checkpointed, its curve so far kept (`budget.Deadline`); the wall time
        spent on `stage` where any ran; one line where a trial failed."""
        from lbscale.sweep.budget import Deadline
        from lbscale.sweep.follow import SweepProgress
        from lbscale.sweep.launch import LocalLauncher, select, write_trial_files

        t0, rec = time.monotonic(), self.record
        plans = [q for q in plans if q.trial_id not in rec.cut]
        write_trial_files(plans)  # the pilot's folder is locked for the whole design (`design`)
        todo = select(plans, retry_failed=False)
        if todo:
            launcher = LocalLauncher()
            launcher.wall = Deadline(p.pilot_limit(self.wall) - rec.seconds)
            launcher.run_rounds(todo, SweepProgress())
        failed = [q.trial_id for q in plans if (read_json(q.out / SUMMARY) or {}).get("status") == "failed"]
        if failed:
            why = (read_json(plans[0].out / SUMMARY) or {}).get("error") or "see its train.log"
            raise LbscaleError(f"design: pilot trial {failed[0]} failed ({why}); fix it, then run design again")
        rec.cut += [q.trial_id for q in todo if not (q.out / SUMMARY).exists()]
        if todo:
            self.spent(time.monotonic() - t0, stage)

    def stage(self, name: str, batch: int, lrs: list[float], epochs: int | None = None) -> p.Stage:
        """Train the stage's LRs at `batch` for `epochs` (the pilot's by default); each LR's curve, in order."""
        plans = [self.trial(batch, lr, epochs or self.record.epochs, self.folder / lr_name(batch, lr),
                            self.record.evals) for lr in lrs]
        self.run(plans, name)
        return [(float(f"{lr:.4g}"), curve(q.out, self.facts.metric)) for lr, q in zip(lrs, plans)]

    def longer(self, lr: float, epochs: int) -> p.Curve:
        """The middle stage's trial at `lr` trained on from its last epoch's checkpoint to `epochs`, in a folder of
        its own (kept, reused): a constant LR trained on is the longer trial (bit for bit on CPU), so its curve is
        the longer trial's. The checkpoint is copied whole or not at all (an interrupted copy leaves no folder)."""
        from lbscale.results import CHECKPOINT

        source = self.folder / lr_name(self.record.mid, lr)
        out = self.folder / f"{source.name}-e{epochs}"
        if not out.exists():
            part = self.folder / f".{out.name}.part"
            shutil.rmtree(part, ignore_errors=True)
            shutil.copytree(source / CHECKPOINT, part / CHECKPOINT)
            part.rename(out)
        self.run([self.trial(self.record.mid, lr, epochs, out, self.record.evals)], "long")
        return curve(out, self.facts.metric)

    def decided(self, key: str, value) -> int:
        """The record's `key` (epochs_long) where it was decided already, else `value()`, kept."""
        if getattr(self.record, key) is None:
            setattr(self.record, key, value())
            write_json(self.folder / PILOT_FILE, self.record.to_json())
        return getattr(self.record, key)

    def costs(self, stages: dict) -> p.Costs:
        """The pilot's prices from each stage's trials' own images/s."""
        ips = {batch: [(read_json(self.folder / lr_name(batch, lr) / SUMMARY) or {}).get("images_per_second")
                       or math.nan for lr, _ in stages[name]]
               for name, batch in (("mid", self.record.mid), ("largest", self.record.largest))}
        return p.costs(self.record, ips)

    def pilot(self, inputs: dict) -> p.Pilot:
        """The pilot (see the module's note)."""
        rec = self.start(inputs)
        print(f"design: pilot of {rec.epochs} epochs a trial at batch {rec.mid}, then batch {rec.largest}, in "
              f"{self.folder}", flush=True)
        stage = self.stage("mid", rec.mid, [rec.lr / p.LR_STEP, rec.lr, rec.lr * p.LR_STEP])
        edge = p.edge_lr(stage)
        if edge is not None:  # the best at an edge: one more LR past it
            stage = self.stage("mid", rec.mid, [s[0] for s in stage] + [edge])
        lr_mid, curve = p.best_of(stage)
        rising = bool(curve) and plateau([v for _, v in curve], self.facts.val).rising
        if self.decided("epochs_long", lambda: p.long_epochs(rec, len(stage), self.wall) if rising else 0):
            longer = self.longer(lr_mid, rec.epochs_long)  # its curve still rose: the plateau lies further on
            stage = [(lr, longer if lr == lr_mid else c) for lr, c in stage]
        moved = lr_mid * math.sqrt(rec.largest / rec.mid)
        if rec.epochs_largest is None:  # what the limit leaves: three LRs, one, or none
            rec.lrs_largest, rec.epochs_largest = p.largest_stage(rec, len(stage), self.wall)
            write_json(self.folder / PILOT_FILE, rec.to_json())
        lrs = {3: [moved / p.LR_STEP, moved, moved * p.LR_STEP], 1: [moved], 0: []}[rec.lrs_largest]
        top = self.stage("largest", rec.largest, lrs, rec.epochs_largest) if lrs else []
        stages = {k: [(lr, c) for lr, c in v if c] for k, v in (("mid", stage), ("largest", top))}  # cut: none
        if not stages["mid"]:
            raise LbscaleError(f"design: the pilot measured no curve at batch {rec.mid} within its limit "
                               f"({p.pilot_limit(self.wall):.0f} s); give a larger --wall, or a smaller model")
        return p.Pilot(rec, stages, self.costs(stages))


def inputs_of(o: DesignOptions, facts: p.DataFacts) -> dict:
    """What the pilot depends on: the same inputs reuse it."""
    return {"data": str(o.data), "train": facts.train, "val": facts.val, "model": o.model, "wall": o.wall,
            "metric": facts.metric, "optimizer": o.optimizer, "lr": o.lr, "seed": o.seed}


def run_pilot(o: DesignOptions, facts: p.DataFacts, folder: Path, wall: float) -> p.Pilot:
    """The pilot in `folder` (locked while it runs), or the kept one where it measured these inputs; where the
    design stops before the pilot measured anything, nothing is left behind."""
    from lbscale.sweep.lock import sweep_lock

    new = not folder.exists()
    try:
        with sweep_lock(folder, busy="another `lbscale design` measures its pilot there"):
            return PilotRun(o, facts, folder, wall).pilot(inputs_of(o, facts))
    except (LbscaleError, KeyboardInterrupt):
        if new and not (folder / PILOT_FILE).exists():  # nothing measured: nothing left behind
            shutil.rmtree(folder, ignore_errors=True)
        raise
