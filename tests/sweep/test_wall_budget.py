"""A sweep's wall-clock budget (`--wall`, or the spec's `wall` less its designer's pilot): no trial starts once it
is spent, a running trial is checkpointed and stopped at 1.1x it, the running periods are kept in rounds.json, and
a rerun resumes from them."""

import re

from lbscale.results import read_json
from tests.sweep.test_launch import lbscale

SPEC = """
name: walled
data: {data}
model: test_resnet
epochs: 200
{wall}
trial: {{optimizer: sgd, base_lr: 0.05, lr_scaling: none, device: cpu}}
grid:
  batch: [16, 32]
  gpus: [1]
  seeds: 2
"""


def _trial_steps(results):
    out = {}
    for d in sorted(results.iterdir()):
        info = read_json(d / "checkpoint" / "info.json") if (d / "checkpoint").is_dir() else None
        if (d / "trial.yaml").exists():
            out[d.name] = (info or {}).get("step")
    return out


def test_a_wall_budget_stops_the_sweep_checkpoints_the_running_trial_and_a_rerun_resumes(tiny_h5, tmp_path):
    spec = tmp_path / "walled.yaml"
    spec.write_text(SPEC.format(data=tiny_h5, wall=""))
    results = tmp_path / "results"
    first = lbscale("sweep", spec, "--results", results, "--wall", "6s", check=False)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "wall budget spent" in first.stdout, first.stdout
    periods = read_json(results / "rounds.json")["periods"]
    assert len(periods) == 1 and periods[0]["seconds"] >= 6
    steps = _trial_steps(results)
    started = {k: v for k, v in steps.items() if v}
    # 200 epochs cannot finish in 6 s: the first trial was stopped with a checkpoint, and none after it started
    assert len(started) == 1, steps
    (name, step), = started.items()
    assert not (results / name / "summary.json").exists()
    again = lbscale("sweep", spec, "--results", results, "--wall", "40s", check=False)
    assert again.returncode == 0 and "wall budget spent" in again.stdout, again.stdout + again.stderr
    assert len(read_json(results / "rounds.json")["periods"]) == 2
    # the budget counts both runs (the second ran what the first left of 40 s); the interrupted trial resumed
    assert _trial_steps(results)[name] > step


def test_the_spec_wall_less_the_pilot_is_the_sweep_budget_and_a_bad_wall_is_one_line(tiny_h5, tmp_path):
    spec = tmp_path / "walled.yaml"
    spec.write_text(SPEC.format(data=tiny_h5, wall="wall: 20s\ndesign: {pilot_seconds: 14}"))
    results = tmp_path / "results"
    out = lbscale("sweep", spec, "--results", results).stdout
    assert re.search(r"wall budget spent \(\d+\.\d of 0\.1 min\)", out), out  # 20 s less the pilot's 14
    bad = lbscale("sweep", spec, "--results", results, "--wall", "20", check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--wall '20'" in bad.stderr, bad.stderr
    spec.write_text(SPEC.format(data=tiny_h5, wall="wall: 3 hours"))
    bad = lbscale("sweep", spec, "--results", results, "--dry-run", check=False)
    assert bad.returncode == 2 and "wall" in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr


def test_the_report_says_the_wall_budget_ended_the_rounds_where_it_did(tmp_path):
    """Before, a study the wall budget stopped mid-round read "interrupted ... run the same command again"."""
    import json

    from lbscale.report.rounds_tables import rounds_line, wall_spent

    rounds = [{"round": 1, "stop": None, "added": [{"trials": [{"id": "a"}, {"id": "b"}]}],
               "settings": {"ratio": 4.0, "budget": None, "wall": 1074}}]
    (tmp_path / "rounds.json").write_text(json.dumps({"rounds": rounds, "periods": [
        {"start": "2026-11-28T17:07:00", "seconds": 600.0}, {"start": "2026-11-28T17:20:00", "seconds": 480.0}]}))
    spent = wall_spent([tmp_path])
    assert spent == (1080.0, 1074.0)
    line = rounds_line(rounds, running=False, wall=spent)
    assert "wall budget spent (18.0 of 17.9 min)" in line and "interrupted" not in line
    assert "interrupted" in rounds_line(rounds, running=False, wall=(600.0, 1074.0))  # not spent: stopped by hand
