"""What every prepared format shares: dataset metadata, band statistics, atomic finish, the reader API."""

from __future__ import annotations

import glob
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import lbscale
from lbscale.errors import LbscaleError
from lbscale.results import naming

FORMAT_VERSION = 1
SPLITS = ("train", "val", "test")
# What a prepared file's pixels show (notes.imagery), each with the augmentation `augmentation: auto` trains
# pixel data of that kind with: the transformations that keep every label true.
IMAGERY = {
    "remote-sensing": "flip-rot90",  # seen from above: no up, no handedness; any flip or quarter turn is a patch
    "photo": "crop-flip",  # the world has an up (no turns) but no handedness
    # clothes (Fashion-MNIST): a horizontal flip keeps a shirt a shirt, a left shoe a shoe; a rotation does not
    "objects": "crop-flip",
    "digits": "none",  # a flipped or turned digit is another digit (6 and 9) or none at all
    "characters": "none",  # so are letters (b, d, p, q) and kana
}
UNKNOWN_IMAGERY = "unknown"  # recorded where the source cannot tell (your own arrays, IDX files of no known set)
# Unknown or unrecorded imagery: what `auto` took for all pixel data before lbscale recorded imagery, so results
# on files prepared before then stay comparable.
FALLBACK_AUGMENTATION = "flip-rot90"
ENCODED_AUGMENTATION = "rrc-flip"  # JPEG data is cropped and flipped as it is decoded, whatever it shows


def auto_augmentation(encoding: str, imagery: str | None) -> str:
    """The augmentation `augmentation: auto` stands for on data of this encoding and imagery (None: a file
    prepared before lbscale recorded imagery)."""
    if encoding != "raw":
        return ENCODED_AUGMENTATION
    return IMAGERY.get(imagery, FALLBACK_AUGMENTATION)


@dataclass
class DatasetMeta:
    """Attributes stored with a prepared dataset (see docs/formats.md)."""

    dataset: str
    task: str
    class_names: list[str]
    band_names: list[str]
    source_version: str
    # Extra per-sample label sets, e.g. {"labels_43": [43 class names]} for BigEarthNet.
    extra_class_names: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    # "raw": images are pixel arrays (N, C, H, W); "jpeg": encoded JPEG bytes, decoded by the loader
    encoding: str = "raw"

    def __post_init__(self):
        # every file written from now on says what it shows, if only "unknown": a file without the note is one
        # prepared before lbscale recorded imagery, and `data info` can say so
        self.notes = {"imagery": UNKNOWN_IMAGERY, **self.notes}

    def attrs(self) -> dict:
        return {
            "encoding": self.encoding,
            "dataset": self.dataset,
            "task": self.task,
            "class_names": json.dumps(self.class_names),
            "band_names": json.dumps(self.band_names),
            "source_version": self.source_version,
            "extra_class_names": json.dumps(self.extra_class_names),
            "notes": json.dumps(self.notes),
            "lbscale_version": lbscale.__version__,
            "format_version": FORMAT_VERSION,
        }


class BandStats:
    """Streaming per-band mean and std (population) over the train split.

    Unsigned images of up to 16 bits are summed exactly (squares in uint32, sums in uint64), several times
    cheaper than a float64 copy; other dtypes in float64."""

    def __init__(self):
        self.count = 0
        self.sum = None
        self.sumsq = None

    def update(self, images: np.ndarray) -> None:
        if len(images) == 0:
            return
        bands = images.shape[1]
        exact = np.issubdtype(images.dtype, np.unsignedinteger) and images.dtype.itemsize <= 2
        s, sq = np.zeros(bands), np.zeros(bands)
        for c in range(bands):
            v = images[:, c]
            if exact:
                s[c] = float(v.sum(dtype=np.uint64))
                sq[c] = float(np.square(v, dtype=np.uint32).sum(dtype=np.uint64))
            else:
                v = v.astype(np.float64)
                s[c], sq[c] = v.sum(), np.vdot(v.ravel(), v.ravel())  # einsum("...,...->") fails on numpy 2.4
        if self.sum is None:
            self.sum, self.sumsq = s, sq
        else:
            self.sum += s
            self.sumsq += sq
        self.count += images.shape[0] * images.shape[2] * images.shape[3]

    def add(self, stats: np.ndarray) -> None:
        """Sums already taken per sample: rows of (sum x bands, sum of squares x bands, pixel count)."""
        stats = np.asarray(stats, dtype=np.float64)
        if not len(stats):
            return
        bands = (stats.shape[1] - 1) // 2
        s, sq = stats[:, :bands].sum(axis=0), stats[:, bands:2 * bands].sum(axis=0)
        if self.sum is None:
            self.sum, self.sumsq = s, sq
        else:
            self.sum += s
            self.sumsq += sq
        self.count += int(stats[:, -1].sum())

    def result(self, bands: int) -> tuple[list[float], list[float]]:
        if not self.count:
            return [0.0] * bands, [1.0] * bands
        mean = self.sum / self.count
        var = np.maximum(self.sumsq / self.count - mean**2, 0.0)
        return mean.tolist(), np.sqrt(var).tolist()


