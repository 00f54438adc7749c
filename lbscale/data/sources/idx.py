"""MNIST, Fashion-MNIST, KMNIST and EMNIST: the IDX files (gzipped or not), official train / t10k split."""

from __future__ import annotations

import gzip
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from lbscale.data.formats.base import DatasetMeta
from lbscale.data.sources.base import Source, SourceOption, SplitBatch
from lbscale.errors import LbscaleError
from lbscale.progress import log_line

# The type byte of the magic number; all data is big-endian.
DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
# train-images-idx3-ubyte[.gz], t10k-labels.idx1-ubyte, emnist-balanced-test-images-idx3-ubyte.gz, ...
FILE_RE = re.compile(r"^(?P<prefix>.*?)(?P<split>train|t10k|test)-(?P<kind>images|labels)[-.]idx[13]-ubyte(\.gz)?$")
KINDS = {"images": 3, "labels": 1}  # dimensions of each file: (N, H, W) and (N,)
BATCH = 8192  # rows streamed per SplitBatch
READ_BLOCK = 16 << 20

DIGITS = [str(i) for i in range(10)]
UPPER = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
# EMNIST's splits (emnist-<split>-*), from the release's emnist-<split>-mapping.txt files.
EMNIST_CLASSES = {
    "byclass": DIGITS + UPPER + [c.lower() for c in UPPER],
    "bymerge": DIGITS + UPPER + list("abdefghnqrt"),
    "balanced": DIGITS + UPPER + list("abdefghnqrt"),
    "letters": [f"{c}/{c.lower()}" for c in UPPER],  # upper and lower case merged
    "digits": DIGITS,
    "mnist": DIGITS,
}
EMNIST_FIRST_LABEL = {"letters": 1}  # EMNIST letters numbers its classes 1..26: stored as 0..25


@dataclass(frozen=True)
class Known:
    """A dataset the files can be: its title, the imagery it holds (notes.imagery) and its class names."""

    title: str
    imagery: str
    classes: tuple[str, ...] | None  # None: EMNIST, per split


