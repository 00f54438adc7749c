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


def crop_resize(images, boxes: torch.Tensor, flips: torch.Tensor, size, chunk: int = 64) -> torch.Tensor:
    """Crop box i = (top, left, height, width) of image i, resize it to `size` (an int for a square, or
    (height, width)) with the arithmetic of `F.interpolate(crop, mode="bilinear", align_corners=False)`, and
    flip it horizontally where flips[i]: (n, C, *size) float32.

    `images` is a list of (C, h_i, w_i) tensors of any sizes (decoded JPEGs) or one (n, C, H, W) tensor. All
    samples are done by a few batched gathers into the images laid end to end, one set per `chunk` samples
    (bounding the index tensors' memory), not a loop over images."""
    if isinstance(images, torch.Tensor):
        images = list(images.unbind(0))
    out_h, out_w = (size, size) if isinstance(size, int) else size
    device = images[0].device
    n, c = len(images), images[0].shape[0]
    shapes = torch.tensor([tuple(im.shape[-2:]) for im in images], dtype=torch.int64).to(device)
    flat = torch.cat([im.reshape(-1) for im in images])
    pixels = shapes[:, 0] * shapes[:, 1]
    starts = torch.cumsum(pixels * c, 0) - pixels * c
    boxes, flips = boxes.to(device, torch.int64), flips.to(device, torch.bool)
    out = torch.empty((n, c, out_h, out_w), dtype=torch.float32, device=device)

    def axis(start, length, steps):  # source index pairs and the weight of the second, (m, steps)
        grid = torch.arange(steps, device=device, dtype=torch.float64).view(1, -1) + 0.5
        src = (grid * (length.view(-1, 1) / steps) - 0.5).clamp(min=0)
        i0 = src.floor()
        lam = (src - i0).to(torch.float32)
        i0 = i0.to(torch.int64)
        i1 = torch.minimum(i0 + 1, length.view(-1, 1) - 1)
        return i0 + start.view(-1, 1), i1 + start.view(-1, 1), lam

    for a in range(0, n, chunk):
        sl = slice(a, min(a + chunk, n))
        top, left, bh, bw = boxes[sl].unbind(1)
        y0, y1, wy = axis(top, bh, out_h)
        x0, x1, wx = axis(left, bw, out_w)
        x0, x1, wx = (torch.where(flips[sl].view(-1, 1), t.flip(1), t) for t in (x0, x1, wx))
        m = y0.shape[0]
        width = shapes[sl, 1].view(m, 1, 1, 1)
        channel = torch.arange(c, device=device).view(1, c, 1, 1) * pixels[sl].view(m, 1, 1, 1)
        base = starts[sl].view(m, 1, 1, 1) + channel

        def at(y, x, base=base, width=width, m=m):
            return flat.take(base + y.view(m, 1, out_h, 1) * width + x.view(m, 1, 1, out_w)).float()

        wy4, wx4 = wy.view(m, 1, out_h, 1), wx.view(m, 1, 1, out_w)
        upper = at(y0, x0) * (1 - wx4) + at(y0, x1) * wx4
        lower = at(y1, x0) * (1 - wx4) + at(y1, x1) * wx4
        out[sl] = upper * (1 - wy4) + lower * wy4
    return out


def random_resized_crop_flip(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Per sample: a random-resized crop (area 8-100%, ratio 3/4-4/3, torchvision's sampling) back to the
    input size, then a random horizontal flip: the ImageNet augmentation. JPEG data gets it at decode time."""
    from lbscale.data.jpeg import random_resized_boxes

    n, _, h, w = x.shape
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    rng = np.random.default_rng(seed)
    boxes = random_resized_boxes(np.tile([h, w], (n, 1)), rng)
    flips = rng.random(n) < 0.5
    return crop_resize(x, torch.from_numpy(boxes), torch.from_numpy(flips), (h, w)).to(x.dtype)


def no_augmentation(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The batch as it is, drawing nothing from `generator`: for digits and characters, where a flipped or turned
    glyph is another one or none at all."""
    return x


# names and help: config.AUGMENTATIONS; the one `auto` picks per imagery: data.formats.base.IMAGERY
AUGMENT = {"flip-rot90": random_flip_rot90, "crop-flip": random_crop_flip, "rrc-flip": random_resized_crop_flip,
           "none": no_augmentation}
