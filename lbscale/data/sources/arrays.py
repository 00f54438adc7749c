"""A user's own NumPy arrays: images + labels (+ an optional per-sample split) as .npy, .npz or HDF5 datasets.

An array is named as `X.npy`, `X.npz:KEY` (KEY optional when the archive holds one array) or `X.h5:DATASET`.
Nothing is read whole but the labels and the split array: .npy files are memory-mapped, HDF5 datasets read
per slice, and .npz members memory-mapped where stored uncompressed (`np.savez`); a compressed member
(`np.savez_compressed`) cannot be mapped and is read whole into memory. Images stream in batches of at most
1024 samples (and about 32 MiB), so an array larger than memory prepares in bounded memory. `--size S` resizes
every image to S x S with the resize `prepare folder --size` uses (sources.base.resize), batch by batch.
"""

from __future__ import annotations

import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from lbscale.data.formats.base import SPLITS, DatasetMeta
from lbscale.data.sources.base import PIXEL_TYPES, RESIZE, Source, SourceOption, SplitBatch, check_size, resize
from lbscale.errors import LbscaleError

BATCH = 1024
BATCH_BYTES = 32 << 20
LAYOUTS = ("NCHW", "NHWC")
_SPEC = re.compile(r"^(.*?\.(npy|npz|h5|hdf5))(?::(.*))?$", re.IGNORECASE)


@dataclass
class ArrayRef:
    """One named array: `spec` as given, and `array` read lazily (np.memmap, h5py.Dataset or ndarray)."""

    spec: str
    array: object
    handle: object = None  # the open h5py.File the dataset lives in

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.array.dtype)

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, start: int | None = None, stop: int | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        """Rows [start:stop] (those where `mask`); of a memory map a view (a copy of only those rows with a mask)."""
        block = self.array[start:stop]
        return np.asarray(block[mask] if mask is not None else block)


def open_array(spec: str, what: str) -> ArrayRef:
    """`X.npy`, `X.npz[:KEY]` or `X.h5:DATASET` -> an ArrayRef; LbscaleError naming the file and key if not."""
    m = _SPEC.match(str(spec))
    if not m:
        raise LbscaleError(f"{spec}: {what}: expected X.npy, X.npz[:KEY] or X.h5:DATASET")
    path, ext, key = Path(m.group(1)), m.group(2).lower(), m.group(3) or None
    if not path.is_file():
        raise LbscaleError(f"{path}: no such file ({what})")
    if ext == "npy":
        if key is not None:
            raise LbscaleError(f"{spec}: a .npy file holds one array; name it without ':{key}' ({what})")
        try:
            return ArrayRef(str(spec), np.load(path, mmap_mode="r", allow_pickle=False))
        except (ValueError, OSError, EOFError) as e:
            raise LbscaleError(f"{path}: not a readable .npy array ({what}: {e})") from None
    if ext == "npz":
        return ArrayRef(str(spec), _npz_member(path, key, what))
    return _h5_dataset(path, key, what, str(spec))


def _npz_member(path: Path, key: str | None, what: str):
    try:
        with zipfile.ZipFile(path) as zf:
            members = [n[:-4] for n in zf.namelist() if n.endswith(".npy")]
    except (zipfile.BadZipFile, OSError) as e:
        raise LbscaleError(f"{path}: not a readable .npz archive ({what}: {e})") from None
    if key is None:
        if len(members) != 1:
            raise LbscaleError(f"{path}: holds {len(members)} arrays ({', '.join(members)}); name one as "
                               f"{path}:KEY ({what})")
        key = members[0]
    if key not in members:
        raise LbscaleError(f"{path}: no array {key!r} (it holds {', '.join(members) or 'none'}) ({what})")
    mapped = _map_stored_member(path, key + ".npy")
    if mapped is not None:
        return mapped
    try:
        with np.load(path, allow_pickle=False) as npz:
            return npz[key]
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise LbscaleError(f"{path}:{key}: not a readable array ({what}: {e})") from None


