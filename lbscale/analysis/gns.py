"""Gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", appendix A).

B_simple = tr(Sigma) / |G|^2 predicts the critical batch. From squared gradient norms measured at a small
batch b and a big batch B (the mean of B/b small-batch gradients), the unbiased estimates are
    |G|^2    ~ (B |G_B|^2 - b |G_b|^2) / (B - b)
    tr(Sigma) ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B)
Each is noisy on its own, so they are summed over many measurements and divided once (ratio of means).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

GNS_FILE = "gns.json"
from lbscale.analysis.intervals import LEVEL  # noqa: E402  (the interval's level, as the report's)


def estimate(g2_small: float, g2_big: float, b_small: float, b_big: float) -> tuple[float, float]:
    """Unbiased (|G|^2, tr(Sigma)) from one pair of squared norms at batches b_small < b_big."""
    if not 0 < b_small < b_big:
        raise ValueError("need 0 < b_small < b_big")
    g2 = (b_big * g2_big - b_small * g2_small) / (b_big - b_small)
    trace = (g2_small - g2_big) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


MIN_GROUPS = 4  # fewer groups leave too few degrees of freedom for an interval


def b_simple_interval(parts, level: float = LEVEL) -> tuple[float | None, float | None]:
    """Fieller's interval (Fieller 1954) for B_simple, the ratio of the mean tr(Sigma) and |G|^2 estimates over the
    measurement groups `parts` [(|G|^2, tr(Sigma)), ...]: the B for which mean tr - B mean |G|^2 is within the
    t-quantile (n - 1 degrees of freedom) of zero, from the groups' variances and covariance. Where the |G|^2
    mean is not resolved from zero (or lies below it) the set is unbounded: (0, inf). The lower end is at least 0
    (a noise scale is not negative). (None, None) with fewer than MIN_GROUPS groups, a group that is not a
    number, or a set that lies below zero whole (tr(Sigma) resolved as negative: no noise scale to bound)."""
    import numpy as np
    from scipy.special import stdtrit

    g2, trace = np.asarray(parts, dtype=float).reshape(-1, 2).T
    n = len(g2)
    if n < MIN_GROUPS or not (np.isfinite(g2).all() and np.isfinite(trace).all()):
        return None, None
    q = float(stdtrit(n - 1, 0.5 + level / 2)) ** 2
    cov = np.cov(g2, trace, ddof=1) / n  # of the two means
    gm, tm = g2.mean(), trace.mean()
    a = gm ** 2 - q * cov[0, 0]
    b = -2 * (gm * tm - q * cov[0, 1])
    c = tm ** 2 - q * cov[1, 1]
    disc = b * b - 4 * a * c
    if a <= 0 or disc < 0 or gm <= 0:
        return 0.0, math.inf
    root = math.sqrt(disc)
    lo, hi = (-b - root) / (2 * a), (-b + root) / (2 * a)
    return (None, None) if hi <= 0 else (max(0.0, lo), hi)


@dataclass
class NoiseScale:
    """Sums of the per-measurement estimates; `b_simple` is their ratio."""

    g2_sum: float = 0.0
    trace_sum: float = 0.0
    count: int = 0
    b_small: float = 0.0
    b_big: float = 0.0

    def add(self, g2_small: float, g2_big: float, b_small: float, b_big: float) -> tuple[float, float]:
        """Add one measurement; returns its (|G|^2, tr(Sigma)) estimates."""
        g2, trace = estimate(g2_small, g2_big, b_small, b_big)
        self.g2_sum += g2
        self.trace_sum += trace
        self.count += 1
        self.b_small, self.b_big = b_small, b_big
        return g2, trace

    @property
    def b_simple(self) -> float | None:
        return self.trace_sum / self.g2_sum if self.count and self.g2_sum > 0 else None

    def as_dict(self) -> dict:
        return {**asdict(self), "b_simple": self.b_simple,
                "g2": self.g2_sum / self.count if self.count else None,
                "trace": self.trace_sum / self.count if self.count else None}


@dataclass
class SmoothedNoiseScale:
    """Exponential moving averages of the |G|^2 and tr(Sigma) estimates (McCandlish et al. smooth both before
    taking the ratio), bias-corrected as Adam's moments are: B_simple near the current point of training, where
    the whole-run ratio mixes early training (large |G|^2) with late."""

    decay: float = 0.9  # per measurement: about the last 10 measured steps
    g2: float = 0.0
    trace: float = 0.0
    weight: float = 0.0  # 1 - decay^count: the bias correction

    def add(self, g2_small: float, g2_big: float, b_small: float, b_big: float) -> None:
        g2, trace = estimate(g2_small, g2_big, b_small, b_big)
        self.g2 = self.decay * self.g2 + (1 - self.decay) * g2
        self.trace = self.decay * self.trace + (1 - self.decay) * trace
        self.weight = self.decay * self.weight + (1 - self.decay)

    @property
    def b_simple(self) -> float | None:
        return self.trace / self.g2 if self.weight > 0 and self.g2 > 0 else None  # the correction cancels


def measure(model, batches, loss_fn, k: int, groups: int, progress=None, parts: list | None = None) -> NoiseScale:
    """Measure on `groups` groups of `k` micro-batches: each micro-batch gradient is the small batch, their mean
    the big one. `batches` yields (inputs, targets) of equal size; `loss_fn(outputs, targets)` is a mean loss.
    `parts`, where given, receives each group's (|G|^2, tr(Sigma)) estimates (for `b_simple_interval`)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    out = NoiseScale()
    it = iter(batches)
    for _ in range(groups):
        total, small_sq, size = None, 0.0, None
        for _ in range(k):
            x, y = next(it)
            size = len(x)
            model.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            flat = torch.cat([p.grad.detach().double().flatten() for p in params])
            small_sq += float(flat @ flat)
            total = flat if total is None else total + flat
        mean = total / k
        pair = out.add(small_sq / k, float(mean @ mean), size, size * k)
        if parts is not None:
            parts.append(pair)
        if progress is not None:
            progress.update(1)
    return out


