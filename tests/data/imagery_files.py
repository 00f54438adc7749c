"""Small prepared files of every kind of imagery, each written through `prepare` from raw files the fixture
generators (or PIL, tifffile, numpy) write: `prepared(kind, folder)`; and `without_imagery`, a file as lbscale
wrote it before it recorded imagery."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import h5py
import numpy as np
import tifffile
from PIL import Image

from lbscale.data.prepare import prepare
from tests.fixtures.make_bigearthnet import make_root
from tests.fixtures.make_cifar import make_cifar
from tests.fixtures.make_eurosat import make_eurosat
from tests.fixtures.make_idx import make_idx
from tests.fixtures.make_imagenet import make_imagenet
from tests.fixtures.make_sat import make_mat

CLASSES = ("crop", "forest", "water")


def _image_folder(root: Path, suffix: str, per_class: int = 8, side: int = 16) -> Path:
    """root/<class>/img<i><suffix>: RGB uint8 PNGs or JPEGs (PIL), or 5-band uint16 TIFFs (tifffile)."""
    rng = np.random.default_rng(0)
    for c in CLASSES:
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            path = root / c / f"img{i}{suffix}"
            if suffix == ".tif":
                tifffile.imwrite(path, rng.integers(0, 5000, (side, side, 5), dtype=np.uint16), planarconfig="contig")
            else:
                Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(path)
    return root


def _written(make, src: Path, **kw) -> Path:
    make(src, **kw)
    return src


def _idx(tmp: Path, name: str | None = None) -> tuple[Path, dict]:
    make_idx(tmp / "files", n_train=120, n_test=20)  # a folder whose name names no dataset: --name says which
    return tmp / "files", ({"name": name} if name else {})


def _arrays(tmp: Path) -> tuple[None, dict]:
    rng = np.random.default_rng(0)
    np.save(tmp / "x.npy", rng.integers(0, 256, (120, 16, 16, 3), dtype=np.uint8))
    np.save(tmp / "y.npy", np.arange(120) % 4)
    return None, {"images": str(tmp / "x.npy"), "labels": str(tmp / "y.npy"), "layout": "nhwc"}


# kind: (prepare's dataset, a function writing the raw files into a folder -> (--src, prepare's options))
RAW = {
    "sat4": ("sat4", lambda tmp: (_written(make_mat, tmp / "sat.mat"), {})),
    "bigearthnet": ("bigearthnet", lambda tmp: (_written(make_root, tmp / "ben"), {})),
    "eurosat": ("eurosat", lambda tmp: (_written(make_eurosat, tmp / "EuroSAT_MS", per_class=2),
                                        {"val_fraction": 0, "test_fraction": 0})),
    "synthetic": ("synthetic", lambda tmp: (None, {"count": 200, "size": 16})),
    "tiff-folder": ("folder", lambda tmp: (_image_folder(tmp / "tiffs", ".tif"), {})),
    "png-folder": ("folder", lambda tmp: (_image_folder(tmp / "pngs", ".png"), {})),
    "jpeg-folder": ("folder", lambda tmp: (_image_folder(tmp / "jpegs", ".jpg"), {"encoding": "jpeg"})),
    "imagenet": ("imagenet", lambda tmp: (_written(make_imagenet, tmp / "in", per_class=3, val_per_class=1),
                                          {"val_fraction": 0})),
    "cifar10": ("cifar10", lambda tmp: (_written(make_cifar, tmp / "cifar-10-batches-py", per_batch=24), {})),
    "mnist": ("idx", partial(_idx, name="mnist")),
    "fashion-mnist": ("idx", partial(_idx, name="fashion-mnist")),
    "kmnist": ("idx", partial(_idx, name="kmnist")),
    "idx": ("idx", _idx),
    "arrays": ("arrays", _arrays),
}


def prepared(kind: str, tmp: Path, **more) -> Path:
    """A prepared HDF5 file of `kind` (a RAW key) in `tmp`; `more`: further options of prepare."""
    tmp.mkdir(parents=True, exist_ok=True)
    dataset, write = RAW[kind]
    src, options = write(tmp)
    out = tmp / f"{kind}.h5"
    prepare(dataset, src, out, command="test", **options, **more)
    return out


def without_imagery(path: Path) -> Path:
    """`path` as an lbscale before this one wrote it: the same notes but `imagery`."""
    with h5py.File(path, "r+") as h:
        notes = json.loads(h.attrs["notes"])
        del notes["imagery"]
        h.attrs["notes"] = json.dumps(notes)
    return path
