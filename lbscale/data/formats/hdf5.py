"""HDF5 layout: /<split>/images (N,C,H,W), /<split>/labels, optional /<split>/names and extras; attrs on /."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np

from lbscale.data.formats.base import (
    FORMAT_VERSION,
    SPLITS,
    AtomicWriter,
    BandStats,
    DatasetMeta,
    PreparedFile,
    check_splits,
    commit_path,
    claim_partial,
)
from lbscale.data.formats.checksums import CheckedDataset, ChunkChecks, chunk_checks, checksummable, has_checksums
from lbscale.errors import LbscaleError
from lbscale.results import naming

# Encoded samples: bytes end to end in /<split>/images, located by these per-sample arrays (not label sets);
# `sizes` holds each sample's decoded (height, width). The loader shuffles them in blocks of ENCODED_BLOCK.
ENCODED_KEYS = ("images", "labels", "names", "offsets", "lengths", "sizes")
ENCODED_BLOCK = 1024
REQUIRED = ("images", "labels")  # per split; names and extras are optional
REQUIRED_ENCODED = ("images", "labels", "offsets", "lengths", "sizes")
CHUNK_BYTES = 2 << 20  # ~2 MiB per chunk: one batch of small images is one or a few contiguous reads


def chunk_len_for(sample_bytes: int) -> int:
    return max(1, CHUNK_BYTES // max(1, sample_bytes))


CACHE_ROOM = 8 << 20  # bytes a write may need beyond its batch: the chunk caches (1 MiB per dataset), metadata


class Hdf5Writer(AtomicWriter):
    """Appends batches per split into resizable, N-chunked datasets with a Fletcher32 checksum per chunk;
    `finish` stamps attrs and renames. checksums=False writes files as lbscale did before it stored them
    (to measure what they cost: benchmarks/bench_checksums.py)."""

    def __init__(self, out: Path, meta: DatasetMeta, command: str, checksums: bool = True):
        self.checksums = checksums
        self.out = Path(out)
        self.meta = meta
        self.command = command
        self.tmp = claim_partial(self.out)
        with naming(self.out):
            self.h5 = h5py.File(self.tmp, "w")
        self.stats = BandStats()
        self.template: dict[str, tuple] = {}

    def append(self, split: str, images: np.ndarray, labels: np.ndarray, names=None, extras=None,
               stats: np.ndarray | None = None) -> None:
        """Pixel arrays (n, C, H, W), or encoded samples: an object array of uint8 byte arrays with their
        per-sample pixel `stats` (rows of sums, sums of squares, pixel count), stored end to end."""
        if images.dtype == object:
            group = self.h5.get(split)
            before = group["images"].shape[0] if group is not None and "images" in group else 0
            lengths = np.fromiter((len(b) for b in images), dtype=np.int64, count=len(images))
            extras = {**(extras or {}), "offsets": before + np.cumsum(lengths) - lengths, "lengths": lengths}
            images = np.concatenate(images) if len(images) else np.empty(0, np.uint8)
        arrays = {"images": images, "labels": labels, **(extras or {})}
        if names is not None:
            arrays["names"] = np.asarray(names, dtype=object)
        self._check_space(sum(a.nbytes for a in arrays.values()))
        group = self.h5.require_group(split)
        for key, arr in arrays.items():
            self._dataset(group, key, arr)
            ds = group[key]
            n0 = ds.shape[0]
            ds.resize(n0 + len(arr), axis=0)
            ds[n0:] = arr
        if split == "train" and stats is not None:
            self.stats.add(stats)
        elif split == "train":
            self.stats.update(images)

    def _check_space(self, nbytes: int) -> None:
        # The HDF5 library writes through its caches: a full disk surfaces later, while it flushes or frees a
        # dataset, as messages on stderr and at worst a crash. So refuse a batch the disk cannot take (with room
        # for what the caches hold), as an OSError naming the output.
        if shutil.disk_usage(self.tmp.parent).free < nbytes + CACHE_ROOM:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.out))

    def _dataset(self, group, key: str, arr: np.ndarray) -> None:
        if key in group:
            return
        shape = arr.shape[1:]
        dtype = h5py.string_dtype() if arr.dtype == object else arr.dtype
        self.template.setdefault(key, (shape, dtype))
        sample_bytes = int(np.prod(shape, dtype=np.int64)) * (np.dtype(dtype).itemsize if arr.dtype != object else 32)
        n_chunk = chunk_len_for(sample_bytes)
        group.create_dataset(key, shape=(0, *shape), maxshape=(None, *shape), dtype=dtype, chunks=(n_chunk, *shape),
                             fletcher32=self.checksums and checksummable(dtype))

    def finish(self) -> None:
        if "images" not in self.template:
            raise LbscaleError(f"{self.out}: the source yielded no samples")
        for split in SPLITS:  # every split exists, possibly empty, so readers need no special case
            group = self.h5.require_group(split)
            if "images" in group:
                continue
            for key, (shape, dtype) in self.template.items():
                if key not in group:
                    group.create_dataset(key, shape=(0, *shape), maxshape=(None, *shape), dtype=dtype,
                                         chunks=(1, *shape), fletcher32=self.checksums and checksummable(dtype))
        bands = len(self.meta.band_names) if self.meta.encoding != "raw" else self.template["images"][0][0]
        mean, std = self.stats.result(bands)
        attrs = self.meta.attrs()
        attrs.update(mean=json.dumps(mean), std=json.dumps(std), command=self.command)
        for k, v in attrs.items():
            self.h5.attrs[k] = v
        self.h5.attrs["complete"] = True  # written last: a file without it is not a finished prepare
        self.h5.close()
        commit_path(self.tmp, self.out)

    def close(self) -> None:
        try:
            self.h5.close()
        except Exception:  # already closed
            pass


class Hdf5File(PreparedFile):
    """Lazy reader: images stay on disk and are sliced by the loader; labels are read whole (small)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            # A large raw-chunk cache keeps partially read chunks around between contiguous reads.
            self.h5 = h5py.File(self.path, "r", rdcc_nbytes=64 << 20)
        except OSError as e:
            raise LbscaleError(f"{self.path}: not a readable HDF5 file ({e})") from None
        self.attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in self.h5.attrs.items()}
        if not self.attrs.get("complete"):
            self.h5.close()
            raise LbscaleError(f"{self.path}: not a finished lbscale prepared file (no 'complete' attribute)")
        if int(self.attrs.get("format_version", 0)) > FORMAT_VERSION:
            self.h5.close()
            raise LbscaleError(f"{self.path}: format version {self.attrs['format_version']} is newer than this lbscale")
        groups = {s: set(g.keys()) for s, g in self.h5.items() if s in SPLITS and isinstance(g, h5py.Group)}
        try:
            check_splits(self.path, groups, REQUIRED if self.encoding == "raw" else REQUIRED_ENCODED)
        except LbscaleError:
            self.h5.close()
            raise

    def has_split(self, split: str) -> bool:
        return split in self.h5 and "images" in self.h5[split]

    def checked_dataset(self, split: str, key: str) -> CheckedDataset:
        """One dataset of a split, read through HDF5's checksums with a refused chunk as one line."""
        return CheckedDataset(self.path, self.h5[split][key])

    def images(self, split: str):
        if self.encoding != "raw":
            return EncodedImages(self.path, self.checked_dataset(split, "images"), self.labels(split, "offsets"),
                                 self.labels(split, "lengths"))
        return self.checked_dataset(split, "images")

    def size(self, split: str) -> int:
        return int(self.h5[split]["labels"].shape[0])

    def labels(self, split: str, key: str = "labels") -> np.ndarray:
        return self.checked_dataset(split, key)[...]

    def names(self, split: str):
        if "names" not in self.h5[split]:
            return None
        return [n.decode() if isinstance(n, bytes) else n for n in self.checked_dataset(split, "names")[...]]

    def extras(self, split: str) -> list[str]:
        return [k for k in self.h5[split].keys() if k not in ENCODED_KEYS]

    def chunk_len(self, split: str) -> int:
        if self.encoding != "raw":
            return ENCODED_BLOCK
        chunks = self.h5[split]["images"].chunks
        return int(chunks[0]) if chunks else 1024

    def chunk_views(self, split: str) -> list[np.ndarray] | None:
        """Read-only memory maps of the image chunks in sample order, or None if stored with filters (but
        Fletcher32 checksums).

        Unfiltered chunks are plain bytes in the file; mapping them lets the loader gather a batch with one
        copy instead of a read plus a shuffle copy. (Encoded files map their byte stream in EncodedImages.)"""
        return None if self.encoding != "raw" else mapped_chunks(self.path, self.h5[split]["images"])

    def chunk_checks(self, split: str) -> ChunkChecks | None:
        """The checksums of the chunks chunk_views maps, verified as they are first read."""
        return None if self.encoding != "raw" else chunk_checks(self.path, self.h5[split]["images"])

    def close(self) -> None:
        self.h5.close()


