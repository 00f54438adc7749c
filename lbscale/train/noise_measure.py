"""The gradient noise scale measured on a network (the estimators' arithmetic is analysis/gns.py): on its weights as
they are (`measure`, `measure_at`: `lbscale gns` on a checkpoint and a trial's `--gns-at-target`) and during
data-parallel training at no extra pass (`DDPNoiseScale`, the DDP communication hook of `--gns-every`)."""

from __future__ import annotations

import math
from dataclasses import asdict

from lbscale.analysis.gns import LEVEL, NoiseScale, SmoothedNoiseScale, b_simple_interval


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
