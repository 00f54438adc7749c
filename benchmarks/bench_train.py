"""lbscale training img/s vs a bare torch loop: same timm model, batch, optimizer, channels_last, one run.

SAT-4-sized input (28x28, 4 bands), ResNet-50, local batch 128, LAMB, one process on the CPU. The bare loop
trains on one in-memory tensor batch (no data pipeline at all); lbscale reads, normalises and augments every
batch and keeps its metrics, checks and timing. Both leave out their first 3 steps; best of 2 alternating
runs each."""

import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import report
from lbscale.config import load_config
from lbscale.data.prepare import prepare
from lbscale.results import read_json
from lbscale.train.models import build_model
from lbscale.train.optim import OptimizerOptions, build_optimizer
from lbscale.train.trial import run_trial

MODEL, BATCH, SIDE, BANDS, CLASSES, WARMUP = "resnet50", 128, 28, 4, 4, 3


def bare_loop(steps: int) -> float:
    torch.manual_seed(0)
    model = build_model(MODEL, BANDS, CLASSES, channels_last=True)
    opt = build_optimizer("lamb", model, 0.01, OptimizerOptions(weight_decay=0.01))
    x = torch.randn(BATCH, BANDS, SIDE, SIDE).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, CLASSES, (BATCH,))
    model.train()
    for i in range(WARMUP + steps):
        if i == WARMUP:
            t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return steps * BATCH / (time.perf_counter() - t0)


def lbscale_run(data: Path, out: Path) -> float:
    cfg = load_config(None, data=str(data), out=str(out), model=MODEL, global_batch=BATCH, optimizer="lamb",
                      base_lr=0.01, lr_scaling="none", weight_decay=0.01, epochs=1, timing_warmup_steps=WARMUP,
                      check_every=10)
    assert run_trial(cfg) == 0
    return read_json(out / "summary.json")["images_per_second"]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "sat4-like.h5"
        prepare("synthetic", None, data, count=4000, bands=BANDS, size=SIDE, classes=CLASSES, val_fraction=0.02,
                test_fraction=0.0)
        steps = 3920 // BATCH - WARMUP
        bare, ours = [], []
        for i in range(2):
            bare.append(bare_loop(steps))
            ours.append(lbscale_run(data, Path(tmp) / f"run{i}"))
        report(f"bare torch loop ({MODEL}, {SIDE}px x{BANDS}, batch {BATCH}, lamb), img/s", max(bare), "img/s")
        report("lbscale train (loader + normalise + augment + metrics), img/s", max(ours), "img/s")
        report("RATIO lbscale train / bare loop", max(ours) / max(bare), "x", "target >= 0.95")


if __name__ == "__main__":
    main()
