"""ImageNet-1k (ILSVRC2012) from its usual folders, stored as JPEG bytes (decoded by the loader).

Layouts read (SRC is the folder given with --src):
    SRC/train/<wnid>/*.JPEG                       the training images, one folder per WordNet id
    SRC/val/<wnid>/*.JPEG                         validation sorted into class folders, or
    SRC/val/*.JPEG + labels                       the flat release, labelled by one of
        LOC_val_solution.csv                          (the common re-distribution: ImageId,PredictionString)
        ILSVRC2012_devkit_t12/ or its .tar.gz         (data/ILSVRC2012_validation_ground_truth.txt + meta.mat)
    SRC/ILSVRC/Data/CLS-LOC/{train,val}           the re-distribution's tree, LOC_*.csv beside ILSVRC/
The label files are looked for in SRC and the folders above it, or given with --val-labels.

Class ids follow the sorted WordNet ids of train/ (the convention of torchvision and timm); class names are
the WordNet ids, their words (LOC_synset_mapping.txt or the devkit) go to notes.class_words. The official
validation set, which the papers report as top-1, becomes the test split; val is carved from train
(--val-fraction). Train is stored in a seeded random order, so that the loader's block shuffle mixes classes.
"""

from __future__ import annotations

import csv
import io
import json
import tarfile
from functools import partial
from pathlib import Path
from typing import Iterator

import numpy as np

from lbscale.data import worker_context
from lbscale.data.formats.base import DatasetMeta
from lbscale.data.jpeg import BadImage, read_image_file
from lbscale.data.sources.base import SKIP_BAD, SampleNames, Source, SourceOption, SplitBatch
from lbscale.errors import LbscaleError
from lbscale.progress import bar, log_line

SUFFIXES = {".jpeg", ".jpg", ".png"}
BATCH = 256
SOLUTION = "LOC_val_solution.csv"
SYNSETS = "LOC_synset_mapping.txt"
DEVKIT = "ILSVRC2012_devkit_t12"
GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)


def _read_one(path: Path, max_side: int | None):
    try:
        return read_image_file(path, max_side)
    except BadImage as e:
        return str(e)


def _devkit_members(devkit: Path) -> tuple[bytes, bytes]:
    """(meta.mat, validation ground truth) from the devkit folder or its .tar.gz."""
    if devkit.is_dir():
        return (devkit / "data" / "meta.mat").read_bytes(), (devkit / GROUND_TRUTH).read_bytes()
    with tarfile.open(devkit) as tar:
        def member(suffix):
            for m in tar.getmembers():
                if m.name.endswith(suffix):
                    return tar.extractfile(m).read()
            raise LbscaleError(f"{devkit}: no {suffix} in the devkit archive")
        return member("data/meta.mat"), member(GROUND_TRUTH)


def _devkit_labels(devkit: Path) -> tuple[list[str], dict[str, str]]:
    """The devkit's wnid per validation image (in file-name order) and the words of each wnid."""
    import scipy.io

    try:
        meta, truth = _devkit_members(devkit)
        synsets = scipy.io.loadmat(io.BytesIO(meta), squeeze_me=True)["synsets"]
        leaves = [s for s in synsets if int(s["num_children"]) == 0]
        wnid_of = {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in leaves}
        words = {str(s["WNID"]): str(s["words"]) for s in leaves}
        ids = [int(line) for line in truth.decode().split()]
        return [wnid_of[i] for i in ids], words
    except LbscaleError:
        raise
    except (OSError, KeyError, ValueError, TypeError, tarfile.TarError) as e:
        raise LbscaleError(f"{devkit}: not an ILSVRC2012 devkit ({type(e).__name__}: {e})") from None


