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
from lbscale.task import TASKS, Task
from lbscale.train.models import MODELS
from lbscale.train.optim import DECAY_ON, OPTIMIZERS, OPTION_FIELDS
from lbscale.train.policy import SCALING_RULES, SCHEDULES
from lbscale.train.pruning import MODES as PRUNE_MODES

LAST_BATCH = {"drop": "left out (each rank trains whole batches only)",
              "keep": "trained, as Keras' fit counts an epoch: each rank's N // ranks samples in "
                      "ceil(N // ranks / local batch) micro-batches (a one-sample last batch, which BatchNorm "
                      "cannot train on, left out)"}
PRECISIONS = {"fp32": "float32", "bf16": "bfloat16 autocast", "fp16": "float16 autocast and a grad scaler"}
DEVICES = {"auto": "a GPU where one is visible, else the CPU", "cpu": "the CPU", "cuda": "a GPU"}
BACKENDS = {"nccl": "GPUs", "gloo": "CPUs", "mpi": "a torch built with MPI"}
ENGINES = {"ddp": "PyTorch DistributedDataParallel (torchrun locally, srun under SLURM)",
           "horovod": "Horovod's DistributedOptimizer (horovodrun locally, srun and a Gloo rendezvous under SLURM; "
                      "make horovod)"}
AUGMENTATIONS = {  # the functions: lbscale.data.transforms.AUGMENT ("auto" resolves to one of them)
    "auto": "the one that fits the file's imagery (lbscale data info): flip-rot90 for remote sensing, crop-flip for "
            "photos and objects, none for digits and characters, flip-rot90 where unknown or not recorded; "
            "rrc-flip for JPEG data (ImageNet)",
    "flip-rot90": "random horizontal flip and multiple of 90 degrees (the remote-sensing studies)",
    "crop-flip": "4-pixel zero pad (the band mean), random crop back to size, random horizontal flip (CIFAR ResNets)",
    "rrc-flip": "random-resized crop (8-100% of the area, ratio 3/4-4/3) and horizontal flip (ImageNet; done at "
                "decode time for JPEG data)",
    "none": "the images as they are (what auto takes for digits and characters)",
}
# (option, value an older lbscale recorded, today's value with the same meaning): a sweep rerun over results of
# an older version compares trials through this (lbscale.sweep.launch.same_trial).
UPGRADED_VALUES = {("augmentation", "flip-rot90", "auto")}  # auto is flip-rot90 for pixel data, the only kind then
COMPILE_MODES = {
    "auto": "reduce-overhead on a GPU (CUDA graphs: fastest measured at SAT-4 size), default on the CPU",
    "default": "inductor kernels",
    "reduce-overhead": "inductor kernels replayed as CUDA graphs",
    "max-autotune": "autotuned kernels and CUDA graphs (long compile)",
    "max-autotune-no-cudagraphs": "autotuned kernels without CUDA graphs",
}


def _f(default, help: str, **kw):
    return field(default=default, metadata={"help": help, **kw})


def _choice(default, help: str, registry: dict):
    """A field whose values are a registry's names; the CLI shows them and validation checks them."""
    return _f(default, f"{help} ({', '.join(registry)})", choices=registry)


