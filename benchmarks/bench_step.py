"""The training step split on the CPU: forward+backward of ResNet-50 (SAT-4 size, 28 px x 4 bands, local
batch 64) against the optimizer step of lbscale's multi-tensor LAMB / LARS and timm's Lamb / Lars on the
same 161 parameter tensors and gradients. Optimizer steps alternate between implementations (best of 5
rounds of 10 steps each), so machine noise hits both alike. Ratios > 1: lbscale's step is faster."""

import time

import torch
import torch.nn.functional as F
from timm.optim import Lamb as TimmLamb
from timm.optim import Lars as TimmLars

from benchmarks.common import report
from lbscale.train.models import build_model
from lbscale.train.optim import OptimizerOptions, build_optimizer, param_groups

BATCH, SIDE, BANDS, CLASSES, STEPS, ROUNDS = 64, 28, 4, 4, 10, 5


def _timm(name, model):
    groups = [{**g, "always_adapt": g.pop("trust_ratio")} for g in param_groups(model, 5e-5)]
    if name == "lamb":
        return TimmLamb(groups, lr=0.01, betas=(0.9, 0.999), eps=1e-6)
    return TimmLars(groups, lr=0.1, momentum=0.9, trust_coeff=0.001, eps=1e-8)


def _time_steps(opt) -> float:
    t0 = time.perf_counter()
    for _ in range(STEPS):
        opt.step()
    return (time.perf_counter() - t0) / STEPS


def main():
    torch.manual_seed(0)
    model = build_model("resnet50", BANDS, CLASSES, channels_last=True)
    x = torch.randn(BATCH, BANDS, SIDE, SIDE).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, CLASSES, (BATCH,))
    fwd_bwd = float("inf")
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        F.cross_entropy(model(x), y).backward()
        fwd_bwd = min(fwd_bwd, time.perf_counter() - t0)
    report(f"forward+backward, ResNet-50 {SIDE}px x {BANDS}, batch {BATCH}", 1000 * fwd_bwd, "ms")
    for name in ("lamb", "lars"):
        ours = build_optimizer(name, model, 0.01, OptimizerOptions())
        theirs = _timm(name, model)
        best = {"lbscale": float("inf"), "timm": float("inf")}
        for _ in range(ROUNDS):
            best["lbscale"] = min(best["lbscale"], _time_steps(ours))
            best["timm"] = min(best["timm"], _time_steps(theirs))
        report(f"{name} step: lbscale (multi-tensor)", 1000 * best["lbscale"], "ms",
               f"{100 * best['lbscale'] / (fwd_bwd + best['lbscale']):.1f}% of a step")
        report(f"{name} step: timm", 1000 * best["timm"], "ms")
        report(f"{name} step: timm / lbscale", best["timm"] / best["lbscale"], "x", "target >= 1")
