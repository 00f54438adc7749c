"""`lbscale sweep --until-resolved` end to end on the tiny set: rounds decided from the fit, written to
rounds.json, planned again (not decided again) by a rerun, cut by the budget, shown in the report; and its
refusals."""

import json

import pytest

from lbscale.results import read_json
from tests.sweep.test_launch import lbscale

SPEC = """
name: adaptive
data: {data}
model: test_resnet
epochs: 2
trial: {{optimizer: sgd, lr_scaling: none, check_every: 1, device: cpu, eval_spacing: 0.2, target_metric: val_top1,
        target: 0.45, stop_at_target: true}}
grid:
  batch: [16, 32]
  gpus: [1]
  search:
    {search}
"""


def _spec(tmp_path, data, search="base_lr: [0.02, 0.1]"):
    path = tmp_path / "adaptive.yaml"
    path.write_text(SPEC.format(data=data, search=search))
    return path


def test_rounds_are_decided_written_replayed_and_cut_by_the_budget(tiny_h5, tmp_path):
    results = tmp_path / "results"
    spec = _spec(tmp_path, tiny_h5)
    out = lbscale("sweep", spec, "--results", results, "--until-resolved", "--budget", "7", "--ratio", "1.5").stdout
    rounds = read_json(results / "rounds.json")["rounds"]
    assert rounds, out
    last = rounds[-1]
    # a ratio of 1.5 is not met on 4..7 trials: the budget of 7 trials ends it
    assert last["stop"].startswith("budget spent") or last["stop"].startswith("no batch reached"), last
    added = [t["id"] for r in rounds for a in r["added"] for t in a["trials"]]
    trials = sorted(d.name for d in results.iterdir() if (d / "trial.yaml").exists())
    assert len(trials) <= 7 and set(added) <= set(trials) and len(trials) == 4 + len(added)
    for r in rounds[:-1]:
        assert r["stop"] is None and r["added"] and all(a["action"]["why"] for a in r["added"])
        assert set(r["answer"]) and {"kind", "lo", "hi"} <= set(next(iter(r["answer"].values())))
    assert f"until resolved: {last['stop']}" in out and "sweep done" in out.splitlines()[-1]
    # a rerun plans the rounds' trials from rounds.json and decides nothing new
    again = lbscale("sweep", spec, "--results", results, "--until-resolved", "--budget", "7", "--ratio", "1.5").stdout
    assert f"{len(trials)} of {len(trials)} trials already finished" in again
    assert f"until resolved: {last['stop']}" in again  # the rounds' outcome, read back, not decided again
    assert read_json(results / "rounds.json")["rounds"] == rounds
    # an array task finds a round's trial by its id (the rounds replayed from rounds.json), and runs it
    if added:
        import shutil

        redo = results / added[-1]
        for name in ("summary.json", "metrics.jsonl", "checkpoint", "config.json"):
            target = redo / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
        flags = ["--results", results, "--until-resolved", "--budget", "7", "--ratio", "1.5"]
        script = lbscale("sweep", spec, *flags, "--launcher", "slurm", "--no-submit").stdout
        text = next((results / "slurm").glob("adaptive-g1.sh")).read_text()
        assert added[-1] in text and "--until-resolved" in text, script
        lbscale("sweep", spec, *flags, "--trial", added[-1])
        assert read_json(redo / "summary.json")["status"] in ("completed", "pruned")
    # the report shows the rounds
    rep = lbscale("report", results, "--out", tmp_path / "rep").stdout
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "Rounds (--until-resolved)" in text and last["stop"] in text, rep
    # a stop recorded by another version of the steps model (here: one before the model carried a version) is
    # not replayed: the rounds are decided again by this one, and the new entry records its version
    from lbscale.report.steps_model import VERSION

    doc = read_json(results / "rounds.json")
    doc["rounds"][-1]["settings"].pop("model")
    (results / "rounds.json").write_text(json.dumps(doc))
    lbscale("sweep", spec, "--results", results, "--until-resolved", "--budget", "7", "--ratio", "1.5")
    after = read_json(results / "rounds.json")["rounds"]
    assert len(after) == len(rounds) + 1 and after[-1]["settings"]["model"] == VERSION, after[-1]


