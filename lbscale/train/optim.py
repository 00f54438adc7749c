"""Optimizer registry: one `OptimInfo` per optimizer (name, help, what it accepts, how to build it).

The CLI's choices and help, config validation and the trust-ratio handling all read this registry.
Parameter groups carry two explicit choices: `weight_decay` and `trust_ratio`. BatchNorm and bias parameters
get neither, weights get both, as in the MLPerf ResNet-50 LARS reference. The trust ratio does not depend on
the weight decay: LARS with `--weight-decay 0` still adapts every weight tensor.
LARS and LAMB are lbscale's own multi-tensor implementations (train/adaptive.py), which read `trust_ratio`.
Importing this module costs no torch (the sweep planner validates configs with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class OptimizerOptions:
    momentum: float = 0.9
    weight_decay: float = 5e-5
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-6
    trust_coeff: float = 0.001
    nesterov: bool = False  # LARS with Nesterov momentum
    max_grad_norm: float | None = None  # LAMB: global gradient clipping (NVIDIA's variant); None as published
    decay_on: str = "all"  # which weights decay: all (every weight tensor) or conv (convolution kernels only)


@dataclass(frozen=True)
class OptimInfo:
    """What the CLI, validation and the trial need to know about one optimizer."""

    name: str
    help: str
    build: Callable  # (param_groups, lr, OptimizerOptions) -> torch.optim.Optimizer
    has_momentum: bool = False  # reads --momentum
    has_betas: bool = False  # reads --betas / --eps
    trust_ratio: bool = False  # layer-wise adaptive: reads --trust-coeff (LARS) and the groups' trust_ratio


def _sgd(groups, lr, o: OptimizerOptions):
    import torch

    return torch.optim.SGD(groups, lr=lr, momentum=o.momentum)


def _nesterov(groups, lr, o: OptimizerOptions):
    import torch

    return torch.optim.SGD(groups, lr=lr, momentum=o.momentum, nesterov=True)


def _lars(groups, lr, o: OptimizerOptions):
    from lbscale.train.adaptive import Lars

    return Lars(groups, lr=lr, momentum=o.momentum, nesterov=o.nesterov, trust_coeff=o.trust_coeff, eps=1e-8)


def _lamb(groups, lr, o: OptimizerOptions):
    from lbscale.train.adaptive import Lamb

    return Lamb(groups, lr=lr, betas=tuple(o.betas), eps=o.eps, max_grad_norm=o.max_grad_norm)


def _adamw(groups, lr, o: OptimizerOptions):
    import torch

    return torch.optim.AdamW(groups, lr=lr, betas=tuple(o.betas), eps=o.eps)


OPTIMIZERS: dict[str, OptimInfo] = {o.name: o for o in (
    OptimInfo("sgd", "SGD with momentum", _sgd, has_momentum=True),
    OptimInfo("nesterov", "SGD with Nesterov momentum", _nesterov, has_momentum=True),
    OptimInfo("lars", "LARS (You, Gitman & Ginsburg 2017): layer-wise trust ratio on SGD momentum", _lars,
              has_momentum=True, trust_ratio=True),
    OptimInfo("lamb", "LAMB (You et al. 2019): layer-wise trust ratio on Adam", _lamb, has_betas=True,
              trust_ratio=True),
    OptimInfo("adamw", "AdamW (decoupled weight decay)", _adamw, has_betas=True),
)}


DECAY_ON = {"all": "every weight tensor (not BatchNorm, not biases)",
            "conv": "convolution kernels only (the BigEarthNet LARS study's L2 on the convolutional layers)"}


def param_groups(model, weight_decay: float, decay_on: str = "all") -> list[dict]:
    """BatchNorm and bias parameters (ndim <= 1): no decay, no trust ratio. Weights: the trust ratio, and weight
    decay where `decay_on` says (all weights, or convolution kernels only). Empty groups are dropped."""
    if decay_on not in DECAY_ON:
        raise ValueError(f"unknown decay_on {decay_on!r}; choose one of {', '.join(DECAY_ON)}")
    others, decayed, plain = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim <= 1 or name.endswith(".bias"):
            others.append(p)
        elif decay_on == "all" or p.ndim == 4:
            decayed.append(p)
        else:
            plain.append(p)
    groups = [{"params": others, "weight_decay": 0.0, "trust_ratio": False},
              {"params": decayed, "weight_decay": weight_decay, "trust_ratio": True},
              {"params": plain, "weight_decay": 0.0, "trust_ratio": True}]
    return [g for g in groups if g["params"]]


def build_optimizer(name: str, model, lr: float, options: OptimizerOptions):
    """The optimizer `name` over `model`, with the parameter groups of `param_groups`."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name].build(param_groups(model, options.weight_decay, options.decay_on), lr, options)
