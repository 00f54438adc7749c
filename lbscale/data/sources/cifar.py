"""CIFAR-10, python version: data_batch_1..5 and test_batch, read through a restricted unpickler."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Iterator

import numpy as np

from lbscale.data.formats.base import DatasetMeta
from lbscale.data.sources.base import Source, SplitBatch
from lbscale.errors import LbscaleError

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
FILES = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}

# Exactly what numpy needs to rebuild an ndarray from a pickle (numpy 1.x and 2.x module paths).
ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),
}


class RestrictedUnpickler(pickle.Unpickler):
    """Refuses every global but the few numpy constructors a CIFAR batch contains."""

    def find_class(self, module, name):
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def load_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR batch file -> images (n,3,32,32) uint8 and labels (n,) int64."""
    try:
        with open(path, "rb") as f:
            d = RestrictedUnpickler(f, encoding="bytes").load()
    except FileNotFoundError:
        raise LbscaleError(f"{path}: missing CIFAR-10 batch file") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError) as e:
        raise LbscaleError(f"{path}: not a CIFAR-10 python batch ({e})") from None
    if not isinstance(d, dict):
        raise LbscaleError(f"{path}: not a CIFAR-10 python batch (top level is {type(d).__name__})")
    data, labels = d.get(b"data"), d.get(b"labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise LbscaleError(f"{path}: 'data' is not an (N, 3072) uint8 array")
    if not isinstance(labels, list) or len(labels) != len(data) or not all(isinstance(x, int) for x in labels):
        raise LbscaleError(f"{path}: 'labels' is not a list of {len(data)} ints")
    y = np.asarray(labels, dtype=np.int64)
    if y.size and (y.min() < 0 or y.max() >= len(CLASSES)):
        raise LbscaleError(f"{path}: label out of range 0..9")
    # Each row is the R plane, then G, then B, each 32x32 row-major: a reshape gives C,H,W directly.
    return data.reshape(-1, 3, 32, 32), y


class Cifar10Source(Source):
    """CIFAR-10 from the `cifar-10-batches-py` folder (or its parent)."""

    splits = ("train", "test")
    help = "CIFAR-10, python version (cifar-10-batches-py)"

    def __init__(self, name: str, src: Path):
        src = Path(src)
        if (src / "cifar-10-batches-py").is_dir():
            src = src / "cifar-10-batches-py"
        if not src.is_dir():
            raise LbscaleError(f"{src}: not a directory with CIFAR-10 batch files")
        self.src = src
        self.meta = DatasetMeta("cifar10", "multiclass", CLASSES, ["R", "G", "B"], "CIFAR-10 python version",
                                notes={"imagery": "photo"})
        for files in FILES.values():
            for f in files:
                if not (src / f).exists():
                    raise LbscaleError(f"{src / f}: missing CIFAR-10 batch file")

    def train_labels(self) -> np.ndarray:
        return np.concatenate([load_batch(self.src / f)[1] for f in FILES["train"]])

    def batches(self, split: str) -> Iterator[SplitBatch]:
        for f in FILES[split]:
            images, labels = load_batch(self.src / f)
            yield SplitBatch(images, labels)
