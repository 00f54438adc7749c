"""A trial's numbers from its config, world size and train split: local batch, accumulation, steps, LR plan.

Pure arithmetic (no torch), shared by `lbscale train` and `lbscale sweep --dry-run`."""

from __future__ import annotations

from dataclasses import dataclass

from lbscale.train.config import TrialConfig
from lbscale.data.formats.base import auto_augmentation
from lbscale.errors import LbscaleError
from lbscale.ranges import parse_keep
from lbscale.train.policy import LRPolicy, auto_warmup_epochs, peak_lr


@dataclass
class Plan:
    """The numbers a trial runs with, resolved from its config, the world size and the train split."""

    world_size: int
    global_batch: int
    local_batch: int
    accum_steps: int
    train_samples: int
    steps_per_epoch: int
    total_steps: int
    peak_lr: float
    warmup_epochs: float
    warmup_steps: int
    # absent from the config.json of lbscale before --last-batch (which dropped it): None there
    micro_batches_per_epoch: int | None = None  # per rank; with `keep` the last one may be partial
    epoch_samples: int | None = None  # trained per epoch, all ranks

    def step_samples(self, micro_batch: int) -> int:
        """The samples one rank trains in the optimizer step of its `micro_batch`-th micro-batch of an epoch: fewer
        in a kept partial last step (the same on every rank: shards are equal)."""
        shard, per_step = self.epoch_samples // self.world_size, self.local_batch * self.accum_steps
        return min(per_step, shard - micro_batch // self.accum_steps * per_step)

    def samples_seen(self, epoch: int, micro_batch: int) -> int:
        """Training samples of every rank after `micro_batch` micro-batches of epoch `epoch` (counted from 0; a kept
        partial last batch counted whole)."""
        return epoch * self.epoch_samples + min(micro_batch * self.local_batch * self.world_size, self.epoch_samples)

    def policy(self, cfg: TrialConfig) -> LRPolicy:
        return LRPolicy(self.peak_lr, self.steps_per_epoch, cfg.epochs, self.warmup_epochs, cfg.schedule,
                        cfg.warmup_start_lr, cfg.poly_power, cfg.end_lr, tuple(cfg.milestones),
                        tuple(cfg.milestone_factors))


def resolve_plan(cfg: TrialConfig, world_size: int, train_samples: int | None) -> Plan:
    """Local batch and accumulation from the global batch; an error before any work if they do not divide.

    Without `train_samples` (data not prepared yet) the step counts are left as None."""
    g = cfg.global_batch
    if cfg.local_batch and cfg.accum_steps:
        local, accum = cfg.local_batch, cfg.accum_steps
        if local * world_size * accum != g:
            raise LbscaleError(f"global batch {g} != local batch {local} x {world_size} processes x {accum} accum")
    elif cfg.local_batch:
        local = cfg.local_batch
        if g % (local * world_size):
            raise LbscaleError(f"global batch {g} is not a multiple of local batch {local} x {world_size} processes")
        accum = g // (local * world_size)
    else:
        accum = cfg.accum_steps or 1
        if g % (world_size * accum):
            raise LbscaleError(f"global batch {g} does not divide into {world_size} processes x {accum} accum steps")
        local = g // (world_size * accum)
    warmup = (auto_warmup_epochs(g, cfg.warmup_ref_batch, cfg.warmup_ref_epochs) if cfg.warmup_auto
              else float(cfg.warmup_epochs))
    peak = peak_lr(cfg.base_lr, g, cfg.ref_batch, cfg.lr_scaling)
    if train_samples is None:
        return Plan(world_size, g, local, accum, None, None, None, peak, warmup, None, None, None)
    micro, shard_samples = epoch_batches(train_samples // world_size, local, accum, cfg.last_batch)
    steps = -(-micro // accum)
    if steps < 1 or g > train_samples:  # keep would train one partial step an epoch, labelled batch g
        raise LbscaleError(f"global batch {g} is larger than the train split ({train_samples} samples)")
    policy = LRPolicy(peak, steps, cfg.epochs, warmup, cfg.schedule)
    return Plan(world_size, g, local, accum, train_samples, steps, policy.total_steps, peak, warmup,
                policy.warmup_steps, micro, shard_samples * world_size)


def epoch_batches(shard: int, local: int, accum: int, last_batch: str) -> tuple[int, int]:
    """(micro-batches, samples) one rank trains per epoch from its shard of `shard` samples. Every rank has the
    same shard size (the split's N mod world samples sit out the epoch, others each epoch), so all ranks run
    the same steps and, with `keep`, the same partial last batch. `drop`: whole optimizer steps only. `keep`:
    every sample, but a last batch of one sample, which BatchNorm cannot train on, is left out."""
    if last_batch == "drop":
        micro = shard // local // accum * accum
        return micro, micro * local
    usable = shard - 1 if shard % local == 1 else shard
    return -(-usable // local), usable


def resolve_augmentation(requested: str, encoding: str, imagery: str | None) -> str:
    """The augmentation a trial trains with. `auto`: the one that fits the file's recorded imagery
    (data.formats.base.IMAGERY; flip-rot90 where it is unknown or not recorded), rrc-flip for JPEG data (done at
    decode). JPEG data is augmented only at decode time, so any other choice is refused."""
    if requested == "auto":
        return auto_augmentation(encoding, imagery)
    if encoding != "raw" and requested != "rrc-flip":
        raise LbscaleError(f"--augmentation {requested}: JPEG data is augmented at decode time with rrc-flip "
                           "(or --no-augment)")
    return requested


def compile_mode(requested: str, device_type: str) -> str:
    """`auto`: CUDA graphs (reduce-overhead) on a GPU, where they measured fastest for small inputs; default
    elsewhere (CUDA graphs do not exist on the CPU)."""
    if requested == "auto":
        return "reduce-overhead" if device_type == "cuda" else "default"
    return requested


def keep_steps(text: str | None, total_steps: int, steps_per_epoch: int) -> dict[int, str]:
    """The optimizer step of each point of --keep-checkpoints (a fraction of the run, epochs or steps, rounded
    to a step >= 1 and below the last), by step; the label is kept/'s folder name."""
    if not text:
        return {}
    out = {}
    for label, value, unit in parse_keep(text):
        step = {"%": value / 100 * total_steps, "ep": value * steps_per_epoch, "st": value}[unit]
        step = int(round(step))
        if not 1 <= step < total_steps:
            raise LbscaleError(f"--keep-checkpoints {label}: step {step} is outside the run's 1..{total_steps - 1}")
        out[step] = label.replace("%", "pct")
    return out
