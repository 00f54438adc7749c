"""BigEarthNet-S2 v1.0 (one folder per patch, 12 uint16 GeoTIFF bands, 43-class CORINE labels in JSON) and
v2.0 ("reBEN": `metadata.parquet` with patch ids, 19-class labels, the official split and snow / cloud flags;
patch folders under `BigEarthNet-S2/<tile>/<patch_id>/`, or directly under the root).

Output bands are B01,B02,B03,B04,B05,B06,B07,B08,B8A,B09,B11,B12, all at 120x120. The 20 m and 60 m bands
are upsampled bilinearly with half-pixel centres and edge clamping (align_corners=False, the convention of
torch.nn.functional.interpolate and OpenCV INTER_LINEAR), rounded to the nearest integer; 10 m bands are
copied bit-exact. Labels: `labels` multi-hot in the 19-class nomenclature, `labels_43` in the 43-class one,
both sorted by name, as bigearthnet-common lists them. torchgeo's BigEarthNet lists its classes in the
nomenclature's order instead: compare with it by class name, not by index.
v1.0: snowy and cloudy/shadowed patches are excluded and the official train/val/test split is applied, both
from bigearthnet-common; patches in none of its splits (e.g. no 19-class target) are excluded too.
v2.0: the split and the flags come from metadata.parquet (read with pyarrow); rows flagged with seasonal snow
or cloud / shadow are excluded; labels are its 19-class names (there is no 43-class set in v2.0).
"""

from __future__ import annotations

import json
import warnings
from functools import partial
from pathlib import Path
from typing import Iterator

import numpy as np

from lbscale.data.formats.base import DatasetMeta
from lbscale.data.sources.base import Source, SourceOption, SplitBatch, parallel_batches, resize
from lbscale.data.sources.tiff import read_tiff
from lbscale.errors import LbscaleError

BANDS = ["B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B11", "B12"]
NATIVE_SIZE = {"B02": 120, "B03": 120, "B04": 120, "B08": 120, "B05": 60, "B06": 60, "B07": 60, "B8A": 60,
               "B11": 60, "B12": 60, "B01": 20, "B09": 20}
SIZE = 120
BATCH = 256


def _ben():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import bigearthnet_common.base as base
        import bigearthnet_common.constants as constants
    return base, constants


def upsample(band: np.ndarray, size: int = SIZE) -> np.ndarray:
    """Bilinear upsampling of one uint16 band to size x size (see the module docstring for the convention)."""
    if band.shape == (size, size):
        return band
    return resize(band[None], size)[0]


def read_bands(folder: Path) -> np.ndarray:
    """One patch folder's 12 bands -> (12,120,120) uint16; LbscaleError names the bad file."""
    name = folder.name
    out = np.empty((len(BANDS), SIZE, SIZE), dtype=np.uint16)
    for i, b in enumerate(BANDS):
        path = folder / f"{name}_{b}.tif"
        arr = read_tiff(path, f"band {b} of patch {name}")
        n = NATIVE_SIZE[b]
        if arr.shape != (n, n) or arr.dtype != np.uint16:
            raise LbscaleError(f"{path}: {arr.dtype} {arr.shape}, expected uint16 ({n}, {n}) for {b}")
        out[i] = upsample(arr)
    return out


def read_patch(folder: Path, label_index: dict[str, int]) -> tuple[np.ndarray, list[int]]:
    """One v1.0 patch -> (12,120,120) uint16 and its 43-class label ids; LbscaleError names the bad file."""
    name = folder.name
    out = read_bands(folder)
    meta = folder / f"{name}_labels_metadata.json"
    try:
        labels = json.loads(meta.read_text())["labels"]
    except FileNotFoundError:
        raise LbscaleError(f"{meta}: missing label metadata") from None
    except (ValueError, KeyError, TypeError) as e:
        raise LbscaleError(f"{meta}: malformed label metadata ({e})") from None
    ids = []
    for lab in labels:
        if lab not in label_index:
            raise LbscaleError(f"{meta}: unknown label name {lab!r}")
        ids.append(label_index[lab])
    return out, ids


