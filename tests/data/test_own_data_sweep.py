"""Your own data from prepare to report with the README's commands alone: a folder of PNGs and a pair of npy
arrays each prepared, swept (2 batches, 1 epoch) and reported; the report's trials are the sweep's."""

import json

import pytest

from tests.data.test_prepare_arrays import _small_set
from tests.data.test_prepare_folder import _png_folder

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


@pytest.mark.parametrize("kind", ["folder", "arrays"])
def test_prepare_sweep_report(tmp_path, run_cli, kind):
    data = tmp_path / f"{kind}.h5"
    if kind == "folder":
        _png_folder(tmp_path / "src", per_class=10)
        args = ["--src", tmp_path / "src"]
    else:
        args = _small_set(tmp_path, n=120)
    rc, _, err = run_cli("prepare", kind, *args, "--out", data, "--quiet")
    assert rc == 0, err
    assert run_cli("data", "check", data)[0] == 0
    spec = tmp_path / "own.yaml"
    spec.write_text(SPEC.format(data=data))
    rc, out, err = run_cli("sweep", spec, "--results", tmp_path / "results", "--quiet")
    assert rc == 0, err + out
    summaries = [json.loads((d / "summary.json").read_text()) for d in sorted((tmp_path / "results").glob("b*"))]
    assert [s["status"] for s in summaries] == ["completed", "completed"]
    rc, out, err = run_cli("report", tmp_path / "results", "--out", tmp_path / "report")
    assert rc == 0, err
    assert "report of 2 trials (2 finished)" in out and (tmp_path / "report" / "report.md").exists()
