"""HDF5 and TFRecord hold the same data; writes are atomic."""

import numpy as np
import pytest

from lbscale.data.formats import create_writer, open_prepared
from lbscale.data.formats.base import DatasetMeta
from lbscale.data.prepare import prepare
from lbscale.errors import LbscaleError
from tests.fixtures.make_bigearthnet import PATCHES, make_root


def test_tfrecord_round_trip_matches_hdf5(tmp_path):
    for fmt, out in (("hdf5", tmp_path / "a.h5"), ("tfrecord", tmp_path / "a.tfr")):
        prepare("synthetic", None, out, fmt=fmt, count=500, task="multilabel", label_noise=0.2, seed=1)
    with open_prepared(tmp_path / "a.h5") as h, open_prepared(tmp_path / "a.tfr") as t:
        assert h.attrs["class_names"] == t.attrs["class_names"]
        np.testing.assert_allclose(h.mean, t.mean)
        for s in ("train", "val", "test"):
            np.testing.assert_array_equal(h.images(s)[...], t.images(s))
            np.testing.assert_array_equal(h.labels(s), t.labels(s))
            assert h.names(s) == t.names(s)
            assert sorted(h.extras(s)) == sorted(t.extras(s))
        np.testing.assert_array_equal(h.labels("train", "noisy"), t.labels("train", "noisy"))
    shards = sorted(p.name for p in (tmp_path / "a.tfr").iterdir())
    assert shards == ["meta.json", "test-00000-of-00001.tfrecord", "train-00000-of-00001.tfrecord",
                      "val-00000-of-00001.tfrecord"]


@pytest.mark.parametrize("fmt", ["hdf5", "tfrecord"])
def test_crash_mid_write_leaves_nothing(tmp_path, fmt):
    out = tmp_path / "x.out"
    meta = DatasetMeta("t", "multiclass", ["a", "b"], ["b0"], "test")
    with pytest.raises(KeyboardInterrupt):
        with create_writer(fmt, out, meta, "cmd") as w:
            w.append("train", np.zeros((4, 1, 8, 8), np.uint8), np.zeros(4, np.int64))
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_force_replaces_only_after_success(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "s.h5"
    prepare("synthetic", None, out, count=100)
    root = tmp_path / "ben"
    make_root(root)
    name = list(PATCHES)[2]  # the last train patch: fails after the first ones were read
    (root / name / f"{name}_B12.tif").write_bytes(b"not a tiff")
    with pytest.raises(LbscaleError):
        prepare("bigearthnet", root, out, force=True)
    with open_prepared(out) as f:  # the old file survives a failed --force, and no partial is left
        assert f.dataset == "synthetic" and f.size("train") == 70
    assert [p.name for p in out_dir.iterdir()] == ["s.h5"]
    prepare("synthetic", None, out, count=200, force=True)
    with open_prepared(out) as f:
        assert f.size("train") == 140
    assert [p.name for p in out_dir.iterdir()] == ["s.h5"]
