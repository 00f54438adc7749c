"""The contract every raw dataset implements, and helpers they share."""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import numpy as np

from lbscale.data.formats.base import DatasetMeta
from lbscale.progress import bar


@dataclass
class SplitBatch:
    """A run of consecutive samples of one split: images (n,C,H,W) in native dtype, labels, names, extras."""

    images: np.ndarray
    labels: np.ndarray
    names: list[str] | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    def take(self, mask: np.ndarray) -> "SplitBatch":
        names = None if self.names is None else [n for n, m in zip(self.names, mask) if m]
        return SplitBatch(self.images[mask], self.labels[mask], names, {k: v[mask] for k, v in self.extras.items()})


class Source:
    """A raw dataset. The constructor validates the input (LbscaleError on bad input) before any output exists.

    `splits` names the splits the source itself provides; prepare carves the others from train.
    `batches(split)` streams that split in order.
    """

    meta: DatasetMeta
    splits: tuple[str, ...] = ("train", "test")

    def train_labels(self) -> np.ndarray:
        """Labels of the train split in stream order (used to carve stratified val/test splits)."""
        raise NotImplementedError

    def batches(self, split: str) -> Iterator[SplitBatch]:
        raise NotImplementedError


def stratify_key(labels: np.ndarray) -> np.ndarray:
    """Class id per sample; for multi-hot rows, the rarest class present (keeps rare classes in every split)."""
    if labels.ndim == 1:
        return labels.astype(np.int64)
    freq = labels.sum(axis=0).astype(np.float64)
    freq[freq == 0] = np.inf
    weighted = np.where(labels > 0, freq[None, :], np.inf)
    return np.argmin(weighted, axis=1)


def carve(labels: np.ndarray, fractions: dict[str, float], seed: int) -> np.ndarray:
    """Assign each train sample a split name: stratified by class, seeded; the rest stays 'train'."""
    key = stratify_key(labels)
    assign = np.full(len(key), "train", dtype=object)
    rng = np.random.default_rng(seed)
    for c in np.unique(key):
        idx = rng.permutation(np.flatnonzero(key == c))
        start = 0
        for split, frac in fractions.items():
            k = int(round(frac * len(idx)))
            assign[idx[start:start + k]] = split
            start += k
    return assign


def parallel_map(fn: Callable, items: Iterable, workers: int, total: int, desc: str) -> Iterator:
    """`map` in order over a process pool (or in-process for workers <= 1), with a progress bar."""
    progress = bar(total=total, desc=desc, unit="file")
    try:
        if workers <= 1:
            for out in map(fn, items):
                progress.update(1)
                yield out
            return
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        with ctx.Pool(workers) as pool:
            for out in pool.imap(fn, items, chunksize=8):
                progress.update(1)
                yield out
    finally:
        progress.close()


def stack_batches(results: Iterable, batch: int) -> Iterator[list]:
    """Group an iterator into lists of at most `batch` items."""
    buf = []
    for r in results:
        buf.append(r)
        if len(buf) == batch:
            yield buf
            buf = []
    if buf:
        yield buf
