"""Your own images from a folder, in the layout torchvision's ImageFolder and torchgeo users know.

    SRC/<class>/<file>                      one folder per class; val and test are carved (stratified, seeded)
    SRC/train|val|test/<class>/<file>       given splits (train required); a split missing is carved
    SRC/... + --labels labels.csv           multilabel: a `file` column (paths relative to SRC), then one 0/1
                                            column per class, or a `labels` column of class names (';' or ' ')

Files: PNG and JPEG decoded to pixels (uint8 grey, grey + alpha, RGB, RGBA; palettes as the RGB / RGBA they
index, bilevel as 0 / 255 grey; 16-bit grey PNGs as one uint16 band; CMYK, float, 16-bit colour and 32-bit
values are refused) and TIFF / GeoTIFF with any band count, as samples or as pages (tifffile; uint8 / uint16 /
float32 kept native). All files of a dataset must agree in bands, size and type; `--size S` resizes every image
to S x S as PIL's BILINEAR does: enlarging with the bilinear convention of BigEarthNet's upsampling (half-pixel
centres, clamped edges), shrinking with its antialiasing triangle filter; rounded for integer types. Class ids
follow the sorted class-folder (or column) names. Sample names are paths relative to SRC, so names repeated
across class folders stay distinct.
"""

from __future__ import annotations

import csv
import json
from functools import partial
from pathlib import Path
from typing import Iterator

import numpy as np

from lbscale.data.formats.base import UNKNOWN_IMAGERY, DatasetMeta
from lbscale.data.sources.base import (PIXEL_TYPES, RESIZE, SKIP_BAD, SampleNames, Source, SourceOption, SplitBatch,
                                       check_size, parallel_batches, resize)
from lbscale.data.sources.imagenet import encoded_batches
from lbscale.data.sources.tiff import read_tiff
from lbscale.errors import LbscaleError
from lbscale.progress import log_line

SUFFIXES = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".tif": "tiff", ".tiff": "tiff"}
SPLIT_DIRS = ("train", "val", "test")
BATCH = 256


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES
                  and not p.name.startswith("."))


# PIL modes stored as they are, and those converted on the way: bilevel to 0/255 grey, palettes to the colours they
# index, premultiplied alpha undone. 16-bit grey (the I;16 modes, and I as older Pillows open 16-bit PNGs) is kept as
# one uint16 band; anything else (CMYK, floats, 32-bit values) would be a lossy guess, so it is refused.
KEPT_MODES = ("L", "LA", "RGB", "RGBA")
CONVERTED_MODES = {"1": "L", "PA": "RGBA", "La": "LA", "RGBa": "RGBA", "RGBX": "RGB"}
GREY16_MODES = ("I;16", "I;16L", "I;16B", "I;16N")


def _pil_pixels(path: Path, im) -> np.ndarray:
    """An opened, not yet loaded PIL image -> (H, W) or (H, W, bands) of uint8 / uint16; LbscaleError if its mode
    cannot be kept."""
    rawmode = im.tile[0][3] if im.tile else None  # what the file holds; gone once loaded
    im.load()
    mode = im.mode
    if isinstance(rawmode, str) and ";16" in rawmode and mode not in GREY16_MODES:
        raise LbscaleError(f"{path}: a 16-bit {rawmode.split(';')[0]} image, which PIL decodes to 8 bits per channel "
                           f"(mode {mode}); save 16-bit colour, alpha or multi-band images as TIFF")
    if mode in GREY16_MODES:
        return np.asarray(im).astype(np.uint16)  # native byte order (I;16B reads big-endian)
    if mode == "I":
        arr = np.asarray(im)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > 65535:
            raise LbscaleError(f"{path}: PIL mode I with values {lo}..{hi}; lbscale keeps 32-bit integer images "
                               f"only within uint16 (0..65535)")
        return arr.astype(np.uint16)
    if mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
    elif mode in CONVERTED_MODES:
        im = im.convert(CONVERTED_MODES[mode])
    elif mode not in KEPT_MODES:
        raise LbscaleError(f"{path}: PIL mode {mode}, which lbscale does not keep (PNG / JPEG pixels are stored as "
                           f"grey, grey + alpha, RGB, RGBA or 16-bit grey; save other data as TIFF)")
    return np.asarray(im)


