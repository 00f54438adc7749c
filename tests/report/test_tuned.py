"""The report of a tuned study (a hyperparameter search per batch): the batch_science-shaped functions on hand-made
frames, the exponent of the optimal LR and the critical batch on result sets that follow a known law
(tests/report/make_tuned.py), and `write_report` end to end. Expected values come from the hand-made rows or the
law, never from the functions under test."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from lbscale.report import ReportOptions, load_results, plots, write_report
from lbscale.report.critical_batch import fits_of, tuned_fits
from lbscale.report.tuned import (apply_epoch_budget, best_measurement, best_trials, budget_view, optima_of,
                                  steps_to_result, trial_outcomes)
from tests.fixtures.make_results import make_study
from tests.report.pictures import assert_drawn
from tests.report.make_tuned import critical_steps, make_tuned_study, make_tuned_trial, tuned_frames


def _frame(rows):
    """(trials, steps) from {trial: (batch, state, peak_lr, [(step, epoch, seconds, val_top1), ...])}."""
    trials = pd.DataFrame([{"results": "r", "trial": t, "variant": "sgd", "global_batch": b, "state": state,
                            "peak_lr": lr, "base_lr": lr / 2, "hp_base_lr": lr / 2, "hp_momentum": 0.9}
                           for t, (b, state, lr, _) in rows.items()])
    steps = pd.DataFrame([{"results": "r", "trial": t, "variant": "sgd", "global_batch": b, "step": s, "epoch": e,
                           "elapsed_seconds": sec, "val_top1": v, "val_loss": 1 - v}
                          for t, (b, _, _, evals) in rows.items() for s, e, sec, v in evals])
    return trials, steps.sample(frac=1, random_state=3)  # row order is no hint: the functions order by step


ROWS = {  # batch 256: a, b, c reach 0.9; b and c at step 20, c in fewer seconds, b with the better accuracy;
    # batch 512: nobody reaches 0.9
    "a": (256, "completed", 0.1,
          [(10, 0.5, 1.0, 0.50), (20, 1.0, 2.0, 0.70), (30, 1.5, 3.0, 0.90), (40, 2.0, 4.0, 0.95)]),
    "b": (256, "completed", 0.2, [(10, 0.5, 1.0, 0.60), (20, 1.0, 2.5, 0.91), (30, 1.5, 3.5, 0.93)]),
    "c": (256, "completed", 0.3,
          [(10, 0.5, 1.0, 0.55), (20, 1.0, 2.2, 0.90), (30, 1.5, 3.2, 0.89), (40, 2.0, 4.2, 0.92)]),
    "d": (512, "completed", 0.4, [(10, 1.0, 1.0, 0.40), (20, 2.0, 2.0, 0.80), (30, 3.0, 3.0, 0.78)]),
    "e": (512, "pruned", 0.5, [(10, 1.0, 1.0, 0.45), (20, 2.0, 2.0, 0.85)]),  # pruned at step 20: its records count
    "f": (512, "pending", 0.6, []),
}


def test_steps_to_result_is_the_first_evaluation_at_the_threshold_both_directions():
    _, steps = _frame(ROWS)
    up = steps_to_result(steps, "val_top1", 0.9, maximize=True).set_index("trial")
    assert up["step"].to_dict() == {"a": 30, "b": 20, "c": 20}  # d and e never reach 0.9: absent
    assert up["epoch"].to_dict() == {"a": 1.5, "b": 1.0, "c": 1.0}
    assert up["elapsed_seconds"].to_dict() == {"a": 3.0, "b": 2.5, "c": 2.2}
    # loss = 1 - accuracy: at or below 0.2 first where accuracy first reaches 0.8
    down = steps_to_result(steps, "val_loss", 0.2 + 1e-12, maximize=False).set_index("trial")
    assert down["step"].to_dict() == {"a": 30, "b": 20, "c": 20, "d": 20, "e": 20}
    by_batch = steps_to_result(steps, "val_top1", 0.92, maximize=True, group_by=["global_batch"])
    assert by_batch.drop(columns="crossing").to_dict("records") == [
        {"global_batch": 256, "step": 30, "epoch": 1.5, "elapsed_seconds": 3.5, "step_before": 20}]  # before: 20


def test_the_crossing_is_interpolated_in_log_steps_between_its_two_evaluations():
    """0.6 at step 10, 0.9 at step 40: a target of 0.8 lies two thirds of the way in log steps,
    10 * 4^(2/3) = 25.2; with no evaluation before the crossing, the crossing is the evaluation's own step."""
    steps = pd.DataFrame({"results": "r", "trial": ["a", "a", "b"], "step": [10, 40, 5], "epoch": [1.0, 4.0, 0.5],
                          "elapsed_seconds": [1.0, 4.0, 0.5], "val_top1": [0.6, 0.9, 0.95], "subset": None})
    hit = steps_to_result(steps, "val_top1", 0.8, maximize=True).set_index("trial")
    assert hit.loc["a", "crossing"] == pytest.approx(10 * 4 ** (2 / 3))
    assert hit.loc["b", "crossing"] == 5
    down = steps_to_result(steps.assign(val_loss=1 - steps["val_top1"]), "val_loss", 0.2, maximize=False)
    assert down.set_index("trial").loc["a", "crossing"] == pytest.approx(10 * 4 ** (2 / 3))


def test_a_check_that_stopped_below_the_target_bounds_the_crossing_from_below():
    """Whole split at 10 (0.6) and 40 (0.9); subset evaluations between; at 30 a check of the whole split stopped
    after 200 images (0.7, clearly below 0.8): the crossing lies in (30, 40], interpolated from there. A subset
    value within its noise of the threshold (20, 0.75 on 100 images) bounds nothing, nor does a stopped check past
    the threshold asked about (0.7 >= 0.65)."""
    steps = pd.DataFrame({"results": "r", "trial": "a", "step": [10, 20, 30, 40], "epoch": [1.0, 2.0, 3.0, 4.0],
                          "elapsed_seconds": [1.0, 2.0, 3.0, 4.0], "val_top1": [0.6, 0.75, 0.7, 0.9],
                          "subset": [None, 100, 200, None], "check": [None, None, 200, 1600]})
    hit = steps_to_result(steps, "val_top1", 0.8, maximize=True).set_index("trial")
    assert (hit.loc["a", "step"], hit.loc["a", "step_before"]) == (40, 30)
    assert hit.loc["a", "crossing"] == pytest.approx(30 * (40 / 30) ** 0.5)
    low = steps_to_result(steps, "val_top1", 0.65, maximize=True).set_index("trial")
    assert (low.loc["a", "step"], low.loc["a", "step_before"]) == (40, 10)


