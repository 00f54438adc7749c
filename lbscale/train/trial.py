"""One trial: a data-parallel training run of one configuration, with honest timing and exact resume.

The story of `Trial.run`: resolve the plan (batches, steps, LR), build model, optimizer and loaders,
maybe resume, then epoch by epoch: train (micro-batches with accumulation, an LR per optimizer step, a
cross-rank check every few steps for divergence and signals), evaluate, record, checkpoint. Result files
(config.json, metrics.jsonl, summary.json) are written by rank 0, atomically, summary last.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from lbscale.analysis.gns import DDPNoiseScale
from lbscale.config import TrialConfig, to_dict
from lbscale.data.decoder import JpegDecoder, default_workers
from lbscale.data.formats import open_prepared
from lbscale.data.loader import Prefetcher, ShardedLoader
from lbscale.data.transforms import AUGMENT, Normalize
from lbscale.errors import LbscaleError
from lbscale.progress import bar, log_line
from lbscale.results import (CONFIG, METRICS, PREEMPTED, REQUEUE_EXIT, SUMMARY, WAITING, read_json, write_json,
                             write_jsonl)
from lbscale.slurm import SlurmEnv
from lbscale.task import get_task
from lbscale.train import checkpoint, provenance
from lbscale.train import distributed as dist
from lbscale.train.commtime import CommTimer
from lbscale.train.metrics import TaskMetrics
from lbscale.train.models import build_model, check_model, gradient_size
from lbscale.train.monitors import DivergenceMonitor, EpochClock
from lbscale.train.optim import OptimizerOptions, build_optimizer
from lbscale.train.plan import resolve_plan
from lbscale.train.pruning import Pruner, rung_steps
from lbscale.train.summary import NO_TARGET, epoch_records, summarize
from lbscale.train.tensorboard import TENSORBOARD_DIR, ScalarLog, require_tensorboard

AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Trial:
    def __init__(self, cfg: TrialConfig, env: dist.DistEnv, device: torch.device, backend: str | None):
        self.cfg, self.env, self.device, self.backend = cfg, env, device, backend
        self.out = Path(cfg.out)
        self.data = open_prepared(cfg.data)
        if cfg.label_set != "labels" and cfg.label_set not in self.data.extras("train"):
            raise LbscaleError(f"{cfg.data}: no label set {cfg.label_set!r}")
        self.num_classes = (self.data.num_classes if cfg.label_set == "labels"
                            else len(self.data.extra_class_names[cfg.label_set]))
        self.task = get_task(self.data.task)
        self.encoded = self.data.encoding != "raw"
        self.augmentation = resolve_augmentation(cfg.augmentation, self.data.encoding)
        if not self.encoded and (cfg.crop_size is not None or cfg.decode_workers is not None):
            raise LbscaleError(f"{cfg.data}: --crop-size and --decode-workers apply to JPEG data; "
                               "this file holds pixels")
        if not self.data.size(cfg.eval_split) and cfg.eval_split == "test":
            raise LbscaleError(f"{cfg.data}: no test split to evaluate (--eval-split test); prepare the data with "
                               "--test-fraction > 0 or evaluate val")
        if cfg.target_metric:
            self.task.check_target_metric(cfg.target_metric, self.num_classes, (cfg.eval_split,))
        self.plan = resolve_plan(cfg, env.world_size, self.data.size("train"))
        self.policy = self.plan.policy(cfg)
        check_model(cfg.model)  # before any output exists
        if cfg.gns_every and env.world_size < 2:
            raise LbscaleError("--gns-every needs 2 or more processes (each rank's gradient is the small batch); "
                               "on one process run `lbscale gns` on the trial's checkpoint")
        if cfg.tensorboard:
            require_tensorboard()
        self.scalars = ScalarLog()  # a writer on rank 0 once outputs may exist (build)
        self.decoder = None
        self.gns: DDPNoiseScale | None = None
        self.comm: CommTimer | None = None  # with 2 or more processes: the exposed all-reduce wait
        self.divergence = DivergenceMonitor(cfg.divergence_factor, cfg.divergence_window)
        self.clock = EpochClock()  # this epoch's seconds, carried through a preemption checkpoint
        self.stop_signal = None
        self.compile_seconds = None  # the first compiled step's extra time, in this process
        self.diverged_at: dict | None = None  # where the divergence criterion first held
        self.t_start = time.perf_counter()
        self.records: list[dict] = []
        self.step, self.epoch = 0, 0
        self.target_hit: dict | None = None
        self.elapsed_before = 0.0
        self.stopped: str | None = None  # why a trial ended before its last epoch ("target")
        self.pruner = self._pruner()

    def _pruner(self) -> Pruner | None:
        cfg = self.cfg
        if cfg.prune == "none":
            return None
        metric = cfg.prune_metric or cfg.target_metric or self.task.primary_on(cfg.eval_split)
        self.task.check_target_metric(metric, self.num_classes, (cfg.eval_split,))
        steps = rung_steps(cfg.prune_min_steps, cfg.prune_eta, self.plan.total_steps)
        return Pruner(self.out, cfg.prune, cfg.prune_group, cfg.prune_eta, metric,
                      self.task.higher_is_better(metric), steps)

    # --- building -------------------------------------------------------------------------------
    def build(self) -> None:
        cfg, plan = self.cfg, self.plan
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        np.random.seed(cfg.seed)
        self.model = build_model(cfg.model, len(self.data.band_names), self.num_classes, cfg.channels_last,
                                 cfg.drop_rate)
        self.model.to(self.device)
        if cfg.tensorboard and self.env.is_main:
            self.scalars = ScalarLog(self.out / TENSORBOARD_DIR)
        options = OptimizerOptions(momentum=cfg.momentum, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas),
                                   eps=cfg.eps, trust_coeff=cfg.trust_coeff, nesterov=cfg.lars_nesterov,
                                   max_grad_norm=cfg.max_grad_norm, decay_on=cfg.weight_decay_on)
        self.optimizer = build_optimizer(cfg.optimizer, self.model, self.policy.lr(0), options)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.precision == "fp16")
        self.net = self.model
        if cfg.gns_every:
            self.gns = DDPNoiseScale(self.env.world_size, plan.local_batch * plan.accum_steps, plan.global_batch,
                                     self.device)
        if self.env.world_size > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
            # DDP takes one communication hook: the timer, handing each bucket on to the noise-scale hook or
            # torch's default all-reduce
            self.comm = CommTimer(self.device, self.gns.hook if self.gns else None)
            self.net.register_comm_hook(None, self.comm.hook)
        self.eval_net = self.net
        if cfg.compile:
            mode = compile_mode(cfg.compile_mode, self.device)
            self.net = torch.compile(self.net, mode=mode)
            # CUDA graphs need static shapes: the last, smaller evaluation batch would be captured anew
            self.eval_net = self.net if mode in ("default", "max-autotune-no-cudagraphs") else self.model
        jpeg = {}
        if self.encoded:  # one decoder for all loaders: nvjpeg on a GPU, processes on the CPU
            workers = cfg.decode_workers
            if workers is None:
                workers = default_workers(self.env.local_world_size)
            self.decoder = JpegDecoder(self.device, workers)
            jpeg = {"decoder": self.decoder, "crop_size": cfg.crop_size or 224}
        self.train_loader = ShardedLoader(self.data, "train", self.env.rank, plan.world_size, plan.local_batch,
                                          cfg.seed, drop_last=cfg.last_batch == "drop", even=True,
                                          in_memory=cfg.in_memory,
                                          label_key=cfg.label_set, random_crop=cfg.augment, **jpeg)
        eval_batch = cfg.eval_batch or plan.local_batch
        self.eval_loaders = {split: ShardedLoader(self.data, split, self.env.rank, plan.world_size, eval_batch,
                                                  cfg.seed, drop_last=False, even=False, in_memory=cfg.in_memory,
                                                  label_key=cfg.label_set, **jpeg)
                             for split in ("val", "test") if self.data.size(split) > 0}
        self.step_loader = self.eval_loaders.get(cfg.eval_split)  # step evaluations: a fixed subset, or all
        self.step_subset = None
        if cfg.eval_subset and self.step_loader is not None:
            self.step_loader = ShardedLoader(self.data, cfg.eval_split, self.env.rank, plan.world_size,
                                             eval_batch, cfg.seed, drop_last=False, even=False,
                                             in_memory=cfg.in_memory, label_key=cfg.label_set,
                                             subset=cfg.eval_subset, **jpeg)
            self.step_subset = None if self.step_loader.only is None else len(self.step_loader.only)
        self.normalize = Normalize(self.data.mean, self.data.std, self.device)
        self.augment_rng = torch.Generator().manual_seed(cfg.seed * 100_003 + self.env.rank)
        self.metrics = {split: TaskMetrics(self.task, self.num_classes, self.device, split)
                        for split in self.eval_loaders}
        # progress within the epoch, saved in checkpoints with records, step, epoch, target_hit and the clock
        self.batch = 0
        self.epoch_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        self.epoch_seen = 0

    def loss_fn(self, logits, y):
        return self.task.loss(logits, y, self.cfg.label_smoothing)

    def inputs(self, batch, train: bool):
        if batch.ready is not None:  # decoded on the loader's CUDA stream
            torch.cuda.current_stream(self.device).wait_event(batch.ready)
            batch.images.record_stream(torch.cuda.current_stream(self.device))
        x = self.normalize(batch.images.to(self.device, non_blocking=True))
        if train and self.cfg.augment and not self.encoded:  # JPEG data: cropped and flipped at decode
            x = AUGMENT[self.augmentation](x, self.augment_rng)
        if self.cfg.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, self.task.targets(batch.labels.to(self.device, non_blocking=True))

    def autocast(self):
        dtype = AUTOCAST[self.cfg.precision]
        return torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext()

    # --- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, reason: str) -> None:
        main = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(), "epoch": self.epoch, "batch": self.batch, "step": self.step,
                "records": self.records, "divergence": self.divergence.state_dict(), "clock": self.clock.state_dict(),
                "target_hit": self.target_hit, "world_size": self.env.world_size,
                "gns": self.gns.state_dict() if self.gns else None, "diverged_at": self.diverged_at,
                "pruner": self.pruner.state_dict() if self.pruner else None,
                "elapsed": self.elapsed_before + time.perf_counter() - self.t_start}
        rank = {"rng": checkpoint.rng_state(self.augment_rng), "epoch_loss": self.epoch_loss.cpu(),
                "epoch_seen": self.epoch_seen}
        checkpoint.save(self.out, self.env, main, rank, {"reason": reason, "epoch": self.epoch, "step": self.step})

    def restore(self) -> None:
        main, rank = checkpoint.load(self.out, self.env, self.device)
        self.model.load_state_dict(main["model"])
        self.optimizer.load_state_dict(main["optimizer"])
        self.scaler.load_state_dict(main["scaler"])
        if self.gns and main.get("gns"):
            self.gns.load_state_dict(main["gns"])
        self.diverged_at = main.get("diverged_at")
        if self.pruner and main.get("pruner"):
            self.pruner.load_state_dict(main["pruner"])
        for key in ("epoch", "batch", "step", "records", "target_hit"):
            setattr(self, key, main[key])
        # checkpoints of lbscale before the monitor and the clock: their fields, and no seconds to carry
        self.divergence.load_state_dict(main.get("divergence") or {
            "initial_loss": main.get("initial_loss"), "above_steps": main.get("above_steps", 0),
            "last_step": main["step"]})
        if main.get("clock"):
            self.clock.load_state_dict(main["clock"])
        self.elapsed_before = main["elapsed"]
        checkpoint.set_rng_state(rank["rng"], self.augment_rng)
        self.epoch_loss = rank["epoch_loss"].to(self.device)
        self.epoch_seen = rank["epoch_seen"]

    # --- the loop -------------------------------------------------------------------------------
    def check(self, window: torch.Tensor) -> str | None:
        """Cross-rank agreement every few steps: 'diverged' (where divergence stops the trial), 'stop' (a signal
        or the preemption step: checkpoint and requeue, also after a divergence the trial carries on from),
        or None. The first divergence is recorded either way."""
        stop = 1.0 if (self.stop_signal or self.step == self.cfg.preempt_after_steps) else 0.0
        t = torch.stack([window[0], window[1], torch.tensor(stop, dtype=torch.float64, device=self.device)])
        loss_sum, count, stop = dist.all_reduce_sum(t).tolist()
        window.zero_()
        if self.divergence.update(loss_sum / max(count, 1), self.step):
            if self.diverged_at is None:
                self.diverged_at = {"epoch": self.epoch + 1, "step": self.step}
            if self.cfg.on_divergence != "continue":
                return "diverged"
        return "stop" if stop else None

    def train_epoch(self) -> tuple[str | None, dict]:
        cfg, plan = self.cfg, self.plan
        self.net.train()
        self.train_loader.set_epoch(self.epoch)
        n_micro = plan.micro_batches_per_epoch
        shard_samples = plan.epoch_samples // plan.world_size
        step_samples = plan.local_batch * plan.accum_steps
        batches = Prefetcher(self.train_loader.iterate(self.batch), pin_memory=self.device.type == "cuda")
        window = torch.zeros(2, dtype=torch.float64, device=self.device)
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        progress = bar(total=n_micro, desc=f"epoch {self.epoch + 1}/{cfg.epochs}", unit="batch", log_every=None)
        progress.disable = progress.disable or not self.env.is_main
        progress.update(self.batch)
        t0 = time.perf_counter()
        data_seconds, eval_seconds, images, mark, steps_here, first_step = 0.0, 0.0, 0, None, 0, None
        verdict = None
        try:
            while self.batch < n_micro:
                td = time.perf_counter()
                batch = next(batches)  # the wait for data; normalising and augmenting count as compute
                data_seconds += time.perf_counter() - td
                x, y = self.inputs(batch, train=True)
                last_micro = (self.batch + 1) % plan.accum_steps == 0 or self.batch + 1 == n_micro
                # the samples of this optimizer step on this rank: fewer in a kept partial last step, whose
                # micro-batches then weigh by their share (the same on every rank: equal shards)
                in_step = min(step_samples, shard_samples - self.batch // plan.accum_steps * step_samples)
                if self.gns and last_micro and (self.step + 1) % cfg.gns_every == 0 and in_step == step_samples:
                    self.gns.active = True  # the hook measures this (whole) step's all-reduce
                accumulate = not last_micro and self.env.world_size > 1
                with self.net.no_sync() if accumulate else contextlib.nullcontext():
                    with self.autocast():
                        loss = self.loss_fn(self.net(x), y)
                    self.scaler.scale(loss / (in_step / len(x))).backward()
                if self.comm:
                    self.comm.backward_done()
                detached = loss.detach().double()
                window[0] += detached
                window[1] += 1
                self.epoch_loss += detached
                self.epoch_seen += 1
                images += len(x)
                self.batch += 1
                progress.update(1)
                if not last_micro:
                    continue
                lr = self.policy.lr(self.step)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                measured = self.gns is not None and self.gns.active
                loss_scale = self.scaler.get_scale() if measured and self.scaler.is_enabled() else 1.0
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad(set_to_none=True)
                self.step += 1
                steps_here += 1
                if measured:
                    self.gns.collect(loss_scale)  # the scale this step's gradients carry
                if steps_here == 1 and cfg.compile and self.compile_seconds is None:
                    sync()
                    first_step = time.perf_counter() - t0  # compiles the step (once per process)
                if steps_here == cfg.timing_warmup_steps:
                    sync()
                    mark = (time.perf_counter(), images, eval_seconds)
                end_of_epoch = self.batch == n_micro
                if self.step % cfg.check_every == 0 or self.step == cfg.preempt_after_steps or end_of_epoch:
                    verdict = self.check(window)
                # a due evaluation runs also when a preemption stops the epoch here: a resumed trial starts
                # after this step, and a rung it skipped would never be judged ('wait', 'pruned' and 'target'
                # end the process as the preemption would)
                if verdict != "diverged" and self.step_evaluation_due():
                    sync()
                    te = time.perf_counter()
                    trained = self.clock.timing()["train_seconds"] + te - t0 - eval_seconds
                    samples = (self.clock.images + images) * plan.world_size
                    verdict = self.step_evaluation(trained, samples) or verdict
                    self.net.train()
                    eval_seconds += time.perf_counter() - te
                if verdict:
                    break
        finally:
            batches.close()  # also when the epoch stops early (divergence, preemption, an error)
        sync()
        t1 = time.perf_counter()
        progress.close()
        comm_seconds = self.comm.take() if self.comm else 0.0
        # step evaluations: out of the training time, in their own bucket
        self.clock.add(data=data_seconds, compute=t1 - t0 - data_seconds - comm_seconds - eval_seconds,
                       comm=comm_seconds, step_eval=eval_seconds)
        self.clock.count(images)
        steady_seconds = t1 - mark[0] - (eval_seconds - mark[2]) if mark else 0.0
        ips = None
        if mark and steady_seconds > 0 and images > mark[1]:  # steady pace: this process's steps past the first few
            ips = (images - mark[1]) * plan.world_size / steady_seconds
        timing = self.epoch_timing(ips)
        if first_step is not None:  # reported once, beside img/s (which leaves the first steps out anyway)
            steady = steady_seconds / max(steps_here - cfg.timing_warmup_steps, 1) if mark else 0.0
            self.compile_seconds = max(first_step - steady, 0.0)
            timing["compile_seconds"] = self.compile_seconds
        return verdict, timing

    def epoch_timing(self, ips: float | None = None) -> dict:
        """The epoch's timing fields from the clock (the whole epoch's, a part before a preemption included);
        images/s over the clock's time where no steady pace was measured."""
        cfg, plan = self.cfg, self.plan
        timing = self.clock.timing()
        if not (cfg.eval_every or cfg.eval_every_samples or self.pruner):
            del timing["step_eval_seconds"]
        samples = self.clock.images * plan.world_size
        if ips is None:
            ips = samples / max(timing["train_seconds"], 1e-9)
        # time per epoch for a full pass of the train split, whatever the epoch left out (--last-batch drop,
        # the N mod world samples of uneven shards) or did not reach (a divergence)
        timing.update(images_per_second=ips, lr=self.policy.lr(max(self.step - 1, 0)), samples=samples,
                      full_pass_seconds=timing["train_seconds"] * plan.train_samples / max(samples, 1))
        return timing

    @torch.no_grad()
    def evaluate(self, split: str | None = None, loader: ShardedLoader | None = None) -> dict:
        """`{split}_*` metrics of the evaluation split (default: --eval-split; `loader`: a subset of it); empty
        where the file has none."""
        split = split or self.cfg.eval_split
        if split not in self.eval_loaders:
            return {}
        self.net.eval()
        for batch in loader if loader is not None else self.eval_loaders[split]:
            x, y = self.inputs(batch, train=False)
            with self.autocast():
                logits = self.eval_net(x)
            self.metrics[split].update(logits, y, self.loss_fn(logits, y))
        return self.metrics[split].compute()

    def test_metrics(self, status: str) -> dict | None:
        """The end-of-training test figures the papers report (collective): the last epoch's where test is the
        evaluation split, else one evaluation of the test split now. None for a run stopped at divergence."""
        if status not in ("completed", "diverged") or self.epoch < self.cfg.epochs or "test" not in self.eval_loaders:
            return None
        if self.cfg.eval_split == "test":
            last = self.records[-1] if self.records else {}
            return {k: v for k, v in last.items() if k.startswith("test_")}
        return self.evaluate("test")

    def epoch_train_loss(self) -> float:
        """The epoch's mean training loss over every rank's micro-batches so far (collective)."""
        seen = torch.tensor(float(self.epoch_seen), dtype=torch.float64, device=self.device)
        loss_sum, count = dist.all_reduce_sum(torch.stack([self.epoch_loss, seen])).tolist()
        return loss_sum / max(count, 1)

    def elapsed_at_epoch_start(self) -> float:
        """Training and epoch-evaluation seconds before this epoch (step evaluations' time left out)."""
        return next((r["elapsed_seconds"] for r in reversed(epoch_records(self.records))), 0.0)

    def step_evaluation_due(self) -> bool:
        every, samples, b = self.cfg.eval_every, self.cfg.eval_every_samples, self.plan.global_batch
        return (bool(every and self.step % every == 0)
                or bool(samples and self.step * b // samples > (self.step - 1) * b // samples)
                or bool(self.pruner and self.pruner.rung_at(self.step)))

    def step_evaluation(self, trained_seconds: float, samples: int) -> str | None:
        """Evaluate inside the epoch (collective) and record it; then 'target' (reached, with --stop-at-target),
        'pruned' or 'wait' (successive halving at a rung), or None to train on."""
        te = time.perf_counter()
        metrics = self.evaluate(loader=self.step_loader)
        before = self.elapsed_at_epoch_start()
        record = {"kind": "step", "step": self.step,
                  "epoch": self.epoch + self.batch / self.plan.micro_batches_per_epoch,
                  "samples": self.epoch * self.plan.epoch_samples + samples, **metrics,
                  "elapsed_seconds": before + trained_seconds, "eval_seconds": time.perf_counter() - te,
                  "subset": self.step_subset}
        self.records.append(record)
        self.scalars.step(record)
        if self.env.is_main:
            write_jsonl(self.out / METRICS, self.records)
        rung = self.pruner.rung_at(self.step) if self.pruner else None
        if rung and self.env.is_main:  # published first: a trial that stops at its target is still a peer
            self.pruner.publish(rung, self.step, record.get(self.pruner.metric, float("nan")))
        if self.note_target(record) and self.cfg.stop_at_target:
            return "target"
        return self.rung_decision() if rung else None

    def rung_decision(self) -> str | None:
        """Rank 0 decides from the peers' records; every rank learns the decision (collective)."""
        code = 0.0
        if self.env.is_main:
            code = {"continue": 0.0, "prune": 1.0, None: 2.0}[self.pruner.decide()]
        code = dist.all_reduce_sum(torch.tensor(code, dtype=torch.float64, device=self.device)).item()
        return {0.0: None, 1.0: "pruned", 2.0: "wait"}[code]

    def note_target(self, record: dict) -> bool:
        """Record the first evaluation (step or epoch) at or past the target; True once it has been reached."""
        metric, target = self.cfg.target_metric, self.cfg.target
        if metric and self.target_hit is None and metric in record and self.task.reached(metric, record[metric],
                                                                                          target):
            self.target_hit = {"steps_to_target": record["step"], "epochs_to_target": record["epoch"],
                               "seconds_to_target": record["elapsed_seconds"]}
        return self.target_hit is not None

    def end_epoch(self, timing: dict) -> None:
        train_loss = self.epoch_train_loss()
        te = time.perf_counter()
        val = self.evaluate()
        eval_seconds = time.perf_counter() - te
        record = {"epoch": self.epoch + 1, "step": self.step, "train_loss": train_loss,
                  **val, **timing, "eval_seconds": eval_seconds, **(self.gns.end_epoch() if self.gns else {})}
        before = self.elapsed_at_epoch_start()
        record["elapsed_seconds"] = before + timing["train_seconds"] + eval_seconds
        self.records.append(record)
        self.scalars.epoch(record)
        if self.env.is_main:
            shown = ", ".join(f"{k} {record[k]:.4f}" for k in self.task.metric_names(self.num_classes) if k in record)
            log_line(f"epoch {record['epoch']}/{self.cfg.epochs}: train_loss {record['train_loss']:.4f}"
                     f"{', ' + shown if shown else ''}, {timing['train_seconds']:.1f} s, "
                     f"{timing['images_per_second']:,.0f} img/s")
        self.epoch += 1
        self.batch = 0
        self.clock.reset()
        self.epoch_loss.zero_()
        self.epoch_seen = 0
        self.note_target(record)
        if self.env.is_main:
            write_jsonl(self.out / METRICS, self.records)

    def record_partial_epoch(self, timing: dict) -> None:
        """The epoch a divergence, pruning or the target cut short still has a time: steps done, seconds, img/s
        and the time a full pass would have taken at that pace (the papers' time per epoch of a diverged run)."""
        train_loss = self.epoch_train_loss()
        fraction = self.batch / self.plan.micro_batches_per_epoch
        before = self.elapsed_at_epoch_start()
        self.records.append({"epoch": self.epoch + 1, "step": self.step, "partial": True, "epoch_fraction": fraction,
                             "train_loss": train_loss, **timing, "eval_seconds": 0.0,
                             "elapsed_seconds": before + timing["train_seconds"],
                             "epoch_seconds_estimate": timing["full_pass_seconds"]})
        self.scalars.epoch(self.records[-1])
        if self.env.is_main:
            write_jsonl(self.out / METRICS, self.records)

    def run(self) -> int:
        cfg = self.cfg
        self.build()
        if cfg.resume and checkpoint.exists(self.out):
            self.restore()
        described = self.describe()  # collective: every rank contributes its host name
        if self.env.is_main:
            write_json(self.out / CONFIG, described)
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(signum, self._on_signal)
        if self.pruner and self.pruner.pending:  # resumed while waiting at a rung: decide first
            verdict = self.rung_decision()
            if verdict:
                return self.stop_early(verdict, self.epoch_timing())
        while self.epoch < cfg.epochs:
            verdict, timing = self.train_epoch()
            if verdict == "diverged":
                self.record_partial_epoch(timing)
                return self.finish("diverged")
            if verdict == "stop":
                self.save_checkpoint(PREEMPTED)
                return REQUEUE_EXIT
            if verdict:
                return self.stop_early(verdict, timing)
            self.end_epoch(timing)
            self.save_checkpoint("epoch")
            if cfg.stop_at_target and self.target_hit:
                return self.stop_early("target", None)
        return self.finish("diverged" if self.diverged_at else "completed")

    def stop_early(self, verdict: str, timing: dict | None) -> int:
        """Inside an epoch (`timing`: its part so far) or between epochs: 'wait' checkpoints for the next
        round of synchronous halving; 'pruned' and 'target' end the trial."""
        if verdict == "wait":
            self.save_checkpoint(WAITING)
            return REQUEUE_EXIT
        if timing is not None and self.batch == self.plan.micro_batches_per_epoch:
            self.end_epoch(timing)  # its last step: a whole epoch, evaluated and recorded as one
        elif timing is not None and self.batch:
            self.record_partial_epoch(timing)
        if verdict == "target":
            self.stopped = "target"
            return self.finish("diverged" if self.diverged_at else "completed")
        return self.finish("pruned")

    def _on_signal(self, signum, frame):
        self.stop_signal = signum

    # --- results --------------------------------------------------------------------------------
    def release_ddp(self) -> None:
        """Drop the DDP wrapper (its reducer, holding the Python communication hook and the process group) while
        the interpreter is fully alive: left to interpreter shutdown, its destruction aborted gloo processes
        now and then ("terminate called without an active exception")."""
        if self.env.world_size > 1:
            self.net = self.eval_net = None
            gc.collect()

    def describe(self) -> dict:
        """config.json: everything resolved, and what ran it. Collective (host names)."""
        return {"config": to_dict(self.cfg), "plan": asdict(self.plan), "world_size": self.env.world_size,
                "dataset": self.data.dataset, "task": self.task.name, "augmentation": self.augmentation,
                "primary_metric": self.task.primary_on(self.cfg.eval_split), "eval_split": self.cfg.eval_split,
                "num_classes": self.num_classes, "train_samples": self.plan.train_samples,
                **gradient_size(self.model), **provenance.environment(self.device, self.backend, self.env.launcher)}

    def finish(self, status: str, error: str | None = None) -> int:
        digests = dist.all_gather_object(provenance.param_digest(self.model)) if status != "failed" else []
        test = self.test_metrics(status)
        if self.env.is_main:
            write_json(self.out / SUMMARY, self.summary(status, error, digests, test))
        return 0

    def summary(self, status: str, error: str | None, digests: list, test: dict | None = None) -> dict:
        return summarize(self.records, self.task, status, error, steps=self.step, eval_split=self.cfg.eval_split,
                         test=test,
                         diverged_at=self.diverged_at if status == "diverged" else None,
                         on_divergence=self.cfg.on_divergence,
                         wall_seconds=self.elapsed_before + time.perf_counter() - self.t_start,
                         target_metric=self.cfg.target_metric, target=self.cfg.target, **(self.target_hit or NO_TARGET),
                         world_size=self.env.world_size, global_batch=self.plan.global_batch,
                         peak_lr=self.plan.peak_lr, param_digests=digests, stopped=self.stopped,
                         pruned_at=self.pruner.records[-1] if self.pruner and status == "pruned" else None,
                         rungs=self.pruner.records if self.pruner else None,
                         gns={"source": "training", "every": self.cfg.gns_every, "skipped": self.gns.skipped,
                              **self.gns.total.as_dict()}
                         if self.gns else None)


def run_trial(cfg: TrialConfig) -> int:
    """Entry point of `lbscale train` in every process; returns the exit code."""
    env = dist.detect_env()
    if env.launcher == "slurm" and "OMP_NUM_THREADS" not in os.environ:
        # torchrun sets one thread per process; srun does not: use the allocation's CPUs per task,
        # else every rank spins one thread per core of the node.
        torch.set_num_threads(SlurmEnv.current().cpus_per_task or 1)
    out = Path(cfg.out)
    if (out / SUMMARY).exists() and not cfg.resume:
        raise LbscaleError(f"{out}: holds a finished trial ({read_json(out / SUMMARY)['status']}); "
                           "use another --out")
    if (out / SUMMARY).exists() and cfg.resume:
        return 0  # nothing left to do
    device = dist.pick_device(cfg.device, env)
    trial = Trial(cfg, env, device, None)  # validates data and plan before any process group or output
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
    trial.backend = dist.init(env, cfg.backend, device)
    clean = False
    try:
        code = trial.run()
        clean = True
        return code
    except Exception as e:
        if env.is_main and out.is_dir():
            write_json(out / SUMMARY, trial.summary("failed", f"{type(e).__name__}: {e}", []))
        raise
    finally:
        if trial.decoder is not None:
            trial.decoder.close()
        trial.scalars.close()  # every way out: finished, preempted, waiting at a rung, failed
        trial.release_ddp()
        dist.teardown(clean)


def resolve_augmentation(requested: str, encoding: str) -> str:
    """`auto`: rrc-flip for JPEG data (done at decode), flip-rot90 for pixel data. JPEG data is augmented only
    at decode time, so any other choice is refused."""
    if requested == "auto":
        return "rrc-flip" if encoding != "raw" else "flip-rot90"
    if encoding != "raw" and requested != "rrc-flip":
        raise LbscaleError(f"--augmentation {requested}: JPEG data is augmented at decode time with rrc-flip "
                           "(or --no-augment)")
    return requested


def compile_mode(requested: str, device: torch.device) -> str:
    """`auto`: CUDA graphs (reduce-overhead) on a GPU, where they measured fastest for small inputs; default
    elsewhere (CUDA graphs do not exist on the CPU)."""
    if requested == "auto":
        return "reduce-overhead" if device.type == "cuda" else "default"
    return requested


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
    return f"trial {summary['status']}:{shown} {at}{timing}; results in {out}"
