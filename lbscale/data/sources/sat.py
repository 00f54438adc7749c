"""DeepSat SAT-4 / SAT-6: 28x28 px, 4 bands (R, G, B, NIR), from the .mat release or the Kaggle CSVs."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from lbscale.data.formats.base import DatasetMeta
from lbscale.data.sources.base import Source, SplitBatch
from lbscale.errors import LbscaleError

CLASSES = {
    "sat4": ["barren_land", "trees", "grassland", "none"],
    "sat6": ["building", "barren_land", "trees", "grassland", "road", "water"],
}
BANDS = ["R", "G", "B", "NIR"]
SIDE, CH = 28, 4
BATCH = 8192
MAT_KEYS = ("train_x", "train_y", "test_x", "test_y")


def _one_hot_to_ids(onehot: np.ndarray, where: str) -> np.ndarray:
    """(N, C) one-hot rows -> class ids; anything but exactly one 1 per row is bad input."""
    if onehot.ndim != 2 or not np.all((onehot == 0) | (onehot == 1)) or not np.all(onehot.sum(axis=1) == 1):
        raise LbscaleError(f"{where}: labels are not one-hot rows")
    return onehot.argmax(axis=1).astype(np.int64)


class SatSource(Source):
    """SAT-4 or SAT-6 from `sat-N-full.mat` (MATLAB v5) or `X_train_satN.csv` + `y_train_satN.csv` (+ test)."""

    splits = ("train", "test")
    help = "DeepSat SAT-4 / SAT-6: the .mat release or the Kaggle CSVs"

    def __init__(self, name: str, src: Path):
        self.name = name
        self.classes = CLASSES[name]
        self.src = Path(src)
        self.meta = DatasetMeta(name, "multiclass", self.classes, BANDS, "DeepSat (SAT-4/SAT-6) 2015",
                                notes={"imagery": "remote-sensing"})
        if not self.src.exists():
            raise LbscaleError(f"{self.src}: no such file or directory")
        mat = self.src if self.src.is_file() else next(iter(sorted(self.src.glob("*.mat"))), None)
        if mat is not None:
            self.kind, self.mat = "mat", mat
            self._check_mat()
        else:
            self.kind = "csv"
            tag = name  # sat4 / sat6
            self.csv = {s: (self.src / f"X_{s}_{tag}.csv", self.src / f"y_{s}_{tag}.csv") for s in self.splits}
            for pair in self.csv.values():
                for p in pair:
                    if not p.exists():
                        raise LbscaleError(f"{p}: missing (expected a .mat file or the Kaggle CSVs in {self.src})")
            self._labels = {s: self._read_csv_labels(s) for s in self.splits}

    # --- .mat ------------------------------------------------------------------------------------
    def _check_mat(self) -> None:
        import scipy.io

        try:
            info = {name: shape for name, shape, _ in scipy.io.whosmat(str(self.mat))}
        except Exception as e:  # scipy raises several types for non-MAT input
            raise LbscaleError(f"{self.mat}: not a readable MATLAB v5 file ({e})") from None
        missing = [k for k in MAT_KEYS if k not in info]
        if missing:
            raise LbscaleError(f"{self.mat}: missing variables {', '.join(missing)}")
        k = len(self.classes)
        for s in self.splits:
            x, y = info[f"{s}_x"], info[f"{s}_y"]
            if len(x) != 4 or tuple(x[:3]) != (SIDE, SIDE, CH):
                raise LbscaleError(f"{self.mat}: {s}_x has shape {tuple(x)}, expected (28, 28, 4, N)")
            if tuple(y) != (k, x[3]):
                raise LbscaleError(f"{self.mat}: {s}_y has shape {tuple(y)}, expected ({k}, {x[3]}) for {self.name}")

    def _load_mat(self, key: str) -> np.ndarray:
        import scipy.io

        try:
            return scipy.io.loadmat(str(self.mat), variable_names=[key])[key]
        except Exception as e:
            raise LbscaleError(f"{self.mat}: cannot read {key} ({e})") from None

    # --- Kaggle CSV ------------------------------------------------------------------------------
    def _read_csv_labels(self, split: str) -> np.ndarray:
        path = self.csv[split][1]
        try:
            y = np.loadtxt(path, delimiter=",", dtype=np.int64, ndmin=2)
        except ValueError as e:
            raise LbscaleError(f"{path}: not a CSV of integers ({e})") from None
        if y.shape[1] != len(self.classes):
            raise LbscaleError(f"{path}: rows have {y.shape[1]} columns, expected {len(self.classes)} for {self.name}")
        return _one_hot_to_ids(y, str(path))

    def _csv_batches(self, split: str) -> Iterator[np.ndarray]:
        import pandas as pd

        path = self.csv[split][0]
        try:
            for chunk in pd.read_csv(path, header=None, chunksize=BATCH, dtype=np.uint8, engine="c"):
                if chunk.shape[1] != SIDE * SIDE * CH:
                    raise LbscaleError(f"{path}: rows have {chunk.shape[1]} values, expected {SIDE * SIDE * CH}")
                yield chunk.to_numpy().reshape(-1, SIDE, SIDE, CH).transpose(0, 3, 1, 2)
        except (ValueError, pd.errors.ParserError) as e:
            raise LbscaleError(f"{path}: not a CSV of 0..255 integers ({e})") from None

    # --- Source API ------------------------------------------------------------------------------
    def labels(self, split: str) -> np.ndarray:
        if self.kind == "csv":
            return self._labels[split]
        return _one_hot_to_ids(self._load_mat(f"{split}_y").T, f"{self.mat}:{split}_y")

    def train_labels(self) -> np.ndarray:
        return self.labels("train")

    def batches(self, split: str) -> Iterator[SplitBatch]:
        labels = self.labels(split)
        if self.kind == "csv":
            start = 0
            for images in self._csv_batches(split):
                stop = start + len(images)
                if stop > len(labels):
                    raise LbscaleError(f"{self.csv[split][0]}: more image rows than label rows ({len(labels)})")
                yield SplitBatch(np.ascontiguousarray(images), labels[start:stop])
                start = stop
            if start != len(labels):
                raise LbscaleError(f"{self.csv[split][0]}: {start} image rows but {len(labels)} label rows")
            return
        # One copy of the pixel array in memory (H,W,C,N); each batch is transposed to N,C,H,W on the way out.
        x = self._load_mat(f"{split}_x")
        for a in range(0, x.shape[3], BATCH):
            b = min(a + BATCH, x.shape[3])
            yield SplitBatch(np.ascontiguousarray(x[:, :, :, a:b].transpose(3, 2, 0, 1)), labels[a:b])
        del x