def _map_stored_member(path: Path, member: str) -> np.memmap | None:
    """A memory map of an uncompressed (ZIP_STORED) .npy member of an .npz; None where it cannot be mapped."""
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(member)
        if info.compress_type != zipfile.ZIP_STORED:
            return None
        with open(path, "rb") as fh:
            fh.seek(info.header_offset)
            local = fh.read(30)
            if local[:4] != b"PK\x03\x04":
                return None
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            fh.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(fh)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(fh)
            offset = fh.tell()
        if dtype.hasobject or 0 in shape:
            return None
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")
    except (ValueError, OSError, struct.error, KeyError):
        return None  # np.load reports what is wrong with it


def _h5_dataset(path: Path, key: str | None, what: str, spec: str) -> ArrayRef:
    import h5py

    try:
        h5 = h5py.File(path, "r")
    except OSError as e:
        raise LbscaleError(f"{path}: not a readable HDF5 file ({what}: {e})") from None
    names = []
    h5.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    if key is None or not isinstance(h5.get(key), h5py.Dataset):
        h5.close()
        held = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "") if names else "none"
        if key is None:
            raise LbscaleError(f"{path}: name the dataset as {path}:DATASET (it holds {held}) ({what})")
        raise LbscaleError(f"{path}: no dataset {key!r} (it holds {held}) ({what})")
    return ArrayRef(spec, h5[key], h5)


def image_layout(ref: ArrayRef, layout: str | None) -> tuple[int, int, int]:
    """(C, H, W) of one image of `ref` under `layout`; a layout that only the other one makes sense of is refused."""
    shape = ref.shape
    if len(shape) == 3:
        return 1, shape[1], shape[2]
    if len(shape) != 4:
        raise LbscaleError(f"{ref.spec}: images of shape {shape}: expected (N, H, W) or 4-D with --layout")
    if layout is None:
        raise LbscaleError(f"{ref.spec}: 4-D images {shape} need --layout NCHW or NHWC")
    layout = layout.upper()
    if layout not in LAYOUTS:
        raise LbscaleError(f"unknown --layout {layout!r}; choose NCHW or NHWC")
    nchw, nhwc = (shape[1], shape[2], shape[3]), (shape[3], shape[1], shape[2])
    chw, other = (nchw, nhwc) if layout == "NCHW" else (nhwc, nchw)
    # Images are almost always square: reading channels as a side makes them non-square (a 64x64x12 NHWC
    # array read as NCHW gives 64 channels of 64x12), while the right layout makes them square again.
    if chw[1] != chw[2] and other[1] == other[2]:
        guess = "NHWC" if layout == "NCHW" else "NCHW"
        raise LbscaleError(f"{ref.spec}: images {shape} read as {layout} give {chw[0]} bands of {chw[1]}x{chw[2]}; "
                           f"they look {guess} ({other[0]} bands of {other[1]}x{other[2]})")
    return chw


def read_labels(ref: ArrayRef, n: int, images: str, class_names: list[str] | None) -> tuple[np.ndarray, str, int]:
    """Labels of `ref` checked against `n` images -> (labels, task, classes): 1-D ids or 2-D 0/1 multi-hot with two
    or more columns (a single column is refused: lbscale does not guess which task it means)."""
    if len(ref.shape) not in (1, 2):
        raise LbscaleError(f"{ref.spec}: labels of shape {ref.shape}: expected (N,) class ids or (N, K) multi-hot")
    if ref.shape[0] != n:
        raise LbscaleError(f"{ref.spec}: {ref.shape[0]} labels for {n} images in {images}")
    labels = ref.read()
    if labels.ndim == 1:
        if not np.issubdtype(labels.dtype, np.integer):
            raise LbscaleError(f"{ref.spec}: labels of dtype {labels.dtype}: class ids must be integers")
        if n and labels.min() < 0:
            raise LbscaleError(f"{ref.spec}: class id {labels.min()} < 0")
        k = int(labels.max()) + 1 if n else 0
        if class_names is not None:
            if len(class_names) < k:
                raise LbscaleError(f"{ref.spec}: class id {k - 1} but --class-names names {len(class_names)}")
            k = len(class_names)
        return labels.astype(np.int64), "multiclass", k
    k = labels.shape[1]
    binary = np.all((labels == 0) | (labels == 1))
    if k == 1:  # a one-label multilabel task is a two-class task in disguise, or class ids in a column: say which
        raise LbscaleError(f"{ref.spec}: labels of shape {ref.shape}: " + (
            "one 0/1 column; pass shape (N,) class ids 0/1 for a two-class task, or (N, 2) multi-hot for two "
            "independent labels" if binary else "one column of class ids; pass them as shape (N,)"))
    if k == 0 or not binary:
        raise LbscaleError(f"{ref.spec}: multi-hot labels {labels.shape} must be rows of 0/1")
    if class_names is not None and len(class_names) != k:
        raise LbscaleError(f"{ref.spec}: {k} label columns but --class-names names {len(class_names)}")
    return labels.astype(np.uint8), "multilabel", k


