"""Bad input: one stderr line naming the file and the problem, exit code 2, nothing left behind."""

import json

import numpy as np
import pytest
import scipy.io

from tests.fixtures.make_bigearthnet import PATCHES, make_root
from tests.fixtures.make_cifar import make_cifar, make_hostile
from tests.fixtures.make_sat import make_arrays


def _assert_clean_failure(result, out_dir, *needles):
    rc, stdout, err = result
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lbscale: error: ")
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in err
    left = [p.name for p in out_dir.iterdir()]
    assert not [n for n in left if n.startswith(".out") or n.startswith("out")], left


@pytest.fixture
def out_dir(tmp_path):
    d = tmp_path / "outdir"
    d.mkdir()
    return d


def test_missing_source(run_cli, tmp_path, out_dir):
    _assert_clean_failure(run_cli("prepare", "sat4", "--src", tmp_path / "nope.mat", "--out", out_dir / "out.h5"),
                          out_dir, "nope.mat", "no such file")


def test_mat_without_keys(run_cli, tmp_path, out_dir):
    scipy.io.savemat(tmp_path / "x.mat", {"train_x": np.zeros((28, 28, 4, 2), np.uint8)})
    _assert_clean_failure(run_cli("prepare", "sat4", "--src", tmp_path / "x.mat", "--out", out_dir / "out.h5"),
                          out_dir, "x.mat", "missing variables", "test_x")


def test_mat_wrong_shapes(run_cli, tmp_path, out_dir):
    a = make_arrays(n_train=10, n_test=5, classes=4)
    a["train_x"] = np.zeros((32, 32, 4, 10), np.uint8)
    scipy.io.savemat(tmp_path / "x.mat", a)
    _assert_clean_failure(run_cli("prepare", "sat4", "--src", tmp_path / "x.mat", "--out", out_dir / "out.h5"),
                          out_dir, "x.mat", "train_x", "(28, 28, 4, N)")


def test_sat6_labels_given_to_sat4(run_cli, tmp_path, out_dir):
    scipy.io.savemat(tmp_path / "x.mat", make_arrays(n_train=10, n_test=5, classes=6))
    _assert_clean_failure(run_cli("prepare", "sat4", "--src", tmp_path / "x.mat", "--out", out_dir / "out.h5"),
                          out_dir, "train_y", "sat4")


def test_not_a_mat_file(run_cli, tmp_path, out_dir):
    (tmp_path / "x.mat").write_bytes(b"MATLAB 5.0 MAT-file" + b"\0" * 10)
    _assert_clean_failure(run_cli("prepare", "sat4", "--src", tmp_path / "x.mat", "--out", out_dir / "out.h5"),
                          out_dir, "x.mat")


@pytest.fixture
def ben(tmp_path):
    root = tmp_path / "ben"
    make_root(root)
    return root, list(PATCHES)[1]


def test_truncated_tif(run_cli, ben, out_dir):
    root, name = ben
    tif = root / name / f"{name}_B05.tif"
    tif.write_bytes(tif.read_bytes()[:200])
    _assert_clean_failure(run_cli("prepare", "bigearthnet", "--src", root, "--out", out_dir / "out.h5",
                                  "--workers", "2"), out_dir, f"{name}_B05.tif")


def test_corrupt_tif(run_cli, ben, out_dir):
    root, name = ben
    (root / name / f"{name}_B11.tif").write_bytes(b"II*\0garbage garbage garbage")
    _assert_clean_failure(run_cli("prepare", "bigearthnet", "--src", root, "--out", out_dir / "out.h5"),
                          out_dir, f"{name}_B11.tif", "unreadable TIFF")


def test_patch_missing_band(run_cli, ben, out_dir):
    root, name = ben
    (root / name / f"{name}_B8A.tif").unlink()
    _assert_clean_failure(run_cli("prepare", "bigearthnet", "--src", root, "--out", out_dir / "out.h5"),
                          out_dir, f"{name}_B8A.tif", "missing band B8A of patch")


def test_unknown_label_name(run_cli, ben, out_dir):
    root, name = ben
    (root / name / f"{name}_labels_metadata.json").write_text(json.dumps({"labels": ["Moon craters"]}))
    _assert_clean_failure(run_cli("prepare", "bigearthnet", "--src", root, "--out", out_dir / "out.h5"),
                          out_dir, "labels_metadata.json", "unknown label name 'Moon craters'")


