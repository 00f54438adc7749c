"""Trial configuration: one dataclass, read from YAML and overridden by CLI options, validated with clear errors.

The CLI options of `lbscale train` are generated from the fields below (`global_batch` -> `--global-batch`),
so a YAML key and an option always mean the same thing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lbscale.errors import LbscaleError


def _f(default, help: str, **kw):
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrialConfig:
    data: str = _f(None, "Prepared dataset (HDF5 file or TFRecord directory).")
    out: str = _f(None, "Result directory of this trial.")
    model: str = _f("resnet50", "timm model name (resnet18/34/50/101/152 or any other).")
    global_batch: int = _f(256, "Global batch = local batch x world size x accumulation steps.")
    local_batch: int = _f(None, "Per-process batch (default: global / world size / accum steps).")
    accum_steps: int = _f(None, "Gradient accumulation steps (default: from --local-batch, else 1).")
    optimizer: str = _f("sgd", "sgd, nesterov, lars, lamb or adamw.")
    base_lr: float = _f(0.1, "LR at the reference batch.")
    ref_batch: int = _f(256, "Reference batch of the scaling rule.")
    lr_scaling: str = _f("linear", "Scaling rule: linear, sqrt or none.")
    warmup_epochs: str = _f("0", "Linear warm-up epochs, or 'auto' (scaled with global batch / warmup-ref-batch).")
    warmup_ref_batch: int = _f(8192, "With --warmup-epochs auto: the batch that gets warmup-ref-epochs.")
    warmup_ref_epochs: float = _f(5.0, "With --warmup-epochs auto: warm-up epochs at warmup-ref-batch.")
    warmup_start_lr: float = _f(0.0, "LR the warm-up starts from.")
    schedule: str = _f("poly", "After warm-up: poly, multistep, cosine or constant.")
    poly_power: float = _f(2.0, "Power of the poly schedule.")
    end_lr: float = _f(0.0, "Final LR of poly and cosine.")
    milestones: list = _f((), "multistep: milestone epochs, e.g. 30,60,80.", kind="floats")
    milestone_factors: list = _f((), "multistep: cumulative LR factors, e.g. 0.1,0.01,0.001 (default 0.1^i).",
                                 kind="floats")
    epochs: int = _f(10, "Training epochs.")
    seed: int = _f(0, "Seed of weights, data order and augmentation.")
    momentum: float = _f(0.9, "Momentum (sgd, nesterov, lars).")
    weight_decay: float = _f(5e-5, "Weight decay (not on BatchNorm and bias parameters).")
    betas: list = _f((0.9, 0.999), "Adam betas (lamb, adamw).", kind="floats")
    eps: float = _f(1e-6, "Adam epsilon (lamb, adamw).")
    trust_coeff: float = _f(0.001, "LARS trust coefficient.")
    lars_nesterov: bool = _f(False, "LARS with Nesterov momentum.")
    max_grad_norm: float = _f(None, "LAMB global gradient clipping (off as published).")
    label_smoothing: float = _f(0.0, "Label smoothing (multiclass).")
    label_set: str = _f("labels", "Label array to train on (e.g. labels_43 for BigEarthNet's 43 classes).")
    precision: str = _f("fp32", "fp32, bf16 or fp16 (autocast; a grad scaler for fp16).")
    compile: bool = _f(False, "torch.compile the model.")
    channels_last: bool = _f(True, "channels_last memory format.")
    augment: bool = _f(True, "Random flips and 90-degree rotations on the training device.")
    in_memory: bool = _f(False, "Load the splits into memory instead of reading chunks.")
    backend: str = _f(None, "nccl, gloo or mpi (default: nccl on GPU, gloo on CPU).")
    device: str = _f("auto", "auto, cpu or cuda.")
    target_metric: str = _f(None, "Metric for time-to-target, e.g. val_top1 or val_f1_micro.")
    target: float = _f(None, "Target value of --target-metric.")
    divergence_factor: float = _f(10.0, "Diverged when the loss stays above this factor of its initial value...")
    divergence_window: int = _f(20, "...for this many optimizer steps (or is not finite).")
    check_every: int = _f(10, "Optimizer steps between the cross-rank checks (loss, divergence, signals).")
    timing_warmup_steps: int = _f(3, "Optimizer steps per epoch left out of images/s.")
    preempt_after_steps: int = _f(None, "Act as if preempted after this many steps: checkpoint, exit 75.")
    resume: bool = _f(False, "Continue from the checkpoint in --out.")

    @property
    def warmup_auto(self) -> bool:
        return str(self.warmup_epochs) == "auto"


CHOICES = {
    "optimizer": ("sgd", "nesterov", "lars", "lamb", "adamw"),
    "lr_scaling": ("linear", "sqrt", "none"),
    "schedule": ("poly", "multistep", "cosine", "constant"),
    "precision": ("fp32", "bf16", "fp16"),
    "device": ("auto", "cpu", "cuda"),
    "backend": (None, "nccl", "gloo", "mpi"),
}
FIELDS = {f.name: f for f in dataclasses.fields(TrialConfig)}


def _coerce(name: str, value):
    f = FIELDS[name]
    if value is None:
        return None
    try:
        if f.metadata.get("kind") == "floats":
            items = value.split(",") if isinstance(value, str) else list(value)
            return tuple(float(v) for v in items if str(v).strip() != "")
        if f.type == "bool":
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("true", "1", "yes")
            return bool(value)
        if f.type == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if f.type == "float":
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        kind = f.metadata.get("kind", f.type)
        raise LbscaleError(f"--{name.replace('_', '-')}: {value!r} is not a valid {kind}") from None


def read_yaml_mapping(path: Path, what: str) -> dict:
    """A YAML file that must hold a mapping; every problem is one LbscaleError line naming the file."""
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise LbscaleError(f"{path}: no such file") from None
    except yaml.YAMLError as e:
        raise LbscaleError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise LbscaleError(f"{path}: expected {what}")
    return raw


def load_config(path: str | Path | None = None, **overrides) -> TrialConfig:
    """Defaults <- YAML file <- overrides (None means not given); validated."""
    values = {}
    if path is not None:
        path = Path(path)
        raw = read_yaml_mapping(path, "a mapping of trial options")
        for key, value in raw.items():
            name = str(key).replace("-", "_")
            if name not in FIELDS:
                raise LbscaleError(f"{path}: unknown key {key!r}")
            values[name] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    cfg = TrialConfig(**{k: _coerce(k, v) for k, v in values.items()})
    validate(cfg)
    return cfg


def validate(cfg: TrialConfig) -> None:
    """Everything checkable without the data: clear errors before any work."""
    if not cfg.data:
        raise LbscaleError("--data is required")
    if not cfg.out:
        raise LbscaleError("--out is required")
    for name, allowed in CHOICES.items():
        if getattr(cfg, name) not in allowed:
            shown = ", ".join(a for a in allowed if a)
            raise LbscaleError(f"--{name.replace('_', '-')}: {getattr(cfg, name)!r} is not one of {shown}")
    positive = ["global_batch", "ref_batch", "epochs", "check_every", "warmup_ref_batch"]
    positive += [n for n in ("local_batch", "accum_steps") if getattr(cfg, n) is not None]
    for name in positive:
        if getattr(cfg, name) < 1:
            raise LbscaleError(f"--{name.replace('_', '-')} must be >= 1")
    if cfg.base_lr <= 0:
        raise LbscaleError("--base-lr must be > 0")
    if not cfg.warmup_auto:
        try:
            if float(cfg.warmup_epochs) < 0:
                raise ValueError
        except ValueError:
            raise LbscaleError(f"--warmup-epochs: {cfg.warmup_epochs!r} is not a number >= 0 or 'auto'") from None
    if cfg.milestone_factors and len(cfg.milestone_factors) != len(cfg.milestones):
        raise LbscaleError("--milestone-factors needs one factor per milestone")
    if (cfg.target is None) != (cfg.target_metric is None):
        raise LbscaleError("--target and --target-metric go together")
    if not 0 <= cfg.label_smoothing < 1:
        raise LbscaleError("--label-smoothing must be in [0, 1)")
    if len(cfg.betas) != 2:
        raise LbscaleError("--betas takes two values, e.g. 0.9,0.999")


def to_dict(cfg: TrialConfig) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}


# --- sweep specs ---------------------------------------------------------------------------------------
SWEEP_KEYS = {"name", "data", "model", "epochs", "trial", "grid", "system", "results"}
GRID_KEYS = {"batch", "gpus", "local_batch", "variants", "warmup", "seeds"}


@dataclass
class SweepSpec:
    """A grid of trials: fixed trial options plus batch x GPUs x variant x warm-up x seed."""

    name: str
    trial: dict  # fixed TrialConfig options (data, model, epochs included)
    batch: object  # a range string like "8k..65k", a list, or one value
    gpus: object = None  # list of GPU (process) counts; or None with local_batch
    local_batch: int | None = None
    variants: dict = field(default_factory=dict)  # name -> TrialConfig options (optimizer, LR policy, ...)
    warmup: list | None = None  # warm-up variants (epochs or 'auto'); None: the trial option stands
    seeds: object = 1  # a count or a list
    system: str = "generic"
    results: str | None = None
    path: str = ""


def _check_trial_keys(options: dict, where: str) -> dict:
    out = {}
    for key, value in (options or {}).items():
        name = str(key).replace("-", "_")
        if name not in FIELDS or name in ("out", "resume", "preempt_after_steps"):
            raise LbscaleError(f"{where}: unknown trial option {key!r}")
        out[name] = value
    return out


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """Read and check a sweep YAML (keys: name, data, model, epochs, trial, grid, system, results)."""
    path = Path(path)
    raw = read_yaml_mapping(path, "a sweep spec mapping")
    unknown = sorted(set(raw) - SWEEP_KEYS)
    if unknown:
        raise LbscaleError(f"{path}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(SWEEP_KEYS))})")
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict):
        raise LbscaleError(f"{path}: grid must be a mapping")
    unknown = sorted(set(grid) - GRID_KEYS)
    if unknown:
        raise LbscaleError(f"{path}: unknown grid key {unknown[0]!r} (allowed: {', '.join(sorted(GRID_KEYS))})")
    if "batch" not in grid:
        raise LbscaleError(f"{path}: grid.batch is required")
    trial = _check_trial_keys(raw.get("trial"), f"{path}: trial")
    for key in ("data", "model", "epochs"):
        if key in raw:
            trial[key] = raw[key]
    variants = grid.get("variants") or {}
    if not isinstance(variants, dict):
        raise LbscaleError(f"{path}: grid.variants must map names to trial options")
    variants = {str(k): _check_trial_keys(v, f"{path}: variant {k}") for k, v in variants.items()}
    warmup = grid.get("warmup")
    return SweepSpec(name=str(raw.get("name") or path.stem), trial=trial, batch=grid["batch"], gpus=grid.get("gpus"),
                     local_batch=grid.get("local_batch"), variants=variants,
                     warmup=None if warmup is None else (warmup if isinstance(warmup, list) else [warmup]),
                     seeds=grid.get("seeds", 1), system=str(raw.get("system", "generic")), results=raw.get("results"),
                     path=str(path))