def read_split_of(ref: ArrayRef, n: int, images: str) -> np.ndarray:
    """Per-sample split index into SPLITS (0 train, 1 val, 2 test) from names or the ints 0/1/2."""
    if len(ref.shape) != 1 or ref.shape[0] != n:
        raise LbscaleError(f"{ref.spec}: split array of shape {ref.shape}; expected ({n},) for the images of {images}")
    raw = ref.read()
    if raw.dtype.kind in "iu":
        bad = raw[(raw < 0) | (raw >= len(SPLITS))]
        if bad.size:
            raise LbscaleError(f"{ref.spec}: unknown split {bad[0]} (0 train, 1 val, 2 test, or the names)")
        return raw.astype(np.int8)
    if raw.dtype.kind == "S":
        raw = np.char.decode(raw, "utf-8")
    elif raw.dtype.kind == "O":  # h5py variable-length strings
        raw = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in raw])
    if raw.dtype.kind != "U":
        raise LbscaleError(f"{ref.spec}: split array of dtype {raw.dtype}; expected names or the ints 0/1/2")
    raw = np.char.strip(np.char.lower(raw))
    out = np.full(n, -1, dtype=np.int8)
    for i, s in enumerate(SPLITS):
        out[raw == s] = i
    if (out < 0).any():
        raise LbscaleError(f"{ref.spec}: unknown split name {str(raw[out < 0][0])!r} (train, val, test or 0, 1, 2)")
    return out


def name_list(value, what: str) -> list[str] | None:
    """'a,b,c' (or a list) -> names; None stays None."""
    if value is None:
        return None
    names = [s.strip() for s in value.split(",")] if isinstance(value, str) else [str(s) for s in value]
    if not all(names) or len(set(names)) != len(names):
        raise LbscaleError(f"--{what}: names must be non-empty and distinct")
    return names


