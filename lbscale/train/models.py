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