def test_a_subset_value_clearly_below_the_threshold_bounds_the_crossing_as_a_stopped_check_does():
    """A step evaluation's fixed subset is a random sample of the split, as a stopped check's first part is: a value
    more than 2.5 binomial standard errors below the threshold on its n images bounds the crossing from below (the
    same rule, without the finite-population factor). 0.5 on 100 images: 0.5 + 2.5 x 0.05 = 0.625 < 0.8, a bound;
    0.72 on 100: 0.72 + 2.5 x 0.0449 = 0.832, none; the whole split reaches 0.8 at step 40. Digits, 2026-12-05: 9
    of 32 crossings had a subset value clearly below the target as the evaluation before them, unchecked, and
    the bracket reached back to an earlier check."""
    steps = pd.DataFrame({"results": "r", "trial": "a", "step": [10, 20, 30, 40], "epoch": [1.0, 2.0, 3.0, 4.0],
                          "elapsed_seconds": [1.0, 2.0, 3.0, 4.0], "val_top1": [0.4, 0.5, 0.72, 0.85],
                          "subset": [None, 100, 100, None], "check": [None, None, None, 1500]})
    hit = steps_to_result(steps, "val_top1", 0.8, maximize=True).set_index("trial")
    assert (hit.loc["a", "step"], hit.loc["a", "step_before"]) == (40, 20)
    assert hit.loc["a", "crossing"] == pytest.approx(20 * 2 ** ((0.8 - 0.5) / (0.85 - 0.5)))
    # for an easier threshold 0.6 the subset value 0.5 is not clearly below (0.625 > 0.6): the whole split's 0.4
    low = steps_to_result(steps, "val_top1", 0.6, maximize=True).set_index("trial")
    assert (low.loc["a", "step"], low.loc["a", "step_before"]) == (40, 10)
    # a loss has no binomial error: its subset values bound nothing
    loss = steps.assign(val_loss=1 - steps["val_top1"])
    down = steps_to_result(loss, "val_loss", 0.2, maximize=False).set_index("trial")
    assert down.loc["a", "step_before"] == 10


def test_best_measurement_and_the_epoch_budget_by_hand():
    _, steps = _frame(ROWS)
    best = best_measurement(steps, "val_top1", True, ["trial"]).set_index("trial")
    assert best["val_top1"].to_dict() == {"a": 0.95, "b": 0.93, "c": 0.92, "d": 0.80, "e": 0.85}
    assert best["step"].to_dict() == {"a": 40, "b": 30, "c": 40, "d": 20, "e": 20}
    worst_loss = best_measurement(steps, "val_loss", False, ["global_batch"]).set_index("global_batch")
    assert worst_loss["trial"].to_dict() == {256: "a", 512: "e"}
    assert sorted(apply_epoch_budget(steps, 1.0)["step"]) == [10, 10, 10, 10, 10, 20, 20, 20]


def test_best_trial_per_batch_fewest_steps_then_the_best_value_else_the_best_metric():
    trials, steps = _frame(ROWS)
    best = best_trials(trials, steps, "val_top1", 0.9, maximize=True).set_index("global_batch")
    # b and c reach 0.9 at step 20: b's best accuracy (0.93) beats c's (0.92); c's fewer seconds (2.2 against
    # 2.5) do not count: measured time is noise that would make the choice differ between reruns
    assert best.loc[256, "trial"] == "b"
    assert best.loc[256, "reached"] and best.loc[256, "steps_to_target"] == 20
    assert best.loc[256, "seconds_to_target"] == 2.5 and best.loc[256, "epochs_to_target"] == 1.0
    assert best.loc[256, "peak_lr"] == 0.2 and best.loc[256, "hp_base_lr"] == 0.1
    assert best.loc[256, "best_value"] == 0.93
    # nobody reached 0.9 at 512: the best accuracy wins, the pruned trial's 0.85 over d's 0.80
    assert best.loc[512, "trial"] == "e" and not best.loc[512, "reached"]
    assert math.isnan(best.loc[512, "steps_to_target"]) and best.loc[512, "best_value"] == 0.85
    assert {"hp_base_lr", "hp_momentum", "base_lr", "peak_lr", "best_value"} <= set(best.columns)
    assert "f" not in set(trial_outcomes(trials, steps, "val_top1", 0.9, True)["trial"])  # pending: no records
    # a loss: the lowest wins; without a target the best value over all evaluations decides everywhere
    low = best_trials(trials, steps, "val_loss", None, maximize=False).set_index("global_batch")
    assert low["trial"].to_dict() == {256: "a", 512: "e"} and not low["reached"].any()
    assert low["best_value"].to_dict() == pytest.approx({256: 0.05, 512: 0.15})


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_best_trials_and_the_model_recover_the_lr_exponent(alpha):
    # per batch seven LRs half an octave apart around lr* = 0.02 B^alpha, the grid shifted by up to 0.2 octave;
    # the LR closest to lr* reaches the target first
    batches = [2 ** k for k in range(6, 14)]
    offsets = np.random.default_rng(7).uniform(-0.2, 0.2, len(batches))
    trials, steps = tuned_frames(batches, [-1.5, -1, -0.5, 0, 0.5, 1, 1.5], alpha, offsets=offsets)
    best = best_trials(trials, steps, "val_top1", 0.9, maximize=True).set_index("global_batch")
    law = {b: 0.02 * b ** alpha for b in batches}
    closest = trials.assign(d=abs(np.log2(trials["peak_lr"] / trials["global_batch"].map(law))))
    closest = closest.sort_values("d").drop_duplicates("global_batch").set_index("global_batch")
    assert best["trial"].to_dict() == closest["trial"].to_dict()
    fit = tuned_fits(trials, steps, "val_top1", 0.9, True).iloc[0]
    assert fit["alpha"] == pytest.approx(alpha, abs=0.05) and fit["c"] > 0
    assert fit["alpha_lo"] <= alpha <= fit["alpha_hi"] and fit["alpha_lo"] < fit["alpha"] < fit["alpha_hi"]
    again = tuned_fits(trials, steps, "val_top1", 0.9, True).iloc[0]
    assert (again["alpha_lo"], again["alpha_hi"]) == (fit["alpha_lo"], fit["alpha_hi"])  # the same interval


