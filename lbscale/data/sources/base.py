"""The contract every raw dataset implements, and helpers they share."""

from __future__ import annotations

import inspect
import os
import tempfile
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from lbscale.data import worker_context
from lbscale.data.formats.base import DatasetMeta
from lbscale.errors import LbscaleError
from lbscale.progress import bar


@dataclass
class SplitBatch:
    """A run of consecutive samples of one split: images (n,C,H,W) in native dtype, labels, names, extras.

    Encoded sources (JPEG) give images as an object array of byte arrays, with `stats`: per-sample pixel sums
    (see BandStats.add). `keep` marks the samples to write (False: a bad file skipped with --skip-bad); the
    others still count in the stream order that carving val/test from train relies on."""

    images: np.ndarray
    labels: np.ndarray
    names: list[str] | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    stats: np.ndarray | None = None
    keep: np.ndarray | None = None

    def take(self, mask: np.ndarray) -> "SplitBatch":
        names = None if self.names is None else [n for n, m in zip(self.names, mask) if m]
        return SplitBatch(self.images[mask], self.labels[mask], names, {k: v[mask] for k, v in self.extras.items()},
                          None if self.stats is None else self.stats[mask])


@dataclass(frozen=True)
class SourceOption:
    """An option of `lbscale prepare` that a source reads (`label_noise` is --label-noise): the CLI makes the option
    from it. Its default is the keyword default of the source's constructor, the one place it is written; prepare
    passes the option only where it is given."""

    name: str  # the constructor's keyword
    help: str  # what this source does with it
    type: type = str  # int, float, str, or bool for a flag
    choices: tuple[str, ...] = ()
    case_sensitive: bool = True

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


# Options several sources read with one meaning, declared once.
RESIZE = SourceOption("size", "resize every image to SIZE x SIZE (bilinear)", int)
SKIP_BAD = SourceOption("skip_bad", "leave unreadable files out (listed) instead of failing", bool)


class Source:
    """A raw dataset. The constructor validates the input (LbscaleError on bad input) before any output exists.

    `splits` names the splits the source itself provides; prepare carves the others from train.
    `batches(split)` streams that split in order.
    """

    meta: DatasetMeta
    splits: tuple[str, ...] = ("train", "test")
    help: str = ""  # one line for `lbscale prepare --help`
    options: tuple[SourceOption, ...] = ()  # the prepare options of its own this source reads
    common: tuple[str, ...] = ()  # the options of every source that its constructor takes too (workers, seed, ...)
    needs_src: bool = True  # False: it reads no --src (it generates its data, or names its files in options)
    encoding: str = "raw"  # "jpeg": samples are stored encoded (HDF5 only)

    @classmethod
    def default(cls, option: str):
        """What the constructor takes where `option` is not given (None where it has no default)."""
        default = inspect.signature(cls.__init__).parameters[option].default
        return None if default is inspect.Parameter.empty else default

    def train_labels(self) -> np.ndarray:
        """Labels of the train split in stream order (used to carve stratified val/test splits)."""
        raise NotImplementedError

    def batches(self, split: str) -> Iterator[SplitBatch]:
        raise NotImplementedError


def prepare_options(sources: dict[str, type[Source]]) -> dict[str, tuple[SourceOption, object]]:
    """`lbscale prepare`'s own options of the sources, one per name, with the default it shows (None: none).

    The rule for a name several sources read: it means one kind of value (they declare the same type and
    choices, else TypeError), its help says what each source does with it, and it shows a default where they share
    one; where they do not, each source's meaning names its own."""
    uses: dict[str, list] = {}
    for dataset, cls in sources.items():
        for spec in cls.options:
            uses.setdefault(spec.name, []).append((dataset, spec, cls.default(spec.name)))
    merged = {}
    for name, readers in uses.items():
        if len({(s.type, s.choices, s.case_sensitive) for _, s, _ in readers}) > 1:
            raise TypeError(f"--{name} means different kinds of value to {', '.join(d for d, _, _ in readers)}")
        defaults = {repr(d) for _, _, d in readers}
        meanings: dict[str, list[str]] = {}
        for dataset, spec, default in readers:
            own = len(defaults) > 1 and default not in (None, False)
            meanings.setdefault(spec.help + (f" (default {default})" if own else ""), []).append(dataset)
        text = "; ".join(f"{', '.join(names)}: {meaning}" for meaning, names in meanings.items()) + "."
        merged[name] = (replace(readers[0][1], help=text), readers[0][2] if len(defaults) == 1 else None)
    return merged


class SampleNames:
    """Names of samples read from files: each file's path relative to the source root, '/'-separated
    ("train/n01440764/n01440764_0.JPEG"), unique within the source where file stems are not. A link to a file
    inside the root is named as that file, so one file linked into two splits is one sample to `data check`."""

    def __init__(self, root: Path):
        self.root, self.real_root = Path(root), Path(root).resolve()

    def __call__(self, path: Path) -> str:
        try:
            return Path(path).resolve().relative_to(self.real_root).as_posix()
        except ValueError:  # a link out of the root (a dataset of links into a shared store): its own place
            return Path(path).relative_to(self.root).as_posix()


# The pixel types a prepared file keeps as they are (every source stores these natively).
PIXEL_TYPES = ("uint8", "uint16", "float32")