@dataclass
class TrialConfig:
    data: str = _f(None, "Prepared dataset (HDF5 file or TFRecord directory).")
    out: str = _f(None, "Result directory of this trial.")
    model: str = _f("resnet50", "timm model name (resnet18/34/50/101/152, test_resnet or any other), or one of "
                                f"lbscale's for small images ({', '.join(MODELS)}).")
    global_batch: int = _f(256, "Global batch = local batch x world size x accumulation steps.")
    local_batch: int = _f(None, "Per-process batch (default: global / world size / accum steps).")
    accum_steps: int = _f(None, "Gradient accumulation steps (default: from --local-batch, else 1).")
    optimizer: str = _choice("sgd", "Optimizer.", OPTIMIZERS)
    base_lr: float = _f(0.1, "LR at the reference batch.")
    ref_batch: int = _f(256, "Reference batch of the scaling rule.")
    lr_scaling: str = _choice("linear", "LR scaling rule.", SCALING_RULES)
    warmup_epochs: str = _f("0", "Linear warm-up epochs, or 'auto' (scaled with global batch / warmup-ref-batch).")
    warmup_ref_batch: int = _f(8192, "With --warmup-epochs auto: the batch that gets warmup-ref-epochs.")
    warmup_ref_epochs: float = _f(5.0, "With --warmup-epochs auto: warm-up epochs at warmup-ref-batch.")
    warmup_start_lr: float = _f(0.0, "LR the warm-up starts from.")
    schedule: str = _choice("poly", "LR schedule after warm-up.", SCHEDULES)
    poly_power: float = _f(2.0, "Power of the poly schedule.")
    end_lr: float = _f(0.0, "Final LR of poly and cosine.")
    milestones: list = _f((), "multistep: milestone epochs, e.g. 30,60,80.", kind="floats")
    milestone_factors: list = _f((), "multistep: cumulative LR factors, e.g. 0.1,0.01,0.001 (default 0.1^i).",
                                 kind="floats")
    epochs: int = _f(10, "Training epochs.")
    last_batch: str = _choice("drop", "The epoch's last partial batch.", LAST_BATCH)
    seed: int = _f(0, "Seed of weights, data order and augmentation.")
    momentum: float = _f(0.9, "Momentum (sgd, nesterov, lars).")
    weight_decay: float = _f(5e-5, "Weight decay (not on BatchNorm and bias parameters).")
    weight_decay_on: str = _choice("all", "Weights that decay.", DECAY_ON)
    drop_rate: float = _f(0.0, "Dropout before the classifier (timm's drop_rate).")
    betas: list = _f((0.9, 0.999), "Adam betas (lamb, adamw).", kind="floats")
    eps: float = _f(1e-6, "Adam epsilon (lamb, adamw).")
    trust_coeff: float = _f(0.001, "LARS trust coefficient.")
    lars_nesterov: bool = _f(False, "LARS with Nesterov momentum.")
    max_grad_norm: float = _f(None, "LAMB global gradient clipping (off as published).")
    label_smoothing: float = _f(0.0, "Label smoothing (multiclass).")
    label_set: str = _f("labels", "Label array to train on (e.g. labels_43 for BigEarthNet's 43 classes).")
    precision: str = _choice("fp32", "Precision.", PRECISIONS)
    compile: bool = _f(False, "torch.compile the model (evaluation runs it eagerly under CUDA graphs).")
    compile_mode: str = _choice("auto", "torch.compile mode.", COMPILE_MODES)
    channels_last: bool = _f(True, "channels_last memory format.")
    augment: bool = _f(True, "Augment training batches on the training device (--augmentation).")
    augmentation: str = _choice("auto", "Training augmentation (auto: the one that fits the data).", AUGMENTATIONS)
    crop_size: int = _f(None, "JPEG data: side of the training crop and the evaluation centre crop (default 224).")
    decode_workers: int = _f(None, "JPEG data on the CPU: decoder processes per rank (default: the rank's CPUs; 0: "
                                   "decode in the loader thread).")
    in_memory: bool = _f(False, "Load the splits into memory instead of reading chunks.")
    backend: str = _choice(None, "Process-group backend (default: nccl on GPU, gloo on CPU).", BACKENDS)
    device: str = _choice("auto", "Training device.", DEVICES)
    engine: str = _choice("ddp", "Data-parallel engine (horovod: ranks started by horovodrun, or by a sweep).", ENGINES)
    eval_split: str = _choice("val", "Split evaluated after every epoch (its metrics: val_* or test_*).", {
        "val": "the validation split; the test split, where the file has one, is evaluated once at the end",
        "test": "the test split, as the papers report it (train on all of train with `prepare --val-fraction 0`)"})
    target_metric: str = _f(None, "Metric for time-to-target, e.g. val_top1, test_top1 or val_f1_micro.")
    target: object = _f(None, "Target value of --target-metric, or several (0.90,0.95,0.97: steps to each; "
                              "--stop-at-target ends at the hardest).", kind="targets")
    eval_every: int = _f(None, "Also evaluate every N optimizer steps (step records in metrics.jsonl; steps to "
                               "target at step resolution).")
    eval_every_samples: int = _f(None, "Or: evaluate whenever this many more training samples have been seen (the "
                                       "same cost relative to training, and the same resolution in samples, at "
                                       "every batch).")
    eval_spacing: float = _f(None, "Or: evaluate at optimizer steps spaced geometrically, each at most this fraction "
                                   "of the steps after the previous one (0.05: steps to target within 5% at every "
                                   "batch, about 14 evaluations per doubling of the steps; one step apart below 1/x).")
    eval_first: int = _f(None, "With --eval-spacing: the first evaluation's optimizer step (default 1).")
    eval_subset: int = _f(None, "Step evaluations on this many samples of the evaluation split (the same fixed, "
                                "seeded subset every time; the epoch evaluations stay whole; one not smaller than "
                                "the split takes all of it, as the outcome line says).")
    eval_batch: int = _f(None, "Evaluation batch per process (default: the local batch; evaluation keeps no "
                               "activations, so a larger one is cheap).")
    stop_at_target: bool = _f(False, "End the trial at the first evaluation that reaches --target (status completed, "
                                     "stopped: target).")
    prune: str = _choice("none", "Stop hopeless trials by successive halving against the trials of --prune-group.",
                         PRUNE_MODES)
    prune_min_steps: int = _f(None, "First rung, in optimizer steps (rungs at r, r*eta, r*eta^2, ...).")
    prune_min_samples: int = _f(None, "Or: first rung, in training samples (rungs where r, r*eta, r*eta^2, ... samples "
                                      "have been trained: the same training at every batch).")
    prune_eta: int = _f(3, "Successive halving's reduction factor: the top 1/eta of a rung goes on.")
    prune_metric: str = _f(None, "Metric compared at the rungs (default: --target-metric, else the primary metric).")
    prune_group: str = _f(None, "The trials compared with each other (required with --prune): siblings in the results "
                                "directory with this group (a sweep sets one per batch and variant).")
    divergence_factor: float = _f(10.0, "Diverged when the loss stays above this factor of its initial value...")
    divergence_window: int = _f(20, "...for this many optimizer steps (or is not finite).")
    on_divergence: str = _choice("stop", "At divergence.", {
        "stop": "end the trial (status diverged, exit 0)",
        "continue": "train to the end, record where it diverged, end with status diverged and final metrics"})
    check_every: int = _f(10, "Optimizer steps between the cross-rank checks (loss, divergence, signals).")
    timing_warmup_steps: int = _f(3, "Optimizer steps per epoch left out of images/s.")
    gns_every: int = _f(None, "Measure the gradient noise scale every N optimizer steps (2+ processes; no extra pass).")
    gns_at_target: bool = _f(False, "Where the trial first reaches --target: measure the gradient noise scale at those "
                                    "weights as lbscale gns does (any number of processes; on a copy, outside "
                                    "training time; training unchanged) into gns.json.")
    preempt_after_steps: int = _f(None, "Act as if preempted after this many steps: checkpoint, exit 75.")
    keep_checkpoints: str = _f(None, "Keep checkpoints beside the resume checkpoint, under kept/, at these points: "
                                     "fractions of the run (5%,10%,25%,50%), epochs (2ep) or steps (300st); "
                                     "lbscale branch trains from them.")
    batch_schedule: str = _f(None, "Grow the global batch during the trial: BATCH@POINT,... (64@0,128@2ep,256@6400: "
                                   "points in epochs, optimizer steps (300st) or training samples; the first is "
                                   "--global-batch; BATCH@POINT:LR gives each batch its own peak LR, the first the "
                                   "trial's), or "
                                   "auto:FILE (double where a branch study's critical-batch.csv allows), by "
                                   "accumulation over its micro-batches; the LR is the schedule's at that place in "
                                   "the data times --batch-rule's factor.")
    batch_rule: str = _choice("linear", "LR factor of a --batch-schedule batch B over the first batch B0.", {
        "linear": "B / B0 (SGD-like optimizers; Smith et al. 2017)", "sqrt": "sqrt(B / B0) (Adam-like optimizers)",
        "none": "1: the LR schedule as it is"})
    branch_from: str = _f(None, "Start from this kept checkpoint of another trial (its kept/<label> folder): its "
                                "weights, optimizer state, RNG and place in the data, continued at this trial's "
                                "batch (same local batch, more accumulation) and LR; lbscale branch writes these.")
    branch_ema: float = _f(None, "With --branch-from: also the training loss's exponential moving average over "
                                 "the window, decaying by this factor per parent batch of samples (the same "
                                 "smoothing in samples at every batch), recorded at the window's end as "
                                 "train_loss_ema.")
    branch_reseed: int = _f(None, "With --branch-from: a repeat of the branch: the data order past the branch "
                                  "point (the rest of that epoch and every later one) and the augmentation drawn "
                                  "afresh with this seed (>= 1), the same at every batch of the same micro-batch; "
                                  "unset: the parent's own order (the k = 1 branch continues it bit for bit).")
    branch_samples: int = _f(None, "With --branch-from: train this many samples past the branch point, evaluate "
                                   "(the --eval-subset), end (status completed, stopped: window).")
    tensorboard: bool = _f(False, "Write TensorBoard scalars under <out>/tensorboard (rank 0; needs the tensorboard "
                                  "package).")
    resume: bool = _f(False, "Continue from the checkpoint in --out.")

    @property
    def warmup_auto(self) -> bool:
        return str(self.warmup_epochs) == "auto"

    @property
    def targets(self) -> tuple:
        """Every target of --target-metric, easiest first (a loss: the highest first); () without one."""
        if self.target is None:
            return ()
        values = sorted(self.target) if isinstance(self.target, (list, tuple)) else [float(self.target)]
        return tuple(values if not str(self.target_metric or "").endswith("loss") else values[::-1])