def mapped_chunks(path: Path, ds) -> list[np.ndarray] | None:
    """Read-only memory maps of the chunks of a dataset chunked along its first axis, in order; None where
    it is stored with filters other than Fletcher32, empty, or not in whole chunks.

    Fletcher32 leaves a chunk's bytes as they are and appends 4 checksum bytes, so checksummed chunks map
    too; the maps skip HDF5's check (it would cost every batch a pass over its chunks), so their readers verify
    each chunk once, the first time they read it (ChunkChecks: benchmarks/bench_checksums.py measures it)."""
    n_filters = ds.id.get_create_plist().get_nfilters() if ds.chunks is not None else 0
    if ds.chunks is None or ds.shape[0] == 0 or n_filters > int(has_checksums(ds)):
        return None
    n_chunk = ds.chunks[0]
    views: list = [None] * (-(-ds.shape[0] // n_chunk))
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    for i in range(ds.id.get_num_chunks()):
        info = ds.id.get_chunk_info(i)
        tail = 4 if n_filters and not info.filter_mask else 0
        if info.size != n_chunk * int(np.prod(ds.shape[1:])) * ds.dtype.itemsize + tail:
            return None
        views[info.chunk_offset[0] // n_chunk] = np.ndarray((n_chunk, *ds.shape[1:]), dtype=ds.dtype, buffer=mm,
                                                            offset=info.byte_offset)
    return None if any(v is None for v in views) else views


class EncodedImages:
    """The encoded samples of one split: `take(sorted indices)` -> list of uint8 arrays (the JPEG bytes).

    Unfiltered chunks of the byte stream are memory-mapped, so a sample is a view (or a join of two views
    where it straddles a chunk boundary); filtered storage falls back to h5py reads."""

    dtype = np.dtype(object)

    def __init__(self, path: Path, ds, offsets: np.ndarray, lengths: np.ndarray):
        self.ds, self.offsets, self.lengths = ds, offsets.astype(np.int64), lengths.astype(np.int64)
        self.shape = (len(self.offsets),)
        self.ndim = 1
        self.memory = None  # the whole stream, after `load()`
        self.views = mapped_chunks(path, ds)
        self.chunk = int(ds.chunks[0]) if self.views is not None else None
        self.checks = chunk_checks(path, ds) if self.views is not None else None

    def __len__(self) -> int:
        return self.shape[0]

    def load(self) -> "EncodedImages":
        self.memory = self.ds[...]
        return self

    def _one(self, i: int) -> np.ndarray:
        a, n = int(self.offsets[i]), int(self.lengths[i])
        if self.memory is not None:
            return self.memory[a:a + n]
        if self.views is None:
            return self.ds[a:a + n]
        first, last = a // self.chunk, (a + n - 1) // self.chunk
        if self.checks is not None:
            for k in range(first, last + 1):
                self.checks.verify(k)
        if first == last:
            return self.views[first][a - first * self.chunk:a - first * self.chunk + n]
        parts = [self.views[k] for k in range(first, last + 1)]
        return np.concatenate(parts)[a - first * self.chunk:a - first * self.chunk + n]

    def take(self, idx) -> list[np.ndarray]:
        return [self._one(int(i)) for i in idx]

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.take(range(*key.indices(len(self))))
        return self._one(int(key))
