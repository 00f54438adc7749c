"""Optimizer registry: one `OptimInfo` per optimizer (name, help, class, the options it reads).

The CLI's choices and help, config validation (an option the optimizer does not read is refused) and the one
builder all read this registry.
Parameter groups carry two explicit choices: `weight_decay` and `trust_ratio`. BatchNorm and bias parameters
get neither, weights get both, as in the MLPerf ResNet-50 LARS reference. The trust ratio does not depend on
the weight decay: LARS with `--weight-decay 0` still adapts every weight tensor.
LARS and LAMB are lbscale's own multi-tensor implementations (train/adaptive.py), which read `trust_ratio`.
Importing this module costs no torch (the sweep planner validates configs with it).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass
class OptimizerOptions:
    """The options an optimizer may read, named as its constructor names them."""

    momentum: float = 0.9
    weight_decay: float = 5e-5  # every optimizer, through the parameter groups
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-6
    trust_coeff: float = 0.001
    nesterov: bool = False  # LARS with Nesterov momentum (--lars-nesterov)
    max_grad_norm: float | None = None  # LAMB: global gradient clipping (NVIDIA's variant); None as published
    decay_on: str = "all"  # which weights decay: all (every weight tensor) or conv (convolution kernels only)


def options_of(cfg) -> OptimizerOptions:
    """The optimizer options of a trial config (`TrialConfig`)."""
    return OptimizerOptions(momentum=cfg.momentum, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas), eps=cfg.eps,
                            trust_coeff=cfg.trust_coeff, nesterov=cfg.lars_nesterov, max_grad_norm=cfg.max_grad_norm,
                            decay_on=cfg.weight_decay_on)


# The trial option (config field) behind each constructor argument a registry entry can read.
OPTION_FIELDS = {"momentum": "momentum", "betas": "betas", "eps": "eps", "trust_coeff": "trust_coeff",
                 "nesterov": "lars_nesterov", "max_grad_norm": "max_grad_norm"}


@dataclass(frozen=True)
class OptimInfo:
    """One optimizer: its class (a lazy path, so importing the registry costs no torch), the options it reads
    (constructor arguments, from `OPTION_FIELDS`) and fixed arguments. `build_optimizer` builds every entry
    from this alone, and config validation refuses an option the entry does not read."""

    name: str
    help: str
    cls: str  # "module.Class"
    reads: tuple = ()
    defaults: dict = field(default_factory=dict)  # fixed constructor arguments
    trust_ratio: bool = False  # layer-wise adaptive: honours the parameter groups' trust_ratio

    @property
    def has_momentum(self) -> bool:
        return "momentum" in self.reads

    @property
    def has_betas(self) -> bool:
        return "betas" in self.reads

    @property
    def lr_rule(self) -> str:
        """How its LR scales with the batch (lbscale branch's --rule auto): square root for Adam-like optimizers
        (Malladi et al. 2022; Merrill et al. 2025), linear for SGD-like ones (Goyal et al. 2017)."""
        return "sqrt" if self.has_betas else "linear"

    def option_fields(self) -> list[str]:
        """The trial options this optimizer reads (config field names)."""
        return [OPTION_FIELDS[k] for k in self.reads]


OPTIMIZERS: dict[str, OptimInfo] = {o.name: o for o in (
    OptimInfo("sgd", "SGD with momentum", "torch.optim.SGD", reads=("momentum",)),
    OptimInfo("nesterov", "SGD with Nesterov momentum", "torch.optim.SGD", reads=("momentum",),
              defaults={"nesterov": True}),
    OptimInfo("lars", "LARS (You, Gitman & Ginsburg 2017): layer-wise trust ratio on SGD momentum",
              "lbscale.train.adaptive.Lars", reads=("momentum", "trust_coeff", "nesterov"),
              defaults={"eps": 1e-8}, trust_ratio=True),  # eps guards ||g|| + wd ||w||; not Adam's --eps
    OptimInfo("lamb", "LAMB (You et al. 2019): layer-wise trust ratio on Adam", "lbscale.train.adaptive.Lamb",
              reads=("betas", "eps", "max_grad_norm"), trust_ratio=True),
    OptimInfo("adamw", "AdamW (decoupled weight decay)", "torch.optim.AdamW", reads=("betas", "eps")),
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
    """The optimizer `name` over `model`, with the parameter groups of `param_groups`, built from its registry
    entry: the options it reads, its fixed arguments, nothing else."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    info = OPTIMIZERS[name]
    module, cls = info.cls.rsplit(".", 1)
    kwargs = {k: tuple(v) if k == "betas" else v for k, v in ((k, getattr(options, k)) for k in info.reads)}
    groups = param_groups(model, options.weight_decay, options.decay_on)
    return getattr(importlib.import_module(module), cls)(groups, lr=lr, **info.defaults, **kwargs)
