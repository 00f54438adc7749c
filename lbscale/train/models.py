"""Model factory: any timm model, or one of lbscale's own for small images (`MODELS`), with the band count and
class count of the prepared file. Importing this module costs no torch (the trial config's help names MODELS)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lbscale.errors import LbscaleError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ModelInfo:
    """One of lbscale's own models: its factory (a lazy "module.Class" path, so the registry costs no torch) and
    fixed arguments. `build_model` builds every entry from this alone, with timm's in_chans, num_classes and
    drop_rate."""

    name: str
    help: str
    factory: str
    defaults: dict = field(default_factory=dict)


# Names timm does not use (a test holds it): a timm model of the same name would be shadowed.
MODELS: dict[str, ModelInfo] = {m.name: m for m in (
    ModelInfo("cifar_resnet8", "ResNet-8 (He et al. 2016 sec. 4.2, n = 1), projection shortcuts: 0.078M parameters "
              "(Shallue et al. 2019's CIFAR-10 ResNet-8)", "lbscale.train.small_models.CifarResNet",
              {"blocks": 1, "shortcut": "projection"}),
    ModelInfo("cifar_resnet20", "ResNet-20 (He et al. 2016 sec. 4.2, n = 3), identity shortcuts: 0.27M parameters",
              "lbscale.train.small_models.CifarResNet", {"blocks": 3, "shortcut": "identity"}),
    ModelInfo("simple_cnn", "Simple CNN (Shallue et al. 2019, Fashion-MNIST): 5x5 convolutions of 32 and 64 "
              "filters, each with a 2x2 max-pool, then 1024 units", "lbscale.train.small_models.SimpleCnn"),
)}


# timm's small test networks that suit 8-64 px images and a 2-core machine; named here so that the help and the
# docs list the one the template and the tests train (timm builds them; they are not MODELS entries).
TIMM_SMALL_MODELS: dict[str, str] = {
    "test_resnet": "timm's test ResNet: 0.37M parameters, any image size; the study template's fast network",
}


def check_model(name: str) -> None:
    """A model lbscale can build: one of MODELS or a timm name; LbscaleError naming both kinds if not."""
    import timm

    if name not in MODELS and not timm.is_model(name):
        raise LbscaleError(f"--model: {name!r} is not a timm model (e.g. resnet18, resnet50) nor one of lbscale's "
                           f"for small images ({', '.join(MODELS)})")


def check_runs(name: str, shape: tuple[int, ...], num_classes: int) -> None:
    """The model takes images of `shape` (bands, height, width): one forward pass of two blank ones on the CPU;
    one line where it does not (a ViT built for 224-pixel inputs, given 16-pixel images)."""
    import torch

    model = build_model(name, shape[0], num_classes, channels_last=False).eval()
    try:
        with torch.no_grad():
            model(torch.zeros(2, *shape))
    except Exception as e:  # what the network's own code raises: its first line says why
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise LbscaleError(f"--model {name}: does not run on this data's {' x '.join(map(str, shape))} images "
                           f"(bands x height x width): {why}") from None


def build_model(name: str, in_chans: int, num_classes: int, channels_last: bool = True,
                drop_rate: float = 0.0) -> torch.nn.Module:
    """A randomly initialised model (no download) for `in_chans` bands and `num_classes` outputs: one of MODELS,
    else timm's; `drop_rate`: dropout before the classifier (timm's `drop_rate`)."""
    check_model(name)
    if name in MODELS:
        info = MODELS[name]
        module, cls = info.factory.rsplit(".", 1)
        model = getattr(importlib.import_module(module), cls)(in_chans=in_chans, num_classes=num_classes,
                                                              drop_rate=drop_rate, **info.defaults)
    else:
        import timm

        model = timm.create_model(name, pretrained=False, in_chans=in_chans, num_classes=num_classes,
                                  drop_rate=drop_rate)
    if channels_last:
        import torch

        model = model.to(memory_format=torch.channels_last)
    return model


def gradient_size(model: torch.nn.Module) -> dict:
    """What DDP all-reduces each step: the trainable parameters (requires_grad) and their gradients' bytes
    (numel x element size: 4 per fp32 parameter), as config.json records them for the scaling model."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    return {"trainable_parameters": sum(p.numel() for p in trainable),
            "gradient_bytes": sum(p.numel() * p.element_size() for p in trainable)}


def load_trial_model(trial_dir, bands: int, num_classes: int | None = None, weights=None) \
        -> tuple[torch.nn.Module, dict, dict]:
    """The model of a trial directory (config.json + checkpoint/model.pt, or `weights`: a kept checkpoint's
    model.pt) with its checkpointed weights, built for `bands` bands (and `num_classes` outputs, default the
    trial's): (model, config.json, checkpoint).
    A directory that is not a trial, or weights that do not fit, are one LbscaleError."""
    import json
    from pathlib import Path

    import torch

    from lbscale.results import CONFIG

    trial_dir = Path(trial_dir)
    config_path, ckpt = trial_dir / CONFIG, Path(weights) if weights else trial_dir / "checkpoint" / "model.pt"
    if not config_path.exists() or not ckpt.exists():
        raise LbscaleError(f"{trial_dir}: not a trial directory with a checkpoint (config.json, checkpoint/model.pt)")
    try:
        config = json.loads(config_path.read_text())
        cfg = config["config"]
    except (ValueError, KeyError):
        raise LbscaleError(f"{config_path}: not a trial's config.json") from None
    num_classes = num_classes if num_classes is not None else config.get("num_classes")
    model = build_model(cfg["model"], bands, num_classes, channels_last=False, drop_rate=cfg.get("drop_rate", 0.0))
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    try:
        model.load_state_dict(saved["model"])
    except RuntimeError as e:
        raise LbscaleError(f"{ckpt}: does not fit {cfg['model']} with {bands} bands and {num_classes} classes "
                           f"({str(e).splitlines()[0]})") from None
    return model, config, saved
