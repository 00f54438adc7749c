"""Three estimates of the critical batch side by side: the branch study's local critical batch at the target's
point with the interval its factor grid gives (hand-made tables), and the report's table and figure on a tuned
study with a noise scale measured at the target (its interval carried through) and a branch study."""

import json
import math

import pandas as pd
import pytest

from lbscale.report.branch_study import local_at
from tests.report.make_tuned import make_tuned_study


def _branches(rows):
    """A branch table as lbscale branch writes it: per (checkpoint, batch) with the checkpoint's answer."""
    out = []
    for cp, step, batches, critical, why in rows:
        out += [{"parent": "p", "checkpoint": cp, "samples": step * 32, "parent_step": step, "batch": b,
                 "critical_batch": critical, "why": why} for b in batches]
    return pd.DataFrame(out)


KEPT = "the largest batch within 0.01 of the smaller batches' best loss"


def test_the_checkpoint_nearest_the_target_and_its_bracket():
    t = _branches([("s100", 100, [32, 64, 128, 256], 64, KEPT), ("s400", 400, [32, 64, 128, 256], 128, KEPT)])
    at = local_at(t, 330)  # 400 is nearer than 100
    assert (at["checkpoint"], at["value"], at["lo"], at["hi"], at["kind"]) == ("s400", 128, 128, 256, "interval")
    assert local_at(t, 120)["checkpoint"] == "s100"
    assert local_at(t, None)["checkpoint"] == "s400"  # unknown step: the last checkpoint


def test_open_ends_where_the_grid_leaves_them_open():
    every = _branches([("s", 10, [32, 64, 128], 128, "every factor within 0.01: the critical batch is at least 128")])
    at = local_at(every, 10)
    assert (at["kind"], at["lo"], at["hi"]) == ("lower", 128, math.inf)
    only = _branches([("s", 10, [32, 64, 128], 32, KEPT)])  # only the parent's own batch kept up
    at = local_at(only, 10)
    assert (at["kind"], at["lo"], at["hi"]) == ("upper", 0.0, 64)
    none = _branches([("s", 10, [32, 64], float("nan"), "no branch has a loss")])
    assert local_at(none, 10) is None


@pytest.fixture
def study_with_both(tmp_path):
    """make_tuned_study (B_crit 256 by construction, batches 64..2048) with a noise scale measured at the
    target of each best trial and a branch study of the batch-512 winner kept in the results."""
    from lbscale.report import load_results, tuned

    results = make_tuned_study(tmp_path / "tuned", batches=(64, 128, 256, 512, 1024, 2048), prune=(),
                               pending=False)
    study = load_results([results])
    best = tuned.best_trials(study.trials, study.steps, "val_top1", 0.9, True)
    for _, r in best.iterrows():
        (results / r["trial"] / "gns.json").write_text(json.dumps(
            {"source": "target", "b_simple": 2.0 * r["global_batch"], "b_simple_lo": 1.5 * r["global_batch"],
             "b_simple_hi": 3.0 * r["global_batch"], "step": int(r["steps_to_target"])}))
    parent = best.loc[best["global_batch"] == 512, "trial"].iloc[0]
    folder = results / f"{parent}-branches"
    folder.mkdir()
    t = _branches([("s300", 300, [512, 1024, 2048, 4096], 1024, KEPT)]).assign(parent=parent)
    t.to_csv(folder / "critical-batch.csv", index=False)
    return results


def test_the_report_sets_the_three_side_by_side(study_with_both, tmp_path, run_cli):
    rc, out, err = run_cli("report", study_with_both, "--out", tmp_path / "rep", "--format", "md,csv")
    assert rc == 0, err
    tidy = pd.read_csv(tmp_path / "rep" / "tables" / "critical-batch-estimates.csv")
    assert list(tidy["estimate"]) == ["tuned", "gns", "branch"]
    gns = tidy[tidy["estimate"] == "gns"].iloc[0]
    tuned_row = tidy[tidy["estimate"] == "tuned"].iloc[0]
    # B_simple taken at the batch nearest the tuned B_crit: 2 B there (B_simple = 2 B by construction)
    assert tuned_row["interval"] == "interval"
    nearest = min((64, 128, 256, 512, 1024, 2048), key=lambda b: abs(math.log(b / tuned_row["value"])))
    assert (gns["value"], gns["lo"], gns["hi"]) == (2.0 * nearest, 1.5 * nearest, 3.0 * nearest)
    branch = tidy[tidy["estimate"] == "branch"].iloc[0]
    assert (branch["value"], branch["lo"], branch["hi"]) == (1024, 1024, 2048)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Three estimates of the critical batch" in md and "1024 [1024, 2048]" in md
    assert (tmp_path / "rep" / "figures" / "critical-batch-estimates.png").stat().st_size > 5000


def test_no_section_with_only_the_tuned_estimate(tmp_path, run_cli):
    results = make_tuned_study(tmp_path / "tuned", pending=False)
    rc, _, err = run_cli("report", results, "--out", tmp_path / "rep", "--format", "md,csv")
    assert rc == 0, err
    assert (tmp_path / "rep" / "tables").is_dir()
    assert not (tmp_path / "rep" / "tables" / "critical-batch-estimates.csv").exists()
