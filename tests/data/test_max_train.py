"""prepare --max-train N: a documented, stratified, seeded subset of train (the rest left out, val and test
untouched), recorded in the file's notes."""

import json

import numpy as np
import pytest

from lbscale.data.formats import open_prepared
from lbscale.data.prepare import limit_train, prepare


def test_the_subset_keeps_each_class_its_share_by_hand():
    labels = np.array([0] * 60 + [1] * 30 + [2] * 10)  # 100 train samples: 60 / 30 / 10
    assign = np.full(100, "train", dtype=object)
    kept = limit_train(assign, labels, 25, seed=0)
    # shares 15 / 7.5 / 2.5: floors 15 / 7 / 2, the one left over to the largest remainder (class 1, first)
    assert [int(((kept == "train") & (labels == c)).sum()) for c in range(3)] == [15, 8, 2]
    assert (kept == None).sum() == 75  # noqa: E711
    assert np.array_equal(kept, limit_train(assign, labels, 25, seed=0))  # seeded


def _arrays(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.integers(0, 255, (1000, 8, 8), dtype=np.uint8))
    np.save(tmp_path / "y.npy", rng.integers(0, 4, 1000))
    return {"images": str(tmp_path / "x.npy"), "labels": str(tmp_path / "y.npy")}


def test_prepare_keeps_n_train_samples_and_the_other_splits(tmp_path):
    full, sub = tmp_path / "full.h5", tmp_path / "sub.h5"
    prepare("arrays", None, full, command="test", **_arrays(tmp_path))
    prepare("arrays", None, sub, command="test", max_train=200, **_arrays(tmp_path))
    with open_prepared(full) as a, open_prepared(sub) as b:
        assert b.size("train") == 200 and a.size("train") > 200
        assert b.size("val") == a.size("val") and b.size("test") == a.size("test")
        assert np.array_equal(np.asarray(b.labels("test")), np.asarray(a.labels("test")))
        names = set(b.names("train"))
        assert names <= set(a.names("train"))  # a subset of the same samples, nothing new
        counts = np.bincount(np.asarray(b.labels("train")), minlength=4)
        full_counts = np.bincount(np.asarray(a.labels("train")), minlength=4)
        np.testing.assert_allclose(counts, 200 * full_counts / full_counts.sum(), atol=1)
        assert "of " + str(a.size("train")) + " train samples kept" in json.loads(b.attrs["notes"])["train_subset"]


def test_too_large_a_subset_is_one_line(tmp_path):
    from lbscale.errors import LbscaleError

    with pytest.raises(LbscaleError, match="--max-train 5000: the train split has"):
        prepare("arrays", None, tmp_path / "x.h5", command="test", max_train=5000, **_arrays(tmp_path))
    with pytest.raises(LbscaleError, match="synthetic generates its splits"):
        prepare("synthetic", None, tmp_path / "x.h5", count=1000, command="test", max_train=50)
    assert not (tmp_path / "x.h5").exists()