def read_pixels(path: Path) -> np.ndarray:
    """One image file -> (C, H, W) in its native type; LbscaleError names an unreadable file."""
    if SUFFIXES[path.suffix.lower()] == "tiff":
        arr = read_tiff(path)
    else:
        from PIL import Image

        try:
            with Image.open(path) as im:
                arr = _pil_pixels(path, im)
        except LbscaleError:
            raise
        except Exception as e:  # PIL raises OSError, SyntaxError, ValueError, ... on a bad file
            raise LbscaleError(f"{path}: not a readable image ({str(e).splitlines()[0] if str(e) else e!r})") \
                from None
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3:
        raise LbscaleError(f"{path}: {arr.ndim}-D image data, expected height x width x bands")
    if arr.dtype.name not in PIXEL_TYPES:
        raise LbscaleError(f"{path}: pixel type {arr.dtype}; lbscale keeps uint8, uint16 or float32")
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def read_sample(path: Path, shape: tuple, dtype: str, size: int | None, skip_bad: bool):
    """A reader process's job: the sample's pixels, checked against the dataset's shape and type, and None;
    with skip_bad, a file that fails gives zeros and its error (left out of the written file)."""
    try:
        image = read_pixels(path)
        if size is not None:
            image = resize(image, size)
        if image.shape != shape or image.dtype != np.dtype(dtype):
            raise LbscaleError(f"{path}: {image.dtype} {image.shape[0]} bands x {image.shape[1]} x {image.shape[2]}, "
                               f"but the dataset's first image is {np.dtype(dtype)} {shape[0]} bands x {shape[1]} x "
                               f"{shape[2]} (give --size to resize every image)")
        return image, None
    except LbscaleError as e:
        if not skip_bad:
            raise
        return np.zeros(shape, dtype=dtype), str(e)


def folder_imagery(files: dict[str, list[Path]]) -> str:
    """What a folder's files show, by their type: GeoTIFF / TIFF bands are remote sensing, PNG and JPEG photos; a
    folder of both is neither for sure."""
    tiff = {SUFFIXES[p.suffix.lower()] == "tiff" for paths in files.values() for p in paths}
    if tiff == {True}:
        return "remote-sensing"
    return "photo" if tiff == {False} else UNKNOWN_IMAGERY