KNOWN = {
    "mnist": Known("MNIST", "digits", tuple(DIGITS)),
    "fashion-mnist": Known("Fashion-MNIST", "objects", ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")),
    "kmnist": Known("Kuzushiji-MNIST", "characters", ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo")),
    "emnist": Known("EMNIST", "characters", None),
}


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"  # by content: a .gz name on a plain file (or the reverse) still reads


class IdxFile:
    """One IDX file, its header and length checked on opening (a gzipped one is read through once)."""

    def __init__(self, path: Path, kind: str):
        self.path = Path(path)
        try:
            self.gzipped = _is_gzip(self.path)
            with self._open() as f:
                magic = f.read(4)
                if len(magic) < 4 or magic[:2] != b"\0\0" or magic[2] not in DTYPES:
                    raise LbscaleError(f"{self.path}: not an IDX file (magic {magic.hex() or 'missing'})")
                if magic[3] != KINDS[kind]:
                    raise LbscaleError(f"{self.path}: {magic[3]} dimensions, IDX {kind} have {KINDS[kind]}")
                dims = f.read(4 * magic[3])
                if len(dims) < 4 * magic[3]:
                    raise LbscaleError(f"{self.path}: truncated inside the header")
                self.shape = struct.unpack(f">{magic[3]}I", dims)
                self.dtype, self.header = np.dtype(DTYPES[magic[2]]), 4 + len(dims)
                size = self._data_bytes(f)
        except (OSError, EOFError, zlib.error) as e:
            raise LbscaleError(f"{self.path}: unreadable ({e})") from None
        expected = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        if size != expected:
            what = "truncated" if size < expected else "longer than its header says"
            raise LbscaleError(f"{self.path}: {what}: {size:,} data bytes, header {self.shape} needs {expected:,}")

    def _open(self) -> BinaryIO:
        return gzip.open(self.path, "rb") if self.gzipped else open(self.path, "rb")

    def _data_bytes(self, f) -> int:
        if not self.gzipped:
            return self.path.stat().st_size - self.header
        # gzip keeps the length only modulo 4 GiB, and only a full read checks the CRC of a damaged file
        size = 0
        while block := f.read(READ_BLOCK):
            size += len(block)
        return size

    def read(self) -> np.ndarray:
        """The whole array (for labels)."""
        return np.concatenate([np.empty((0, *self.shape[1:]), self.dtype.newbyteorder("=")),
                               *self.blocks(max(self.shape[0], 1))])

    def blocks(self, rows: int) -> Iterator[np.ndarray]:
        """The array in blocks of `rows` along the first axis, native byte order."""
        row_shape = self.shape[1:]
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * self.dtype.itemsize
        with self._open() as f:
            f.read(self.header)
            for a in range(0, self.shape[0], rows):
                n = min(rows, self.shape[0] - a)
                data = f.read(n * row_bytes)
                if len(data) != n * row_bytes:  # changed since it was checked
                    raise LbscaleError(f"{self.path}: truncated at row {a + len(data) // max(row_bytes, 1)}")
                block = np.frombuffer(data, self.dtype).reshape(n, *row_shape)
                yield block.astype(self.dtype.newbyteorder("="), copy=False)


def find_set(src: Path, subset: str | None) -> tuple[Path, str, dict[str, IdxFile]]:
    """The one complete set of four IDX files in `src` (a folder, a subfolder of it, or one of the files):
    its folder, its file-name prefix and the files opened, keyed "train-images", "test-labels", ..."""
    only = None
    if src.is_file():
        match = FILE_RE.match(src.name)
        if not match:
            raise LbscaleError(f"{src}: not an IDX file name (like train-images-idx3-ubyte.gz)")
        src, only = src.parent, match["prefix"]
    if not src.is_dir():
        raise LbscaleError(f"{src}: no such directory")
    sets = _sets_in(src) or {k: v for d in sorted(src.iterdir()) if d.is_dir() for k, v in _sets_in(d).items()}
    if only is not None:
        sets = {k: v for k, v in sets.items() if k[1] == only}
    if not sets:
        raise LbscaleError(f"{src}: no IDX files (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
                           "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz])")
    complete = {k: v for k, v in sets.items() if len(v) == 4}
    if not complete:
        (folder, prefix), files = next(iter(sets.items()))
        lacks = sorted(f"{s}-{k}" for s in ("train", "test") for k in KINDS if f"{s}-{k}" not in files)
        raise LbscaleError(f"{folder}: the IDX set {_label(prefix)!r} lacks its {', '.join(lacks)} file(s)")
    if subset is not None:
        chosen = {k: v for k, v in complete.items() if _label(k[1]) == subset or
                  re.search(rf"[-_.]{re.escape(subset)}$", _label(k[1]))}
        if len(chosen) != 1:
            raise LbscaleError(f"{src}: --subset {subset} names {len(chosen)} of the IDX sets here "
                               f"({', '.join(_label(p) for _, p in complete)})")
        complete = chosen
    if len(complete) > 1:
        shown = [_label(p) if f == src else f"{f.relative_to(src)}/{_label(p)}" for f, p in complete]
        named = [_label(p) for _, p in complete if p]
        pick = f"pick one with --subset {named[-1].rsplit('-', 1)[-1]}, or " if named else ""
        raise LbscaleError(f"{src}: {len(complete)} IDX sets ({', '.join(shown)}): {pick}give --src a folder "
                           "holding one set")
    (folder, prefix), paths = next(iter(complete.items()))
    return folder, prefix, {key: IdxFile(p, key.split("-")[1]) for key, p in sorted(paths.items())}


def _sets_in(folder: Path) -> dict[tuple[Path, str], dict[str, Path]]:
    sets: dict = {}
    for p in sorted(folder.iterdir()):  # a plain file sorts before its .gz twin, which it then shadows
        match = FILE_RE.match(p.name)
        if match and p.is_file():
            key = f"{'test' if match['split'] == 't10k' else match['split']}-{match['kind']}"
            sets.setdefault((folder, match["prefix"]), {}).setdefault(key, p)
    return sets


def _label(prefix: str) -> str:
    """How a set is named to the user: its file-name prefix ("emnist-balanced"), or "(no prefix)"."""
    return prefix.rstrip("-_.") or "(no prefix)"


def identify(name: str | None, folder: Path, prefix: str) -> tuple[str | None, str]:
    """Which dataset the files are (a KNOWN key or None) and how that was decided: --name, the file names,
    then the names of the folder and its parent (Debian's /usr/share/datasets/fashion-mnist)."""
    if name is not None:
        if name not in KNOWN:
            raise LbscaleError(f"--name {name}: choose one of {', '.join(KNOWN)}")
        return name, "--name"
    places = [("file names", prefix), ("folder name", folder.absolute().name),
              ("folder name", folder.absolute().parent.name)]
    for how, text in places:
        key = text.lower().replace("_", "-")
        for needle, known in (("fashion", "fashion-mnist"), ("kuzushiji", "kmnist"), ("kmnist", "kmnist"),
                              ("emnist", "emnist"), ("mnist", "mnist")):
            if needle in key:
                return known, how
    return None, ""


class IdxSource(Source):
    """The IDX files of MNIST and its kin: (N, 1, H, W) uint8 images, one band ("gray"), integer labels."""

    splits = ("train", "test")
    help = "MNIST, Fashion-MNIST, KMNIST, EMNIST: IDX files (train-images-idx3-ubyte[.gz], ...)"
    options = (SourceOption("name", f"which dataset the files hold ({', '.join(KNOWN)}); default: from the file and "
                                    "folder names"),
               SourceOption("subset", "the set of files to read where --src holds several (EMNIST: balanced, ...)"))

    def __init__(self, dataset: str, src: Path, name: str | None = None, subset: str | None = None):
        if src is None:
            raise LbscaleError("idx: --src is required")
        folder, prefix, self.files = find_set(Path(src), subset)
        name, how = identify(name, folder, prefix)
        emnist_split = prefix.rstrip("-_.").removeprefix("emnist-") if name == "emnist" else None
        first = EMNIST_FIRST_LABEL.get(emnist_split, 0)
        self.labels = {s: self._labels(s) - first for s in self.splits}
        classes = self._classes(name, emnist_split)
        for s, y in self.labels.items():
            if y.size and (y.min() < 0 or y.max() >= len(classes)):
                bad = int(y.min() if y.min() < 0 else y.max()) + first
                raise LbscaleError(f"{self.files[f'{s}-labels'].path}: label {bad} outside {first}.."
                                   f"{len(classes) - 1 + first} of {KNOWN[name].title if name else 'the set'}")
        self.meta = self._meta(name, emnist_split, classes, first)
        if how and how != "--name":
            log_line(f"idx: {folder} holds {KNOWN[name].title} (from the {how}; --name chooses otherwise)")

    def _labels(self, split: str) -> np.ndarray:
        images, labels = self.files[f"{split}-images"], self.files[f"{split}-labels"]
        if images.dtype != np.uint8:
            raise LbscaleError(f"{images.path}: {images.dtype.name} pixels; IDX images here are uint8")
        if not np.issubdtype(labels.dtype, np.integer):
            raise LbscaleError(f"{labels.path}: {labels.dtype.name} labels; expected integer class ids")
        if labels.shape[0] != images.shape[0]:
            raise LbscaleError(f"{labels.path}: {labels.shape[0]:,} labels for the {images.shape[0]:,} images "
                               f"of {images.path.name}")
        train = self.files["train-images"].shape[1:]
        if images.shape[1:] != train:
            raise LbscaleError(f"{images.path}: {images.shape[1:]} pixel images, train has {train}")
        return labels.read().astype(np.int64)

    def _classes(self, name: str | None, emnist_split: str | None) -> list[str]:
        known = KNOWN[name].classes if name else None
        if name == "emnist":
            known = EMNIST_CLASSES.get(emnist_split)
        if known is not None:
            return list(known)
        top = max((int(y.max()) for y in self.labels.values() if y.size), default=0)
        return [str(i) for i in range(max(top + 1, 1))]  # the ids the files use, 0..K-1

    def _meta(self, name: str | None, emnist_split: str | None, classes: list[str], first: int) -> DatasetMeta:
        dataset, notes = name or "idx", {}
        if name:
            notes["imagery"] = KNOWN[name].imagery
        if name == "emnist" and emnist_split in EMNIST_CLASSES:
            dataset = f"emnist-{emnist_split}"
            notes["imagery"] = "digits" if emnist_split in ("digits", "mnist") else "characters"
        if first:
            notes["labels"] = f"the files number the classes {first}..{len(classes) - 1 + first}; stored from 0"
        title = " ".join(w for w in (KNOWN[name].title if name else "", emnist_split or "", "IDX files") if w)
        if any(f.gzipped for f in self.files.values()):
            title += " (gzip)"
        return DatasetMeta(dataset, "multiclass", classes, ["gray"], title, notes=notes)

    def train_labels(self) -> np.ndarray:
        return self.labels["train"]

    def batches(self, split: str) -> Iterator[SplitBatch]:
        labels, start = self.labels[split], 0
        for images in self.files[f"{split}-images"].blocks(BATCH):
            yield SplitBatch(images[:, None], labels[start:start + len(images)])
            start += len(images)
