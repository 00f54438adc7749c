"""Each raw format prepares into the documented layout with the pixels and labels of the source."""

import json

import h5py
import numpy as np
import pytest
import torch

from lbscale.data.formats import open_prepared
from lbscale.data.prepare import prepare
from lbscale.data.sources.bigearthnet import BANDS, upsample
from tests.fixtures.make_bigearthnet import LABELS, PATCHES, SNOWY, V2_ROWS, make_root, make_root_v2
from tests.fixtures.make_cifar import make_cifar
from tests.fixtures.make_eurosat import make_eurosat
from tests.fixtures.make_sat import make_csv, make_mat


def _by_name(f, split):
    return {n: i for i, n in enumerate(f.names(split))}


@pytest.mark.parametrize("maker", [make_mat, make_csv])
def test_sat4_pixels_labels_and_val_carve(tmp_path, maker):
    src = tmp_path / ("sat.mat" if maker is make_mat else "csv")
    arrays = maker(src)
    out = tmp_path / "sat4.h5"
    counts = prepare("sat4", src, out, val_fraction=0.2, seed=3)
    assert counts == {"train": 240, "val": 60, "test": 60}
    with open_prepared(out) as f:
        assert f.class_names == ["barren_land", "trees", "grassland", "none"]
        assert f.band_names == ["R", "G", "B", "NIR"]
        # test keeps source order: pixel (h, w, c, n) of the .mat equals (n, c, h, w) of the output
        x, y = arrays["test_x"], arrays["test_y"]
        np.testing.assert_array_equal(f.images("test")[...], x.transpose(3, 2, 0, 1))
        np.testing.assert_array_equal(f.labels("test"), y.argmax(axis=0))
        # train + val hold exactly the source train samples
        both = np.concatenate([f.images("train")[...], f.images("val")[...]])
        src_rows = {r.tobytes() for r in arrays["train_x"].transpose(3, 2, 0, 1)}
        assert {r.tobytes() for r in both} == src_rows
        assert f.images("train").chunks[0] >= 256  # a batch is one contiguous chunk read
        mean = np.concatenate([f.images("train")[...]]).astype(np.float64).mean(axis=(0, 2, 3))
        np.testing.assert_allclose(f.mean, mean, rtol=1e-9)


def test_val_carve_is_stratified_and_seeded(tmp_path):
    src = tmp_path / "sat.mat"
    make_mat(src, name="sat6", n_train=1200)
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    prepare("sat6", src, a, val_fraction=0.25, seed=7)
    prepare("sat6", src, b, val_fraction=0.25, seed=7)
    with open_prepared(a) as fa, open_prepared(b) as fb:
        np.testing.assert_array_equal(fa.labels("val"), fb.labels("val"))
        val = np.bincount(fa.labels("val"), minlength=6)
        train = np.bincount(fa.labels("train"), minlength=6)
        np.testing.assert_allclose(val / (val + train), 0.25, atol=0.02)


def test_cifar_planes_and_labels(tmp_path):
    batches = make_cifar(tmp_path / "cifar-10-batches-py")
    out = tmp_path / "c.h5"
    prepare("cifar10", tmp_path, out, val_fraction=0.0)
    with open_prepared(out) as f:
        data, labels = batches["test_batch"]
        img = f.images("test")[...]
        np.testing.assert_array_equal(img[:, 0].reshape(len(img), -1), data[:, :1024])  # R plane
        np.testing.assert_array_equal(img[:, 2].reshape(len(img), -1), data[:, 2048:])  # B plane
        np.testing.assert_array_equal(f.labels("test"), labels)
        assert f.size("train") == 200


def test_eurosat_interleaved_bands_and_carved_splits(tmp_path):
    tiles = make_eurosat(tmp_path / "EuroSAT_MS")
    out = tmp_path / "e.h5"
    counts = prepare("eurosat", tmp_path, out, val_fraction=0.2, test_fraction=0.2, workers=2)
    assert sum(counts.values()) == 60 and counts["val"] == counts["test"] == 10
    with open_prepared(out) as f:
        assert f.band_names[-1] == "B8A" and len(f.band_names) == 13
        for split in ("train", "val", "test"):
            for name, i in _by_name(f, split).items():
                np.testing.assert_array_equal(f.images(split)[i], tiles[name].transpose(2, 0, 1))
        assert np.bincount(f.labels("test"), minlength=10).tolist() == [1] * 10