def test_hostile_cifar_pickle_refused(run_cli, tmp_path, out_dir):
    folder = tmp_path / "cifar-10-batches-py"
    make_cifar(folder)
    marker = tmp_path / "PWNED"
    make_hostile(folder / "data_batch_3", marker)
    result = run_cli("prepare", "cifar10", "--src", folder, "--out", out_dir / "out.h5")
    _assert_clean_failure(result, out_dir, "data_batch_3", "refusing to load posix.system")
    assert not marker.exists()


def test_cifar_missing_batch(run_cli, tmp_path, out_dir):
    folder = tmp_path / "cifar-10-batches-py"
    make_cifar(folder)
    (folder / "test_batch").unlink()
    _assert_clean_failure(run_cli("prepare", "cifar10", "--src", folder, "--out", out_dir / "out.h5"),
                          out_dir, "test_batch", "missing")


def test_existing_output_needs_force(run_cli, out_dir):
    target = out_dir / "out.h5"
    target.write_text("precious")
    rc, _, err = run_cli("prepare", "synthetic", "--out", target)
    assert rc == 2 and "exists" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert target.read_text() == "precious"


def test_bad_option_is_one_line(run_cli, out_dir):
    rc, _, err = run_cli("prepare", "synthetic", "--out", out_dir / "out.h5", "--label-noise", "1.5")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "label-noise" in err
    rc, _, err = run_cli("prepare", "mnist", "--out", out_dir / "out.h5")
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_check_rejects_unfinished_file(run_cli, tmp_path):
    import h5py

    with h5py.File(tmp_path / "half.h5", "w") as h:
        h.create_dataset("train/images", data=np.zeros((2, 1, 4, 4), np.uint8))
    rc, _, err = run_cli("data", "check", tmp_path / "half.h5")
    assert rc == 2 and "not a finished" in err


@pytest.mark.parametrize("fmt, remove, split", [
    ("hdf5", "val", "val"),
    ("hdf5", "train", "train"),
    ("hdf5", "test/labels", "test"),
    ("tfrecord", "val", "val"),
])
def test_prepared_file_without_a_split_is_one_line(run_cli, tmp_path, fmt, remove, split):
    """prepare writes all three splits, possibly empty: a file lacking one (hand-written or cut short) is
    malformed, and `lbscale train` and `lbscale data check` say so in the same line."""
    import h5py

    from lbscale.data.prepare import prepare

    data = tmp_path / ("d.h5" if fmt == "hdf5" else "d-records")
    prepare("synthetic", None, data, fmt=fmt, count=120, bands=3, size=8, classes=3, command="test")
    if fmt == "hdf5":
        with h5py.File(data, "a") as h:
            del h[remove]
    else:
        meta = json.loads((data / "meta.json").read_text())
        for shard in meta["shards"].pop(remove):
            (data / shard).unlink()
        del meta["counts"][remove]
        (data / "meta.json").write_text(json.dumps(meta))
    what = f"no {split!r} split" if "/" not in remove else f"split {split!r} has no 'labels'"
    rc, _, err = run_cli("train", "--data", data, "--out", tmp_path / "trial", "--model", "test_resnet",
                         "--epochs", "1", "--global-batch", "16", "--device", "cpu", "--quiet")
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"lbscale: error: {data}: {what}"), err
    assert not (tmp_path / "trial").exists()
    rc, out, check_err = run_cli("data", "check", data)
    assert rc == 2 and check_err == err and not out


def test_a_one_class_dataset_is_refused(run_cli, tmp_path, out_dir):
    """Arrays whose labels are all 0, and a folder with one class folder: every target would be met at once."""
    from PIL import Image

    np.save(tmp_path / "x.npy", np.zeros((12, 8, 8), dtype=np.uint8))
    np.save(tmp_path / "y.npy", np.zeros(12, dtype=np.int64))
    _assert_clean_failure(run_cli("prepare", "arrays", "--images", tmp_path / "x.npy", "--labels", tmp_path / "y.npy",
                                  "--out", out_dir / "out.h5"), out_dir, "one class (", "two or more")
    folder = tmp_path / "src" / "cats"
    folder.mkdir(parents=True)
    for i in range(6):
        Image.fromarray(np.full((8, 8, 3), 40 * i, dtype=np.uint8)).save(folder / f"{i}.png")
    _assert_clean_failure(run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out_dir / "out.h5"),
                          out_dir, "one class (cats)", "two or more")
