"""`lbscale prepare idx`: MNIST-family IDX files, gzipped or plain, through the CLI and back out with h5py."""

import gzip
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from lbscale.data.sources.base import carve
from tests.real_data import debian_fashion_mnist
from tests.fixtures.make_idx import NAMES, break_magic, make_idx, truncate, write_idx


def _read(out: Path) -> tuple[dict, dict]:
    """The root attributes and every split's images and labels of a prepared HDF5 file."""
    with h5py.File(out, "r") as h:
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in h.attrs.items()}
        arrays = {f"{s}-{k}": h[s][k][...] for s in ("train", "val", "test") for k in ("images", "labels")}
    return attrs, arrays


def _one_error_line(result, out: Path, *needles) -> None:
    rc, _, err = result
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("lbscale: error: "), err
    assert all(n in lines[0] for n in needles), lines[0]
    assert not list(out.parent.glob(f"*{out.name}*")), "a failed prepare left output behind"


@pytest.mark.parametrize("gz", [False, True])
def test_pixels_labels_and_seeded_val_carve(tmp_path, run_cli, gz):
    src, out = tmp_path / "src" / "files", tmp_path / "out.h5"  # folder names that name no dataset
    truth = make_idx(src, gz=gz)
    rc, stdout, err = run_cli("prepare", "idx", "--src", src, "--out", out, "--val-fraction", "0.1", "--seed", "3")
    assert rc == 0 and "train 270, val 30, test 60" in stdout, err
    attrs, got = _read(out)
    assert got["test-images"].shape == (60, 1, 28, 28) and got["test-images"].dtype == np.uint8
    np.testing.assert_array_equal(got["test-images"][:, 0], truth["test-images"])  # t10k is test, in order
    np.testing.assert_array_equal(got["test-labels"], truth["test-labels"])
    assign = carve(truth["train-labels"].astype(np.int64), {"val": 0.1}, seed=3)  # prepare's own carve
    for split in ("train", "val"):
        np.testing.assert_array_equal(got[f"{split}-images"][:, 0], truth["train-images"][assign == split])
        np.testing.assert_array_equal(got[f"{split}-labels"], truth["train-labels"][assign == split])
    assert np.bincount(got["val-labels"]).tolist() == [3] * 10  # stratified
    assert attrs["dataset"] == "idx" and json.loads(attrs["band_names"]) == ["gray"]
    assert json.loads(attrs["class_names"]) == [str(i) for i in range(10)]
    assert json.loads(attrs["notes"]) == {"imagery": "unknown"}  # nothing says what the pixels show
    assert attrs["source_version"] == "IDX files" + (" (gzip)" if gz else "")


@pytest.mark.parametrize("folder, option, dataset, first_class, imagery", [
    ("fashion-mnist", [], "fashion-mnist", "T-shirt/top", "objects"),  # Debian's /usr/share/datasets/fashion-mnist
    ("fashion_mnist", [], "fashion-mnist", "T-shirt/top", "objects"),
    ("FashionMNIST/raw", [], "fashion-mnist", "T-shirt/top", "objects"),  # torchvision's root
    ("KMNIST/raw", [], "kmnist", "o", "characters"),
    ("MNIST/raw", [], "mnist", "0", "digits"),
    ("fashion-mnist", ["--name", "mnist"], "mnist", "0", "digits"),  # the user's word wins
    ("files", ["--name", "kmnist"], "kmnist", "o", "characters"),
])
def test_dataset_from_name_or_folder(tmp_path, run_cli, folder, option, dataset, first_class, imagery):
    src, out = tmp_path / "src" / folder, tmp_path / "out.h5"
    make_idx(src, gz=True, n_train=100, n_test=20)
    rc, _, err = run_cli("prepare", "idx", "--src", src, "--out", out, *option)
    assert rc == 0, err
    attrs, _ = _read(out)
    classes = json.loads(attrs["class_names"])
    assert attrs["dataset"] == dataset and classes[0] == first_class and len(classes) == 10
    assert json.loads(attrs["notes"])["imagery"] == imagery


def test_emnist_sets_are_chosen_with_subset(tmp_path, run_cli):
    src, out = tmp_path / "src" / "gzip", tmp_path / "out.h5"
    make_idx(src, gz=True, prefix="emnist-balanced-", test_word="test", classes=47, n_train=470, n_test=94)
    letters = make_idx(src, gz=True, prefix="emnist-letters-", test_word="test", classes=26, first_label=1,
                       n_train=260, n_test=52)
    _one_error_line(run_cli("prepare", "idx", "--src", src, "--out", out), out,
                    str(src), "2 IDX sets (emnist-balanced, emnist-letters)", "--subset")
    rc, _, err = run_cli("prepare", "idx", "--src", src, "--out", out, "--subset", "balanced")
    assert rc == 0, err
    attrs, _ = _read(out)
    classes = json.loads(attrs["class_names"])
    assert attrs["dataset"] == "emnist-balanced" and len(classes) == 47 and classes[36:39] == ["a", "b", "d"]
    out.unlink()
    rc, _, err = run_cli("prepare", "idx", "--src", src, "--out", out, "--subset", "letters", "--val-fraction", "0")
    assert rc == 0, err
    attrs, got = _read(out)
    assert attrs["dataset"] == "emnist-letters" and json.loads(attrs["class_names"])[:2] == ["A/a", "B/b"]
    np.testing.assert_array_equal(got["test-labels"], letters["test-labels"] - 1)  # 1..26 stored as 0..25
    assert json.loads(attrs["notes"]) == {"imagery": "characters",
                                          "labels": "the files number the classes 1..26; stored from 0"}