def test_a_run_with_twice_the_epochs_that_reached_the_target_counts_its_batch_as_reached(tiny_h5, tmp_path):
    """With a constant LR, batch 32 misses 0.95 in 2 epochs; round 1 runs its closest trial with twice the epochs,
    which reaches it. That run supersedes the short one (not another seed of its point that missed): the next round
    does not double it again but goes past batch 32, and the report counts batch 32 as reached."""
    from lbscale.studies.resolve import decider

    spec = tmp_path / "adaptive.yaml"
    spec.write_text(SPEC.format(data=tiny_h5, search="base_lr: [0.02, 0.1]")
                    .replace("target: 0.45", "target: 0.95, schedule: constant"))
    results = tmp_path / "results"
    lbscale("sweep", spec, "--results", results, "--until-resolved", "--budget", "5")
    first = read_json(results / "rounds.json")["rounds"][0]
    (longer,) = [t for a in first["added"] for t in a["trials"]]
    assert longer["id"] == "b32-g1-sgd-none-p0-e4-s0" and longer["from"] == "b32-g1-sgd-none-p0-s0", first
    assert read_json(results / longer["id"] / "summary.json").get("steps_to_target"), "the premise: it reached"
    _, decided = decider("val_top1", 0.95, 4.0)(results, 10, 2, None)
    kinds = [(a.kind, a.batch) for a in decided.actions]
    assert ("budget", 32) not in kinds and ("batch", 64) in kinds, decided
    lbscale("report", results, "--out", tmp_path / "rep")
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "2 of 2 batches reached" in text and "4 trials (1 shorter run superseded by a longer run" in text


@pytest.mark.parametrize("args, message", [
    (["--budget", "7"], "--budget and --ratio go with --until-resolved"),
    (["--until-resolved", "--budget", "x"], "--budget 'x': give N trials in all (60) or H GPU-hours (12h)"),
    (["--until-resolved", "--budget", "0"], "--budget '0'"),
    (["--until-resolved", "--ratio", "1"], "--ratio: 1 is not a finite number > 1"),
    (["--until-resolved", "--ratio", "nan"], "--ratio: nan is not a finite number > 1"),
    (["--until-resolved", "--budget", "3"], "--budget 3: the grid alone has 4 trials"),
])
def test_refusals(tiny_h5, tmp_path, args, message):
    r = lbscale("sweep", _spec(tmp_path, tiny_h5), "--results", tmp_path / "r", "--dry-run", *args, check=False)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_a_budget_smaller_than_the_grid_is_refused_before_launch(tiny_h5, tmp_path):
    """--budget counts trials in all, the grid's included: 3 cannot run a grid of 4; one line naming the grid's
    size, exit 2, and nothing run or written."""
    results = tmp_path / "r"
    r = lbscale("sweep", _spec(tmp_path, tiny_h5), "--results", results, "--until-resolved", "--budget", "3",
                check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
    assert "--budget 3: the grid alone has 4 trials" in r.stderr and "Traceback" not in r.stderr
    assert not results.exists()


def test_a_spec_without_a_search_of_base_lr_is_refused(tiny_h5, tmp_path):
    spec = _spec(tmp_path, tiny_h5, search="momentum: [0.8, 0.9]")
    r = lbscale("sweep", spec, "--results", tmp_path / "r", "--until-resolved", check=False)
    assert r.returncode == 2 and "needs a tuned grid.search over base_lr" in r.stderr


def test_the_rounds_file_is_json_a_program_can_read(tiny_h5, tmp_path):
    """rounds.json is one strict JSON object with a list of rounds: an open end of B_crit is null, never Infinity."""
    results = tmp_path / "results"
    lbscale("sweep", _spec(tmp_path, tiny_h5), "--results", results, "--until-resolved", "--budget", "4")

    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    data = json.loads((results / "rounds.json").read_text(), parse_constant=refuse)
    assert list(data) == ["rounds"] and data["rounds"][0]["stop"].startswith("budget spent")


def test_rounds_as_slurm_jobs_each_planned_by_a_follow_up_job(slurm, tiny_h5, tmp_path):
    """Under SLURM a job after the arrays fits the results and submits the next round with a job after it, until
    the rounds stop: the same rounds.json as a local sweep writes."""
    import time

    results = tmp_path / "res"
    out = lbscale("sweep", _spec(tmp_path, tiny_h5), "--results", results, "--launcher", "slurm", "--until-resolved",
                  "--budget", "6", "--ratio", "1.5").stdout
    assert "submitted job array" in out and "it plans and submits the next round" in out
    deadline = time.time() + 900
    rounds = []
    while time.time() < deadline and not (rounds and rounds[-1]["stop"]):
        time.sleep(3)
        rounds = (read_json(results / "rounds.json") or {}).get("rounds", []) if (results / "rounds.json").exists() \
            else []
    assert rounds and rounds[-1]["stop"], rounds
    added = [t["id"] for r in rounds for a in r["added"] for t in a["trials"]]
    for name in added:
        assert read_json(results / name / "summary.json")["status"] in ("completed", "pruned"), name
