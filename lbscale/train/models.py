"""Model factory: any timm model, with the band count and class count of the prepared file."""

from __future__ import annotations

import timm
import torch

from lbscale.errors import LbscaleError


def check_model(name: str) -> None:
    if not timm.is_model(name):
        raise LbscaleError(f"--model: {name!r} is not a timm model (e.g. resnet18, resnet50)")


def build_model(name: str, in_chans: int, num_classes: int, channels_last: bool = True,
                drop_rate: float = 0.0) -> torch.nn.Module:
    """A randomly initialised timm model (no download) for `in_chans` bands and `num_classes` outputs;
    `drop_rate`: dropout before the classifier (timm's `drop_rate`)."""
    check_model(name)
    model = timm.create_model(name, pretrained=False, in_chans=in_chans, num_classes=num_classes,
                              drop_rate=drop_rate)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def gradient_size(model: torch.nn.Module) -> dict:
    """What DDP all-reduces each step: the trainable parameters (requires_grad) and their gradients' bytes
    (numel x element size: 4 per fp32 parameter), as config.json records them for the scaling model."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    return {"trainable_parameters": sum(p.numel() for p in trainable),
            "gradient_bytes": sum(p.numel() * p.element_size() for p in trainable)}


def load_trial_model(trial_dir, bands: int, num_classes: int | None = None) -> tuple[torch.nn.Module, dict, dict]:
    """The model of a trial directory (config.json + checkpoint/model.pt) with its checkpointed weights, built
    for `bands` bands (and `num_classes` outputs, default the trial's): (model, config.json, checkpoint).
    A directory that is not a trial, or weights that do not fit, are one LbscaleError."""
    import json
    from pathlib import Path

    from lbscale.results import CONFIG

    trial_dir = Path(trial_dir)
    config_path, ckpt = trial_dir / CONFIG, trial_dir / "checkpoint" / "model.pt"
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
