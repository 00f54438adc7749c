"""`lbscale prepare folder`: class folders of PNGs, baseline JPEGs and 12-band uint16 GeoTIFFs, given or carved
splits, a multilabel CSV, resizing, and malformed folders as one line with nothing left behind. Every file is
written by the test (PIL, tifffile); pixels are compared with the files read back another way."""

import numpy as np
import pytest
import tifffile
from PIL import Image

from lbscale.data.formats import open_prepared
from lbscale.data.sources.base import resize

CLASSES = ["crop", "forest", "water"]


def _png_folder(root, per_class=8, side=16, seed=0):
    """root/<class>/img<i>.png, RGB uint8; the same file names in every class folder."""
    rng = np.random.default_rng(seed)
    pixels = {}
    for c in CLASSES:
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            arr = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
            Image.fromarray(arr).save(root / c / f"img{i}.png")
            pixels[f"{c}/img{i}.png"] = arr.transpose(2, 0, 1)
    return pixels


def _by_name(f, split):
    return {n.decode() if isinstance(n, bytes) else str(n): (img, lab)
            for n, img, lab in zip(f.names(split), f.images(split)[...], f.labels(split)[...])}


def test_class_folders_of_pngs_carved_into_splits(tmp_path, run_cli):
    pixels = _png_folder(tmp_path / "src")
    out = tmp_path / "png.h5"
    rc, stdout, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--val-fraction", "0.25",
                              "--test-fraction", "0.25")
    assert rc == 0, err
    with open_prepared(out) as f:
        assert f.class_names == CLASSES and f.band_names == ["red", "green", "blue"] and f.task == "multiclass"
        seen = {}
        for split in ("train", "val", "test"):
            seen.update(_by_name(f, split))
            assert sorted(np.bincount(f.labels(split)[...], minlength=3).tolist()) == [
                {"train": 4, "val": 2, "test": 2}[split]] * 3  # stratified: per class 4 / 2 / 2
    assert sorted(seen) == sorted(pixels)  # names relative to the root: img0.png three times, distinct
    for name, (img, label) in seen.items():
        assert np.array_equal(img, pixels[name]) and CLASSES[label] == name.split("/")[0]
    assert run_cli("data", "check", out)[0] == 0
    rc, _, err = run_cli("train", "--data", out, "--out", tmp_path / "t", "--model", "test_resnet", "--epochs", "1",
                         "--global-batch", "4", "--quiet", "--device", "cpu")
    assert rc == 0, err


def test_baseline_jpegs_are_decoded_pixels(tmp_path, run_cli):
    rng = np.random.default_rng(1)
    for c in CLASSES[:2]:
        (tmp_path / "src" / c).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(tmp_path / "src" / c / f"{i}.jpg",
                                                                                  quality=90)
    out = tmp_path / "jpg.h5"
    assert run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--val-fraction", "0",
                   "--test-fraction", "0")[0] == 0
    with open_prepared(out) as f:
        for name, (img, _) in _by_name(f, "train").items():
            with Image.open(tmp_path / "src" / name) as im:  # PIL's decode of the same file
                assert np.array_equal(img, np.asarray(im.convert("RGB")).transpose(2, 0, 1))


def _tiff_splits(root, bands=12, side=20, odd=None):
    """root/train|val|test/<class>/<n>.tif: uint16, `bands` bands (one file `odd` = (path, bands) differs)."""
    rng = np.random.default_rng(2)
    pixels = {}
    for split, n in (("train", 6), ("val", 2), ("test", 2)):
        for c in CLASSES:
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                name = f"{split}/{c}/{c}_{i}.tif"
                k = odd[1] if odd and name == odd[0] else bands
                arr = rng.integers(0, 10_000, (side, side, k), dtype=np.uint16)
                tifffile.imwrite(root / name, arr, photometric="minisblack", planarconfig="contig")
                pixels[name] = arr.transpose(2, 0, 1)
    return pixels


def test_given_splits_of_12_band_uint16_geotiffs(tmp_path, run_cli):
    pixels = _tiff_splits(tmp_path / "src")
    out = tmp_path / "tif.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--workers", "2")
    assert rc == 0, err
    with open_prepared(out) as f:
        assert f.band_names == [f"B{i}" for i in range(1, 13)] and f.images("train").dtype == np.uint16
        for split, n in (("train", 18), ("val", 6), ("test", 6)):
            got = _by_name(f, split)
            assert len(got) == n and all(name.startswith(split + "/") for name in got)
            for name, (img, label) in got.items():
                assert np.array_equal(img, pixels[name]) and CLASSES[label] == name.split("/")[1]