FIELDS = {f.name: f for f in dataclasses.fields(TrialConfig)}
CHOICES = {name: f.metadata["choices"] for name, f in FIELDS.items() if "choices" in f.metadata}
# a trial of a pruned search that must not be pruned (a confirmation, a branch, a timing run): halving off, and none
# of its group or rungs left behind in its trial.yaml
NO_PRUNING = {"prune": "none", "prune_group": None, "prune_min_steps": None, "prune_min_samples": None}


def _coerce(name: str, value):
    f = FIELDS[name]
    if value is None:
        return None
    try:
        if f.metadata.get("kind") == "targets":  # one number stays a number; several are kept sorted
            items = value.split(",") if isinstance(value, str) else (list(value) if isinstance(value, (list, tuple))
                                                                     else [value])
            out = sorted({float(v) for v in items if str(v).strip() != ""})
            if not out:
                raise ValueError(value)
            return out[0] if len(out) == 1 else tuple(out)
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
        value = getattr(cfg, name)
        if value not in allowed and not (value is None and FIELDS[name].default is None):
            raise LbscaleError(f"--{name.replace('_', '-')}: {value!r} is not one of {', '.join(allowed)}")
    positive = ["global_batch", "ref_batch", "epochs", "check_every", "warmup_ref_batch"]
    positive += [n for n in ("local_batch", "accum_steps", "gns_every") if getattr(cfg, n) is not None]
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
    known = sorted({m for t in TASKS.values() for m in t.metric_names(split=cfg.eval_split)})
    if cfg.target_metric is not None:
        if cfg.target_metric not in known:  # the data's task narrows this further (Trial, sweep plan)
            raise LbscaleError(f"--target-metric: {cfg.target_metric!r} is not a metric of any task "
                               f"(choose one of {', '.join(known)})")
        for t in cfg.targets:
            Task.check_target(cfg.target_metric, t)
    _check_optimizer_options(cfg)
    _check_evaluation_options(cfg, known)
    if cfg.divergence_factor <= 0:
        raise LbscaleError("--divergence-factor must be > 0")
    if cfg.divergence_window < 1:
        raise LbscaleError("--divergence-window must be >= 1 optimizer step")
    if not 0 <= cfg.label_smoothing < 1:
        raise LbscaleError("--label-smoothing must be in [0, 1)")
    if cfg.crop_size is not None and cfg.crop_size < 8:
        raise LbscaleError("--crop-size must be >= 8 pixels")
    if cfg.decode_workers is not None and cfg.decode_workers < 0:
        raise LbscaleError("--decode-workers must be >= 0")
    if not 0 <= cfg.drop_rate < 1:
        raise LbscaleError("--drop-rate must be in [0, 1)")
    if len(cfg.betas) != 2:
        raise LbscaleError("--betas takes two values, e.g. 0.9,0.999")
    if cfg.batch_schedule:
        _check_batch_schedule(cfg)
    _check_branch_options(cfg)
    if cfg.engine == "horovod":
        _check_horovod_options(cfg)
    if cfg.keep_checkpoints:
        from lbscale.ranges import parse_keep

        parse_keep(cfg.keep_checkpoints)