def test_eurosat_same_file_names_in_two_classes_are_two_samples(tmp_path, run_cli):
    tiles = make_eurosat(tmp_path / "EuroSAT_MS", per_class=3, stem="tile")  # Forest/tile_1.tif, River/tile_1.tif
    out = tmp_path / "e.h5"
    prepare("eurosat", tmp_path / "EuroSAT_MS", out, val_fraction=0.2, test_fraction=0.2, workers=0)
    with open_prepared(out) as f:
        names = sum((f.names(s) for s in f.splits()), [])
        assert sorted(names) == sorted(tiles) and "Forest/tile_1.tif" in names
        for split in f.splits():
            for name, i in _by_name(f, split).items():
                np.testing.assert_array_equal(f.images(split)[i], tiles[name].transpose(2, 0, 1))
    assert run_cli("data", "check", out) == (0, f"{out}: OK\n", "")


def test_bilinear_convention_matches_torch_half_pixel():
    rng = np.random.default_rng(0)
    for n in (20, 60):
        band = rng.integers(0, 10000, size=(n, n), dtype=np.uint16)
        ref = torch.nn.functional.interpolate(torch.from_numpy(band.astype(np.float64))[None, None], size=(120, 120),
                                              mode="bilinear", align_corners=False)[0, 0].numpy()
        np.testing.assert_allclose(upsample(band).astype(np.float64), np.rint(ref), atol=1)
    same = rng.integers(0, 10000, size=(120, 120), dtype=np.uint16)
    assert upsample(same) is same


def test_bigearthnet_bands_labels_splits(tmp_path):
    bands = make_root(tmp_path / "ben")
    out = tmp_path / "ben.h5"
    counts = prepare("bigearthnet", tmp_path / "ben", out, workers=2)
    assert counts == {"train": 3, "val": 0, "test": 1}
    with open_prepared(out) as f:
        names = {s: f.names(s) for s in f.splits()}
        assert SNOWY not in sum(names.values(), [])
        assert {n: s for s in names for n in names[s]} == PATCHES
        k19, k43 = f.class_names, f.extra_class_names["labels_43"]
        assert len(k19) == 19 and len(k43) == 43 and k19 == sorted(k19)
        with h5py.File(out) as h:
            for i, name in enumerate(names["train"]):
                img = h["train/images"][i]
                patch = bands[name]
                for j, b in enumerate(BANDS):
                    expected = patch[b] if patch[b].shape == (120, 120) else upsample(patch[b])
                    np.testing.assert_array_equal(img[j], expected)
                labels = LABELS[: 1 + list(PATCHES).index(name) % 4]
                assert sorted(k43[c] for c in np.flatnonzero(h["train/labels_43"][i])) == sorted(labels)
                # 'Port areas' has no 19-class counterpart; 'Sea and ocean' becomes 'Marine waters'
                expected19 = {"Non-irrigated arable land": "Arable land", "Coniferous forest": "Coniferous forest",
                              "Sea and ocean": "Marine waters"}
                got19 = sorted(k19[c] for c in np.flatnonzero(h["train/labels"][i]))
                assert got19 == sorted(expected19[x] for x in labels if x in expected19)