class ArraysSource(Source):
    """Images (N, H, W) or 4-D in --layout, labels (N,) class ids or (N, K >= 2) multi-hot; samples named by row.

    With `split_of` the samples marked val / test form those splits as given and train is the rest; a split it
    marks no sample of is carved from train as for any source (set its fraction to 0 to keep it empty)."""

    splits = ("train",)
    help = "your own arrays: --images, --labels (X.npy, X.npz:KEY, X.h5:DATASET), --layout"
    options = (SourceOption("images", "the image array: X.npy, X.npz[:KEY] or X.h5:DATASET"),
               SourceOption("labels", "the label array (N,) class ids or (N, K) multi-hot, same syntax as --images"),
               SourceOption("layout", "axis order of 4-D images (required for them; (N, H, W) images are one band)",
                            choices=("NCHW", "NHWC"), case_sensitive=False),
               SourceOption("split_of", "a per-sample array of train/val/test (or 0/1/2); splits it marks no sample "
                                        "of are carved from train"),
               SourceOption("band_names", "comma-separated band names (default B1..Bn)"),
               SourceOption("class_names", "comma-separated class names (default 0..K-1)"), RESIZE)
    needs_src = False  # --images and --labels name its files

    def __init__(self, name: str = "arrays", src=None, images: str | None = None, labels: str | None = None,
                 layout: str | None = None, split_of: str | None = None, band_names=None, class_names=None,
                 size: int | None = None):
        if src is not None:
            raise LbscaleError(f"{name}: --src does not apply; name the arrays with --images and --labels")
        if images is None or labels is None:
            raise LbscaleError(f"{name}: --images and --labels are required")
        check_size(size)
        self.images = open_array(images, "images")
        c, h, w = image_layout(self.images, layout)
        self.size = size
        self.nhwc = len(self.images.shape) == 4 and layout.upper() == "NHWC"
        dt = self.images.dtype
        self.dtype = np.dtype(f"{dt.kind}{dt.itemsize}") if dt.kind in "uf" else dt  # native byte order
        if self.dtype.name not in PIXEL_TYPES:
            raise LbscaleError(f"{self.images.spec}: images of dtype {dt} not supported ({', '.join(PIXEL_TYPES)})")
        n = len(self.images)
        if n == 0:
            raise LbscaleError(f"{self.images.spec}: no images")
        classes = name_list(class_names, "class-names")
        self.labels, task, k = read_labels(open_array(labels, "labels"), n, images, classes)
        bands = name_list(band_names, "band-names") or [f"B{i + 1}" for i in range(c)]
        if len(bands) != c:
            raise LbscaleError(f"--band-names names {len(bands)} bands; {images} has {c}")
        self.split_ids = None
        if split_of is not None:
            self.split_ids = read_split_of(open_array(split_of, "split-of"), n, images)
            present = set(np.unique(self.split_ids).tolist())
            if 0 not in present:
                raise LbscaleError(f"{split_of}: no sample is marked train")
            self.splits = tuple(s for i, s in enumerate(SPLITS) if i in present)
        # resizing works in float32 on the image, a half-resized copy and the result
        per_sample = c * h * w * self.dtype.itemsize if size is None else 4 * c * max(h * w, size * max(size, w))
        self.batch = max(1, min(BATCH, BATCH_BYTES // max(1, per_sample)))
        notes = {"images": str(images), "labels": str(labels),
                 "layout": "NHW" if len(self.images.shape) == 3 else layout.upper()}
        if split_of is not None:
            notes["split_of"] = str(split_of)
        # arrays say nothing of what they show: notes.imagery stays "unknown" (`augmentation: auto` takes
        # flip-rot90, as it always did) unless prepare's --imagery says
        self.meta = DatasetMeta(name, task, classes or [str(i) for i in range(k)], bands, "user arrays", notes=notes)

    def train_labels(self) -> np.ndarray:
        return self.labels if self.split_ids is None else self.labels[self.split_ids == 0]

    def batches(self, split: str) -> Iterator[SplitBatch]:
        code = SPLITS.index(split)
        for a in range(0, len(self.images), self.batch):
            b = min(a + self.batch, len(self.images))
            rows = np.arange(a, b)
            mask = None
            if self.split_ids is not None:
                mask = self.split_ids[a:b] == code
                if not mask.any():
                    continue
                rows = rows[mask]
                a, b, mask = rows[0], rows[-1] + 1, mask[rows[0] - a:rows[-1] + 1 - a]  # an HDF5 read spans these
            pixels = self.images.read(a, b, None if mask is None or mask.all() else mask)
            pixels = pixels[:, None] if pixels.ndim == 3 else pixels.transpose(0, 3, 1, 2) if self.nhwc else pixels
            if self.size is not None:  # resize is per band: the batch's bands in one call
                n, c, h, w = pixels.shape
                pixels = resize(pixels.reshape(n * c, h, w), self.size).reshape(n, c, self.size, self.size)
            # the one copy (none for a contiguous NCHW view of a memory map: the writer reads it from there)
            yield SplitBatch(np.ascontiguousarray(pixels, dtype=self.dtype), self.labels[rows],
                             [str(i) for i in rows])