def _check_horovod_options(cfg: TrialConfig) -> None:
    """What the Horovod engine does not do: the noise scale is measured on DDP's gradient all-reduce (its
    communication hook), and the process group's backend is DDP's (Horovod picks its own operations)."""
    if cfg.gns_every is not None:
        raise LbscaleError("--gns-every measures the noise scale on DDP's gradient all-reduce: give --engine ddp")
    if cfg.backend is not None:
        raise LbscaleError(f"--backend {cfg.backend} is DDP's process group: Horovod runs its own Gloo (CPU) or NCCL "
                           "(GPU) operations; leave --backend out with --engine horovod")


def _check_branch_options(cfg: TrialConfig) -> None:
    if cfg.branch_ema is not None and (not 0 < cfg.branch_ema < 1 or not cfg.branch_from):
        raise LbscaleError("--branch-ema needs --branch-from and a decay in (0, 1), e.g. 0.9")
    if cfg.branch_samples is not None and (cfg.branch_samples < 1 or not cfg.branch_from):
        raise LbscaleError("--branch-samples needs --branch-from and must be >= 1")
    if cfg.branch_reseed is not None and (cfg.branch_reseed < 1 or not cfg.branch_from):
        raise LbscaleError("--branch-reseed needs --branch-from and must be >= 1 (unset: the parent's own order)")