def partial_path(out: Path) -> Path:
    """Where a write in progress lives: beside the target, a name that never looks complete."""
    return out.with_name(f".{out.name}.partial-{os.getpid()}")


def claim_partial(out: Path) -> Path:
    """partial_path(out), after removing what a killed prepare of the same output left (its partial write or the
    old output it was replacing: lbscale's names, of a process no longer alive on this host)."""
    for p in out.parent.glob(f".{glob.escape(out.name)}.*-*"):  # a name with [ or * matches only itself
        kind, _, pid = p.name[len(out.name) + 2:].rpartition("-")
        if kind in ("partial", "old") and pid.isdigit() and not _alive(int(pid)):
            remove_path(p)
    return partial_path(out)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def commit_path(tmp: Path, out: Path) -> None:
    """Move a finished write into place; an old output (``--force``) disappears only after that."""
    if tmp.is_dir() and out.exists():
        trash = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, trash)
        os.replace(tmp, out)
        remove_path(trash)
    else:
        if out.is_dir():
            shutil.rmtree(out)
        os.replace(tmp, out)


class AtomicWriter:
    """Context manager shell: anything but a clean `finish` removes the partial output."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
            if isinstance(exc, OSError):
                with naming(self.out):  # a full disk under the HDF5 library or a write: the line names the output
                    raise exc
        return False

    def abort(self) -> None:
        self.close()
        remove_path(self.tmp)

    def close(self) -> None:  # pragma: no cover - overridden
        pass


def check_splits(path: Path, arrays: dict[str, set[str]], required: tuple[str, ...]) -> None:
    """Every split with its `required` per-sample arrays, as prepare writes them (all three splits, possibly
    empty); `arrays` maps each split present to the arrays it holds. A file lacking one was written by hand or
    cut short: an LbscaleError naming the file and the split, before any reader trips over it."""
    for split in SPLITS:
        if split not in arrays:
            raise LbscaleError(f"{path}: no {split!r} split (a prepared file holds train, val and test, possibly "
                               "empty): malformed or cut short; prepare it again")
        missing = [key for key in required if key not in arrays[split]]
        if missing:
            raise LbscaleError(f"{path}: split {split!r} has no {missing[0]!r}: malformed or cut short; "
                               "prepare it again")


class PreparedFile:
    """Read side of a prepared dataset; `images(split)` supports contiguous slicing ``[a:b]``."""

    path: Path
    attrs: dict

    # --- metadata -------------------------------------------------------------------------------
    @property
    def dataset(self) -> str:
        return self.attrs["dataset"]

    @property
    def task(self) -> str:
        return self.attrs["task"]

    @property
    def class_names(self) -> list[str]:
        return json.loads(self.attrs["class_names"])

    @property
    def band_names(self) -> list[str]:
        return json.loads(self.attrs["band_names"])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def encoding(self) -> str:
        """'raw' (pixel arrays) or 'jpeg' (encoded samples the loader decodes)."""
        return self.attrs.get("encoding", "raw")

    @property
    def notes(self) -> dict:
        """The source's notes (docs/formats.md), a dict."""
        notes = self.attrs.get("notes") or "{}"
        return json.loads(notes) if isinstance(notes, str) else dict(notes)

    @property
    def imagery(self) -> str | None:
        """What the pixels show (notes.imagery: a key of IMAGERY, or "unknown"); None for a file prepared before
        lbscale recorded it."""
        return self.notes.get("imagery")

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(json.loads(self.attrs["mean"]), dtype=np.float64)

    @property
    def std(self) -> np.ndarray:
        return np.asarray(json.loads(self.attrs["std"]), dtype=np.float64)

    @property
    def extra_class_names(self) -> dict:
        return json.loads(self.attrs.get("extra_class_names", "{}"))

    def splits(self) -> list[str]:
        return [s for s in SPLITS if self.has_split(s)]

    def sample_shape(self) -> tuple[int, ...]:
        for s in self.splits():
            return tuple(self.images(s).shape[1:])
        raise ValueError("no splits")

    # --- per split, implemented by each format --------------------------------------------------
    def has_split(self, split: str) -> bool:
        raise NotImplementedError

    def size(self, split: str) -> int:
        return int(self.images(split).shape[0])

    def images(self, split: str):
        raise NotImplementedError

    def labels(self, split: str, key: str = "labels") -> np.ndarray:
        raise NotImplementedError

    def names(self, split: str) -> list[str] | None:
        raise NotImplementedError

    def extras(self, split: str) -> list[str]:
        """Names of the per-sample arrays stored beside images and labels (e.g. ``labels_43``)."""
        raise NotImplementedError

    def chunk_len(self, split: str) -> int:
        """Samples per contiguous storage block (the HDF5 chunk length)."""
        return 1024

    def chunk_views(self, split: str) -> list[np.ndarray] | None:
        """Zero-copy views of the storage blocks of `split`'s images, where the format allows it."""
        return None

    def chunk_checks(self, split: str):
        """Where chunk_views' blocks carry checksums the views skip: an object whose verify(block) checks one
        block (once) before it is read; else None."""
        return None

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