MICRO_BATCH, K, GROUPS = 32, 8, 16  # `lbscale gns`'s measurement: groups of k micro-batch gradients


def measure_at(model, data, task, label_key: str, prepare, micro_batch: int, k: int, groups: int, seed: int,
               step: int | None, source: str, device=None, progress=None, loader_options: dict | None = None) -> dict:
    """gns.json's record of `model`'s weights as they are, in train mode (BatchNorm on batch statistics): `measure`
    on micro-batches of `data`'s train split (one process's shuffle of it by `seed`, whole batches, epoch after
    epoch; `prepare(batch)` gives (inputs, targets); `loader_options`: a JPEG file's decoder), with `task`'s loss
    and Fieller's interval over the groups. torch's RNG (dropout) is seeded by `seed` for it and restored after
    it, on the CPU and on `device`."""
    import torch

    from lbscale.data.loader import ShardedLoader

    loader = ShardedLoader(data, "train", 0, 1, micro_batch, seed, drop_last=True, label_key=label_key,
                           **(loader_options or {}))

    def batches():
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            for b in loader:
                yield prepare(b)
            epoch += 1

    device = torch.device(device or "cpu")
    forked = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    parts: list = []
    with torch.random.fork_rng(devices=forked):
        torch.manual_seed(seed)
        model.train()
        result = measure(model, batches(), lambda out, y: task.loss(out, y), k, groups, progress, parts)
    lo, hi = b_simple_interval(parts, LEVEL)
    return {"source": source, "micro_batch": micro_batch, "k": k, "groups": groups, "seed": seed, "step": step,
            **result.as_dict(), "b_simple_lo": lo,
            "b_simple_hi": hi if hi is None or math.isfinite(hi) else None,  # an open end: null in JSON
            "interval": None if lo is None else {"level": LEVEL, "method": "Fieller's interval over the groups "
                                                 f"(t, {groups - 1} degrees of freedom)"}}