def _check_batch_schedule(cfg: TrialConfig) -> None:
    """Its syntax (epochs are checked against the data later), its first batch, and what it cannot go with."""
    from lbscale.train.batch_schedule import SYNTAX_EPOCH, BatchSchedule

    schedule = BatchSchedule.parse(cfg.batch_schedule, SYNTAX_EPOCH, first=cfg.global_batch, ordered=False)
    first = schedule.first
    schedule.check_run(cfg.epochs)  # points in epochs; in samples once the data is known (the trial)
    if first != cfg.global_batch:
        raise LbscaleError(f"--batch-schedule starts at batch {first}: give --global-batch {first}")
    clash = [n for n in ("prune", "gns_every", "branch_from", "keep_checkpoints")
             if getattr(cfg, n) not in (None, "none")]
    if clash:
        raise LbscaleError(f"--batch-schedule does not go with --{clash[0].replace('_', '-')} (their points are "
                           "optimizer steps of one batch)")


def _check_evaluation_options(cfg: TrialConfig, known: list[str]) -> None:
    """Step evaluations, stopping at the target and successive halving: what each needs besides itself."""
    for name in ("eval_every", "eval_every_samples", "eval_first", "eval_subset", "eval_batch", "prune_min_steps",
                 "prune_min_samples"):
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise LbscaleError(f"--{name.replace('_', '-')} must be >= 1")
    if cfg.eval_spacing is not None and not 0 < cfg.eval_spacing <= 1:  # NaN fails both comparisons
        raise LbscaleError("--eval-spacing must be > 0 and <= 1 (the largest gap between evaluations, relative)")
    if cfg.eval_first is not None and cfg.eval_spacing is None:
        raise LbscaleError("--eval-first goes with --eval-spacing")
    spacing = [cfg.eval_every, cfg.eval_every_samples, cfg.eval_spacing]
    if sum(x is not None for x in spacing) > 1:
        raise LbscaleError("evaluations inside epochs: give one of --eval-every, --eval-every-samples, "
                           "--eval-spacing")
    if cfg.eval_subset is not None and all(x is None for x in spacing) \
            and cfg.prune == "none" and cfg.branch_samples is None:
        raise LbscaleError("--eval-subset applies to step evaluations: give --eval-every (or --eval-every-samples, "
                           "--eval-spacing or --prune) too")
    for name in ("stop_at_target", "gns_at_target"):
        if getattr(cfg, name) and cfg.target is None:
            raise LbscaleError(f"--{name.replace('_', '-')} needs --target-metric and --target")
    if cfg.prune == "none":
        for name in ("prune_min_steps", "prune_min_samples"):  # ignored without halving: the user meant some
            if getattr(cfg, name) is not None:
                raise LbscaleError(f"--{name.replace('_', '-')} is successive halving's first rung: give --prune "
                                   "asha or --prune sha too, or leave it out")
        return
    if cfg.prune_min_steps is None and cfg.prune_min_samples is None:
        raise LbscaleError(f"--prune {cfg.prune}: give --prune-min-steps or --prune-min-samples (the first rung, in "
                           "optimizer steps or in training samples)")
    if cfg.prune_min_steps is not None and cfg.prune_min_samples is not None:
        raise LbscaleError("--prune-min-steps and --prune-min-samples: give one of them")
    if cfg.prune_eta < 2:
        raise LbscaleError("--prune-eta must be >= 2")
    if not cfg.prune_group:  # never "every sibling of --out": a directory of other studies would be compared
        raise LbscaleError(f"--prune {cfg.prune}: name the trials it is compared with, --prune-group NAME (the "
                           "siblings of --out that name the same group; a sweep sets one per batch and variant)")
    if cfg.prune_metric is not None and cfg.prune_metric not in known:
        raise LbscaleError(f"--prune-metric: {cfg.prune_metric!r} is not a metric of any task "
                           f"(choose one of {', '.join(known)})")


