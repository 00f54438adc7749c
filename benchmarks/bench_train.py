"""lbscale training img/s vs a bare torch loop: same timm model, batch, optimizer, channels_last, one run.

SAT-4-sized input (28x28, 4 bands), ResNet-50, local batch 128, LAMB at a constant LR, fp32, one process on
the CPU (`compare(device="cuda")`: the same on a GPU, a figure of the GPU test set). Like for like: the bare
loop trains on the same prepared train split, loaded into memory once, and does per batch what lbscale's step
does (uint8 -> float, normalise by the file's band statistics, the same flip/rot90 augmentation, the same
optimizer and options); lbscale adds its loader, background reader, metrics, checks and timing. Both leave out
their first 3 steps; three alternating runs each, the median ratio of the pairs."""

import tempfile
import time
from pathlib import Path
from statistics import median

import torch
import torch.nn.functional as F

from benchmarks.common import report
from lbscale.train.config import load_config
from lbscale.data.formats import open_prepared
from lbscale.data.prepare import prepare
from lbscale.data.transforms import Normalize, random_flip_rot90
from lbscale.results import read_json, read_jsonl
from lbscale.train.models import build_model
from lbscale.train.optim import OptimizerOptions, build_optimizer
from lbscale.train.entry import run_trial

MODEL, BATCH, SIDE, BANDS, CLASSES, WARMUP = "resnet50", 128, 28, 4, 4, 3


def bare_loop(data: Path, steps: int, device: str = "cpu") -> float:
    torch.manual_seed(0)
    with open_prepared(data) as f:
        images, labels = torch.from_numpy(f.images("train")[...]), torch.from_numpy(f.labels("train")[...])
        normalize = Normalize(f.mean, f.std, device)
    if device != "cpu":
        images, labels = images.pin_memory(), labels.pin_memory()
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    model = build_model(MODEL, BANDS, CLASSES, channels_last=True).to(device)
    opt = build_optimizer("lamb", model, 0.01, OptimizerOptions(weight_decay=0.01))
    rng = torch.Generator().manual_seed(0)
    model.train()
    for i in range(WARMUP + steps):
        if i == WARMUP:
            sync()
            t0 = time.perf_counter()
        x = random_flip_rot90(normalize(images[i * BATCH:(i + 1) * BATCH]), rng)
        x = x.contiguous(memory_format=torch.channels_last)
        y = labels[i * BATCH:(i + 1) * BATCH].to(device, non_blocking=True).long()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync()
    return steps * BATCH / (time.perf_counter() - t0)


def lbscale_run(data: Path, out: Path, device: str = "cpu") -> tuple[float, float]:
    """img/s, and the share of the epoch spent waiting for data (the step split's data-wait part)."""
    cfg = load_config(None, data=str(data), out=str(out), model=MODEL, global_batch=BATCH, optimizer="lamb",
                      base_lr=0.01, lr_scaling="none", weight_decay=0.01, epochs=1, timing_warmup_steps=WARMUP,
                      check_every=10, schedule="constant", warmup_epochs="0", device=device)
    assert run_trial(cfg) == 0
    epoch = read_jsonl(out / "metrics.jsonl")[-1]
    return read_json(out / "summary.json")["images_per_second"], epoch["data_seconds"] / epoch["train_seconds"]


def compare(device: str = "cpu", pairs: int = 3) -> dict:
    """Median img/s of the bare loop and of lbscale train, the median ratio of the pairs (each pair's order
    alternates), every ratio, and the smallest data-wait share of lbscale's runs."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "sat4-like.h5"
        prepare("synthetic", None, data, count=8000, bands=BANDS, size=SIDE, classes=CLASSES, val_fraction=0.02,
                test_fraction=0.0)
        steps = 7840 // BATCH - WARMUP
        bare, ours, wait = [], [], []
        for i in range(pairs):
            pair = [None, None]
            for side in ((0, 1) if i % 2 == 0 else (1, 0)):  # alternate which runs first
                if side == 0:
                    pair[0] = bare_loop(data, steps, device)
                else:
                    pair[1], share = lbscale_run(data, Path(tmp) / f"run{i}", device)
                    wait.append(share)
            bare.append(pair[0])
            ours.append(pair[1])
    ratios = sorted(o / b for o, b in zip(ours, bare))
    return {"bare": median(bare), "lbscale": median(ours), "ratio": median(ratios), "ratios": ratios,
            "data_wait": min(wait)}


def main() -> None:
    r = compare()
    report(f"bare torch loop ({MODEL}, {SIDE}px x{BANDS}, batch {BATCH}, lamb), img/s", r["bare"], "img/s")
    report("lbscale train (loader + normalise + augment + metrics), img/s", r["lbscale"], "img/s")
    report("RATIO lbscale train / bare loop (median of 3 pairs)", r["ratio"], "x",
           f"target >= 0.95; pairs {', '.join(f'{x:.2f}' for x in r['ratios'])}")
    report("data wait, share of the epoch (background reader)", 100 * r["data_wait"], "%", "target < 2%")


if __name__ == "__main__":
    main()
