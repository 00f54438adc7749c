"""--keep-checkpoints: kept/<label> beside the resume checkpoint at fractions, epochs or steps of the run, each a
whole checkpoint that resumes to the parent's very weights; bad points are one line."""

import json
import shutil

import pytest

from lbscale.train.checkpoint import kept
from lbscale.train.plan import keep_steps
from tests.train.helpers import summary

BASE = ["--global-batch", "32", "--model", "test_resnet", "--quiet", "--device", "cpu", "--optimizer", "sgd",
        "--base-lr", "0.05", "--epochs", "2"]  # tiny set: 17 steps per epoch, 34 in all


def test_points_to_steps_by_hand():
    assert keep_steps("25%,1ep,10st", 34, 17) == {8: "25pct", 17: "1ep", 10: "10st"}  # 8.5 rounds to even
    assert keep_steps(None, 34, 17) == {}


@pytest.mark.parametrize("spec, message", [("5", "is not N%"), ("100%", "is not N%"), ("3ep", "outside the run")])
def test_bad_points_are_one_line(tiny_h5, tmp_path, run_cli, spec, message):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", *BASE, "--keep-checkpoints", spec)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def test_kept_checkpoints_resume_to_the_parents_weights(tiny_h5, tmp_path, run_cli):
    parent = tmp_path / "parent"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", parent, *BASE, "--keep-checkpoints", "25%,1ep,20st")
    assert rc == 0, err
    found = kept(parent)
    assert list(found) == ["25pct", "1ep", "20st"]  # in step order
    steps = [json.loads((d / "info.json").read_text())["step"] for d in found.values()]
    assert steps == [8, 17, 20]
    for label in ("25pct", "20st"):  # inside an epoch, and after an epoch boundary
        child = tmp_path / f"from-{label}"
        child.mkdir()
        shutil.copytree(found[label], child / "checkpoint")
        rc, _, err = run_cli("train", "--data", tiny_h5, "--out", child, *BASE, "--resume")
        assert rc == 0, err
        assert summary(child)["param_digests"] == summary(parent)["param_digests"]
