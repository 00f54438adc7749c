"""A generated multispectral land-cover set: learnable (spectra + texture) but not trivially, with known noise.

Each class has a spectral signature close to its neighbours', a texture (an oriented wave of its own
frequency and band amplitudes) and the images add brightness changes, a smooth field and pixel noise.
Multilabel images are a 2x2 mosaic of 1-3 classes. With `label_noise` a fraction of *train* labels is
flipped; `/train/noisy` (0/1) and `/train/clean_labels` record which, as ground truth for data filtering.
Deterministic per seed: the same arguments give the same bytes.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from lbscale.data.formats.base import DatasetMeta
from lbscale.data.sources.base import Source, SourceOption, SplitBatch
from lbscale.errors import LbscaleError
from lbscale.task import TASKS

BLOCK = 1024
SPLIT_SEED = {"train": 1, "val": 2, "test": 3}


class SyntheticSource(Source):
    splits = ("train", "val", "test")
    help = "generated multispectral land cover, deterministic per --seed (offline default)"
    options = (SourceOption("count", "samples in all splits", int), SourceOption("bands", "spectral bands", int),
               SourceOption("size", "image side in pixels", int), SourceOption("classes", "classes", int),
               SourceOption("task", "one class per image or a mosaic of 1-3", choices=tuple(TASKS)),
               SourceOption("label_noise", "fraction of train labels flipped (recorded in /train/noisy)", float))
    common = ("seed", "val_fraction", "test_fraction")
    needs_src = False  # it generates its data

    def __init__(self, name: str = "synthetic", src=None, count: int = 6000, bands: int = 4, size: int = 32,
                 classes: int = 6, task: str = "multiclass", seed: int = 0, label_noise: float = 0.0,
                 val_fraction: float = 0.1, test_fraction: float = 0.1):
        if count < 10 or bands < 1 or size < 8 or classes < 2:
            raise LbscaleError("synthetic: need count >= 10, bands >= 1, size >= 8, classes >= 2")
        if task not in TASKS:
            raise LbscaleError(f"synthetic: unknown task {task!r} (multiclass or multilabel)")
        if not 0 <= label_noise < 1:
            raise LbscaleError(f"synthetic: --label-noise must be in [0, 1), got {label_noise}")
        if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
            raise LbscaleError("synthetic: val and test fractions must be in [0, 1) and sum below 1")
        self.bands, self.size, self.classes, self.task = bands, size, classes, task
        self.seed, self.label_noise = seed, label_noise
        n_val, n_test = int(round(count * val_fraction)), int(round(count * test_fraction))
        self.sizes = {"train": count - n_val - n_test, "val": n_val, "test": n_test}
        self.meta = DatasetMeta(
            "synthetic", task, [f"class_{i}" for i in range(classes)], [f"band_{i}" for i in range(bands)],
            "lbscale synthetic v1",
            notes={"generator": f"count={count} bands={bands} size={size} classes={classes} task={task} "
                                f"seed={seed} label_noise={label_noise}",
                   "imagery": "remote-sensing"})  # it imitates satellite patches: textures with no up or left
        world = np.random.default_rng([seed, 0])
        base = world.uniform(70, 150, size=bands)
        self.signature = base[None, :] + world.normal(0, 9, size=(classes, bands))
        self.freq = world.uniform(1.5, 5.0, size=classes)
        self.theta = world.uniform(0, np.pi, size=classes)
        self.amplitude = world.uniform(4, 16, size=(classes, bands))

    def train_labels(self) -> np.ndarray:  # pragma: no cover - all splits are generated
        raise NotImplementedError

    def _class_maps(self, rng, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-pixel class ids (n,H,W) and labels (class ids or multi-hot)."""
        s, h = self.size, self.size // 2
        if self.task == "multiclass":
            y = rng.integers(0, self.classes, size=n)
            return np.broadcast_to(y[:, None, None], (n, s, s)), y.astype(np.int64)
        k = rng.integers(1, min(3, self.classes) + 1, size=n)
        chosen = np.argsort(rng.random((n, self.classes)), axis=1)[:, :3]
        # quadrant q takes the (q mod k)-th chosen class, shuffled so every chosen class appears
        slots = np.argsort(rng.random((n, 4)), axis=1) % k[:, None]
        quad = np.take_along_axis(chosen, slots, axis=1)  # (n, 4)
        maps = np.empty((n, s, s), dtype=np.int64)
        maps[:, :h, :h], maps[:, :h, h:], maps[:, h:, :h], maps[:, h:, h:] = quad.T[:, :, None, None]
        y = np.zeros((n, self.classes), dtype=np.uint8)
        np.put_along_axis(y, quad, 1, axis=1)
        return maps, y

    def _render(self, rng, maps: np.ndarray) -> np.ndarray:
        n, s = maps.shape[0], self.size
        yy, xx = np.mgrid[0:s, 0:s].astype(np.float32) / s
        freq = self.freq[maps] * rng.uniform(0.85, 1.15, size=(n, 1, 1))
        theta = self.theta[maps] + rng.uniform(-0.3, 0.3, size=(n, 1, 1))
        phase = rng.uniform(0, 2 * np.pi, size=(n, 1, 1))
        wave = np.sin(2 * np.pi * freq * (xx * np.cos(theta) + yy * np.sin(theta)) + phase)  # (n,H,W)
        sig = self.signature[maps].transpose(0, 3, 1, 2)  # (n,B,H,W)
        amp = self.amplitude[maps].transpose(0, 3, 1, 2)
        gain = rng.uniform(0.85, 1.15, size=(n, 1, 1, 1))
        coarse = rng.normal(0, 8, size=(n, self.bands, 4, 4))
        smooth = np.repeat(np.repeat(coarse, -(-s // 4), axis=2), -(-s // 4), axis=3)[:, :, :s, :s]
        img = gain * (sig + amp * wave[:, None]) + smooth + rng.normal(0, 7, size=sig.shape)
        return np.clip(np.rint(img), 0, 255).astype(np.uint8)

    def _flip(self, rng, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        noisy = rng.random(len(y)) < self.label_noise
        flipped = y.copy()
        if self.task == "multiclass":
            flipped[noisy] = (y[noisy] + rng.integers(1, self.classes, size=noisy.sum())) % self.classes
        else:
            bit = rng.integers(0, self.classes, size=noisy.sum())
            rows = np.flatnonzero(noisy)
            flipped[rows, bit] = 1 - flipped[rows, bit]
        return flipped, noisy.astype(np.uint8)

    def batches(self, split: str) -> Iterator[SplitBatch]:
        total = self.sizes[split]
        for block, start in enumerate(range(0, total, BLOCK)):
            n = min(BLOCK, total - start)
            rng = np.random.default_rng([self.seed, SPLIT_SEED[split], block])
            maps, y = self._class_maps(rng, n)
            images = self._render(rng, maps)
            names = [f"{split}_{start + i:07d}" for i in range(n)]
            if split == "train":
                noisy_y, noisy = self._flip(rng, y)
                yield SplitBatch(images, noisy_y, names, {"noisy": noisy, "clean_labels": y})
            else:
                yield SplitBatch(images, y, names)
