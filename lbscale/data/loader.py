"""Per-rank batches from a prepared file: disjoint shards, deterministic per-epoch shuffles, contiguous reads.

Each epoch, all ranks draw the same permutation of storage blocks (HDF5 chunks), lay the blocks end to end
and cut that sequence into `world_size` contiguous shards, so shards are disjoint and cover the split.
A rank takes its shard a buffer of blocks at a time, shuffles within the buffer and cuts batches. A batch is
a set to SGD, so its members are gathered in storage order: one copy from the memory-mapped chunks (or the
in-memory array) into the batch. Batches hold raw pixels (native dtype); normalisation and augmentation run
afterwards as tensor ops on the training device (lbscale.data.transforms).

JPEG-encoded files (ImageNet) go through the same order; a batch's encoded samples are decoded by a
`JpegDecoder` (nvjpeg on a GPU, decoder processes on the CPU) into fixed-size crops: random-resized crops and
flips for training, drawn from a generator seeded by (seed, epoch, rank, batch), so that a resumed epoch
crops exactly what the interrupted one did; the resize-and-centre crop for evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lbscale.data.formats import PreparedFile, open_prepared
from lbscale.errors import LbscaleError


@dataclass
class Batch:
    images: torch.Tensor  # (n, C, H, W), the file's dtype (uint16 widened to int32); decoded JPEG crops
    labels: torch.Tensor  # (n,) int64 class ids or (n, K) multi-hot
    ready: object = None  # GPU-decoded batches: the CUDA event to wait for before use


def _as_tensor(a: np.ndarray) -> torch.Tensor:
    # torch has no arithmetic on uint16/uint32; widen them losslessly to int32 / int64.
    if a.dtype == np.uint16:
        a = a.astype(np.int32)
    elif a.dtype == np.uint32:
        a = a.astype(np.int64)
    return torch.from_numpy(a)


RESEED = 0xB7  # a re-drawn order's stream (`ShardedLoader.reorder`): never one the original order draws from
SUBSET_SEED = 0x5EED  # the evaluation subset's draw: fixed, so every trial of a study sees the same samples


class ShardedLoader:
    """Iterate one rank's batches of `split`; call `set_epoch(e)` before each epoch (as with DistributedSampler).

    even=True gives every rank N // world_size samples (the remainder is dropped) and so the same number of
    batches, as collective training needs; even=False covers every sample once (for evaluation).
    """

    def __init__(self, data: PreparedFile | str | Path, split: str, rank: int = 0, world_size: int = 1,
                 local_batch: int = 256, seed: int = 0, drop_last: bool = True, even: bool = True,
                 in_memory: bool = False, buffer_blocks: int = 16, label_key: str = "labels",
                 decoder=None, crop_size: int = 224, random_crop: bool = False, subset: int | None = None,
                 only: np.ndarray | None = None):
        self.file = data if isinstance(data, PreparedFile) else open_prepared(data)
        if not self.file.has_split(split):
            raise LbscaleError(f"{self.file.path}: no split {split!r}")
        if not 0 <= rank < world_size:
            raise LbscaleError(f"rank {rank} outside world size {world_size}")
        if local_batch < 1:
            raise LbscaleError("local batch must be >= 1")
        self.split, self.rank, self.world_size = split, rank, world_size
        self.local_batch, self.seed, self.drop_last, self.even = local_batch, seed, drop_last, even
        self.images = self.file.images(split)
        self.labels = self.file.labels(split, label_key)
        self.n = self.file.size(split)
        # a fixed subset (step evaluations): the same samples every time and in every trial of a study; or the
        # samples `only` names (a part of a whole-split check, `analysis.evaluations.check_parts`)
        self.only = (np.sort(np.asarray(only, dtype=np.int64)) if only is not None
                     else None if subset is None or subset >= self.n
                     else np.sort(np.random.default_rng(SUBSET_SEED).choice(self.n, subset, replace=False)))
        self.views = self.checks = None
        self.encoded = self.file.encoding != "raw"
        if self.encoded:  # JPEG bytes: decoded per batch into crop_size crops
            self.sizes = self.file.labels(split, "sizes")
            self.decoder, self.crop_size, self.random_crop = decoder, crop_size, random_crop
            if in_memory:
                self.images.load()
        elif in_memory:
            self.images = np.asarray(self.images[...])
        elif not isinstance(self.images, np.ndarray):
            self.views = self.file.chunk_views(split)
            self.checks = self.file.chunk_checks(split) if self.views is not None else None
        # The order is drawn over the file's storage blocks and shuffle windows whether or not the split is
        # held in memory, and neither depends on the local batch: the batch is cut only afterwards, so an
        # epoch's order is one and the same for every batch size, on disk and in memory.
        self.block = self.file.chunk_len(split)
        self.buffer = buffer_blocks * self.block
        self.epoch = 0
        self.reseed: tuple[int, int, int] | None = None  # (seed, epoch, micro-batch): `reorder`

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def reorder(self, seed: int, epoch: int, batch: int) -> None:
        """From micro-batch `batch` of `epoch` on, a data order re-drawn with `seed` (a repeat of a branch,
        `--branch-reseed`): that epoch's samples not yet seen in another order, every later epoch drawn afresh.
        Before that point the order is the original; past it the same for every trial of the same micro-batch (the
        factors of a branch study), so that repeat r is paired across them."""
        self.reseed = (seed, epoch, batch)

    def _shard_bounds(self) -> tuple[int, int]:
        n = self.n if self.only is None else len(self.only)
        if self.even:
            per = n // self.world_size
            return self.rank * per, (self.rank + 1) * per
        bounds = np.linspace(0, n, self.world_size + 1).astype(np.int64)
        return int(bounds[self.rank]), int(bounds[self.rank + 1])

    def shard_size(self) -> int:
        a, b = self._shard_bounds()
        return b - a

    def __len__(self) -> int:
        size = self.shard_size()
        return size // self.local_batch if self.drop_last else -(-size // self.local_batch)

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """This rank's samples for `epoch`, batch after batch (each batch in storage order)."""
        epoch = self.epoch if epoch is None else epoch
        if self.only is not None:  # evaluation of a subset: its samples in storage order
            a, b = self._shard_bounds()
            return self.only[a:b].copy()
        again = () if self.reseed is None or epoch <= self.reseed[1] else (RESEED, self.reseed[0])
        rng = np.random.default_rng([self.seed, epoch, *again])
        n_blocks = -(-self.n // self.block)
        starts = rng.permutation(n_blocks) * self.block
        if self.block == 1:
            sequence = starts
        else:
            lengths = np.minimum(self.block, self.n - starts)
            sequence = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
        a, b = self._shard_bounds()
        shard = sequence[a:b]
        local = np.random.default_rng([self.seed, epoch, self.rank, 1, *again])
        out = shard.copy()
        for s in range(0, len(shard), self.buffer):
            out[s:s + self.buffer] = local.permutation(shard[s:s + self.buffer])
        # Cut to whole batches only after shuffling: the same global order whatever the local batch,
        # so that k micro-batches of B see exactly the samples of one batch of k x B.
        out = out[:len(self) * self.local_batch if self.drop_last else len(out)]
        bs = self.local_batch
        if self.reseed is not None and epoch == self.reseed[1]:  # the rest of the epoch past the point, re-drawn
            seen = self.reseed[2] * bs
            out[seen:] = np.random.default_rng([self.seed, epoch, self.rank, RESEED, self.reseed[0]]).permutation(
                out[seen:])
        full = len(out) // bs * bs
        out[:full] = np.sort(out[:full].reshape(-1, bs), axis=1).ravel()
        out[full:] = np.sort(out[full:])
        return out

    def _gather(self, idx: np.ndarray) -> np.ndarray:
        """Images at sorted `idx`, copied once into a new batch array."""
        if isinstance(self.images, np.ndarray):
            return np.take(self.images, idx, axis=0)
        out = np.empty((len(idx), *self.images.shape[1:]), dtype=self.images.dtype)
        block = idx // self.block
        cuts = np.flatnonzero(np.diff(block)) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(idx)]):
            local = idx[a:b] - block[a] * self.block
            if self.views is not None:
                if self.checks is not None:  # each block's checksum once, the first time it is read
                    self.checks.verify(int(block[a]))
                np.take(self.views[block[a]], local, axis=0, out=out[a:b], mode="clip")  # no out-buffering
            else:  # filtered storage: read the run covering these samples, then pick
                lo = int(idx[a])
                run = self.images[lo:int(idx[b - 1]) + 1]
                np.take(run, idx[a:b] - lo, axis=0, out=out[a:b], mode="clip")
        return out

    def __iter__(self):
        return self.iterate(start_batch=0)

    def iterate(self, start_batch: int = 0):
        """Batches of the current epoch, skipping the first `start_batch` (resume in mid-epoch)."""
        order = self.indices()
        bs = self.local_batch
        for k, a in enumerate(range(start_batch * bs, len(order), bs), start=start_batch):
            idx = order[a:a + bs]
            labels = torch.from_numpy(self.labels[idx])
            if self.encoded:
                images, ready = self._decode(idx, k)
                yield Batch(images, labels, ready)
            else:
                yield Batch(_as_tensor(self._gather(idx)), labels)

    def _decode(self, idx: np.ndarray, batch_no: int):
        from lbscale.data.jpeg import center_boxes, random_resized_boxes

        if self.decoder is None:
            from lbscale.data.decoder import JpegDecoder

            self.decoder = JpegDecoder("cpu", workers=0)
        sizes = self.sizes[idx]
        if self.random_crop:
            rng = np.random.default_rng([self.seed, self.epoch, self.rank, batch_no, 0x1E6])
            boxes, flips = random_resized_boxes(sizes, rng), rng.random(len(idx)) < 0.5
        else:
            boxes, flips = center_boxes(sizes), np.zeros(len(idx), dtype=bool)
        return self.decoder(self.images.take(idx), boxes, flips, self.crop_size)


class Prefetcher:
    """Reads the next batches on a background thread while the training step runs, so the wait for data is
    off the critical path. On a GPU the batches land in pinned host memory, ready for `non_blocking` copies.

    Order and content are the wrapped iterator's, so exact resume and the per-rank shard order are unchanged;
    reading ahead never changes what a checkpoint records (the count of batches consumed). `close()` stops
    the thread (the trial calls it at the end of an epoch, or when it stops early)."""

    _END = object()

    def __init__(self, batches, depth: int = 2, pin_memory: bool = False):
        import queue
        import threading

        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._pin = pin_memory
        self._thread = threading.Thread(target=self._fill, args=(iter(batches),), daemon=True,
                                        name="lbscale-prefetch")
        self._thread.start()

    def _put(self, item) -> bool:
        import queue

        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self, batches) -> None:
        try:
            for batch in batches:
                if self._pin and not batch.images.is_cuda:
                    batch = Batch(batch.images.pin_memory(), batch.labels.pin_memory(), batch.ready)
                if not self._put(batch):
                    return
            self._put(self._END)
        except BaseException as e:  # raised again in the training thread
            self._put(e)

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        item = self._queue.get()
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
