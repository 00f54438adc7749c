"""`lbscale filter`: DBSCAN-per-class on a network's feature space finds flipped labels far better than chance,
writes valid prepared files (filtered and same-size random control), its table and plots; the three datasets
then run as one sweep axis."""

import json

import h5py
import numpy as np
import pytest

from lbscale.studies.filter import detection, knee_eps, random_removal
from lbscale.data.formats import open_prepared
from lbscale.data.inspect import check as check_file
from lbscale.data.prepare import prepare
from lbscale.report import load_results
from tests.report.pictures import assert_drawn

TRAIN = ["--model", "test_resnet", "--global-batch", "64", "--optimizer", "sgd", "--base-lr", "0.1",
         "--epochs", "3", "--quiet", "--device", "cpu"]


def test_knee_eps_separates_a_cluster_from_scattered_points():
    rng = np.random.default_rng(0)
    cluster = rng.normal(0, 0.3, size=(400, 2))
    far = rng.uniform(-20, 20, size=(12, 2))
    far = far[np.linalg.norm(far, axis=1) > 5]
    eps = knee_eps(np.vstack([cluster, far]), 4)
    assert 0.05 < eps < 3.0  # inside the cluster's scale, far below the outliers' spacing


def test_random_control_matches_per_class_counts_and_detection_math():
    labels = np.array([0] * 50 + [1] * 30)
    noise = np.zeros(80, dtype=bool)
    noise[[1, 2, 3, 60]] = True
    drop = random_removal(labels, noise, 2, seed=1)
    assert drop[:50].sum() == 3 and drop[50:].sum() == 1
    d = detection(noise, np.isin(np.arange(80), [1, 2, 70]))
    assert (d["found"], d["precision"], d["recall"]) == (2, 0.5, 2 / 3)


@pytest.fixture(scope="module")
def filtered(tmp_path_factory):
    """A 10%-label-noise synthetic set, a trained trial on it, and `lbscale filter` run once."""
    from lbscale.cli import main

    root = tmp_path_factory.mktemp("filter")
    data = root / "noisy.h5"
    prepare("synthetic", None, data, count=2000, bands=3, size=16, classes=4, label_noise=0.1, seed=5,
            command="test")
    assert main(["train", "--data", str(data), "--out", str(root / "trial"), *TRAIN]) == 0
    return root, data


def test_filter_finds_flipped_labels_and_writes_valid_files(filtered, run_cli):
    root, data = filtered
    nf, rf = root / "nf.h5", root / "rf.h5"
    rc, out, err = run_cli("filter", "--data", data, "--checkpoint", root / "trial", "--out", nf,
                           "--random-control", rf, "--seed", "3", "--quiet")
    assert rc == 0, err
    assert out.count("\n") == 1 and "kept" in out and str(nf) in out  # the one outcome line
    rec = json.loads((root / "nf-filter" / "filter.json").read_text())
    found, chance = rec["noise"], rec["noise"]["noise_rate"]
    assert found["precision"] > 4 * chance and found["recall"] > 0.5  # far better than random removal
    assert rec["random_noise"]["precision"] < 2.5 * chance
    assert 0.6 < rec["kept"] / rec["total"] < 1.0
    with open_prepared(data) as src, open_prepared(nf) as a, open_prepared(rf) as b:
        assert a.size("train") == b.size("train") == rec["kept"]
        assert np.array_equal(np.bincount(a.labels("train"), minlength=4), np.bincount(b.labels("train"),
                                                                                      minlength=4))
        for split in ("val", "test"):  # untouched
            assert np.array_equal(a.labels(split), src.labels(split))
            assert np.array_equal(np.asarray(a.images(split)[:]), np.asarray(src.images(split)[:]))
        kept = np.asarray(a.labels("train", "source_index"))
        assert np.array_equal(np.asarray(a.images("train")[:]), np.asarray(src.images("train")[:])[kept])
        dropped = json.loads(json.loads(a.attrs["notes"])["filter"])["dropped"]
        assert sorted(set(range(src.size("train"))) - set(kept.tolist())) == dropped
    assert check_file(nf) == [] and check_file(rf) == []
    assert_drawn(root / "nf-filter" / "tsne.png", min_colors=5)  # the classes' and the dropped points' colours
    table = (root / "nf-filter" / "reduction.md").read_text()
    assert "| test_resnet |" in table and "Precision" in table


