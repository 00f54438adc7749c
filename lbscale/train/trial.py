"""One trial: a data-parallel training run of one configuration, with honest timing and exact resume.

The story of `Trial.run`: check the options against the data and resolve the plan (batches, steps, LR), build
model, optimizer and inputs, maybe resume (or start a branch from its parent's checkpoint), then epoch by epoch:
train (micro-batches grouped into optimizer steps, an LR per step, a cross-rank check every few steps for divergence
and signals, evaluations the schedule asks for), evaluate, record, checkpoint. Result files (config.json,
metrics.jsonl, summary.json) are written by rank 0, atomically, summary last. Each part lives in a module beside
it (docs/architecture.md names them)."""

from __future__ import annotations

import signal
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from lbscale.train.config import TrialConfig
from lbscale.data.formats import open_prepared
from lbscale.data.loader import Prefetcher
from lbscale.progress import bar
from lbscale.results import CHECKPOINT, CONFIG, PREEMPTED, REQUEUE_EXIT, SUMMARY, TARGET, WAITING, write_json
from lbscale.train import checkpoint, provenance
from lbscale.train.columns import write_columns
from lbscale.train import distributed as dist
from lbscale.train.branching import Branch
from lbscale.train.data_checks import check_trial_data
from lbscale.train.checkpoint import Progress, TrialState
from lbscale.train.evaluation import EvalSchedule, Evaluator, NoiseAtTarget
from lbscale.train.grouping import StepGrouping
from lbscale.train.inputs import TrialInputs
from lbscale.train.models import build_model, check_model
from lbscale.train.monitors import (CrossRankCheck, DivergenceMonitor, EpochClock, PaceMeter, StartupClock,
                                   TrainLoss, split_exposed_wait)
from lbscale.train.plan import keep_steps, resolve_plan
from lbscale.train.pruning import make_pruner
from lbscale.train.step import TrainStep
from lbscale.train.summary import RecordBook, epoch_timing, trial_summary
from lbscale.train.tensorboard import TENSORBOARD_DIR, ScalarLog, require_tensorboard