def test_the_critical_batch_of_the_best_trials():
    # the best LR of every batch needs S(B) = 1000 (1 + 256 / B) steps; the others 1.25 to 1.75 times that
    batches = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    trials, steps = tuned_frames(batches, [-1.5, -1, -0.5, 0, 0.5, 1, 1.5], 0.5)
    best = best_trials(trials, steps, "val_top1", 0.9, True).set_index("global_batch")
    np.testing.assert_allclose(best["steps_to_target"], np.round(critical_steps(batches)))
    fit = tuned_fits(trials, steps, "val_top1", 0.9, True).iloc[0]
    # every trial is known between its evaluations at 0.75 and 1.0 of its needed steps (interval-censored); the
    # noise-free truth sits on the brackets' upper ends, so S_min is estimated within the bracket's width
    assert fit["b_crit"] == pytest.approx(256, rel=0.1) and fit["s_min"] == pytest.approx(1000, rel=0.2)
    assert fit["b_crit_kind"] == "interval" and fit["b_crit_lo"] < 256 < fit["b_crit_hi"]
    assert fit["censored"] == 0 and fit["s_min_kind"] == "interval"


def test_budget_view_by_hand():
    trials, steps = _frame(ROWS)
    view = budget_view(trials, steps, "val_top1", True, [1.0, 2.0]).set_index(["global_batch", "budget"])
    assert view["best_value"].to_dict() == {(256, 1.0): 0.91, (512, 1.0): 0.45, (256, 2.0): 0.95, (512, 2.0): 0.85}
    assert view["trial"].to_dict() == {(256, 1.0): "b", (512, 1.0): "e", (256, 2.0): "a", (512, 2.0): "e"}


# --- result directories written by code ---------------------------------------------------------------------

def test_load_a_tuned_study(tmp_path):
    study = load_results([make_tuned_study(tmp_path / "tuned")])
    t = study.trials.set_index("trial")
    assert study.tuned and t["state"].value_counts().to_dict() == {"completed": 10, "pruned": 2, "pending": 1}
    assert t.loc["b256-sgd-none-p2-s0", "pruned_rung"] == 1 and t.loc["b256-sgd-none-p2-s0", "pruned_step"] == 500
    assert t.loc["b256-sgd-none-p1-s0", "stopped"] == "target"
    assert t.loc["b1024-sgd-none-p1-s0", "hp_base_lr"] == pytest.approx(0.02 * 1024 ** 0.5)
    assert t.loc["b1024-sgd-none-p1-s0", "point"] == 1 and t.loc["b1024-sgd-none-p1-s0", "hp_momentum"] == 0.9
    # the best LR of 1K stops at S(1K) = 1,250 steps: epochs of 2^18 / 1K = 256 steps, evaluations every 125
    one = study.steps[study.steps["trial"] == "b1024-sgd-none-p1-s0"]
    assert list(one["kind"]).count("step") == 10 and list(one["kind"]).count("epoch") == 4
    assert list(one["step"]) == sorted(one["step"]) and one["step"].max() == 1250
    assert list(one.columns) == ["results", "trial", "global_batch", "gpus", "variant", "warmup", "seed", "step",
                                 "epoch", "samples_seen", "train_loss", "val_top1", "val_loss", "elapsed_seconds",
                                 "kind", "subset"]
    step_rows = one[one["kind"] == "step"]
    np.testing.assert_allclose(step_rows["epoch"], step_rows["step"] / 256)
    # samples seen so far: a step record's as written, an epoch record's summed over its epochs (each 256 x 1K)
    np.testing.assert_allclose(one["samples_seen"], one["step"] * 1024)
    assert set(study.epochs[study.epochs["trial"] == "b1024-sgd-none-p1-s0"]["epoch"]) == {1, 2, 3, 4}
    assert t.loc["b1024-sgd-none-p1-s0", "epochs_done"] == 4  # step evaluations are not epochs
    assert (study.epochs["epoch"] % 1 == 0).all() and "kind" not in study.epochs