def test_a_file_as_src_picks_its_set(tmp_path, run_cli):
    src, out = tmp_path / "src" / "gzip", tmp_path / "out.h5"
    make_idx(src, prefix="emnist-digits-", test_word="test", n_train=50, n_test=10)
    make_idx(src, prefix="emnist-mnist-", test_word="test", n_train=40, n_test=10)
    rc, stdout, err = run_cli("prepare", "idx", "--src", src / "emnist-mnist-train-images-idx3-ubyte",
                              "--out", out, "--val-fraction", "0")
    assert rc == 0 and "train 40" in stdout, err
    assert _read(out)[0]["dataset"] == "emnist-mnist"


def _bad_set(src: Path, case: str) -> tuple[list[str], str]:
    """Write one broken set into `src`; returns extra CLI arguments and the file its error line must name."""
    make_idx(src, gz=case.endswith("gz"), n_train=50, n_test=10)
    gz = ".gz" if case.endswith("gz") else ""
    images, labels = src / (NAMES["train-images"] + gz), src / (NAMES["train-labels"] + gz)
    if case.startswith("truncated"):
        truncate(images, images.stat().st_size // 2)
    elif case == "magic":
        break_magic(labels)
    elif case == "count":
        write_idx(src / NAMES["train-labels"], np.zeros(49, np.uint8))
    elif case == "dims":
        write_idx(src / NAMES["train-images"], np.zeros((50, 784), np.uint8))
    elif case == "range":
        write_idx(src / NAMES["train-labels"], np.full(50, 10, np.uint8))
        return ["--name", "mnist"], str(labels)
    elif case == "missing":
        labels.unlink()
        return [], "train-labels"
    return [], str(labels if case in ("magic", "count") else images)


@pytest.mark.parametrize("case, needle", [
    ("truncated", "truncated"),
    ("truncated-gz", "unreadable"),
    ("magic", "not an IDX file"),
    ("count", "49 labels for the 50 images"),
    ("dims", "2 dimensions, IDX images have 3"),
    ("range", "label 10 outside 0..9 of MNIST"),
    ("missing", "lacks its"),
])
def test_bad_files_are_one_line_and_nothing_written(tmp_path, run_cli, case, needle):
    src, out = tmp_path / "src" / "files", tmp_path / "out.h5"
    args, names = _bad_set(src, case)
    _one_error_line(run_cli("prepare", "idx", "--src", src, "--out", out, *args), out, names, needle)


def test_no_idx_files_and_an_unknown_name(tmp_path, run_cli):
    src, out = tmp_path / "src", tmp_path / "out.h5"
    src.mkdir()
    _one_error_line(run_cli("prepare", "idx", "--src", src, "--out", out), out, "no IDX files")
    make_idx(src, n_train=20, n_test=10)
    _one_error_line(run_cli("prepare", "idx", "--src", src, "--out", out, "--name", "cifar"), out,
                    "--name cifar", "fashion-mnist")
    _one_error_line(run_cli("prepare", "idx", "--src", src, "--out", out, "--subset", "letters"), out,
                    "--subset letters names 0 of the IDX sets here")


def test_real_fashion_mnist_from_debian(tmp_path, run_cli):
    src, out = debian_fashion_mnist(), tmp_path / "fm.h5"
    rc, stdout, err = run_cli("prepare", "idx", "--src", src, "--out", out)
    assert rc == 0 and "train 54000, val 6000, test 10000" in stdout, err
    attrs, got = _read(out)
    assert attrs["dataset"] == "fashion-mnist" and json.loads(attrs["class_names"])[9] == "Ankle boot"
    raw = gzip.decompress((src / "t10k-images-idx3-ubyte.gz").read_bytes())
    np.testing.assert_array_equal(got["test-images"].ravel(), np.frombuffer(raw, np.uint8, offset=16))
    raw = gzip.decompress((src / "t10k-labels-idx1-ubyte.gz").read_bytes())
    np.testing.assert_array_equal(got["test-labels"], np.frombuffer(raw, np.uint8, offset=8))
    assert np.bincount(got["val-labels"]).tolist() == [600] * 10  # 6,000 a class in train, 10% carved
    assert run_cli("data", "check", out) == (0, f"{out}: OK\n", "")