def _check_optimizer_options(cfg: TrialConfig) -> None:
    """An optimizer option set away from its default that the chosen optimizer does not read is an error (it
    would be ignored silently); the registry says what each optimizer reads."""
    for name in OPTION_FIELDS.values():
        value, default = getattr(cfg, name), FIELDS[name].default
        if name == "betas":
            value, default = tuple(value), tuple(default)
        if value != default:
            check_given(cfg.optimizer, {name: f"--{name.replace('_', '-')}"})


def check_given(optimizer: str, given: dict[str, str]) -> None:
    """The options the user gave (on the command line, in a sweep spec; {option: how the error names it}) that the
    chosen optimizer does not read are refused at any value, their defaults included: `--momentum 0.9` with
    `lamb` would be ignored as silently as 0.5. (A config file written by a sweep holds every option, read or
    not, so it is checked by value only.)"""
    if optimizer not in OPTIMIZERS:  # an unknown one is refused as a bad choice by `validate`
        return
    reads = OPTIMIZERS[optimizer].option_fields()
    for name, label in given.items():
        if name in OPTION_FIELDS.values() and name not in reads:
            takes = ", ".join("--" + r.replace("_", "-") for r in reads) or "none of these options"
            raise LbscaleError(f"{label}: {optimizer} does not read it (it reads {takes})")


def to_dict(cfg: TrialConfig) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