class Trial:
    def __init__(self, cfg: TrialConfig, env: dist.DistEnv, device: torch.device, backend: str | None):
        self.cfg, self.env, self.device, self.backend = cfg, env, device, backend
        self.out = Path(cfg.out)
        self.data = open_prepared(cfg.data)
        self.fit = check_trial_data(cfg, self.data, env.world_size)  # before any process group or output
        self.task, self.num_classes = self.fit.task, self.fit.num_classes
        self.plan = resolve_plan(cfg, env.world_size, self.data.size("train"))
        self.policy = self.plan.policy(cfg)
        check_model(cfg.model)
        if cfg.tensorboard:
            require_tensorboard()
        self.progress = Progress()
        self.book = RecordBook(self.out, env.is_main, self.task.metric_names(self.num_classes, cfg.eval_split),
                               cfg.epochs)
        self.divergence = DivergenceMonitor(cfg.divergence_factor, cfg.divergence_window)
        self.clock = EpochClock()  # this epoch's seconds, carried through a preemption checkpoint
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.pace = PaceMeter(cfg.timing_warmup_steps, env.world_size, sync, cfg.compile)
        self.pruner = make_pruner(cfg, self.task, self.plan.total_steps)
        self.keep = keep_steps(cfg.keep_checkpoints, self.plan.total_steps, self.plan.steps_per_epoch)
        self.grouping = StepGrouping.of(cfg, self.plan)  # which micro-batches make a step (a schedule's, a branch's)
        self.branch = Branch.of(cfg, self.plan)  # before any output: checks its kept checkpoint
        self.loss = TrainLoss(device)
        self.check = CrossRankCheck(cfg, self.plan, self.loss, self.divergence, self.branch)
        self.inputs = self.train_step = self.stop_signal = self.stopped = None
        self.in_step = 0  # the samples of the current optimizer step on this rank
        self.t_start = time.perf_counter()
        self.startup = StartupClock(env)

    # --- building -------------------------------------------------------------------------------
    def build(self) -> None:
        cfg = self.cfg
        self.rung_decision = lambda: self.pruner.collective_decision(self.env.is_main, dist.all_reduce_sum, self.device)
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        np.random.seed(cfg.seed)
        self.model = build_model(cfg.model, len(self.data.band_names), self.num_classes, cfg.channels_last,
                                 cfg.drop_rate).to(self.device)
        self.train_step = TrainStep(cfg, self.plan, self.policy, self.task, self.model, self.device,
                                    self.env.world_size)
        self.inputs = TrialInputs(self.data, cfg, self.plan, self.task, self.env.rank, self.env.local_world_size,
                                  self.device, self.fit.augmentation)
        self.evaluator = Evaluator(self.train_step.eval_module, self.inputs, self.task, self.num_classes,
                                   self.device, self.train_step.autocast, self.train_step.loss_fn)
        self.schedule = EvalSchedule(cfg, self.plan, self.task, self.evaluator, self.book, self.pruner,
                                     self.env.is_main, self.rung_decision, self.train_step.gns)
        self.at_target = NoiseAtTarget(cfg, self.model, self.data, self.inputs, self.task, self.plan.local_batch,
                                       self.device, self.out if self.env.is_main else None)

    # --- checkpoints ----------------------------------------------------------------------------
    def monitors(self) -> dict:
        return {"divergence": self.divergence, "clock": self.clock, "gns": self.train_step.gns, "pruner": self.pruner,
                "branch": self.branch, "grouping": self.grouping}

    def save_checkpoint(self, reason: str, folder: str = CHECKPOINT) -> None:
        p = self.progress
        state = TrialState.of(self.model, self.train_step.optimizer, self.train_step.scaler,
                              replace(p, elapsed=self.elapsed()),
                              self.book.records, self.env.world_size, self.monitors())
        rank = {"rng": checkpoint.rng_state(self.inputs.augment_rng), "epoch_loss": self.loss.epoch.cpu(),
                "window_loss": self.loss.window.cpu()}
        checkpoint.save(self.out, self.env, state.to_dict(), rank, {
            "reason": reason, "epoch": p.epoch, "step": p.step, "global_batch": self.plan.global_batch,
            "local_batch": self.plan.local_batch, "samples_seen": self.plan.samples_seen(p.epoch, p.batch)}, folder)

    def load(self, monitors: dict, folder: Path | None = None) -> TrialState:
        """The trial's checkpoint (or a kept one in `folder`) into the network, optimizer, scaler, `monitors`, the
        RNG and this epoch's loss; its state, for the progress."""
        main, rank = checkpoint.load(self.out, self.env, self.device, folder)
        state = TrialState.from_dict(main)
        state.apply(self.model, self.train_step.optimizer, self.train_step.scaler, monitors)
        self.train_step.loaded()
        checkpoint.set_rng_state(rank["rng"], self.inputs.augment_rng)
        self.loss.epoch = checkpoint.epoch_loss(rank).to(self.device)
        if folder is None:  # resumed: the loss since the last check (a branch's window starts its own)
            self.loss.window = checkpoint.window_loss(rank).to(self.device)
        return state

    def restore(self, resumed: bool) -> None:
        """Resumed: from its own checkpoint; a branch: from its parent's kept one, at its own batch (branching.py)."""
        if resumed:
            state = self.load(self.monitors())
            self.progress, self.book.records = state.progress, state.records
            self.progress.hit_of(self.cfg.targets)  # trained on to a new target (`lbscale predict`): not yet hit
        elif self.branch:
            self.progress = self.branch.begin(self.load({"divergence": self.divergence}, self.branch.folder).progress)
            if self.cfg.branch_reseed:  # a repeat: its own augmentation from the branch point on
                self.inputs.augment_rng.manual_seed(self.inputs.augment_seed(self.cfg.branch_reseed))
        if self.branch and self.cfg.branch_reseed:  # a repeat: its own data order from the window's start
            self.inputs.train.reorder(self.cfg.branch_reseed, *self.branch.start)

    def elapsed(self) -> float:
        return self.progress.elapsed + time.perf_counter() - self.t_start

    # --- the loop -------------------------------------------------------------------------------
    def train_epoch(self) -> tuple[str | None, dict]:
        p, n_micro = self.progress, self.plan.micro_batches_per_epoch
        self.train_step.train()
        self.inputs.train.set_epoch(p.epoch)
        batches = Prefetcher(self.inputs.train.iterate(p.batch), pin_memory=self.device.type == "cuda")
        progress = bar(total=n_micro, desc=f"epoch {p.epoch + 1}/{self.cfg.epochs}", unit="batch", log_every=None,
                       start=p.batch, shown=self.env.is_main)
        self.startup.note(self.progress)
        self.pace.start()
        data_seconds, verdict, images = 0.0, None, 0
        try:
            while p.batch < n_micro and not verdict:
                td = time.perf_counter()
                batch = next(batches)  # the wait for data; normalising and augmenting count as compute
                data_seconds += time.perf_counter() - td
                images += self.micro_batch(batch)
                progress.update(1)
                if self.grouping.ended(p):  # the step's last micro-batch
                    verdict = self.optimizer_step(images)
                    images = 0
        finally:
            batches.close()  # also when the epoch stops early (divergence, preemption, an error)
        progress.close()
        ips, compiled = self.pace.close(self.clock, data_seconds, self.train_step.take_comm_seconds)  # into the clock
        return verdict, self.epoch_timing(ips, compiled)

    def micro_batch(self, batch) -> int:
        p = self.progress
        x, y = self.inputs(batch, train=True)
        loss, self.in_step = self.train_step.micro_batch(x, y, p.batch, p.step, self.grouping.next(p))
        self.loss.add(loss)
        p.batch += 1
        return len(x)

    def optimizer_step(self, images: int) -> str | None:
        """The update, the cross-rank check where due, a branch's end or a step evaluation where due."""
        p = self.progress
        self.train_step.update(p.step, self.grouping.lr(self.policy, self.in_step))
        p.step += 1
        self.pace.step(images)
        if p.step in self.keep:  # for lbscale branch: the state after this step, the epoch's clock aside
            self.save_checkpoint("kept", f"{checkpoint.KEPT}/{self.keep[p.step]}")
        verdict = self.check(p, bool(self.stop_signal)) if self.check.due(p) else None
        if verdict == "diverged":
            return verdict
        if self.branch and self.branch.done(p):  # its window trained: its one evaluation, then the end
            self.schedule.evaluate_now(p, self.pace.trained(self.clock), self.plan.samples_seen(p.epoch, p.batch),
                                       bool(self.cfg.eval_subset), self.branch.smoothed())
            return "window"
        # a due evaluation runs also when a preemption stops the epoch here: a resumed trial starts after this
        # step, and a rung it skipped would never be judged ('wait', 'pruned' and 'target' end the process as the
        # preemption would)
        return self.step_evaluation() or verdict

    def step_evaluation(self) -> str | None:
        """The evaluation the schedule asks for after this step, if any (`EvalSchedule.run`'s verdict)."""
        p = self.progress
        seen = p.epoch * self.plan.epoch_samples + (self.clock.images + self.pace.images) * self.plan.world_size
        if not self.schedule.due(p.step, seen - self.in_step * self.plan.world_size, seen):
            return None
        trained, te, before = self.pace.trained(self.clock), time.perf_counter(), p.target_hit
        verdict = self.schedule.run(p, trained, seen)
        self.train_step.train()
        self.pace.eval_seconds += time.perf_counter() - te
        self.pace.aside_seconds += self.at_target.after(before, p)
        return verdict

    def epoch_timing(self, ips: float | None = None, compiled: float | None = None) -> dict:
        """The epoch's (or its part's) timing fields (collective): every rank's clock, split in the frame of the rank
        that waited most (monitors.py); the compile seconds where this epoch compiled, reported once beside img/s
        (which leaves the first steps out anyway)."""
        split = split_exposed_wait(dist.all_gather_object(self.clock.timing()))
        timing = epoch_timing(split, self.clock.images * self.plan.world_size, ips,
                              self.train_step.optimizer.param_groups[0]["lr"], self.plan.train_samples,
                              self.schedule.any)
        return timing if compiled is None else {**timing, "compile_seconds": compiled}

    def end_epoch(self, timing: dict) -> None:
        p = self.progress
        train_loss = self.loss.epoch_mean()
        te = time.perf_counter()
        metrics = self.evaluator.evaluate(self.cfg.eval_split)
        record = self.book.epoch(p.epoch + 1, p.step, train_loss, metrics, timing, time.perf_counter() - te,
                                 self.train_step.gns.end_epoch() if self.train_step.gns else {})
        p.epoch, p.batch = p.epoch + 1, 0
        self.clock.reset()
        self.loss.epoch.zero_()
        before = p.target_hit
        self.schedule.note_target(record, p)
        self.at_target.after(before, p)  # after the epoch's record: outside its time

    def run(self) -> int:
        cfg = self.cfg
        self.build()
        resumed = cfg.resume and checkpoint.exists(self.out)
        self.restore(resumed)
        if cfg.tensorboard and self.env.is_main:  # a resumed trial hides what it replays after its checkpoint
            self.book.scalars = ScalarLog(self.out / TENSORBOARD_DIR, self.progress.step + 1 if resumed else None)
        described = provenance.describe(self.cfg, self.plan, self.env.world_size, self.data.dataset, self.task,
                                        self.fit.augmentation, self.num_classes, self.model, self.device,
                                        self.backend, self.env.launcher,  # collective: every rank's host name
                                        self.data.size(cfg.eval_split) if self.data.has_split(cfg.eval_split) else None)
        if self.env.is_main:
            write_json(self.out / CONFIG, described)
        for signum in (signal.SIGTERM, signal.SIGUSR1):  # checkpoint and stop at the next cross-rank check
            signal.signal(signum, lambda sig, frame: setattr(self, "stop_signal", sig))
        if self.pruner and self.pruner.pending and (verdict := self.rung_decision()):  # resumed at a rung: decided
            return self.stop_early(verdict, self.epoch_timing())
        if resumed and cfg.stop_at_target and self.progress.target_hit:  # checkpointed at the target, not ended
            return self.stop_early("target", None)
        while self.progress.epoch < cfg.epochs:
            verdict, timing = self.train_epoch()
            if verdict == "diverged":
                self.book.partial_epoch(self.progress.epoch + 1, self.progress.step, self.progress.batch
                                        / self.plan.micro_batches_per_epoch, self.loss.epoch_mean(), timing)
                return self.finish("diverged")
            if verdict == "stop":  # every rank has its part of the checkpoint before any exits (barriers)
                self.save_checkpoint(PREEMPTED)
                return REQUEUE_EXIT
            if verdict:
                return self.stop_early(verdict, timing)
            self.end_epoch(timing)
            self.save_checkpoint("epoch")
            if cfg.stop_at_target and self.progress.target_hit:
                return self.stop_early("target", None)
        return self.finish("diverged" if self.progress.diverged_at else "completed")

    def stop_early(self, verdict: str, timing: dict | None) -> int:
        """Inside an epoch (`timing`: its part so far) or between epochs: 'wait' checkpoints for the next
        round of synchronous halving; 'pruned' and 'target' end the trial."""
        if verdict == "wait":
            self.save_checkpoint(WAITING)
            return REQUEUE_EXIT
        p = self.progress
        if timing is not None and p.batch == self.plan.micro_batches_per_epoch:
            self.end_epoch(timing)  # its last step: a whole epoch, evaluated and recorded as one
        elif timing is not None and p.batch:
            self.book.partial_epoch(p.epoch + 1, p.step, p.batch / self.plan.micro_batches_per_epoch,
                                    self.loss.epoch_mean(), timing)
        if verdict in ("target", "window"):
            self.stopped = verdict
            if verdict == "target" and timing is not None:  # inside an epoch: its weights where it reached the
                self.save_checkpoint(TARGET)  # target, for lbscale gns and branch --at target (epochs' ends have one)
            return self.finish("diverged" if p.diverged_at else "completed")
        return self.finish("pruned")

    # --- results --------------------------------------------------------------------------------
    def finish(self, status: str, error: str | None = None) -> int:
        digests = dist.all_gather_object(provenance.param_digest(self.model)) if status != "failed" else []
        done = status in ("completed", "diverged") and (self.progress.epoch >= self.cfg.epochs
                                                        or self.stopped == "target")
        # the model it ends with, once, after its last record: outside its training time and pace
        test = self.evaluator.test_figures(self.book.records) if done else None  # collective
        if self.env.is_main:
            summary = self.summary(status, error, digests, test)
            write_columns(self.out)  # before summary.json, which is written last; False where it could not
            write_json(self.out / SUMMARY, summary)
        return 0

    def summary(self, status: str, error: str | None, digests: list, test: dict | None = None) -> dict:
        return {**trial_summary(self.book, self.task, status, error, self.cfg, self.plan, self.progress,
                                self.env.world_size, self.elapsed(), digests, test, self.stopped, self.pruner,
                                self.train_step.gns if self.train_step else None), **self.grouping.summary()}
