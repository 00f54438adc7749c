"""Loading a study: which records become Study.steps, and a large study read by two processes giving the same
frames as one process reading it alone (`parallel.shared`)."""

import json


from lbscale.report.load import load_results
from tests.fixtures.make_results import make_trial


def _add_step_evaluation(trial, step: int, value: float) -> None:
    """A step evaluation (`kind: step`, as --eval-every writes it) appended to a trial's records."""
    with open(trial / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "step", "step": step, "epoch": 1.5, "val_top1": value, "val_loss": 0.5,
                            "samples_seen": step * 8192, "elapsed_seconds": 999.0}) + "\n")


def test_steps_hold_each_trials_step_evaluations_and_no_partial_epoch(tmp_path):
    """A diverged trial's partial epoch is an epoch record but no evaluation; another trial's step evaluation is
    an evaluation but no epoch record. With one of each, the study has as many epoch records as evaluations, and
    the evaluations must still be the right ones."""
    res = tmp_path / "res"
    make_trial(res, 8192, 4, 0, epochs=4, state="diverged", diverge_epoch=3, jitter=False)
    done = make_trial(res, 16384, 8, 0, epochs=4, jitter=False)
    _add_step_evaluation(done, 6, 0.123)
    study = load_results([res])
    assert len(study.epochs) == len(study.steps)  # 2 full + 1 partial; 4 full + 1 step evaluation
    diverged = study.steps[study.steps["global_batch"] == 8192]
    assert list(diverged["kind"]) == ["epoch", "epoch"]  # the partial third epoch evaluated nothing
    step = study.steps[(study.steps["global_batch"] == 16384) & (study.steps["kind"] == "step")]
    assert list(step["step"]) == [6] and list(step["val_top1"]) == [0.123]
    assert list(step["samples_seen"]) == [6 * 8192]
    assert study.epochs["partial"].sum() == 1
