"""`lbscale prepare arrays`: a user's .npy / .npz / HDF5 arrays -> the prepared layout, pixels and labels exact."""

import h5py
import numpy as np
import pytest

from lbscale.data.formats import open_prepared
from lbscale.data.prepare import prepare
from lbscale.data.sources.arrays import open_array
from lbscale.data.sources.base import resize


def _rows(f, split):
    """Row indices into the input arrays of a split's samples (sample names are the row numbers)."""
    return np.asarray([int(n) for n in f.names(split)], dtype=np.int64)


def _classes(n, k, rng):
    return rng.permutation(np.arange(n) % k).astype(np.int64)


@pytest.mark.parametrize("fmt", ["hdf5", "tfrecord"])
def test_npy_nhwc_uint16_carved_exactly(tmp_path, fmt):
    rng = np.random.default_rng(0)
    n, k = 300, 5
    x = rng.integers(0, 60000, size=(n, 8, 8, 12), dtype=np.uint16)
    y = _classes(n, k, rng)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    out = tmp_path / ("out.h5" if fmt == "hdf5" else "out.tfr")
    counts = prepare("arrays", None, out, fmt, val_fraction=0.1, test_fraction=0.2, seed=4,
                     images=f"{tmp_path}/x.npy", labels=f"{tmp_path}/y.npy", layout="NHWC")
    assert counts == {"train": 210, "val": 30, "test": 60}
    with open_prepared(out) as f:
        assert f.task == "multiclass"
        assert f.band_names == [f"B{i}" for i in range(1, 13)]
        assert f.class_names == ["0", "1", "2", "3", "4"]
        seen = []
        for split in ("train", "val", "test"):
            rows = _rows(f, split)
            seen.append(rows)
            images = f.images(split)[:]
            assert images.dtype == np.uint16
            np.testing.assert_array_equal(images, x[rows].transpose(0, 3, 1, 2))
            np.testing.assert_array_equal(f.labels(split), y[rows])
        # stratified: 60 per class -> 6 val and 12 test of each
        assert np.bincount(y[seen[1]], minlength=k).tolist() == [6] * k
        assert np.bincount(y[seen[2]], minlength=k).tolist() == [12] * k
    everything = np.concatenate(seen)
    assert sorted(everything.tolist()) == list(range(n))  # disjoint, and together the whole input


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_key_nchw_uint8(tmp_path, save):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(120, 3, 10, 10), dtype=np.uint8)
    y = _classes(120, 3, rng)
    save(tmp_path / "d.npz", images=x, labels=y, other=np.zeros(4))
    # np.savez stores members uncompressed: they are memory-mapped, not read whole
    assert isinstance(open_array(f"{tmp_path}/d.npz:images", "images").array, np.memmap) == (save is np.savez)
    out = tmp_path / "out.h5"
    prepare("arrays", None, out, val_fraction=0.0, test_fraction=0.25, images=f"{tmp_path}/d.npz:images",
            labels=f"{tmp_path}/d.npz:labels", layout="NCHW", band_names="r,g,b", class_names="a,b,c")
    with open_prepared(out) as f:
        assert (f.band_names, f.class_names) == (["r", "g", "b"], ["a", "b", "c"])
        assert (f.size("train"), f.size("val"), f.size("test")) == (90, 0, 30)
        for split in ("train", "test"):
            rows = _rows(f, split)
            np.testing.assert_array_equal(f.images(split)[:], x[rows])
            np.testing.assert_array_equal(f.labels(split), y[rows])


def test_h5_float32_multilabel(tmp_path):
    # float images failed in BandStats.update (np.einsum("...,...->") is refused by numpy 2.4) before its fix
    rng = np.random.default_rng(2)
    x = rng.normal(size=(150, 16, 16, 4)).astype(np.float32)
    y = (rng.random((150, 6)) < 0.3).astype(np.uint8)
    y[np.arange(150), rng.integers(0, 6, 150)] = 1
    with h5py.File(tmp_path / "d.h5", "w") as h5:
        h5["data/x"] = x
        h5["data/y"] = y
    out = tmp_path / "out.h5"
    prepare("arrays", None, out, val_fraction=0.1, test_fraction=0.1, images=f"{tmp_path}/d.h5:data/x",
            labels=f"{tmp_path}/d.h5:data/y", layout="NHWC")
    with open_prepared(out) as f:
        assert f.task == "multilabel" and f.num_classes == 6
        total = 0
        for split in ("train", "val", "test"):
            rows = _rows(f, split)
            total += len(rows)
            images = f.images(split)[:]
            assert images.dtype == np.float32
            np.testing.assert_array_equal(images, x[rows].transpose(0, 3, 1, 2))
            np.testing.assert_array_equal(f.labels(split), y[rows])
        assert total == 150


def test_single_band_3d_images(tmp_path):
    x = np.arange(40 * 9 * 9, dtype=np.uint8).reshape(40, 9, 9)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.arange(40) % 2)
    out = tmp_path / "out.h5"
    prepare("arrays", None, out, val_fraction=0.0, test_fraction=0.0, images=f"{tmp_path}/x.npy",
            labels=f"{tmp_path}/y.npy")
    with open_prepared(out) as f:
        assert f.band_names == ["B1"]
        np.testing.assert_array_equal(f.images("train")[:], x[_rows(f, "train")][:, None])