class ImagenetSource(Source):
    """ImageNet-1k class folders (and the official validation set as test), kept as JPEG bytes."""

    splits = ("train", "test")
    help = "ImageNet-1k: train/<wnid>/*.JPEG and val/ (class folders, or flat with its labels), as JPEG"
    options = (SourceOption("max_side", "re-encode images whose short side exceeds this (e.g. 256)", int), SKIP_BAD,
               SourceOption("val_labels", "labels of a flat val/ (LOC_val_solution.csv or the devkit)"))
    common = ("workers", "seed")
    encoding = "jpeg"

    def __init__(self, name: str, src: Path, workers: int = 1, seed: int = 0, max_side: int | None = None,
                 skip_bad: bool = False, val_labels: str | None = None):
        src = Path(src)
        if not src.is_dir():
            raise LbscaleError(f"{src}: not a directory (expected the folder holding train/ and val/)")
        root = src
        if not (root / "train").is_dir() and (src / "ILSVRC" / "Data" / "CLS-LOC" / "train").is_dir():
            root = src / "ILSVRC" / "Data" / "CLS-LOC"
        if not (root / "train").is_dir():
            raise LbscaleError(f"{src}: no train/ folder of class folders")
        if max_side is not None and max_side < 8:
            raise LbscaleError("--max-side must be >= 8 pixels")
        self.src, self.workers, self.max_side, self.skip_bad = src, workers, max_side, skip_bad
        self.wnids = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
        if not self.wnids:
            raise LbscaleError(f"{root / 'train'}: no class folders")
        index = {w: i for i, w in enumerate(self.wnids)}
        train = [(p, index[w]) for w in self.wnids for p in _images(root / "train" / w)]
        if not train:
            raise LbscaleError(f"{root / 'train'}: no images (.JPEG, .jpg, .png) in the class folders")
        order = np.random.default_rng(seed).permutation(len(train))
        self.files = {"train": [train[i] for i in order], "test": []}
        words: dict[str, str] = {}
        if (root / "val").is_dir():
            self.files["test"], words = self._val(root / "val", index, val_labels)
        synsets = self._find(SYNSETS)
        if synsets is not None:
            for line in synsets.read_text().splitlines():
                wnid, _, text = line.partition(" ")
                words.setdefault(wnid, text.strip())
        notes = {"class_words": json.dumps([words.get(w, "") for w in self.wnids]),
                 "layout": str(root.relative_to(src)) if root != src else "train/ val/",
                 "max_side": str(max_side or "none"), "test": "the official validation set (50 per class)",
                 "imagery": "photo"}
        self.meta = DatasetMeta("imagenet", "multiclass", self.wnids, ["R", "G", "B"], "ILSVRC2012", notes=notes,
                                encoding="jpeg")
        self.skipped: list[str] = []
        self.name_of = SampleNames(src)

    def _find(self, name: str) -> Path | None:
        """A label file in SRC or one of the three folders above it."""
        for folder in [self.src, *list(self.src.resolve().parents)[:3]]:
            if (folder / name).exists():
                return folder / name
        return None

    def _val(self, val: Path, index: dict, val_labels: str | None) -> tuple[list, dict]:
        folders = sorted(p for p in val.iterdir() if p.is_dir())
        if folders:
            unknown = [p.name for p in folders if p.name not in index]
            if unknown:
                raise LbscaleError(f"{val / unknown[0]}: a validation class folder with no train folder")
            return [(p, index[f.name]) for f in folders for p in _images(f)], {}
        files = _images(val)
        if not files:
            return [], {}
        label_file = Path(val_labels) if val_labels else (self._find(SOLUTION) or self._find(DEVKIT)
                                                           or self._find(DEVKIT + ".tar.gz"))
        if label_file is None:
            raise LbscaleError(f"{val}: {len(files)} images in no class folders; give their labels with --val-labels "
                               f"({SOLUTION} or the {DEVKIT} devkit)")
        if not label_file.exists():
            raise LbscaleError(f"{label_file}: no such file")
        words: dict[str, str] = {}
        if label_file.name.endswith(".csv"):
            wnid_of = {}
            try:
                with open(label_file, newline="") as fh:
                    for row in csv.DictReader(fh):
                        wnid_of[row["ImageId"]] = row["PredictionString"].split()[0]
            except (KeyError, IndexError, csv.Error, UnicodeDecodeError):
                raise LbscaleError(f"{label_file}: not a {SOLUTION} (columns ImageId, PredictionString)") from None
        else:
            wnids, words = _devkit_labels(label_file)
            if len(wnids) != len(files):
                raise LbscaleError(f"{label_file}: {len(wnids)} validation labels for {len(files)} images in {val}")
            wnid_of = {p.stem: w for p, w in zip(files, wnids)}
        out = []
        for p in files:
            wnid = wnid_of.get(p.stem)
            if wnid is None:
                raise LbscaleError(f"{p}: no label in {label_file}")
            if wnid not in index:
                raise LbscaleError(f"{label_file}: {p.stem} is labelled {wnid}, which has no train folder")
            out.append((p, index[wnid]))
        return out, words

    def train_labels(self) -> np.ndarray:
        return np.asarray([c for _, c in self.files["train"]], dtype=np.int64)

    def batches(self, split: str) -> Iterator[SplitBatch]:
        yield from encoded_batches(self, self.files[split], f"imagenet {split}", self.max_side)


def encoded_batches(source, files: list[tuple[Path, object]], desc: str, max_side: int | None = None) \
        -> Iterator[SplitBatch]:
    """(path, label) pairs as batches of stored JPEG bytes, read by `source.workers` processes (the source also
    gives `skip_bad`, `skipped`, `name_of` and `meta`); a bad file is an error, or with skip_bad left out and
    named in `source.skipped` and the file's notes. Labels may be class ids or multi-hot rows."""
    progress = bar(total=len(files), desc=desc, unit="file")
    read = partial(_read_one, max_side=max_side)
    pool = worker_context().Pool(source.workers) if source.workers > 0 and len(files) > 1 else None
    try:
        results = pool.imap(read, [p for p, _ in files], chunksize=8) if pool else map(read, (p for p, _ in files))
        for a in range(0, len(files), BATCH):
            group = files[a:a + BATCH]
            images = np.empty(len(group), dtype=object)
            sizes = np.zeros((len(group), 2), dtype=np.int32)
            stats = np.zeros((len(group), 7))
            keep = np.ones(len(group), dtype=bool)
            for i, (path, _) in enumerate(group):
                result = next(results)
                progress.update(1)
                if isinstance(result, str):  # a bad file
                    if not source.skip_bad:
                        raise LbscaleError(f"{result} (use --skip-bad to leave such files out)")
                    log_line(f"skipped {result}")
                    source.skipped.append(source.name_of(path))
                    keep[i], images[i] = False, np.empty(0, np.uint8)
                    continue
                data, sizes[i], stats[i] = result
                images[i] = np.frombuffer(data, dtype=np.uint8)
            labels = np.asarray([c for _, c in group])
            yield SplitBatch(images, labels, [source.name_of(p) for p, _ in group], {"sizes": sizes}, stats, keep)
        source.meta.notes["skipped"] = json.dumps(source.skipped)  # stamped on the file by the writer's finish
    finally:
        progress.close()
        if pool is not None:
            pool.terminate()