def test_filtered_datasets_as_one_sweep_axis(filtered, run_cli, tmp_path):
    root, data = filtered
    nf, rf = tmp_path / "nf.h5", tmp_path / "rf.h5"
    assert run_cli("filter", "--data", data, "--checkpoint", root / "trial", "--out", nf, "--random-control", rf,
                   "--reduce", "pca", "--quiet")[0] == 0
    spec = tmp_path / "arms.yaml"
    spec.write_text(f"""
name: arms
model: test_resnet
epochs: 1
trial: {{optimizer: sgd, base_lr: 0.1, device: cpu}}
grid:
  batch: [128]
  gpus: [1]
  datasets: {{full: {data}, nf: {nf}, rf: {rf}}}
""")
    rc, out, err = run_cli("sweep", spec, "--results", tmp_path / "res", "--quiet")
    assert rc == 0, err
    study = load_results([tmp_path / "res"])
    assert sorted(study.trials["variant"]) == ["full:sgd-linear", "nf:sgd-linear", "rf:sgd-linear"]
    assert (study.trials["state"] == "completed").all()
    with h5py.File(nf) as f:
        n_nf = f["train/images"].shape[0]
    cfg = json.loads((tmp_path / "res" / "b128-g1-nf-sgd-linear-s0" / "config.json").read_text())
    assert cfg["plan"]["train_samples"] == n_nf


@pytest.mark.parametrize("setup, needle", [
    ("multilabel", "per-class DBSCAN is defined for multiclass data only"),
    ("bands", "does not fit test_resnet with 4 bands"),
    ("eps", "--eps must be > 0"),
    ("exists", "exists; use --force"),
    ("no-source", "give --checkpoint TRIAL_DIR"),
    ("random-weights", "--model without --pretrained has random weights"),
])
def test_bad_filter_input_is_one_line(filtered, run_cli, tmp_path, setup, needle):
    root, data = filtered
    args = ["--data", data, "--checkpoint", root / "trial", "--out", tmp_path / "o.h5"]
    if setup == "multilabel":
        ml = tmp_path / "ml.h5"
        prepare("synthetic", None, ml, count=200, bands=3, size=16, classes=4, task="multilabel", command="t")
        args[1] = ml
    elif setup == "bands":
        other = tmp_path / "b4.h5"
        prepare("synthetic", None, other, count=200, bands=4, size=16, classes=4, command="t")
        args[1] = other
    elif setup == "eps":
        args += ["--eps", "0"]
    elif setup == "exists":
        (tmp_path / "o.h5").write_text("x")
    elif setup == "no-source":
        args = args[:2] + args[4:]
    elif setup == "random-weights":
        args = args[:2] + args[4:] + ["--model", "resnet18"]
    rc, _, err = run_cli("filter", *args, "--quiet")
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    if setup != "exists":
        assert not (tmp_path / "o.h5").exists() and not (tmp_path / "o-filter").exists()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    data = tmp_path_factory.mktemp("small") / "s.h5"
    prepare("synthetic", None, data, count=200, bands=3, size=16, classes=4, seed=1, command="test")
    return data


def _create_raising(error):
    def create_model(*args, **kwargs):
        raise error
    return create_model


def _pretrained(data, tmp_path, model="resnet18"):
    return ["filter", "--data", data, "--model", model, "--pretrained", "--out", tmp_path / "o.h5", "--quiet"]


@pytest.mark.parametrize("error", [OSError("no network"), ConnectionError("offline"), "LocalEntryNotFoundError",
                                   "EntryNotFoundError"])
def test_weights_out_of_reach_is_one_line(small, run_cli, tmp_path, monkeypatch, error):
    import huggingface_hub.errors
    import timm

    if isinstance(error, str):  # what the hub raises offline, and for a file the repository lacks
        error = getattr(huggingface_hub.errors, error)("weights file not found")
    monkeypatch.setattr(timm, "create_model", _create_raising(error))
    rc, _, err = run_cli(*_pretrained(small, tmp_path))
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("lbscale: error: --pretrained: timm's weights for resnet18 are not available here")


def test_model_without_pretrained_weights_says_so(small, run_cli, tmp_path):
    rc, _, err = run_cli(*_pretrained(small, tmp_path, "botnet50ts_256"))
    assert (rc, err) == (2, "lbscale: error: --pretrained: timm has no pretrained weights for botnet50ts_256; "
                            "train a trial and give --checkpoint\n")


def test_other_failures_are_not_blamed_on_the_weights(small, run_cli, tmp_path, monkeypatch):
    import timm

    from lbscale.studies import filter as filter_module

    rc, _, err = run_cli(*_pretrained(small, tmp_path, "resnet_nonesuch"))
    assert rc == 2 and err.startswith("lbscale: error: --model: 'resnet_nonesuch' is not a timm model")
    assert err.count("\n") == 1
    # a bug inside model creation or feature extraction is itself, with its traceback, never "weights not available"
    monkeypatch.setattr(timm, "create_model", _create_raising(RuntimeError("stem shapes do not match")))
    with pytest.raises(RuntimeError, match="stem shapes do not match"):
        run_cli(*_pretrained(small, tmp_path))
    monkeypatch.setattr(timm, "create_model", lambda *a, **k: "a model")
    monkeypatch.setattr(filter_module, "extract_features", _create_raising(ValueError("features of rank 3")))
    with pytest.raises(ValueError, match="features of rank 3"):
        run_cli(*_pretrained(small, tmp_path))
    assert not (tmp_path / "o.h5").exists()