def test_resize_is_bilinear_with_half_pixel_centres():
    img = np.array([[[0, 100], [0, 100]]], dtype=np.uint8)  # a horizontal ramp, 2 x 2 -> 4 x 4
    assert resize(img, 4)[0].tolist() == [[0, 25, 75, 100]] * 4
    # 4 -> 2 shrinks with the triangle filter (tests/data/test_resize.py), 2 pixels each side, cut at the edge:
    # weights 3/7, 3/7, 1/7 on columns 0, 1, 2 (ramp 0, 1, 2: 5/7) and 1/7, 3/7, 3/7 on 1, 2, 3 (16/7); rows alike
    f = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
    np.testing.assert_allclose(resize(f, 2)[0], (np.array([[5, 16]]) + np.array([[20], [64]])) / 7, rtol=1e-6)


def test_mixed_sizes_with_size_are_resized(tmp_path, run_cli):
    _png_folder(tmp_path / "src", per_class=3, side=16)
    Image.fromarray(np.full((40, 30, 3), 7, dtype=np.uint8)).save(tmp_path / "src" / "crop" / "big.png")
    out = tmp_path / "r.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--size", "16",
                         "--val-fraction", "0", "--test-fraction", "0")
    assert rc == 0, err
    with open_prepared(out) as f:
        got = _by_name(f, "train")
        assert got["crop/big.png"][0].shape == (3, 16, 16) and (got["crop/big.png"][0] == 7).all()


def test_a_multilabel_csv(tmp_path, run_cli):
    _png_folder(tmp_path / "src", per_class=4)
    files = sorted(p.relative_to(tmp_path / "src").as_posix() for p in (tmp_path / "src").rglob("*.png"))
    hot = {name: [int(name.startswith("crop")), int(i % 2 == 0), 1 - int(name.startswith("crop"))]
           for i, name in enumerate(files)}
    (tmp_path / "labels.csv").write_text("file,urban,green,wet\n" + "".join(
        f"{name},{','.join(map(str, v))}\n" for name, v in hot.items()))
    out = tmp_path / "ml.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--labels", tmp_path / "labels.csv",
                         "--out", out, "--val-fraction", "0", "--test-fraction", "0")
    assert rc == 0, err
    with open_prepared(out) as f:
        assert f.task == "multilabel" and f.class_names == ["urban", "green", "wet"]
        assert {name: lab.tolist() for name, (_, lab) in _by_name(f, "train").items()} == hot
    names = "file,labels\n" + "".join(f"{n},{' '.join(c for c, v in zip(['urban', 'green', 'wet'], hot[n]) if v)}\n"
                                      for n in files)
    (tmp_path / "names.csv").write_text(names)
    out2 = tmp_path / "ml2.h5"
    assert run_cli("prepare", "folder", "--src", tmp_path / "src", "--labels", tmp_path / "names.csv", "--out",
                   out2, "--val-fraction", "0", "--test-fraction", "0")[0] == 0
    with open_prepared(out2) as f:  # class names sorted: green, urban, wet
        assert f.class_names == ["green", "urban", "wet"]
        assert {n: lab.tolist() for n, (_, lab) in _by_name(f, "train").items()} == {
            n: [v[1], v[0], v[2]] for n, v in hot.items()}


def _bad_bands(root):
    _tiff_splits(root, bands=12, odd=("train/forest/forest_3.tif", 4))


def _empty_class(root):
    _png_folder(root, per_class=2)
    (root / "empty").mkdir()


@pytest.mark.parametrize("make, extra, message", [
    (_bad_bands, [], "forest_3.tif: uint16 4 bands x 20 x 20, but the dataset's first image is uint16 12 bands"),
    (_empty_class, [], "empty: a class folder with no images"),
    (lambda root: _png_folder(root, per_class=2), ["--labels", "MISSING_CSV"], "ghost.png: no such file"),
])
def test_malformed_folders_are_one_line_and_leave_nothing(tmp_path, run_cli, make, extra, message):
    make(tmp_path / "src")
    (tmp_path / "labels.csv").write_text("file,a,b\ncrop/img0.png,1,0\ncrop/ghost.png,0,1\n")
    extra = [str(tmp_path / "labels.csv") if e == "MISSING_CSV" else e for e in extra]
    out = tmp_path / "bad.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, *extra)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not list(tmp_path.glob("*.h5*"))