def test_bigearthnet_v2_metadata_splits_flags_and_layouts(tmp_path, run_cli):
    s2, meta, bands = make_root_v2(tmp_path / "reben")
    out = tmp_path / "ben2.h5"
    rc, stdout, err = run_cli("prepare", "bigearthnet", "--src", s2, "--metadata", meta, "--out", out, "--quiet")
    assert rc == 0, err
    assert "train 3, val 1, test 1;" in stdout.strip().splitlines()[-1]  # then the imagery recorded
    kept = {r[0]: r for r in V2_ROWS if not (r[3] or r[4])}
    with open_prepared(out) as f:
        assert f.attrs["source_version"] == "BigEarthNet-S2 v2.0 (reBEN)" and f.extra_class_names == {}
        k19 = f.class_names
        assert len(k19) == 19 and k19 == sorted(k19)
        split_of = {"train": "train", "val": "validation", "test": "test"}
        for split in ("train", "val", "test"):
            names, labels = f.names(split), f.labels(split)
            assert all(kept[n][2] == split_of[split] for n in names)
            for i, name in enumerate(names):
                assert sorted(k19[c] for c in np.flatnonzero(labels[i])) == sorted(kept[name][1])
                for j, b in enumerate(BANDS):
                    patch = bands[name][b]
                    expected = patch if patch.shape == (120, 120) else upsample(patch)
                    np.testing.assert_array_equal(np.asarray(f.images(split)[i])[j], expected)
    # the v2.0 file trains (multilabel, test split) and sweeps like the other datasets
    rc, stdout, err = run_cli("train", "--data", out, "--out", tmp_path / "t", "--model", "test_resnet",
                              "--global-batch", "3", "--epochs", "2", "--eval-split", "test", "--device", "cpu",
                              "--quiet")
    assert rc == 0 and "trial completed: test_f1_micro" in stdout, err
    spec = tmp_path / "ben2.yaml"
    spec.write_text(f"name: ben2\ndata: {out}\nmodel: test_resnet\nepochs: 1\n"
                    "trial: {optimizer: lars, base_lr: 0.1, eval_split: test, device: cpu}\n"
                    "grid: {batch: [1, 3], seeds: 1}\n")
    rc, stdout, err = run_cli("sweep", spec, "--results", tmp_path / "res", "--quiet")
    assert rc == 0, err
    done = sorted(p.parent.name for p in (tmp_path / "res").glob("*/summary.json"))
    assert len(done) == 2 and all(json.loads((tmp_path / "res" / d / "summary.json").read_text())["status"]
                                  == "completed" for d in done)


def test_bigearthnet_v2_bad_metadata_is_one_line(tmp_path, run_cli):
    import pyarrow as pa
    import pyarrow.parquet as pq

    s2, meta, _ = make_root_v2(tmp_path / "reben")
    for table, needle in ((pa.table({"patch_id": ["x"], "split": ["train"]}), "no column 'labels'"),
                          (pa.table({"patch_id": [V2_ROWS[0][0] + "9"], "labels": [["Arable land"]],
                                     "split": ["train"]}), "1 patch(es) of bad.parquet not found"),
                          (pa.table({"patch_id": [V2_ROWS[0][0]], "labels": [["Moon"]], "split": ["train"]}),
                           "unknown label 'Moon'")):
        bad = tmp_path / "bad.parquet"
        pq.write_table(table, bad)
        rc, _, err = run_cli("prepare", "bigearthnet", "--src", s2, "--metadata", bad, "--out", tmp_path / "o.h5")
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / "junk.parquet").write_text("not parquet")
    rc, _, err = run_cli("prepare", "bigearthnet", "--src", s2, "--metadata", tmp_path / "junk.parquet",
                         "--out", tmp_path / "o.h5")
    assert rc == 2 and "not a readable parquet file" in err
    assert not (tmp_path / "o.h5").exists()


def test_synthetic_deterministic_and_noise_recorded(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    for p in (a, b):
        prepare("synthetic", None, p, count=800, label_noise=0.25, seed=5)
    with h5py.File(a) as fa, h5py.File(b) as fb:
        for key in ("train/images", "train/labels", "val/images", "test/labels"):
            np.testing.assert_array_equal(fa[key][...], fb[key][...])
        noisy = fa["train/noisy"][...].astype(bool)
        assert 0.15 < noisy.mean() < 0.35
        labels, clean = fa["train/labels"][...], fa["train/clean_labels"][...]
        assert np.all(labels[noisy] != clean[noisy]) and np.all(labels[~noisy] == clean[~noisy])
        assert "noisy" not in fa["val"]


def test_synthetic_multilabel_mosaic(tmp_path):
    out = tmp_path / "m.h5"
    prepare("synthetic", None, out, count=400, task="multilabel", classes=5)
    with open_prepared(out) as f:
        lab = f.labels("train")
        assert lab.shape[1] == 5 and lab.sum(axis=1).min() >= 1 and lab.sum(axis=1).max() <= 3
        assert f.task == "multilabel"