@lru_cache(maxsize=None)
def lerp_weights(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source neighbours and weight of 1-D linear interpolation, half-pixel centres, clamped edges."""
    src = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
    lo = np.floor(src).astype(np.intp)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, (src - lo).astype(np.float32)


@lru_cache(maxsize=None)
def reduce_weights(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Taps (n_out, k) and weights (n_out, k) of the triangle filter shrinking n_in to n_out samples, as PIL's
    BILINEAR reduction (Resample.c precompute_coeffs): support widened by the factor, cut at the edges and
    renormalised there. Taps past the edge point at the last sample with weight 0."""
    scale = n_in / n_out
    centre = (np.arange(n_out) + 0.5) * scale
    lo = np.maximum((centre - scale + 0.5).astype(np.intp), 0)  # PIL truncates these toward zero, as here
    hi = np.minimum((centre + scale + 0.5).astype(np.intp), n_in)
    taps = lo[:, None] + np.arange(int((hi - lo).max()))[None, :]
    w = np.maximum(0.0, 1.0 - np.abs((taps - centre[:, None] + 0.5) / scale))
    w[taps >= hi[:, None]] = 0.0
    w /= w.sum(axis=1, keepdims=True)
    return np.minimum(taps, n_in - 1), w.astype(np.float32)


def _resize_axis(x: np.ndarray, n_out: int, axis: int) -> np.ndarray:
    """x (float32) resampled to n_out along `axis` (1 or 2): bilinear when enlarging, the triangle filter of
    reduce_weights when shrinking, so that every source pixel counts (no aliasing)."""
    n_in = x.shape[axis]
    if n_in == n_out:
        return x
    shape = (1, n_out, 1) if axis == 1 else (n_out,)
    if n_out > n_in:
        lo, hi, w = lerp_weights(n_in, n_out)
        return x.take(lo, axis) * (1 - w).reshape(shape) + x.take(hi, axis) * w.reshape(shape)
    taps, w = reduce_weights(n_in, n_out)
    out = x.take(taps[:, 0], axis) * w[:, 0].reshape(shape)
    for t in range(1, taps.shape[1]):
        out += x.take(taps[:, t], axis) * w[:, t].reshape(shape)
    return out


def resize(image: np.ndarray, size: int) -> np.ndarray:
    """(C, H, W) -> (C, size, size) as PIL's BILINEAR resize: enlarging is bilinear with half-pixel centres and
    clamped edges (align_corners=False, as torch's interpolate and OpenCV's INTER_LINEAR), shrinking averages
    each output pixel's footprint (the triangle filter of torch's antialias=True); rounded and clipped for
    integer types. Separable gathers and multiply-adds rather than a matrix product: no BLAS threads in forked
    reader processes."""
    if image.shape[1:] == (size, size):
        return image
    out = _resize_axis(_resize_axis(image.astype(np.float32), size, 1), size, 2)
    if image.dtype == np.float32:
        return out
    info = np.iinfo(image.dtype)
    return np.clip(np.rint(out), info.min, info.max).astype(image.dtype)


def check_size(size: int | None) -> None:
    """`--size` of a source that resizes (folder, arrays): None keeps the images' own size."""
    if size is not None and size < 1:
        raise LbscaleError("--size must be >= 1")


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


def parallel_batches(fn: Callable, items: list, workers: int, batch: int, sample_shape: tuple, dtype,
                     desc: str) -> Iterator[tuple[np.ndarray, list]]:
    """Apply `fn(item) -> (pixels, extra)` to every item; yield (pixels (n, *sample_shape), extras) per batch.

    `workers` reader processes run beside the caller, as torch's DataLoader num_workers (0: read in-process).
    They write pixels straight into a shared memory-mapped file (in /dev/shm where it exists) of two batch
    buffers: the caller consumes batch k while workers fill k+1, and only the small extras are pickled. So a
    yielded pixel array is valid until the next one is requested: copy it to keep it. The workers are never
    forks of the caller (lbscale.data.worker_context), so `fn` must be picklable (a module-level function or a
    partial of one)."""
    progress = bar(total=len(items), desc=desc, unit="file")
    groups = [items[a:a + batch] for a in range(0, len(items), batch)]
    shared = None  # the buffer file
    try:
        if not groups:
            return
        if workers < 1:
            for group in groups:
                pixels = np.empty((len(group), *sample_shape), dtype=dtype)
                extras = []
                for i, item in enumerate(group):
                    pixels[i], extra = fn(item)
                    extras.append(extra)
                    progress.update(1)
                yield pixels, extras
            return
        shape = (2, batch, *sample_shape)
        fd, shared = tempfile.mkstemp(prefix="lbscale-read-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.close(fd)
        views = np.memmap(shared, dtype=dtype, mode="w+", shape=shape)  # lives on while a yielded view does
        init = (fn, shared, shape, np.dtype(dtype).str)
        with worker_context().Pool(workers, initializer=_attach, initargs=init) as pool:

            def submit(k):
                jobs = [(k % 2, slot, item) for slot, item in enumerate(groups[k])]
                return pool.map_async(_shared_job, jobs, chunksize=max(1, len(jobs) // (4 * workers)))

            pending = submit(0)
            for k in range(len(groups)):
                extras = pending.get()
                pending = submit(k + 1) if k + 1 < len(groups) else None
                progress.update(len(extras))
                yield views[k % 2, :len(extras)], extras
    finally:
        progress.close()
        if shared is not None:
            os.unlink(shared)  # the mapping itself goes with the last view of it


_WORKER = None  # in a reader process: (fn, views of the buffer file)


def _attach(fn, path, shape, dtype):
    global _WORKER
    _WORKER = (fn, np.memmap(path, dtype=np.dtype(dtype), mode="r+", shape=shape))


def _shared_job(job):
    buffer, slot, item = job
    fn, views = _WORKER
    pixels, extra = fn(item)
    views[buffer, slot] = pixels
    return extra
