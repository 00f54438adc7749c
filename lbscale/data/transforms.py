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
