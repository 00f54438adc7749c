"""Your own data from prepare to report with the README's commands alone: a folder of 16-bit grey PNGs and a pair
of npy arrays each prepared, swept (2 batches, 1 epoch) and reported. The prepared pixels are those of the input
files (PIL / numpy reading them, h5py reading the prepared file), and the report's tables hold the trials the
sweep ran: each trial's id and batch, and the test accuracy and loss its own summary.json recorded."""

import json

import numpy as np
import pytest
from PIL import Image

from tests.data.test_folder_modes import grey16_folder, read_back
from tests.data.test_prepare_arrays import _small_set

SPEC = """
name: own
data: {data}
model: test_resnet
epochs: 1
trial: {{optimizer: sgd, base_lr: 0.05, device: cpu}}
grid:
  batch: [8, 16]
  gpus: [1]
"""


def _input_pixels(tmp_path, kind) -> dict:
    """Sample name -> (C, H, W) pixels as PIL or numpy read the input, not as lbscale does."""
    if kind == "folder":
        out = {}
        for path in sorted((tmp_path / "src").rglob("*.png")):
            with Image.open(path) as im:
                out[path.relative_to(tmp_path / "src").as_posix()] = np.asarray(im)[None]
        return out
    x = np.load(tmp_path / "x.npy")
    return {str(i): img.transpose(2, 0, 1) for i, img in enumerate(x)}


@pytest.mark.parametrize("kind", ["folder", "arrays"])
def test_prepare_sweep_report(tmp_path, run_cli, kind):
    data = tmp_path / f"{kind}.h5"
    if kind == "folder":
        grey16_folder(tmp_path / "src", per_class=15, side=16)
        args = ["--src", tmp_path / "src"]
    else:
        args = _small_set(tmp_path, n=120)
    rc, _, err = run_cli("prepare", kind, *args, "--out", data, "--quiet")
    assert rc == 0, err
    expected, got = _input_pixels(tmp_path, kind), read_back(data)
    assert sorted(got) == sorted(expected)
    for name, img in got.items():
        assert img.dtype == expected[name].dtype and np.array_equal(img, expected[name]), name
    assert run_cli("data", "check", data)[0] == 0
    spec = tmp_path / "own.yaml"
    spec.write_text(SPEC.format(data=data))
    rc, out, err = run_cli("sweep", spec, "--results", tmp_path / "results", "--quiet")
    assert rc == 0, err + out
    trials = {d.name: json.loads((d / "summary.json").read_text()) for d in (tmp_path / "results").glob("b*")}
    assert sorted(s["global_batch"] for s in trials.values()) == [8, 16]
    assert [s["status"] for s in trials.values()] == ["completed", "completed"]
    rc, out, err = run_cli("report", tmp_path / "results", "--out", tmp_path / "report")
    assert rc == 0, err
    assert "report of 2 trials (2 finished)" in out
    report = (tmp_path / "report" / "report.md").read_text()
    assert "- 2 trials: 2 completed" in report
    for trial, s in trials.items():
        batch, test = s["global_batch"], s["test"]
        assert f"| {trial} | {batch} | 1 |" in report  # the per-trial time table
        assert f"| {batch} | 1 | {test['test_top1']:.3f} | {test['test_loss']:.3f} |" in report  # accuracy table