class BigEarthNetSource(Source):
    """BigEarthNet-S2 v1.0 patch folders under `src` (also the bigearthnet-common example folder)."""

    splits = ("train", "val", "test")
    help = ("BigEarthNet-S2 v1.0 patch folders (19 and 43 labels) or v2.0 with --metadata metadata.parquet "
            "(19 labels): 12 bands at 120 px, official splits")
    options = (SourceOption("metadata", "the v2.0 metadata.parquet (default: SRC/metadata.parquet if there)"),)
    common = ("workers", "seed")

    def __init__(self, name: str, src: Path, workers: int = 1, seed: int = 0, metadata: str | None = None):
        base, c = _ben()
        self.src = Path(src)
        self.workers = workers
        if not self.src.is_dir():
            raise LbscaleError(f"{self.src}: not a directory of BigEarthNet-S2 patch folders")
        if metadata is None and (self.src / "metadata.parquet").exists():
            metadata = str(self.src / "metadata.parquet")
        if metadata is not None:
            self._init_v2(Path(metadata), list(c.NEW_LABELS), seed)
            return
        self.version = "v1.0"
        self.labels43 = list(c.OLD_LABELS)
        self.labels19 = list(c.NEW_LABELS)
        self.to19 = np.zeros((43, 19), dtype=np.uint8)
        for i, old in enumerate(self.labels43):
            new = c.OLD2NEW_LABELS_DICT[old]
            if new is not None:
                self.to19[i, self.labels19.index(new)] = 1
        self.meta = DatasetMeta("bigearthnet", "multilabel", self.labels19, BANDS, "BigEarthNet-S2 v1.0",
                                extra_class_names={"labels_43": self.labels43},
                                notes={"upsampling": "bilinear, half-pixel centres, clamped edges, rounded",
                                       "imagery": "remote-sensing"})
        folders = sorted(p for p in self.src.iterdir() if p.is_dir())
        if not folders:
            raise LbscaleError(f"{self.src}: no patch folders")
        official = {
            "train": base.get_s2_patches_from_original_train_split(),
            "val": base.get_s2_patches_from_original_validation_split(),
            "test": base.get_s2_patches_from_original_test_split(),
        }
        excluded = base.get_s2_patches_with_seasonal_snow() | base.get_s2_patches_with_cloud_and_shadow()
        rng = np.random.default_rng(seed)
        self.patches: dict[str, list[Path]] = {}
        for split, names in official.items():
            chosen = [f for f in folders if f.name in names and f.name not in excluded]
            # The folder order is tile by tile; a seeded shuffle keeps each stored chunk spatially mixed.
            self.patches[split] = [chosen[i] for i in rng.permutation(len(chosen))]
        self.excluded = len(folders) - sum(len(v) for v in self.patches.values())

    def _init_v2(self, metadata: Path, labels19: list[str], seed: int) -> None:
        """v2.0: patches, labels and splits from metadata.parquet; snowy / cloudy rows excluded."""
        self.version = "v2.0"
        rows = read_metadata(metadata)
        self.labels19 = labels19
        self.meta = DatasetMeta("bigearthnet", "multilabel", labels19, BANDS, "BigEarthNet-S2 v2.0 (reBEN)",
                                notes={"upsampling": "bilinear, half-pixel centres, clamped edges, rounded",
                                       "metadata": metadata.name, "imagery": "remote-sensing"})
        index = {n: i for i, n in enumerate(labels19)}
        rng = np.random.default_rng(seed)
        self.patches, self.targets, missing = {}, {}, []
        self.excluded = 0
        for split, official in (("train", "train"), ("val", "validation"), ("test", "test")):
            chosen = []
            for r in rows:
                if r["split"] != official:
                    continue
                if r["snow"] or r["cloud"]:
                    self.excluded += 1
                    continue
                folder = patch_folder(self.src, r["patch_id"])
                if folder is None:
                    missing.append(r["patch_id"])
                    continue
                unknown = [lab for lab in r["labels"] if lab not in index]
                if unknown:
                    raise LbscaleError(f"{metadata}: patch {r['patch_id']}: unknown label {unknown[0]!r}")
                chosen.append((folder, [index[lab] for lab in r["labels"]]))
            order = rng.permutation(len(chosen))  # tile by tile in the metadata: mix each stored chunk
            self.patches[split] = [chosen[i][0] for i in order]
            self.targets[split] = [chosen[i][1] for i in order]
        if missing:
            raise LbscaleError(f"{self.src}: {len(missing)} patch(es) of {metadata.name} not found (first: "
                               f"{missing[0]}; expected <tile>/<patch_id>/ or <patch_id>/ under the root)")

    def train_labels(self) -> np.ndarray:  # pragma: no cover - the official split has a val set
        raise NotImplementedError

    def batches(self, split: str) -> Iterator[SplitBatch]:
        if self.version == "v2.0":
            yield from self._batches_v2(split)
            return
        folders = self.patches[split]
        fn = partial(read_patch, label_index={n: i for i, n in enumerate(self.labels43)})
        start = 0
        for images, label_ids in parallel_batches(fn, folders, self.workers, BATCH, (len(BANDS), SIZE, SIZE),
                                                  np.uint16, f"bigearthnet {split}"):
            l43 = np.zeros((len(label_ids), 43), dtype=np.uint8)
            for row, ids in enumerate(label_ids):
                l43[row, ids] = 1
            l19 = (l43 @ self.to19 > 0).astype(np.uint8)
            names = [f.name for f in folders[start:start + len(label_ids)]]
            start += len(label_ids)
            yield SplitBatch(images, l19, names, {"labels_43": l43})

    def _batches_v2(self, split: str) -> Iterator[SplitBatch]:
        folders, targets = self.patches[split], self.targets[split]
        start = 0
        for images, _ in parallel_batches(_read_v2, folders, self.workers, BATCH, (len(BANDS), SIZE, SIZE),
                                          np.uint16, f"bigearthnet {split}"):
            n = len(images)
            l19 = np.zeros((n, len(self.labels19)), dtype=np.uint8)
            for row, ids in enumerate(targets[start:start + n]):
                l19[row, ids] = 1
            names = [f.name for f in folders[start:start + n]]
            start += n
            yield SplitBatch(images, l19, names, {})


