"""Optimizer registry: one entry per optimizer; parameter groups keep BatchNorm and bias out of weight decay.

LARS and LAMB are timm's implementations. In both, a group with weight_decay = 0 also skips the trust
ratio (timm's `always_adapt=False`), so BatchNorm and bias parameters are excluded from the trust ratio and
from weight decay, as the MLPerf ResNet-50 LARS reference does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from timm.optim import Lamb, Lars
from timm.optim._param_groups import param_groups_weight_decay


@dataclass
class OptimizerOptions:
    momentum: float = 0.9
    weight_decay: float = 5e-5
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-6
    trust_coeff: float = 0.001
    nesterov: bool = False  # LARS with Nesterov momentum
    max_grad_norm: float | None = None  # LAMB: global gradient clipping (NVIDIA's variant); None as published


def _sgd(groups, lr, o: OptimizerOptions):
    return torch.optim.SGD(groups, lr=lr, momentum=o.momentum)


def _nesterov(groups, lr, o: OptimizerOptions):
    return torch.optim.SGD(groups, lr=lr, momentum=o.momentum, nesterov=True)


def _lars(groups, lr, o: OptimizerOptions):
    return Lars(groups, lr=lr, momentum=o.momentum, nesterov=o.nesterov, trust_coeff=o.trust_coeff, eps=1e-8)


def _lamb(groups, lr, o: OptimizerOptions):
    return Lamb(groups, lr=lr, betas=tuple(o.betas), eps=o.eps, max_grad_norm=o.max_grad_norm)


def _adamw(groups, lr, o: OptimizerOptions):
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(o.betas), eps=o.eps)


OPTIMIZERS: dict[str, Callable] = {
    "sgd": _sgd,
    "nesterov": _nesterov,
    "lars": _lars,
    "lamb": _lamb,
    "adamw": _adamw,
}


def build_optimizer(name: str, model: torch.nn.Module, lr: float, options: OptimizerOptions):
    """The optimizer `name` over `model`: weights decay, BatchNorm/bias parameters (ndim <= 1) do not."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    groups = param_groups_weight_decay(model, weight_decay=options.weight_decay)
    return OPTIMIZERS[name](groups, lr, options)
