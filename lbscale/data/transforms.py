"""Normalisation and augmentation as batched tensor ops, run on the training device (CPU or GPU)."""

from __future__ import annotations

import numpy as np
import torch


class Normalize:
    """(x - mean) / std per band, from the prepared file's train statistics; output float32."""

    def __init__(self, mean, std, device="cpu"):
        std = np.where(np.asarray(std) > 0, std, 1.0)
        self.mean = torch.as_tensor(np.asarray(mean), dtype=torch.float32, device=device).view(1, -1, 1, 1)
        self.std = torch.as_tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(self.mean.device, torch.float32, non_blocking=True) - self.mean) / self.std


def random_flip_rot90(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Per sample: a random horizontal flip and a random multiple of 90 degrees (square images)."""
    n = x.shape[0]
    flip = torch.rand(n, generator=generator, device="cpu").lt(0.5).to(x.device)
    k = torch.randint(0, 4, (n,), generator=generator, device="cpu").to(x.device)
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)
    if x.shape[-1] != x.shape[-2]:  # only 0 and 180 degrees keep a non-square shape
        return torch.where((k % 2 == 1).view(-1, 1, 1, 1), torch.rot90(x, 2, dims=(-2, -1)), x)
    out = x
    for turns in (1, 2, 3):
        out = torch.where((k == turns).view(-1, 1, 1, 1), torch.rot90(x, turns, dims=(-2, -1)), out)
    return out


def random_crop_flip(x: torch.Tensor, generator: torch.Generator | None = None, pad: int = 4) -> torch.Tensor:
    """Per sample: a random HxW window of the input zero-padded by `pad` pixels (after normalisation: the
    band mean), then a random horizontal flip: the CIFAR augmentation of the ResNet papers, batched."""
    n, _, h, w = x.shape
    rows = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device="cpu").to(x.device)
    cols = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device="cpu").to(x.device)
    flip = torch.rand(n, generator=generator, device="cpu").lt(0.5).to(x.device)
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    r = rows.view(n, 1) + torch.arange(h, device=x.device).view(1, h)  # n x h source rows
    c = cols.view(n, 1) + torch.arange(w, device=x.device).view(1, w)
    c = torch.where(flip.view(n, 1), c.flip(-1), c)
    idx = torch.arange(n, device=x.device).view(n, 1, 1)
    out = padded.permute(0, 2, 3, 1)[idx, r.view(n, h, 1), c.view(n, 1, w)]  # n x h x w x C
    return out.permute(0, 3, 1, 2).contiguous(memory_format=torch.contiguous_format)


AUGMENT = {"flip-rot90": random_flip_rot90, "crop-flip": random_crop_flip}  # names and help: config.AUGMENTATIONS
