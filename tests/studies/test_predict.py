"""`lbscale predict`: the reference run trained on from its checkpoint to the named target, B_simple measured at
both ends, the outcome in one line; a target at or below the sweep's own is a measurement; bad input is one line
and exit 2 before anything trains (the prediction's arithmetic is tests/analysis/test_ladder.py's)."""

import json

import pytest

from lbscale.results import read_json
from tests.sweep.test_launch import lbscale

SPEC = """
name: pt
data: {data}
model: simple_cnn
epochs: 4
trial: {{optimizer: sgd, momentum: 0.9, lr_scaling: sqrt, ref_batch: 32, schedule: constant, device: cpu,
        eval_spacing: 0.3, target_metric: val_top1, target: [0.5, 0.55, 0.6], stop_at_target: true}}
grid:
  batch: [16, 32, 64]
  gpus: [1]
  search:
    base_lr: [0.005, 0.015]
"""


@pytest.fixture(scope="module")
def swept(tiny_h5, tmp_path_factory):
    """A real tuned sweep of 6 trials on the tiny set, each stopped at val_top1 0.6 with its checkpoint."""
    root = tmp_path_factory.mktemp("predict")
    spec = root / "pt.yaml"
    spec.write_text(SPEC.format(data=tiny_h5))
    lbscale("sweep", spec, "--results", root / "res", "--quiet")
    return root / "res"


def _reference(results):
    """The best trial at the smallest batch by hand: the fewest steps to 0.6 at batch 16 (ties: the better best
    value, then the name), from the trials' own summaries."""
    rows = []
    for d in sorted(results.glob("b16-*")):
        s = read_json(d / "summary.json")
        values = [json.loads(x).get("val_top1") for x in (d / "metrics.jsonl").read_text().splitlines()]
        rows.append((s["targets"]["0.6"]["steps_to_target"], -max(v for v in values if v is not None), d.name))
    return min(rows)[2]


def test_the_reference_run_is_trained_on_from_its_checkpoint_and_gns_measured_at_both_ends(swept):
    parent = swept / _reference(swept)
    before = (parent / "metrics.jsonl").read_bytes()
    out = lbscale("predict", swept, "--at", "0.7", "--quiet").stdout.strip().splitlines()
    assert out[0].startswith(f"predict: {parent.name} (batch 16) trained on from val_top1 0.6 to 0.7 in ")
    last = out[-1]
    assert last.startswith("predict: B_crit at val_top1 0.7 ") and "predict-0.7/reference" in last, last
    ref = swept / "predict-0.7" / "reference"
    summary = read_json(ref / "summary.json")
    assert summary["status"] == "completed" and "0.7" in summary["targets"]
    # the same run trained on: its first records are the parent's, then it goes past the parent's last step
    mine = [json.loads(x) for x in (ref / "metrics.jsonl").read_text().splitlines()]
    theirs = [json.loads(x) for x in before.decode().splitlines()]
    assert max(r.get("step", 0) for r in mine) > max(r.get("step", 0) for r in theirs)
    assert (parent / "metrics.jsonl").read_bytes() == before  # the sweep's trial is left as it was
    assert (parent / "gns.json").is_file() and (ref / "gns.json").is_file()
    again = lbscale("predict", swept, "--at", "0.7", "--quiet").stdout.strip().splitlines()
    assert again[-1] == last and read_json(ref / "summary.json") == summary  # nothing trained twice


def test_a_target_at_or_below_the_sweeps_own_is_a_measurement(swept):
    last = lbscale("predict", swept, "--at", "0.55", "--quiet").stdout.strip().splitlines()[-1]
    assert last.startswith("predict: val_top1 0.55 is at or below the sweep's own target 0.6: B_crit there is "
                           "measured, not predicted: "), last
    assert f"lbscale report {swept} --target 0.55,0.6 shows it" in last
    assert not (swept / "predict-0.55").exists()


@pytest.mark.parametrize("args, message", [
    (["--at", "1.5"], "--at 1.5: val_top1 lies between 0 and 1"),
    (["--at", "0.7", "--variant", "lamb"], "--variant lamb: .* has sgd-sqrt"),
    (["--at", "0.7", "--epochs", "0"], "--epochs"),
])
def test_bad_input_is_one_line_and_trains_nothing(swept, run_cli, args, message):
    import re

    made = sorted(p.name for p in swept.iterdir())
    rc, _, err = run_cli("predict", swept, *args)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert sorted(p.name for p in swept.iterdir()) == made


def test_results_without_a_checkpoint_to_train_on_are_refused_in_one_line(tmp_path, run_cli):
    from tests.report.make_tuned import make_tuned_study

    results = make_tuned_study(tmp_path / "tuned", pending=False)
    rc, _, err = run_cli("predict", results, "--at", "0.95")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "the reference run cannot be trained on" in err and not list(results.glob("predict-*"))
