"""EuroSAT-MS: 64x64x13 uint16 GeoTIFFs (pixel-interleaved), one folder per class, no official split."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from lbscale.data.formats.base import DatasetMeta
from lbscale.data.sources.base import SampleNames, Source, SplitBatch, parallel_batches
from lbscale.data.sources.tiff import read_tiff
from lbscale.errors import LbscaleError

CLASSES = ["AnnualCrop", "Forest", "HerbaceousVegetation", "Highway", "Industrial", "Pasture", "PermanentCrop",
           "Residential", "River", "SeaLake"]
# The band order of the EuroSAT-MS files, kept as stored.
BANDS = ["B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B09", "B10", "B11", "B12", "B8A"]
SIDE = 64
BATCH = 512


def read_tile(path: Path) -> tuple[np.ndarray, None]:
    """One EuroSAT tile -> (13, 64, 64) uint16 (and no extra result)."""
    arr = read_tiff(path)
    if arr.shape != (SIDE, SIDE, len(BANDS)) or arr.dtype != np.uint16:
        raise LbscaleError(f"{path}: {arr.dtype} {arr.shape}, expected uint16 (64, 64, 13)")
    return arr.transpose(2, 0, 1), None


class EuroSatSource(Source):
    """EuroSAT-MS from a folder holding the ten class folders; val and test are carved from it."""

    splits = ("train",)
    help = "EuroSAT-MS class folders of 13-band GeoTIFFs"
    common = ("workers", "seed")

    def __init__(self, name: str, src: Path, workers: int = 1, seed: int = 0):
        src = Path(src)
        if not src.is_dir():
            raise LbscaleError(f"{src}: not a directory of EuroSAT class folders")
        found = {p.name for p in src.iterdir() if p.is_dir()}
        if not found & set(CLASSES):
            inner = [p for p in src.iterdir() if p.is_dir() and {q.name for q in p.iterdir()} & set(CLASSES)]
            if len(inner) == 1:
                src, found = inner[0], {p.name for p in inner[0].iterdir() if p.is_dir()}
        unknown = sorted(found - set(CLASSES))
        if unknown:
            raise LbscaleError(f"{src / unknown[0]}: unknown EuroSAT class folder")
        missing = sorted(set(CLASSES) - found)
        if missing:
            raise LbscaleError(f"{src / missing[0]}: missing EuroSAT class folder")
        self.src, self.workers = src, workers
        self.meta = DatasetMeta("eurosat", "multiclass", CLASSES, BANDS, "EuroSAT-MS",
                                notes={"imagery": "remote-sensing"})
        files = [(p, c) for c, name in enumerate(CLASSES) for p in sorted((src / name).glob("*.tif"))]
        if not files:
            raise LbscaleError(f"{src}: no .tif files in the class folders")
        order = np.random.default_rng(seed).permutation(len(files))  # class folders are sorted: mix them
        self.files = [files[i] for i in order]

    def train_labels(self) -> np.ndarray:
        return np.asarray([c for _, c in self.files], dtype=np.int64)

    def batches(self, split: str) -> Iterator[SplitBatch]:
        paths = [p for p, _ in self.files]
        name_of = SampleNames(self.src)  # "Forest/Forest_1.tif": stems need not be unique across classes
        labels = self.train_labels()
        start = 0
        for images, extras in parallel_batches(read_tile, paths, self.workers, BATCH, (len(BANDS), SIDE, SIDE),
                                               np.uint16, "eurosat"):
            stop = start + len(extras)
            yield SplitBatch(images, labels[start:stop], [name_of(p) for p in paths[start:stop]])
            start = stop