def _read_v2(folder: Path) -> tuple[np.ndarray, None]:
    return read_bands(folder), None


def patch_folder(root: Path, patch_id: str) -> Path | None:
    """v2.0's folder of a patch: <tile>/<patch_id>/ (the release: the id without its last two fields), or
    <patch_id>/ directly under the root."""
    tile = "_".join(patch_id.split("_")[:-2])
    for folder in (root / tile / patch_id, root / patch_id):
        if folder.is_dir():
            return folder
    return None


def read_metadata(path: Path) -> list[dict]:
    """metadata.parquet -> [{patch_id, labels, split, snow, cloud}]; one LbscaleError for anything unreadable."""
    if not path.exists():
        raise LbscaleError(f"{path}: no such metadata file")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise LbscaleError("BigEarthNet v2.0 needs pyarrow to read metadata.parquet (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a bad file
        raise LbscaleError(f"{path}: not a readable parquet file ({type(e).__name__})") from None
    need = ("patch_id", "labels", "split")
    lacking = [c for c in need if c not in table.column_names]
    if lacking:
        raise LbscaleError(f"{path}: no column {lacking[0]!r} (a BigEarthNet v2.0 metadata.parquet has "
                           "patch_id, labels, split, contains_seasonal_snow, contains_cloud_or_shadow)")
    cols = {c: table.column(c).to_pylist() for c in need}
    n = table.num_rows
    snow = table.column("contains_seasonal_snow").to_pylist() if "contains_seasonal_snow" in table.column_names \
        else [False] * n
    cloud = table.column("contains_cloud_or_shadow").to_pylist() \
        if "contains_cloud_or_shadow" in table.column_names else [False] * n
    rows = []
    for i in range(n):
        labels = cols["labels"][i]
        if not isinstance(cols["patch_id"][i], str) or not isinstance(labels, list):
            raise LbscaleError(f"{path}: row {i}: patch_id must be a string and labels a list of names")
        rows.append({"patch_id": cols["patch_id"][i], "labels": labels, "split": cols["split"][i],
                     "snow": bool(snow[i]), "cloud": bool(cloud[i])})
    return rows
