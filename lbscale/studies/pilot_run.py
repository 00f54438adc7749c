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
This module runs those trials, one loop over the stages analysis/pilot.py's `next_step` names from what was
measured; the pilot's shape (its epochs, what it spent, which stage comes next, how its stages read) is
analysis/pilot.py's.
"""

from __future__ import annotations

import math
import shutil
import socket
import time
from pathlib import Path

from lbscale.analysis import pilot as p
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
                self.record.spend(time.monotonic() - t0)
                write_json(self.folder / PILOT_FILE, self.record.to_json())
            return self.record
        self.folder.mkdir(parents=True, exist_ok=True)
        lr = self.o.lr if self.o.lr is not None else DEFAULT_LR[self.o.optimizer]
        mid = p.pilot_batches(self.facts.train)[0]
        t0 = time.monotonic()
        timing = self.timing(mid, lr)
        small = self.small_pace(mid, lr)
        self.record = p.new_record(inputs, self.facts, lr, timing, small, time.monotonic() - t0, self.wall,
                                   socket.gethostname())
        write_json(self.folder / PILOT_FILE, self.record.to_json())
        return self.record

    def run(self, plans: list, stage: str) -> None:
        """Train `plans` (those not yet finished, nor cut by the limit before) within the pilot's limit: none starts
        past it, a running one is stopped there, checkpointed, its curve so far kept (`budget.Deadline`); the wall time
        spent on `stage` where any ran; one line where a trial failed."""
        from lbscale.sweep.budget import Deadline
        from lbscale.sweep.follow import SweepProgress
        from lbscale.sweep.launch import LocalLauncher, select, write_trial_files

        t0, rec = time.monotonic(), self.record
        plans = [q for q in plans if q.trial_id not in rec.cut]
        write_trial_files(plans)  # the pilot's folder is locked while the pilot runs (`run_pilot`)
        todo = select(plans, retry_failed=False)
        if todo:
            launcher = LocalLauncher()
            launcher.wall = Deadline(p.pilot_limit(self.wall) - rec.seconds)
            launcher.run_rounds(todo, SweepProgress())
        failed = [(q.trial_id, summary) for q in plans
                  if (summary := read_json(q.out / SUMMARY) or {}).get("status") == "failed"]
        if failed:
            (trial, summary), *_ = failed
            raise LbscaleError(f"design: pilot trial {trial} failed ({summary.get('error') or 'see its train.log'}); "
                               "fix it, then run design again")
        rec.cut += [q.trial_id for q in todo if not (q.out / SUMMARY).exists()]
        if todo:
            rec.spend(time.monotonic() - t0, stage)
            write_json(self.folder / PILOT_FILE, rec.to_json())

    def stage(self, step: p.Step) -> p.Stage:
        """Train the step's LRs at its batch for its epochs; each LR's curve, in order. The long step trains the
        middle stage's trial on from its last epoch's checkpoint, in a folder of its own (`trained_on`)."""
        outs = [self.folder / lr_name(step.batch, lr) for lr in step.lrs]
        if step.name == "long":
            outs = [self.trained_on(out, step.epochs) for out in outs]
        plans = [self.trial(step.batch, lr, step.epochs, out, self.record.evals) for lr, out in zip(step.lrs, outs)]
        self.run(plans, step.name)
        return [(float(f"{lr:.4g}"), curve(q.out, self.facts.metric)) for lr, q in zip(step.lrs, plans)]

    def trained_on(self, source: Path, epochs: int) -> Path:
        """The folder where `source`'s trial trains on from its last epoch's checkpoint to `epochs` (kept, reused):
        a constant LR trained on is the longer trial (bit for bit on CPU), so its curve is the longer trial's. The
        checkpoint is copied whole or not at all (an interrupted copy leaves no folder)."""
        from lbscale.results import CHECKPOINT

        out = self.folder / f"{source.name}-e{epochs}"
        if not out.exists():
            part = self.folder / f".{out.name}.part"
            shutil.rmtree(part, ignore_errors=True)
            shutil.copytree(source / CHECKPOINT, part / CHECKPOINT)
            part.rename(out)
        return out

    def pilot(self, inputs: dict) -> p.Pilot:
        """The pilot (see the module's note): each stage `analysis.pilot.next_step` names trained, the record
        written where it took a decision; what it measured, with each trial's images/s."""
        rec = self.start(inputs)
        print(f"design: pilot of {rec.epochs} epochs a trial at batch {rec.mid}, then batch {rec.largest}, in "
              f"{self.folder}", flush=True)
        stages: dict = {}
        while True:
            kept = rec.to_json()
            step = p.next_step(rec, stages, self.wall, self.facts.val)
            if rec.to_json() != kept:  # a decision taken: kept for a rerun
                write_json(self.folder / PILOT_FILE, rec.to_json())
            if step is None:
                break
            stages[step.name] = self.stage(step)
        ips = {batch: {lr: (read_json(self.folder / lr_name(batch, lr) / SUMMARY) or {}).get("images_per_second")
                       or math.nan for lr, _ in stages.get(name, [])}
               for name, batch in (("mid", rec.mid), ("largest", rec.largest))}
        return p.measured(rec, stages, ips, self.wall)


def other_sweep(results: Path, name: str) -> None:
    """One line where `results` holds the trials of another sweep than the designed one (`name`): the designed
    study and its pilot need a folder of their own."""
    names = {(read_json(g) or {}).get("sweep") for g in Path(results).glob("*/grid.json")} - {name, None, ""}
    if names:
        raise LbscaleError(f"--results {results}: holds the trials of sweep {sorted(names)[0]!r}; give the designed "
                           f"study a folder of its own (another --results)")


def inputs_of(o: DesignOptions, facts: p.DataFacts) -> dict:
    """What the pilot depends on: the same inputs reuse it."""
    return {"data": str(o.data), "train": facts.train, "val": facts.val, "model": o.model, "wall": o.wall,
            "metric": facts.metric, "optimizer": o.optimizer, "lr": o.lr, "seed": o.seed}


def run_pilot(o: DesignOptions, facts: p.DataFacts, results: Path, wall: float) -> tuple[p.Pilot, Path]:
    """The pilot in RESULTS-pilot/ beside the study's folder `results` (locked while it runs), or the kept one where
    it measured these inputs; (what it measured, its folder). Where the design stops before the pilot measured
    anything, nothing is left behind."""
    from lbscale.sweep.lock import sweep_lock

    other_sweep(results, o.out.stem)
    inputs, folder = inputs_of(o, facts), results.parent / f"{results.name}-pilot"
    new = not folder.exists()
    try:
        with sweep_lock(folder, busy="another `lbscale design` measures its pilot there"):
            return PilotRun(o, facts, folder, wall).pilot(inputs), folder
    except (LbscaleError, KeyboardInterrupt):
        if new and not (folder / PILOT_FILE).exists():  # nothing measured: nothing left behind
            shutil.rmtree(folder, ignore_errors=True)
        raise