def test_split_of_given_exactly(tmp_path):
    rng = np.random.default_rng(3)
    n = 200
    x = rng.integers(0, 256, size=(n, 8, 8, 2), dtype=np.uint8)
    y = _classes(n, 4, rng)
    names = rng.choice(np.array(["train", "val", "test"]), size=n, p=[0.6, 0.2, 0.2])
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "s.npy", names)
    out = tmp_path / "out.h5"
    # the fractions would carve val/test; given splits are kept as they are instead
    prepare("arrays", None, out, val_fraction=0.3, test_fraction=0.3, images=f"{tmp_path}/x.npy",
            labels=f"{tmp_path}/y.npy", layout="NHWC", split_of=f"{tmp_path}/s.npy")
    with open_prepared(out) as f:
        for split in ("train", "val", "test"):
            rows = _rows(f, split)
            assert rows.tolist() == np.flatnonzero(names == split).tolist()
            np.testing.assert_array_equal(f.images(split)[:], x[rows].transpose(0, 3, 1, 2))
            np.testing.assert_array_equal(f.labels(split), y[rows])


def test_split_of_ints_without_val_carves_val_from_train(tmp_path):
    rng = np.random.default_rng(5)
    n = 160
    np.save(tmp_path / "x.npy", rng.integers(0, 256, size=(n, 8, 8), dtype=np.uint8))
    np.save(tmp_path / "y.npy", _classes(n, 2, rng))
    codes = np.where(np.arange(n) % 4 == 0, 2, 0)  # every 4th sample is test, the rest train
    np.save(tmp_path / "s.npy", codes)
    out = tmp_path / "out.h5"
    prepare("arrays", None, out, val_fraction=0.25, test_fraction=0.5, images=f"{tmp_path}/x.npy",
            labels=f"{tmp_path}/y.npy", split_of=f"{tmp_path}/s.npy")
    with open_prepared(out) as f:
        assert _rows(f, "test").tolist() == np.flatnonzero(codes == 2).tolist()
        train, val = set(_rows(f, "train").tolist()), set(_rows(f, "val").tolist())
        assert len(val) == 30 and not train & val and train | val == set(np.flatnonzero(codes == 0).tolist())


@pytest.mark.parametrize("shape, dtype, layout, size", [
    ((90, 12, 12, 3), np.uint16, "NHWC", 8),  # shrunk with the triangle filter
    ((90, 2, 6, 6), np.uint8, "NCHW", 16),  # enlarged bilinearly
    ((90, 28, 28), np.float32, None, 8),  # one band, float: not rounded
])
def test_size_resizes_every_image_with_the_shared_resize(tmp_path, shape, dtype, layout, size):
    # arrays refused --size; now each image goes through sources.base.resize, as prepare folder --size sends it
    rng = np.random.default_rng(8)
    x = (rng.random(shape) * 250).astype(dtype)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", _classes(len(x), 3, rng))
    out = tmp_path / "out.h5"
    prepare("arrays", None, out, val_fraction=0.1, test_fraction=0.2, images=f"{tmp_path}/x.npy",
            labels=f"{tmp_path}/y.npy", layout=layout, size=size)
    nchw = x[:, None] if x.ndim == 3 else x.transpose(0, 3, 1, 2) if layout == "NHWC" else x
    with open_prepared(out) as f:
        assert sum(f.size(s) for s in f.splits()) == len(x)
        for split in f.splits():
            images = f.images(split)[:]
            assert images.shape[1:] == (nchw.shape[1], size, size) and images.dtype == dtype
            expected = np.stack([resize(image, size) for image in nchw[_rows(f, split)]])
            np.testing.assert_array_equal(images, expected)