class FolderSource(Source):
    """Class folders (or a labels CSV) of PNG / JPEG / TIFF files, optionally split into train / val / test."""

    help = "your own images: SRC/<class>/<file> or SRC/train|val|test/<class>/<file>, PNG / JPEG / (Geo)TIFF"
    options = (SourceOption("labels", "a labels CSV"), RESIZE, SKIP_BAD,
               SourceOption("encoding", "store pixels, or the JPEG bytes (PNG / JPEG; decoded by the loader, nvjpeg "
                                        "on a GPU)", choices=("raw", "jpeg")))
    common = ("workers", "seed")

    def __init__(self, name: str, src: Path, workers: int = 1, seed: int = 0, labels: str | None = None,
                 size: int | None = None, skip_bad: bool = False, encoding: str = "raw"):
        src = Path(src)
        if not src.is_dir():
            raise LbscaleError(f"{src}: not a directory of images")
        check_size(size)
        if encoding == "jpeg" and size is not None:
            raise LbscaleError("--size resizes pixels; with --encoding jpeg the loader crops at decode time "
                               "(--crop-size when training)")
        self.src, self.workers, self.size, self.skip_bad, self.encoding = src, workers, size, skip_bad, encoding
        self.skipped: list[str] = []
        self.name_of = SampleNames(src)
        given = [s for s in SPLIT_DIRS if (src / s).is_dir()]
        if given and "train" not in given:
            raise LbscaleError(f"{src}: has {', '.join(given)}/ but no train/ folder")
        if labels is not None:
            files, y, classes = self._from_csv(Path(labels), given)
            task = "multilabel"
        else:
            files, y, classes = self._from_folders(given)
            task = "multiclass"
        self.splits = tuple(s for s in SPLIT_DIRS if files.get(s))
        rng = np.random.default_rng(seed)  # class folders come sorted: mix them for the loader's block shuffle
        self.files, self.targets = {}, {}
        for split, paths in files.items():
            order = rng.permutation(len(paths))
            self.files[split] = [paths[i] for i in order]
            self.targets[split] = y[split][order]
        if encoding == "jpeg":  # stored encoded, as ImageNet: baseline RGB JPEGs for any decoder, nvjpeg included
            tiff = next((p for ps in self.files.values() for p in ps if SUFFIXES[p.suffix.lower()] == "tiff"), None)
            if tiff is not None:
                raise LbscaleError(f"{tiff}: a TIFF; --encoding jpeg stores PNG and JPEG files only")
            self.meta = DatasetMeta(src.name, task, classes, ["R", "G", "B"], f"lbscale prepare folder of {src.name}",
                                    notes={"imagery": "photo"}, encoding="jpeg")
            return
        first = read_pixels(self.files["train"][0])
        if size is not None:
            first = resize(first, size)
        self.shape, self.dtype = first.shape, first.dtype
        bands = {1: ["gray"], 2: ["gray", "alpha"], 3: ["red", "green", "blue"], 4: ["red", "green", "blue", "alpha"]}
        png_jpeg = SUFFIXES[self.files["train"][0].suffix.lower()] != "tiff"
        band_names = bands[first.shape[0]] if png_jpeg and first.shape[0] in bands else \
            [f"B{i + 1}" for i in range(first.shape[0])]
        self.meta = DatasetMeta(src.name, task, classes, band_names, f"lbscale prepare folder of {src.name}",
                                notes={"imagery": folder_imagery(self.files)})

    def _from_folders(self, given: list[str]):
        roots = {s: self.src / s for s in given} if given else {"train": self.src}
        classes = sorted(p.name for p in roots["train"].iterdir() if p.is_dir() and not p.name.startswith("."))
        if not classes:
            raise LbscaleError(f"{roots['train']}: no class folders (expected <class>/<image files>)")
        files, y = {}, {}
        for split, root in roots.items():
            found = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
            unknown = sorted(set(found) - set(classes))
            if unknown:
                raise LbscaleError(f"{root / unknown[0]}: a class folder that train/ does not have")
            paths, ids = [], []
            for c, name in enumerate(classes):
                images = _images(root / name) if (root / name).is_dir() else []
                if not images and split == "train":
                    raise LbscaleError(f"{root / name}: a class folder with no images "
                                       f"({', '.join(sorted(SUFFIXES))})")
                paths += images
                ids += [c] * len(images)
            files[split], y[split] = paths, np.asarray(ids, dtype=np.int64)
        return files, y, classes

    def _from_csv(self, path: Path, given: list[str]):
        try:
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
        except FileNotFoundError:
            raise LbscaleError(f"{path}: no such labels file") from None
        if not rows or "file" not in rows[0]:
            raise LbscaleError(f"{path}: expected a header with a `file` column, then class columns or `labels`")
        columns = [c for c in rows[0] if c not in ("file", "labels", "split")]
        if "labels" in rows[0]:
            names = [str(r["labels"] or "").replace(";", " ").split() for r in rows]
            classes = sorted({n for row in names for n in row})
            index = {c: i for i, c in enumerate(classes)}
            hot = np.zeros((len(rows), len(classes)), dtype=np.uint8)
            for i, row in enumerate(names):
                hot[i, [index[n] for n in row]] = 1
        elif columns:
            classes = columns
            try:
                hot = np.asarray([[int(r[c]) for c in columns] for r in rows], dtype=np.int64)
            except (TypeError, ValueError):
                raise LbscaleError(f"{path}: class columns must hold 0 or 1") from None
            if ((hot != 0) & (hot != 1)).any():
                raise LbscaleError(f"{path}: class columns must hold 0 or 1")
            hot = hot.astype(np.uint8)
        else:
            raise LbscaleError(f"{path}: no class columns and no `labels` column")
        files, y = {}, {}
        for i, r in enumerate(rows):
            file = self.src / r["file"]
            if not file.is_file():
                raise LbscaleError(f"{path}:{i + 2}: {r['file']}: no such file under {self.src}")
            split = r.get("split") or (Path(r["file"]).parts[0] if given else "train")
            if split not in SPLIT_DIRS:
                raise LbscaleError(f"{path}:{i + 2}: split {split!r} is not train, val or test")
            files.setdefault(split, []).append(file)
            y.setdefault(split, []).append(hot[i])
        if not files.get("train"):
            raise LbscaleError(f"{path}: no train samples")
        return files, {s: np.stack(v) for s, v in y.items()}, classes

    def train_labels(self) -> np.ndarray:
        return self.targets["train"]

    def batches(self, split: str) -> Iterator[SplitBatch]:
        paths, labels = self.files[split], self.targets[split]
        if self.encoding == "jpeg":
            yield from encoded_batches(self, list(zip(paths, labels)), f"folder {split}")
            return
        name_of = self.name_of
        read = partial(read_sample, shape=self.shape, dtype=self.dtype.str, size=self.size, skip_bad=self.skip_bad)
        start = 0
        for images, errors in parallel_batches(read, paths, self.workers, BATCH, self.shape, self.dtype,
                                               f"folder {split}"):
            stop = start + len(errors)
            names = [name_of(p) for p in paths[start:stop]]
            keep = np.asarray([e is None for e in errors])
            for name, error in zip(names, errors):
                if error is not None:
                    log_line(f"skipped {error}")
                    self.skipped.append(name)
            # the reader's buffer stays valid until the next batch is asked for: prepare writes it before
            yield SplitBatch(images, labels[start:stop], names, keep=None if keep.all() else keep)
            start = stop
        self.meta.notes["skipped"] = json.dumps(self.skipped)  # stamped on the file by the writer's finish