def measure_trial(trial_dir: Path, data: str | None = None, micro_batch: int = MICRO_BATCH, k: int = K,
                  groups: int = GROUPS, seed: int = 0) -> dict:
    """The noise scale of a trial's checkpointed weights on the train split; written to the trial's gns.json."""
    import torch

    from lbscale.data.formats import open_prepared
    from lbscale.data.transforms import Normalize
    from lbscale.errors import LbscaleError
    from lbscale.progress import bar
    from lbscale.results import CONFIG, read_json, write_json
    from lbscale.task import get_task
    from lbscale.train.models import load_trial_model

    trial_dir = Path(trial_dir)
    if micro_batch < 1 or k < 2 or groups < 1:
        raise LbscaleError("--micro-batch >= 1, --k >= 2 and --groups >= 1 are needed")
    config = read_json(trial_dir / CONFIG)
    if not config or "config" not in config:
        raise LbscaleError(f"{trial_dir}: not a trial directory with a checkpoint (config.json, checkpoint/model.pt)")
    cfg = config["config"]
    f = open_prepared(data or cfg["data"])
    task = get_task(f.task)
    num_classes = config.get("num_classes", f.num_classes)
    if micro_batch * k > f.size("train"):
        raise LbscaleError(f"--micro-batch {micro_batch} x --k {k} is more than the train split ({f.size('train')})")
    model, _, saved = load_trial_model(trial_dir, len(f.band_names), num_classes)
    normalize = Normalize(f.mean, f.std, torch.device("cpu"))
    progress = bar(total=groups, desc="gradient noise scale", unit="group")
    record = measure_at(model, f, task, cfg.get("label_set", "labels"),
                        lambda b: (normalize(b.images), task.targets(b.labels)), micro_batch, k, groups, seed,
                        saved.get("step"), "checkpoint", progress=progress)
    progress.close()
    write_json(trial_dir / GNS_FILE, record)
    return record


class DDPNoiseScale:
    """The noise scale measured during data-parallel training at no extra pass: a DDP communication hook takes
    each bucket's squared norm before the all-reduce (the rank's own gradient: the small batch, local batch x
    accumulation) and after it (the all-reduced gradient: the global batch). The hook is DDP's default
    all-reduce otherwise, so the training itself is unchanged. Under fp16 loss scaling the squared norms carry
    scale^2, which `collect` divides out (summed unscaled, each measurement would weigh scale^2); a step whose
    gradient is not finite, which the grad scaler skips, is not measured (`skipped` counts them)."""

    def __init__(self, world_size: int, b_small: int, b_big: int, device):
        import torch

        self.world_size, self.b_small, self.b_big = world_size, b_small, b_big
        self.active = False
        self.small = torch.zeros((), dtype=torch.float64, device=device)
        self.big = torch.zeros((), dtype=torch.float64, device=device)
        self.total = NoiseScale()  # the whole run (checkpointed)
        self.epoch = NoiseScale()
        self.smoothed = SmoothedNoiseScale()  # near the current step: step evaluations record it
        self.skipped = 0  # measured steps left out: a gradient that was not finite

    def hook(self, state, bucket):
        import torch.distributed as dist

        buf = bucket.buffer()
        if self.active:
            self.small += buf.double().square().sum()
        buf.div_(self.world_size)
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f):
            out = f.value()[0]
            if self.active:
                self.big += out.double().square().sum()
            return out

        return fut.then(done)

    def collect(self, loss_scale: float = 1.0) -> None:
        """After a measured step whose loss was multiplied by `loss_scale`: average |G_small|^2 over ranks and
        add one unscaled estimate, unless a norm is not finite (a host sync)."""
        import math

        import torch.distributed as dist

        dist.all_reduce(self.small)
        small = float(self.small) / self.world_size / loss_scale ** 2
        big = float(self.big) / loss_scale ** 2
        if math.isfinite(small) and math.isfinite(big):
            for acc in (self.total, self.epoch, self.smoothed):
                acc.add(small, big, self.b_small, self.b_big)
        else:
            self.skipped += 1
        self.small.zero_()
        self.big.zero_()
        self.active = False

    def end_epoch(self) -> dict:
        out = {"gns_b_simple": self.epoch.b_simple, "gns_measurements": self.epoch.count}
        self.epoch = NoiseScale()
        return out

    def now(self) -> dict:
        """A step evaluation's fields: the smoothed B_simple near this step."""
        return {"gns_b_simple": self.smoothed.b_simple} if self.smoothed.weight > 0 else {}

    def state_dict(self) -> dict:
        return {"total": asdict(self.total), "epoch": asdict(self.epoch), "skipped": self.skipped,
                "smoothed": asdict(self.smoothed)}

    def load_state_dict(self, state: dict) -> None:
        self.total, self.epoch = NoiseScale(**state["total"]), NoiseScale(**state["epoch"])
        self.skipped = state.get("skipped", 0)
        self.smoothed = SmoothedNoiseScale(**state["smoothed"]) if state.get("smoothed") else SmoothedNoiseScale()