def test_size_gives_the_pixels_prepare_folder_gives(tmp_path, run_cli):
    from PIL import Image

    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, size=(24, 10, 10, 3), dtype=np.uint8)
    y = np.arange(24) % 2
    for i, (image, label) in enumerate(zip(x, y)):
        (tmp_path / "src" / f"c{label}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(tmp_path / "src" / f"c{label}" / f"{i}.png")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    none = ["--val-fraction", "0", "--test-fraction", "0", "--size", "7", "--quiet"]
    assert run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", tmp_path / "f.h5", *none)[0] == 0
    rc, _, err = run_cli("prepare", "arrays", "--images", tmp_path / "x.npy", "--labels", tmp_path / "y.npy",
                         "--layout", "NHWC", "--out", tmp_path / "a.h5", *none)
    assert rc == 0, err
    with open_prepared(tmp_path / "f.h5") as f, open_prepared(tmp_path / "a.h5") as a:
        by_row = {int(name.split("/")[1][:-4]): image for name, image in zip(f.names("train"), f.images("train")[:])}
        arrays = a.images("train")[:]
        assert arrays.shape == (24, 3, 7, 7)
        for row, image in zip(_rows(a, "train"), arrays):
            np.testing.assert_array_equal(image, by_row[row])


def test_size_below_one_is_one_line_and_no_output(tmp_path, run_cli):
    out = tmp_path / "out.h5"
    rc, _, err = run_cli("prepare", "arrays", *_small_set(tmp_path), "--size", "0", "--out", out, "--quiet")
    assert (rc, err) == (2, "lbscale: error: --size must be >= 1\n")
    assert not out.exists() and not list(tmp_path.glob(".out.h5*"))


def _small_set(tmp_path, n=200):
    rng = np.random.default_rng(6)
    np.save(tmp_path / "x.npy", rng.integers(0, 256, size=(n, 16, 16, 3), dtype=np.uint8))
    np.save(tmp_path / "y.npy", _classes(n, 4, rng))
    return ["--images", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--layout", "nhwc"]


def test_cli_prepare_check_and_train_one_epoch(tmp_path, run_cli):
    out = tmp_path / "arr.h5"
    rc, stdout, err = run_cli("prepare", "arrays", *_small_set(tmp_path), "--out", out, "--quiet")
    assert rc == 0, err
    assert f"wrote {out}" in stdout
    rc, stdout, err = run_cli("data", "check", out)
    assert rc == 0 and "OK" in stdout, err
    rc, _, err = run_cli("train", "--data", out, "--out", tmp_path / "t", "--model", "test_resnet", "--epochs", "1",
                         "--global-batch", "32", "--quiet", "--device", "cpu")
    assert rc == 0, err


def _bad(tmp_path, case):
    """Arguments of `prepare arrays` for one malformed input, and a piece of its error line."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, size=(20, 8, 8, 3), dtype=np.uint8)
    y = np.arange(20) % 2
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    good = ["--images", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--layout", "NHWC"]
    if case == "labels length":
        np.save(tmp_path / "y19.npy", y[:19])
        return good[:3] + [tmp_path / "y19.npy"] + good[4:], "19 labels for 20 images"
    if case == "npz key":
        np.savez(tmp_path / "d.npz", images=x, labels=y)
        return ["--images", f"{tmp_path}/d.npz:pixels", *good[2:]], "no array 'pixels'"
    if case == "no layout":
        return good[:4], "need --layout"
    if case == "absurd layout":
        return good[:5] + ["NCHW"], "look NHWC"
    if case == "3-D labels":
        np.save(tmp_path / "y3.npy", np.zeros((20, 2, 2), dtype=np.int64))
        return good[:3] + [tmp_path / "y3.npy"] + good[4:], "y3.npy: labels of shape (20, 2, 2)"
    if case == "int64 images":
        np.save(tmp_path / "x64.npy", x.astype(np.int64))
        return ["--images", tmp_path / "x64.npy", *good[2:]], "x64.npy: images of dtype int64 not supported"
    if case == "missing file":
        return ["--images", tmp_path / "nope.npy", *good[2:]], "nope.npy: no such file"
    if case == "h5 dataset":
        with h5py.File(tmp_path / "d.h5", "w") as h5:
            h5["x"] = x
        return ["--images", f"{tmp_path}/d.h5:y", *good[2:]], "no dataset 'y' (it holds x)"
    if case == "one 0/1 column":  # was prepared as a one-class multilabel task, no word said
        np.save(tmp_path / "y1.npy", y[:, None])
        return good[:3] + [tmp_path / "y1.npy"] + good[4:], ("y1.npy: labels of shape (20, 1): one 0/1 column; pass "
                                                             "shape (N,) class ids 0/1 for a two-class task, or (N, 2) "
                                                             "multi-hot for two independent labels")
    if case == "one column of ids":
        np.save(tmp_path / "yc.npy", 2 * y[:, None])
        return good[:3] + [tmp_path / "yc.npy"] + good[4:], "yc.npy: labels of shape (20, 1): one column of class ids"
    if case == "negative class":
        np.save(tmp_path / "yneg.npy", y - 1)
        return good[:3] + [tmp_path / "yneg.npy"] + good[4:], "class id -1 < 0"
    if case == "split length":
        np.save(tmp_path / "s.npy", np.array(["train"] * 19))
        return good + ["--split-of", tmp_path / "s.npy"], "expected (20,)"
    if case == "split name":
        np.save(tmp_path / "s.npy", np.array(["train"] * 19 + ["valid"]))
        return good + ["--split-of", tmp_path / "s.npy"], "unknown split name 'valid'"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["labels length", "npz key", "no layout", "absurd layout", "3-D labels",
                                  "int64 images", "missing file", "h5 dataset", "one 0/1 column", "one column of ids",
                                  "negative class", "split length", "split name"])
def test_malformed_input_is_one_line_and_no_output(tmp_path, run_cli, case):
    args, expected = _bad(tmp_path, case)
    out = tmp_path / "out.h5"
    rc, _, err = run_cli("prepare", "arrays", *args, "--out", out, "--quiet")
    assert rc == 2
    assert len(err.strip().splitlines()) == 1, err
    assert expected in err
    assert not out.exists() and not list(tmp_path.glob(".out.h5*"))
