"""A sweep's wall-clock budget (`--wall`, or the spec's `wall` less its designer's pilot): no trial starts once it
is spent, a running trial is checkpointed and stopped at 1.1x it, the running periods are kept in rounds.json, and
a rerun resumes from them."""

import re

import pytest

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


def test_array_tasks_count_once_where_they_ran_side_by_side_and_queued_time_not_at_all(tmp_path):
    """Under SLURM the budget is the time at least one array task ran a trial: hand-made periods, their union by
    hand (a 0-10 s and a 5-20 s task overlap: 20 s; a gap from 20 to 100 s queued: not counted; 100-130 s: 30 s)."""
    import json

    from lbscale.sweep.budget import WallBudget, array_seconds, union_seconds

    assert union_seconds([(5, 20), (0, 10), (100, 130), (101, 102)]) == 50
    assert union_seconds([]) == 0
    for name, periods in (("a", [(1000.0, 10.0), (1100.0, 30.0)]), ("b", [(1005.0, 15.0)])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "task-periods.json").write_text(json.dumps(
            {"periods": [{"start": s, "seconds": d} for s, d in periods]}))
    assert array_seconds(tmp_path) == 50
    (tmp_path / "rounds.json").write_text(json.dumps({"rounds": [], "periods": [{"start": "x", "seconds": 4.0}]}))
    wall = WallBudget(tmp_path, 60.0)
    assert 54.0 <= wall.spent() < 55.0 and not wall.over() and wall.over(0.9)


@pytest.mark.parametrize("limit,seconds", [("30", 1800), ("5:30", 330), ("1:00:00", 3600), ("2-00", 172800),
                                           ("1-02:03", 93780), ("0-00:00:45", 45)])
def test_a_slurm_time_limit_reads_in_each_of_its_forms(limit, seconds):
    from lbscale.sweep.submit import slurm_seconds

    assert slurm_seconds(limit) == seconds


def test_an_array_task_under_a_wall_budget_gets_what_is_left_of_its_grace_as_its_time_limit(tiny_h5, tmp_path):
    from lbscale.sweep.submit import wall_time_limit

    assert wall_time_limit(3725.2, None) == "1:02:06"
    assert wall_time_limit(10.0, None) == "0:01:00"  # SLURM's limits are minutes: at least one
    assert wall_time_limit(7200.0, "30") == "0:30:00"  # never past the system's own limit
    spec = tmp_path / "walled.yaml"
    spec.write_text(SPEC.format(data=tiny_h5, wall=""))
    results = tmp_path / "results"
    lbscale("sweep", spec, "--results", results, "--launcher", "slurm", "--no-submit", "--wall", "20m")
    text = next((results / "slurm").glob("walled-g1.sh")).read_text()
    limits = [line for line in text.splitlines() if line.startswith("#SBATCH --time=")]
    assert limits == ["#SBATCH --time=0:22:00"] or limits == ["#SBATCH --time=0:21:59"], text


def test_under_slurm_a_follow_up_job_counts_the_arrays_running_time_and_stops_the_rounds(slurm, tiny_h5, tmp_path):
    """The array tasks ran out the budget (a 200-epoch grid, --wall 40s, one task at a time): SLURM stops the
    first at its time limit and it checkpoints, a task that starts once the budget is spent does not start its
    trial, and the follow-up job counts the tasks' running time, submits nothing more and says so."""
    import time

    spec = tmp_path / "walled.yaml"
    spec.write_text(SPEC.format(data=tiny_h5, wall="").replace("seeds: 2", "search: {base_lr: [0.02, 0.05]}")
                    .replace("base_lr: 0.05, ", "target_metric: val_top1, target: 0.999, eval_spacing: 0.5, "))
    results = tmp_path / "results"
    out = lbscale("sweep", spec, "--results", results, "--launcher", "slurm", "--until-resolved", "--wall", "40s",
                  "--max-concurrent", "1").stdout
    assert "it plans and submits the next round" in out, out
    script = (results / "slurm" / "walled-g1.sh").read_text()
    assert "#SBATCH --time=0:01:00" in script, script  # what is left of 1.1 x 40 s, at least a minute
    deadline = time.time() + 600
    logs = []
    while time.time() < deadline:
        time.sleep(3)
        logs = [f.read_text() for f in (results / "slurm").glob("*walled-confirm-*.out")]
        if any("sweep done" in t for t in logs):
            break
    assert any("wall budget spent" in t for t in logs), logs
    from lbscale.sweep.budget import array_seconds

    assert array_seconds(results) >= 40  # the first task ran to its limit
    tasks = [f.read_text() for f in sorted((results / "slurm").glob("*walled-g1-*.out"))]
    assert any("not started" in t for t in tasks), tasks  # a task after the budget was spent
    ran = [d.name for d in results.iterdir() if (d / "task-periods.json").exists()]
    assert 1 <= len(ran) < 4, ran
    periods = read_json(results / "rounds.json")["periods"]
    assert len(periods) >= 2  # the submission's and the follow-up's own
    assert len(list((results / "slurm").glob("*.sh"))) == 2  # the array and one follow-up: nothing more submitted


def test_a_slurm_submitter_that_waits_counts_its_tasks_time_not_its_own(tmp_path):
    """Review finding: a `--wait` submitter alive for the whole run saved its period (queue time included) beside
    the tasks' own periods, counting the run twice."""
    import json

    from lbscale.sweep.budget import WallBudget
    from lbscale.sweep.submit import slurm_seconds

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "task-periods.json").write_text(json.dumps({"periods": [{"start": 0.0, "seconds": 30.0}]}))
    wall = WallBudget(tmp_path, 60.0, own=False)
    assert wall.spent() == 30.0
    wall.save()
    assert not (tmp_path / "rounds.json").exists()
    assert slurm_seconds("UNLIMITED") == slurm_seconds("1:2:3:4") == float("inf")  # no cap from the system