def test_step_records_of_an_older_lbscale_count_samples_seen_as_samples(tmp_path):
    import json

    results = make_tuned_study(tmp_path / "tuned")
    trial = results / "b1024-sgd-none-p1-s0"
    rows = [json.loads(line) for line in (trial / "metrics.jsonl").read_text().splitlines()]
    old = [{("samples" if k == "samples_seen" else k): v for k, v in r.items()} for r in rows]
    (trial / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    one = load_results([results]).steps.query("trial == 'b1024-sgd-none-p1-s0'")
    np.testing.assert_allclose(one["samples_seen"], one["step"] * 1024)


def test_old_results_load_as_before(tmp_path):
    study = load_results([make_study(tmp_path / "sat4", seeds=1)])
    assert not study.tuned and set(study.steps["kind"]) == {"epoch"}
    assert len(study.steps) == int((~study.epochs["partial"]).sum())  # every full epoch, no partial one


def test_pruned_at_chance_counts_the_rungs_values_at_guessing_level():
    from lbscale.report.tuned import pruned_at_chance
    from lbscale.task import TASKS

    rows = [("a", "pruned", "asha", "val_top1", 0.11, 10), ("b", "pruned", "asha", "val_top1", 0.40, 10),
            ("c", "pruned", "asha", "val_loss", 2.4, 10), ("d", "pruned", "asha", "val_top1", math.nan, 10),
            ("e", "completed", "asha", None, None, 10), ("f", "completed", "none", None, None, 10),
            ("g", "pruned", "asha", "val_top1", 0.2, None)]  # classes unknown: no chance level
    trials = pd.DataFrame(rows, columns=["trial", "state", "prune", "pruned_metric", "pruned_value", "num_classes"])
    at, halved = pruned_at_chance(trials, TASKS["multiclass"])
    assert sorted(at["trial"]) == ["a", "c"] and halved == 6  # f trained without halving
    assert at.set_index("trial")["chance_bound"].round(4).to_dict() == {"a": 0.15, "c": 2.3026}


def test_the_verdict_warns_when_trials_were_pruned_at_chance_level(tmp_path):
    res = make_tuned_study(tmp_path / "tuned")  # 4 classes: chance is val_top1 <= 0.30
    make_tuned_trial(res, 1024, 0.02 * 1024 ** 0.5 * 4, 3, state="pruned", pruned_step=500, pruned_value=0.31)
    out, _ = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md",)))
    first = _sections((out / "report.md").read_text())[1]
    # (256, f=1) and (512, f=1) pruned at step 500 with val_top1 0.15 and 0.2; the new one at 0.31 is above it
    assert ("- 2 of 13 trials were pruned at chance level (val_top1 <= 0.30 at their rung): the first rung may be "
            "too early; give --prune-min-samples a larger value") in first
    calm = make_tuned_study(tmp_path / "calm", prune=())
    out, _ = write_report([calm], ReportOptions(out=tmp_path / "rep2", formats=("md",)))
    assert "chance level" not in (out / "report.md").read_text()


def _publish_rung(res, batch: int, values: list, decisions: list, evaluated: int = 500) -> None:
    """Each search point of `batch` publishes `values[point]` at its first rung (4,096 samples) with its decision,
    as a trial's rungs.json has it."""
    for point, (value, decision) in enumerate(zip(values, decisions)):
        rungs = {"group": f"b{batch}-sgd-none", "mode": "asha", "eta": 3, "metric": "val_top1", "maximize": True,
                 "rung_steps": [4096 // batch], "rung_samples": [4096],
                 "rungs": [{"rung": 1, "step": 4096 // batch, "metric": "val_top1", "value": value,
                            "evaluated": evaluated, "decision": decision}]}
        (res / f"b{batch}-sgd-none-p{point}-s0" / "rungs.json").write_text(json.dumps(rungs))


def test_the_verdict_warns_where_a_rung_could_not_tell_its_trials_apart(tmp_path):
    res = make_tuned_study(tmp_path / "tuned", pending=False)  # 4 classes: chance is val_top1 <= 0.30
    # 500 images: the values of batch 512 lie within 2 standard errors of the difference of each other
    _publish_rung(res, 512, [0.40, 0.44, 0.42], ["continue", "continue", "prune"])
    # batch 256's best, 0.33, is within noise of chance (0.30 + 2 x 0.021)
    _publish_rung(res, 256, [0.31, 0.33, 0.32], ["continue", "continue", "continue"])
    # batch 1K: 0.35 arrived first and went on; 0.45, beyond noise better, arrived after 0.60 and was pruned
    _publish_rung(res, 1024, [0.35, 0.60, 0.45], ["continue", "continue", "prune"])
    # batch 2K decided: the pruned values are far below the one that went on
    _publish_rung(res, 2048, [0.80, 0.40, 0.41], ["continue", "prune", "prune"])
    out, _ = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md",)))
    first = _sections((out / "report.md").read_text())[1]
    fix = "give --prune-min-samples a larger value (a larger --eval-subset narrows the noise)"
    assert ("- batch 256 (sgd-none): rung 1 at 4,096 samples could not tell its 3 trials apart (val_top1 0.31-0.33: "
            "all within the evaluation's noise of each other; the best within noise of chance level): " + fix) in first
    assert ("- batch 512 (sgd-none): rung 1 at 4,096 samples could not tell its 3 trials apart (val_top1 0.40-0.44: "
            "all within the evaluation's noise of each other): " + fix) in first
    assert ("- batch 1K (sgd-none): rung 1 at 4,096 samples was decided by arrival order among its 3 trials "
            "(val_top1 0.35-0.60: a trial went on by arrival order while a better one, beyond noise, was pruned): "
            "--prune sha decides in any order") in first
    assert "batch 2K (sgd-none): rung" not in first
    calm = make_tuned_study(tmp_path / "calm", prune=())
    out, _ = write_report([calm], ReportOptions(out=tmp_path / "rep2", formats=("md",)))
    assert "could not tell" not in (out / "report.md").read_text()


def _sections(md: str) -> list[str]:
    return md.split("\n## ")


def test_tuned_report_opens_with_the_verdict_and_counts_pruned_trials(tmp_path):
    res = make_tuned_study(tmp_path / "tuned")  # lr* = 0.02 B^0.5 exactly, S(B) = 1000 (1 + 256 / B)
    out, line = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md", "html", "csv")))
    md = (out / "report.md").read_text()
    first = _sections(md)[1]
    assert first.startswith("Verdict\n\n- sgd-none: ") and "|" not in first  # the first section: before any table
    assert "alpha = 0.50 [" in first and "- sgd-none: B_crit " in first
    assert "  - rests on 4 of 4 batches reached val_top1 0.9; 12 trials, 3 search points per batch" in first
    assert "4 did not reach the target (censored: more steps than they ran)" in first  # 2 pruned, 2 out of budget
    assert first.index("![steps-to-result](figures/steps-to-result.png)") < first.index("13 trials")
    assert "13 trials: 10 completed, 1 pending, 2 pruned" in first
    assert _sections(md)[2].startswith("Best trial per batch (tuned)")
    assert "(10 finished, 2 pruned)" in line and "alpha = 0.50" in line
    html = (out / "report.html").read_text()
    assert html.index("<h2>Verdict</h2>") < html.index("<img") < html.index("<table>")
    best = pd.read_csv(out / "tables" / "tuned-best.csv").set_index("global_batch")
    assert best["steps_to_target"].to_dict() == {b: critical_steps(b) for b in (256, 512, 1024, 2048)}
    np.testing.assert_allclose(best["peak_lr"], [0.02 * b ** 0.5 for b in best.index])
    own = load_results([res]).trials.set_index("trial")  # what each trial's summary.json says it took
    for col in ("steps_to_target", "epochs_to_target", "seconds_to_target"):
        np.testing.assert_allclose(best[col], own.loc[best["trial"], col].to_numpy(float))
    for name in ("steps-to-result", "optimal-lr", "budget"):
        assert_drawn(out / "figures" / f"{name}.png")


def test_tuned_report_without_a_target_says_so(tmp_path):
    res = make_tuned_study(tmp_path / "tuned", own_target=False)
    out, line = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md",)))
    first = _sections((out / "report.md").read_text())[1]
    assert "no target" in first and "steps-to-result figure is skipped" in first and "alpha = " in first
    assert "![optimal-lr](figures/optimal-lr.png)" in first and not (out / "figures" / "steps-to-result.png").exists()


def test_untuned_report_still_opens_with_its_verdict(tmp_path):
    out, line = write_report([make_study(tmp_path / "sat4", seeds=1)], ReportOptions(out=tmp_path / "rep",
                                                                                     formats=("md",)))
    first = _sections((out / "report.md").read_text())[1]
    assert first.startswith("Verdict\n\nlamb-sqrt: best accuracy") and "|" not in first
    assert "![metric-vs-batch](figures/metric-vs-batch.png)" in first
    assert "metric-vs-batch.png" not in _sections((out / "report.md").read_text())[-1]  # shown once


# --- figures --------------------------------------------------------------------------------------------------

def test_figures_plot_every_trial_each_optimum_and_the_reference_slopes():
    batches = [64, 256, 1024, 4096]
    trials, steps = tuned_frames(batches, [-1, 0, 1], 0.5)
    outcomes = trial_outcomes(trials, steps, "val_top1", 0.9, True)
    optima = optima_of(outcomes, 0.9, True)
    fits = tuned_fits(trials, steps, "val_top1", 0.9, True)
    lines = {ln.get_label(): ln for ln in plots.steps_to_result(optima, outcomes, fits, "val_top1", 0.9)
             .axes[0].get_lines()}
    best = lines["sgd: optimum of each batch"]
    np.testing.assert_allclose(best.get_xdata(), batches)
    np.testing.assert_allclose(best.get_ydata(), np.round(critical_steps(batches)))
    every = lines["sgd: trials that reached it"]  # the whole search: 3 points per batch
    assert len(every.get_xdata()) == 12 and sorted(set(every.get_xdata())) == batches
    lines = {ln.get_label(): ln for ln in plots.optimal_lr(optima, outcomes, fits).axes[0].get_lines()}
    fitted, = [ln for name, ln in lines.items() if "alpha = 0.50" in name]
    for name, slope in (("linear rule (slope 1)", 1.0), ("square-root rule (slope 0.5)", 0.5)):
        x, y = np.asarray(lines[name].get_xdata()), np.asarray(lines[name].get_ydata())
        assert np.log(y[-1] / y[0]) / np.log(x[-1] / x[0]) == pytest.approx(slope)
        # through the geometric centre of the optima: at B = 512 (geometric mean), lr* = 0.02 * 512^0.5
        assert np.interp(np.log(512), np.log(x), np.log(y)) == pytest.approx(np.log(0.02 * 512 ** 0.5))
    # the model's quadratic bowl against the fixture's V-shaped one: lr* within a percent
    np.testing.assert_allclose(fitted.get_ydata(), 0.02 * np.asarray(fitted.get_xdata()) ** 0.5, rtol=1e-2)
    np.testing.assert_allclose(lines["sgd: optimum LR*"].get_ydata(), [0.02 * b ** 0.5 for b in batches])


def test_the_steps_figure_draws_perfect_scaling_only_from_two_reached_batches():
    """Perfect scaling from the smallest reached batch: a study that reached the target at one batch has no such
    line, nor a legend entry for one (the grid study's figure listed one for a lone batch; the same rule here)."""
    trials, steps = tuned_frames([64, 256], [-1, 0, 1], 0.5)
    outcomes = trial_outcomes(trials, steps, "val_top1", 0.9, True)
    optima = optima_of(outcomes, 0.9, True)
    fits = tuned_fits(trials, steps, "val_top1", 0.9, True)
    labels = [ln.get_label() for ln in plots.steps_to_result(optima, outcomes, fits, "val_top1", 0.9)
              .axes[0].get_lines()]
    assert "sgd: perfect scaling" in labels
    alone = optima[optima["global_batch"] == 64]
    labels = [ln.get_label() for ln in plots.steps_to_result(alone, outcomes[outcomes["global_batch"] == 64], fits,
                                                              "val_top1", 0.9).axes[0].get_lines()]
    assert "sgd: optimum of each batch" in labels and "sgd: perfect scaling" not in labels


def test_the_steps_figure_marks_trials_that_stopped_before_the_target(tmp_path):
    res = make_tuned_study(tmp_path / "tuned")  # (256, f=1) and (512, f=1) pruned at step 500
    study = load_results([res])
    outcomes = trial_outcomes(study.trials, study.steps, "val_top1", 0.9, True)
    optima = optima_of(outcomes, 0.9, True)
    fits = fits_of(outcomes, 0.9, True)
    lines = {ln.get_label(): ln for ln in plots.steps_to_result(optima, outcomes, fits, "val_top1", 0.9)
             .axes[0].get_lines()}
    censored = lines["sgd-none: stopped before it (censored)"]
    marks = set(zip(censored.get_xdata(), censored.get_ydata()))
    missed = outcomes[~outcomes["reached"]]
    assert marks == set(zip(missed["global_batch"], missed["last_step"]))  # each at its last evaluation
    assert {(256, 500), (512, 500)} <= marks  # the two pruned at rung 1


def test_a_search_that_is_an_axis_is_reported_by_rule_one_curve_per_point(tmp_path):
    """grid.search.tune: false (cifar10-batch's LR axis): no tuned verdict, each LR its own variant."""
    from lbscale.report import load_results
    from tests.report.make_tuned import make_tuned_trial

    results = tmp_path / "axis"
    for batch in (256, 512):
        for point, lr in enumerate((0.01, 0.1)):
            d = make_tuned_trial(results, batch, lr, point)
            grid = json.loads((d / "grid.json").read_text())
            (d / "grid.json").write_text(json.dumps({**grid, "tune": False}))
    study = load_results([results])
    assert not study.tuned
    assert sorted(study.trials["variant"].unique()) == ["sgd-none base_lr=0.01 momentum=0.9",
                                                        "sgd-none base_lr=0.1 momentum=0.9"]
    make_tuned_trial(tmp_path / "tuned", 256, 0.01, 0)
    assert load_results([tmp_path / "tuned"]).tuned  # grid.json without "tune": a tuning, as sweeps write it


def test_several_targets_give_b_crit_per_target(tmp_path):
    res = make_tuned_study(tmp_path / "tuned")  # val_top1 = 0.9 t / S: 0.45 is met at half the steps
    out, line = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md", "csv"), target="0.45,0.9"))
    first = _sections((out / "report.md").read_text())[1]
    assert "B_crit by target (it grows as the target tightens, McCandlish et al. 2018): val_top1 0.45: " in first
    assert "; val_top1 0.9: " in first
    fits = pd.read_csv(out / "tables" / "tuned-fits.csv").set_index("target")
    assert sorted(fits.index) == [0.45, 0.9] and fits.loc[0.9, "b_crit"] == pytest.approx(256, rel=0.15)
    # at 0.45 each batch's optimum needs half the steps: the crossing between the evaluations every 125 steps that
    # bracket it (0.9 t / S at each), interpolated in log steps
    study = load_results([res])
    easy = optima_of(trial_outcomes(study.trials, study.steps, "val_top1", 0.45, True), 0.45, True)

    def bracketed(s):
        t1 = 125 * np.ceil(s / 2 / 125)
        t0 = t1 - 125
        f = (0.45 - 0.9 * t0 / s) / (0.9 * t1 / s - 0.9 * t0 / s)
        return t0 * (t1 / t0) ** f

    expected = [bracketed(critical_steps(b)) for b in (256, 512, 1024, 2048)]
    np.testing.assert_allclose(easy.sort_values("global_batch")["steps_star"], expected, rtol=5e-3)  # 4 digits
    lines = {ln.get_label() for ln in plots.steps_to_result(
        optima_of(trial_outcomes(study.trials, study.steps, "val_top1", 0.9, True), 0.9, True),
        trial_outcomes(study.trials, study.steps, "val_top1", 0.9, True), fits.reset_index().iloc[[1]], "val_top1",
        0.9, {0.45: easy}).axes[0].get_lines()}
    assert "sgd-none: optimum, val_top1 0.45" in lines


def test_a_subset_evaluation_is_never_a_trials_best_value(tmp_path):
    """An evaluation of a 256-image subset (`subset`) is a noisy estimate, kept in the record but never the
    trial's best value, in the outcomes, the best trial per batch, the epoch-budget view or the best trial's
    curve: here it says 0.999 at step 250 where the whole split never passed the trial's curve's values."""
    from tests.report.make_tuned import make_tuned_trial

    res = tmp_path / "res"
    d = make_tuned_trial(res, 256, 0.02 * 256 ** 0.5, 0, epochs=2, own_target=False)
    records = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    whole = max(r["val_top1"] for r in records)
    at = next(r for r in records if r.get("kind") == "step" and r["step"] == 250)
    records.insert(records.index(at), {**at, "val_top1": 0.999, "val_loss": 0.001, "subset": 256})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # a search point pruned before its first whole-split evaluation: searched, with no best value
    early = make_tuned_trial(res, 256, 0.001, 1, epochs=2, own_target=False, state="pruned", pruned_step=300)
    lines = [{**json.loads(line), "subset": 256} for line in (early / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(r.get("kind") == "step" for r in lines)
    (early / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    study = load_results([res])
    assert study.steps["subset"].notna().sum() == 3
    outcomes = trial_outcomes(study.trials, study.steps, "val_top1", None, True).set_index("trial")
    assert outcomes.loc[d.name, "best_value"] == whole
    assert math.isnan(outcomes.loc[early.name, "best_value"]) and outcomes.loc[early.name, "last_step"] == 250
    assert best_trials(study.trials, study.steps, "val_top1", None, True)["trial"].tolist() == [d.name]
    view = budget_view(study.trials, study.steps, "val_top1", True, [1.0, 2.0])
    assert view["best_value"].max() == whole
    best = best_trials(study.trials, study.steps, "val_top1", None, True)
    assert best["best_value"].tolist() == [whole]
    fig = plots.best_curves(study, best, "val_top1")
    curve, ringed = fig.axes[0].lines  # every evaluation; the whole split's
    assert max(curve.get_ydata()) == 0.999 and max(ringed.get_ydata()) == whole
    assert len(ringed.get_ydata()) == len(curve.get_ydata()) - 1
    fig.canvas.draw()  # the legend, with its entry for the rings, has room on the canvas
    assert fig.axes[0].get_legend().get_window_extent(fig.canvas.get_renderer()).x1 < fig.bbox.width


def test_the_time_table_says_how_far_a_trial_that_stopped_at_the_target_trained(tmp_path):
    """A best trial that stops at its target mid-epoch trained a fraction of an epoch: the time table says so
    (its last evaluation's epoch), where it said 0 (the epochs it completed) beside its training seconds."""
    from lbscale.report.tables import time_table
    from tests.report.make_tuned import make_tuned_trial

    res = tmp_path / "res"
    lr = 0.02 * 256 ** 0.5  # the law's optimum: 2,000 steps to the target (make_tuned's S_min 1,000, B_crit 256)
    d = make_tuned_trial(res, 256, lr, 0, epochs=4)  # 1,024 steps an epoch: stops at step 2,000
    summary = json.loads((d / "summary.json").read_text())
    assert summary["stopped"] == "target" and summary["steps_to_target"] == 2000
    study = load_results([res])
    table = time_table(study, trials=study.trials)
    assert table.display["Epochs"].tolist() == [f"{2000 / 1024:.2f}"]
    assert table.tidy["epochs_mean"].tolist() == [pytest.approx(2000 / 1024)]


def test_the_best_trials_test_figures_are_shown_beside_them(tmp_path):
    """The tuned report showed the validation figures only, where every trial's summary held its test figures
    (the grid report shows them): each batch's best trial now gets its final test value, not used to choose it."""
    res = make_tuned_study(tmp_path / "tuned")
    for summary in res.glob("*/summary.json"):
        s = json.loads(summary.read_text())
        tag = summary.parent.name  # b256-g1-sgd-none-p1-s0: the value names the trial
        s["test"] = {"test_top1": int(tag.split("-")[0][1:]) / 10000 + int(tag.split("-p")[1][0]) / 100}
        summary.write_text(json.dumps(s))
    out, _ = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md", "csv")))
    best = pd.read_csv(out / "tables" / "tuned-best.csv")
    for _, r in best.iterrows():
        b, p = int(r["global_batch"]), int(r["trial"].split("-p")[1][0])
        assert r["final_test_top1"] == pytest.approx(b / 10000 + p / 100)
    md = (out / "report.md").read_text()
    assert "Final Accuracy (test)" in md and "not used to choose" in md


def test_the_steps_figure_draws_no_model_curve_for_an_unresolved_critical_batch():
    # make demo-real drew the model's curve, labelled "B_crit not resolved", through two batches: a confident line
    # for a number the study does not resolve; now the title says so and no curve is drawn
    trials, steps = tuned_frames([64, 256, 1024], [-1, 0, 1], 0.5)
    outcomes = trial_outcomes(trials, steps, "val_top1", 0.9, True)
    optima = optima_of(outcomes, 0.9, True)
    fits = tuned_fits(trials, steps, "val_top1", 0.9, True).assign(b_crit_kind="none")
    fig = plots.steps_to_result(optima, outcomes, fits, "val_top1", 0.9)
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert not any("model" in name for name in labels)
    assert "sgd: B_crit not resolved by this study" in fig.axes[0].get_title()


def test_the_evaluation_share_of_training_is_measured_per_trial():
    """step_eval_seconds over train_seconds, summed over each trial's epochs: the median and the largest share,
    with the batch where it was largest."""
    from lbscale.report.tuned_tables import eval_share_line

    epochs = pd.DataFrame({"trial": ["a", "a", "b", "c"], "global_batch": [16, 16, 64, 256],
                           "train_seconds": [10.0, 10.0, 4.0, 8.0], "step_eval_seconds": [1.0, 3.0, 0.2, 0.4]})
    # a: 4 / 20 = 20%; b: 5%; c: 5%
    assert eval_share_line(epochs) == ("Evaluations inside epochs took 5.0% of training time (median over 3 trials; "
                                       "the most 20.0%, at batch 16): docs/designing.md says how to choose the "
                                       "spacing")
    assert eval_share_line(epochs.drop(columns="step_eval_seconds")) is None


def _noise_scale(d, step: int, b_simple: float, source: str = "target"):
    """gns.json as a trial with --gns-at-target (source target) or `lbscale gns` (checkpoint) writes it."""
    (d / "gns.json").write_text(json.dumps({"source": source, "micro_batch": 32, "k": 8, "groups": 16, "seed": 0,
                                            "step": step, "b_simple": b_simple}))


def test_b_simple_at_target_takes_each_winners_gns_json_at_its_steps_to_target(tmp_path):
    """A local sweep (one process per trial: no --gns-every) had no B_simple at the target: now a trial's gns.json
    counts where its step is the trial's steps to target. Each trial's value names it (batch / 2 + its point);
    batch 512's winner also measured --gns-every there (7,777, which stays first), batch 2048's gns.json is of a
    checkpoint 125 steps later (not at the target: '-'); batch 1024's came from `lbscale gns`."""
    from lbscale.train.columns import write_columns

    res = make_tuned_study(tmp_path / "tuned")
    expected = {}
    for d in sorted(p for p in res.iterdir() if (p / "summary.json").exists()):
        s = json.loads((d / "summary.json").read_text())
        if s["steps_to_target"] is None:
            continue
        batch, point = s["global_batch"], int(d.name.split("-p")[1][0])
        value = batch / 2 + point
        later = 125 if batch == 2048 else 0
        _noise_scale(d, s["steps_to_target"] + later, value, "checkpoint" if batch == 1024 else "target")
        expected[d.name] = (value, "checkpoint" if batch == 1024 else "target") if not later else None
        if batch == 512:  # --gns-every's smoothed value at the evaluation that reached the target
            rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
            for r in rows:
                if r.get("kind") == "step" and r["step"] == s["steps_to_target"]:
                    r["gns_b_simple"] = 7777.0
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            write_columns(d)
            expected[d.name] = (7777.0, "training")
    out, _ = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md", "csv")))
    best = pd.read_csv(out / "tables" / "tuned-best.csv").set_index("global_batch")
    assert set(best.index) == {256, 512, 1024, 2048}
    for b, r in best.iterrows():
        want = expected[r["trial"]]
        if want is None:
            assert pd.isna(r["gns_b_simple"]) and pd.isna(r["gns_source"]), b
        else:
            assert (r["gns_b_simple"], r["gns_source"]) == want, (b, r["trial"])
    values = [expected[t][0] for t in best["trial"] if expected[t]]
    assert len(values) == 3
    fits = pd.read_csv(out / "tables" / "tuned-fits.csv")
    assert fits["gns_b_simple"].tolist() == [float(np.median(values))]
    md = (out / "report.md").read_text()
    best_section = next(s for s in _sections(md) if s.startswith("Best trial per batch (tuned)"))
    assert "B_simple at target" in best_section.splitlines()[2]  # the table's header
    assert "from --gns-every (smoothed over the last measured steps) at batch 512" in best_section
    assert "from gns.json of --gns-at-target (measured at those weights) at batch 256" in best_section
    assert "from gns.json of lbscale gns on a checkpoint taken there at batch 1K" in best_section
    fits_section = next(s for s in _sections(md) if s.startswith("Critical batch and optimal LR"))
    assert "1 from --gns-every" in fits_section and "1 from gns.json of --gns-at-target" in fits_section
    verdict = _sections(md)[1]
    assert f"  - B_simple at target ~ {np.median(values):,.0f} (the median of 3 of 4 batches' best " \
        "trials" in verdict


def test_b_simple_at_target_is_the_hardest_targets_only(tmp_path):
    # measured where each trial reached its own target (0.9, the hardest asked): the fits table's row of the
    # easier target 0.5 showed that value too, as if measured there
    res = make_tuned_study(tmp_path / "tuned")
    for d in res.iterdir():
        s = json.loads((d / "summary.json").read_text()) if (d / "summary.json").exists() else {}
        if s.get("steps_to_target"):
            _noise_scale(d, s["steps_to_target"], 100.0)
    out, _ = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("csv",), target="0.5,0.9"))
    fits = pd.read_csv(out / "tables" / "tuned-fits.csv").set_index("target")
    assert fits.loc[0.9, "gns_b_simple"] == 100.0 and pd.isna(fits.loc[0.5, "gns_b_simple"])


def _runs(rows):
    """(trials, steps) from {trial: (point, seed, epochs, [(step, val_top1), ...])} at batch 32, 17 steps an epoch
    (the LR of point 0 is 0.02, of point 1 0.1)."""
    trials = pd.DataFrame([{"results": "r", "trial": t, "variant": "sgd", "global_batch": 32, "state": "completed",
                            "peak_lr": (0.02, 0.1)[p], "base_lr": (0.02, 0.1)[p], "point": p, "seed": s,
                            "epochs": e, "hp_base_lr": (0.02, 0.1)[p]} for t, (p, s, e, _) in rows.items()])
    steps = pd.DataFrame([{"results": "r", "trial": t, "variant": "sgd", "global_batch": 32, "step": step,
                           "epoch": step / 17, "elapsed_seconds": step / 10, "val_top1": v}
                          for t, (_, _, _, evals) in rows.items() for step, v in evals])
    return trials, steps


def test_a_longer_run_of_a_point_supersedes_its_shorter_run_of_the_same_seed():
    # --until-resolved ran p0 (2 epochs, a miss at 0.90) again with twice the epochs under its own id: that run
    # reached 0.95 at step 68. It is the point's run at a longer budget, not another seed of it: the short run's
    # miss (the target lies past its 34 steps) is superseded, and batch 32 reached the target at p0
    trials, steps = _runs({"b32-p0-s0": (0, 0, 2, [(17, 0.8), (34, 0.9)]),
                           "b32-p0-e4-s0": (0, 0, 4, [(17, 0.8), (34, 0.9), (51, 0.93), (68, 0.96)]),
                           "b32-p1-s0": (1, 0, 2, [(17, 0.5), (34, 0.6)])})
    outcomes = trial_outcomes(trials, steps, "val_top1", 0.95, True)
    assert sorted(outcomes["trial"]) == ["b32-p0-e4-s0", "b32-p1-s0"]
    optimum = optima_of(outcomes, 0.95, True).iloc[0]
    assert optimum["reached"] and optimum["trial"] == "b32-p0-e4-s0" and optimum["seeds_best"] == 1
    best = best_trials(trials, steps, "val_top1", 0.95, True).iloc[0]
    assert best["trial"] == "b32-p0-e4-s0" and best["steps_to_target"] == 68
    # another seed of the point is not superseded by seed 0's longer run: its miss still counts against p0
    trials, steps = _runs({"b32-p0-s0": (0, 0, 2, [(34, 0.9)]), "b32-p0-s1": (0, 1, 2, [(34, 0.91)]),
                           "b32-p0-e4-s0": (0, 0, 4, [(34, 0.9), (68, 0.96)])})
    outcomes = trial_outcomes(trials, steps, "val_top1", 0.95, True)
    assert sorted(outcomes["trial"]) == ["b32-p0-e4-s0", "b32-p0-s1"]
    assert not optima_of(outcomes, 0.95, True).iloc[0]["reached"]


INTERRUPTED = """name: interrupted
data: {data}
model: test_resnet
epochs: 3
trial: {{optimizer: sgd, lr_scaling: none, check_every: 1, device: cpu, eval_spacing: 0.2, target_metric: val_top1,
        target: 0.8, stop_at_target: true}}
grid: {{batch: [16, 32], gpus: [1], seeds: 2, search: {{base_lr: [0.1]}}}}
"""


def _stopped_victim(tiny_h5, tmp_path):
    """A real sweep, a copy of it without one seed at batch 16's best point (`gone`), and that seed (`victim`) run
    again and stopped (as by Ctrl-C or a preemption) before it reached the target: a checkpoint and some
    evaluations, no final status."""
    import shutil

    from tests.sweep.test_launch import lbscale

    spec = tmp_path / "interrupted.yaml"
    spec.write_text(INTERRUPTED.format(data=tiny_h5))
    results = tmp_path / "res"
    lbscale("sweep", spec, "--results", results, "--quiet")
    victim = results / "b16-g1-sgd-none-p0-s1"  # a seed at batch 16's best (only) point
    reached_at = json.loads((victim / "summary.json").read_text())["steps_to_target"]
    assert reached_at >= 4
    gone = tmp_path / "gone"  # the same study with the victim's folder deleted
    shutil.copytree(results, gone, ignore=lambda d, names: names if d == str(results / victim.name) else [])
    shutil.rmtree(gone / victim.name)
    for name in ("summary.json", "metrics.jsonl", "metrics.columns.json", "config.json", "checkpoint", "train.log"):
        path = victim / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    stopped = lbscale("train", "--config", victim / "trial.yaml", "--resume", "--quiet",
                      "--preempt-after-steps", reached_at // 2, check=False)
    assert stopped.returncode == 75, stopped.stdout + stopped.stderr
    return results, gone, victim


def test_an_unfinished_trial_is_left_out_of_the_optima_and_the_fit_and_the_verdict_says_so(tiny_h5, tmp_path):
    results, gone, victim = _stopped_victim(tiny_h5, tmp_path)
    study = load_results([results])
    assert study.trials.set_index("trial").loc[victim.name, "state"] == "interrupted"
    assert study.steps[study.steps["trial"] == victim.name]["val_top1"].notna().any()  # it has evaluations
    reports = {}
    for name, res in (("with", results), ("without", gone)):
        out, _ = write_report([res], ReportOptions(out=tmp_path / f"rep-{name}", formats=("md", "csv")))
        reports[name] = out
    for table in ("tuned-best", "tuned-fits"):  # every number as if the trial had never run
        with_, without = (pd.read_csv(reports[k] / "tables" / f"{table}.csv").drop(
            columns=["results", "unfinished"], errors="ignore") for k in ("with", "without"))
        pd.testing.assert_frame_equal(with_, without)
    verdict = _sections((reports["with"] / "report.md").read_text())[1]
    assert "2 of 2 batches reached val_top1 0.8" in verdict
    assert "1 unfinished trial left out (interrupted, still running or failed: no evidence either way)" in verdict


def test_the_rounds_line_says_interrupted_for_a_sweep_stopped_with_ctrl_c_and_running_while_one_runs(tiny_h5,
                                                                                                      tmp_path):
    import os
    import signal
    import subprocess
    import time

    from lbscale.sweep.lock import sweep_lock
    from tests.sweep.test_launch import LBSCALE, _env
    from tests.sweep.test_until_resolved import _spec

    results = tmp_path / "res"
    # SIGINT as a terminal leaves it: a test run in the background inherits it ignored (POSIX: an asynchronous
    # command of a non-interactive shell), and the sweep then never sees the Ctrl-C (test_failures.py does the same)
    p = subprocess.Popen([LBSCALE, "sweep", _spec(tmp_path, tiny_h5), "--results", results, "--until-resolved",
                          "--budget", "7", "--ratio", "1.5", "--quiet"], env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline, added = time.time() + 400, []
    while time.time() < deadline and p.poll() is None and not any((results / t / "run.json").exists()
                                                                  for t in added):
        time.sleep(0.1)  # until a trial of round 1 runs
        rounds = (json.loads((results / "rounds.json").read_text())["rounds"]
                  if (results / "rounds.json").exists() else [])
        added = [t["id"] for r in rounds[:1] for a in r["added"] for t in a["trials"]]
    assert added and p.poll() is None, "round 1 added no trial, or the sweep ended before one ran"
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C in a terminal: the sweep and its trial
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, out + err
    line = f"Rounds (--until-resolved): 1, {len(added)} trials added; "
    out, _ = write_report([results], ReportOptions(out=tmp_path / "stopped", formats=("md",)))
    verdict = _sections((out / "report.md").read_text())[1]
    assert line + "interrupted (the last round's trials are not all in, and no sweep runs them" in verdict
    assert "added; still running" not in verdict
    with sweep_lock(results):  # a live sweep holds the results directory: still running
        out, _ = write_report([results], ReportOptions(out=tmp_path / "live", formats=("md",)))
    assert line + "still running (the last round's trials are not all in)" in _sections(
        (out / "report.md").read_text())[1]


def test_a_failed_trial_is_left_out_of_the_optima_and_the_fit_as_an_unfinished_one_is(tiny_h5, tmp_path):
    """A trial that stopped on an error (a crash, a full disk) before the target says nothing of the steps it would
    have needed: before, it entered the fit as right-censored at its last evaluation."""
    from lbscale.results import write_failed_summary

    results, gone, victim = _stopped_victim(tiny_h5, tmp_path)
    write_failed_summary(victim, "RuntimeError: CUDA out of memory", exit_code=1)  # as the launcher records a crash
    study = load_results([results])
    assert study.trials.set_index("trial").loc[victim.name, "state"] == "failed"
    reports = {}
    for name, res in (("with", results), ("without", gone)):
        out, _ = write_report([res], ReportOptions(out=tmp_path / f"rep-{name}", formats=("md", "csv")))
        reports[name] = out
    for table in ("tuned-best", "tuned-fits"):
        with_, without = (pd.read_csv(reports[k] / "tables" / f"{table}.csv").drop(
            columns=["results", "unfinished"], errors="ignore") for k in ("with", "without"))
        pd.testing.assert_frame_equal(with_, without)
    verdict = _sections((reports["with"] / "report.md").read_text())[1]
    assert "1 unfinished trial left out (interrupted, still running or failed: no evidence either way)" in verdict
