"""A trial's network and its update: the model (DDP-wrapped and compiled where asked), the optimizer with the LR
of each optimizer step, the grad scaler, forward and backward of micro-batches (accumulating under no_sync until a
step's last), the noise-scale measurement on the gradients' all-reduce and the exposed all-reduce wait. Under
`--engine horovod` no DDP wrapper: Horovod's DistributedOptimizer averages the gradients (train/horovod.py)."""

from __future__ import annotations

import contextlib

import torch

from lbscale.train.config import TrialConfig
from lbscale.task import Task
from lbscale.train import distributed as dist
from lbscale.train.commtime import CommTimer
from lbscale.train.horovod import HorovodUpdate
from lbscale.train.noise_measure import DDPNoiseScale
from lbscale.train.optim import build_optimizer, options_of
from lbscale.train.plan import Plan, compile_mode
from lbscale.train.policy import LRPolicy

AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class TrainStep:
    """`model` trained by `cfg`'s optimizer at `policy`'s LR over `world_size` processes. `eval_module` is what
    evaluation runs: the unwrapped module (compiled where that is safe), never the DDP wrapper."""

    def __init__(self, cfg: TrialConfig, plan: Plan, policy: LRPolicy, task: Task, model: torch.nn.Module,
                 device: torch.device, world_size: int):
        self.cfg, self.plan, self.policy, self.task, self.device = cfg, plan, policy, task, device
        self.model, self.world_size = model, world_size
        self.optimizer = build_optimizer(cfg.optimizer, model, policy.lr(0), options_of(cfg))
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        self.gns = (DDPNoiseScale(world_size, plan.local_batch * plan.accum_steps, plan.global_batch, device)
                    if cfg.gns_every else None)
        self.comm, self.net, self.eval_module, self.hvd = None, model, model, None
        if cfg.engine == "horovod":  # Horovod's optimizer averages the gradients: no wrapper, at any world size
            self.hvd = HorovodUpdate(model, self.optimizer, device)
            self.optimizer = self.hvd.optimizer
        elif world_size > 1:  # the timer hands each bucket on to the noise-scale hook or the all-reduce
            self.comm = CommTimer(device, self.gns.hook if self.gns else None)
            self.net = dist.wrap(model, device, self.comm.hook)
        if cfg.compile:
            mode = compile_mode(cfg.compile_mode, device.type)
            self.net = torch.compile(self.net, mode=mode)
            # CUDA graphs need static shapes (the last, smaller evaluation batch would be captured anew), and
            # under DDP the compiled network is the wrapper: evaluation runs the module eagerly there
            if world_size == 1 and mode in ("default", "max-autotune-no-cudagraphs"):
                self.eval_module = self.net

    def autocast(self):
        dtype = AUTOCAST[self.cfg.precision]
        return torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext()

    def loss_fn(self, logits, y):
        return self.task.loss(logits, y, self.cfg.label_smoothing)

    def micro_batch(self, x, y, micro: int, step: int, grouping: tuple[bool, int] | None = None
                    ) -> tuple[torch.Tensor, int]:
        """Forward and backward of the epoch's `micro`-th micro-batch, in optimizer step `step` (counted from 0);
        its loss (detached, float64) and the samples of its optimizer step on this rank. `grouping`: (whether it
        is its step's last, the step's samples on this rank) where a batch schedule decides them, else the plan."""
        plan = self.plan
        if grouping is None:
            last = (micro + 1) % plan.accum_steps == 0 or micro + 1 == plan.micro_batches_per_epoch
            in_step = plan.step_samples(micro)  # a kept partial last step's micro-batches weigh by their share
        else:
            last, in_step = grouping
        if self.gns and last and (step + 1) % self.cfg.gns_every == 0 \
                and in_step == plan.local_batch * plan.accum_steps:
            self.gns.active = True  # the hook measures this (whole) step's all-reduce
        if self.hvd:
            self.hvd.before_forward()
        with self.net.no_sync() if not last and self.comm else contextlib.nullcontext():
            with self.autocast():
                loss = self.loss_fn(self.net(x), y)
            if self.hvd:
                self.hvd.before_backward(last)
            self.scaler.scale(loss / (in_step / len(x))).backward()
        if self.comm:
            self.comm.backward_done()
        return loss.detach().double(), in_step

    def update(self, step: int, lr: float | None = None) -> None:
        """Optimizer step `step` (counted from 0) at its LR (or `lr`: a batch schedule's), through the grad scaler;
        the noise scale where this step was measured."""
        lr = self.policy.lr(step) if lr is None else lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        measured = self.gns is not None and self.gns.active
        loss_scale = self.scaler.get_scale() if measured and self.scaler.is_enabled() else 1.0
        if self.hvd:  # the averaged gradients first, then the step on them
            self.hvd.step(self.scaler)
        else:
            self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()  # to None (torch's default; Horovod's zero_grad takes no argument)
        if measured:
            self.gns.collect(loss_scale)  # the scale this step's gradients carry

    def loaded(self) -> None:
        """After a checkpoint's state was loaded: under Horovod every rank trains on from rank 0's optimizer state
        (DDP's ranks each load the same checkpoint file and need nothing more)."""
        if self.hvd:
            self.hvd.broadcast_state()

    def train(self) -> None:
        self.net.train()

    def take_comm_seconds(self) -> float:
        """The exposed all-reduce wait since the last call (0 on one process under DDP)."""
        if self.hvd:
            return self.hvd.take()
        return self.comm.take() if self.comm else 0.0
