"""`lbscale schedule`: bad input is one line and exit 2 before anything trains (the derivation's arithmetic is
tests/analysis/test_schedule.py's; the whole path runs in `make schedule-demo` / `make schedule-real`)."""

import pytest


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    from tests.report.make_tuned import make_tuned_study

    return make_tuned_study(tmp_path_factory.mktemp("schedule") / "tuned", pending=False)


@pytest.mark.parametrize("args, message", [
    (["--batch", "300"], "--batch 300: no trial of .* at that batch reached the target \\(reached at 256, 512"),
    (["--batch", "256", "--fraction", "0"], "--fraction: 0 is not a finite number > 0"),
    (["--batch", "256", "--fraction", "1.5"], "--fraction: 1.5 is not a finite number > 0 and <= 1"),
    (["--batch", "256", "--repeats", "0"], "--repeats 0: at least 1"),
    (["--batch", "256", "--no-measure", "--factors", "1,2,4,8"],
     "schedule-b256: the reference run is not there yet .*without --no-measure"),
    (["--batch", "256"], "--factors: batch 4,096 \\(factor 16 of --batch 256\\) has no tuned LR in .* leave the "
                         "factor out"),
    (["--batch", "256", "--factors", "1,2", "--out", "."], "--out \\.: a directory; give the spec's file name"),
    (["--batch", "256", "--variant", "lamb"], "--variant lamb: .* has sgd-none"),
])
def test_bad_input_is_one_line_and_trains_nothing(tuned, run_cli, args, message):
    import re

    rc, out, err = run_cli("schedule", tuned, *args)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert not (tuned / "schedule-b256" / "reference").exists()


def test_branches_measured_with_other_options_are_refused_in_one_line(tmp_path, run_cli):
    import json

    from lbscale.studies.schedule import ScheduleOptions, branches_of
    from tests.report.make_tuned import make_tuned_study

    results = make_tuned_study(tmp_path / "tuned", pending=False)
    branches = branches_of(results, ScheduleOptions(batch=256))
    branches.mkdir(parents=True)
    (branches / "schedule-options.json").write_text(json.dumps({"factors": "1,2,4,8", "window": "1ep",
                                                                 "tolerance": 0.01, "repeats": 3}))
    rc, _, err = run_cli("schedule", results, "--batch", "256", "--factors", "1,2,4,8", "--repeats", "5",
                         "--no-measure")
    assert rc == 2 and "measured with --repeats 3, asked 5" in err and len(err.strip().splitlines()) == 1


def test_a_results_folder_that_is_not_a_tuned_study(tmp_path, run_cli):
    from tests.fixtures.make_results import make_study

    plain = make_study(tmp_path / "plain", batches=(8192, 16384), seeds=1)
    rc, _, err = run_cli("schedule", plain, "--batch", "8192")
    assert rc == 2 and "not a tuned study" in err and len(err.strip().splitlines()) == 1


def _table(rows):
    import pandas as pd

    return pd.DataFrame([{"method": "local critical batch", "label": lab, "samples": n, "value": v, "lo": lo,
                          "hi": hi, "kind": k, "rests_on": ""} for lab, n, v, lo, hi, k in rows])


def test_the_plan_takes_each_batchs_tuned_lr_the_fewest_steps_and_says_when_a_switch_comes_too_late():
    import math

    import pandas as pd

    from lbscale.analysis.schedule import plan

    best = pd.DataFrame({"global_batch": [32, 64, 128, 256], "peak_lr": [0.01, 0.015, 0.02, 0.03],
                         "base_lr": [0.014, 0.015, 0.014, 0.015], "steps_to_target": [400, 220, 130, 140]})
    table = _table([("50st", 1600, 64.0, 64.0, 128.0, "interval"), ("target", 12800, 256.0, 256.0, math.inf,
                                                                    "lower")])
    switches, notes, fewest, lrs = plan(table, best, 32, 1.0)
    assert [(s.samples, s.batch) for s in switches] == [(0, 32), (1600, 64), (12800, 256)]
    assert fewest == 128 and lrs == {32: 0.01, 64: 0.015, 128: 0.02, 256: 0.03}
    assert any("the switch to 256 at 12,800 samples is where the reference reached the target" in n for n in notes)


def test_a_doubling_the_sweep_never_tuned_is_one_line():
    import math

    import pandas as pd

    from lbscale.errors import LbscaleError
    from lbscale.analysis.schedule import plan

    best = pd.DataFrame({"global_batch": [48, 128, 384], "peak_lr": [0.01, 0.02, 0.03], "base_lr": [0.01] * 3,
                         "steps_to_target": [300, 200, 150]})  # 48's doublings 96, 192, 384: 96 and 192 not tuned
    table = _table([("a", 1000, 256.0, 256.0, math.inf, "lower")])
    with pytest.raises(LbscaleError, match="reaches batch 192, where the sweep tuned no LR"):
        plan(table, best, 48, 1.0)


def test_one_check_folder_per_derivation():
    from pathlib import Path

    from lbscale.studies.schedule import ScheduleOptions, check_results

    r = Path("results/fm")
    assert check_results(r, ScheduleOptions(batch=32)) == Path("results/fm-schedule-b32")
    other = ScheduleOptions(batch=32, fraction=0.5, rule="sqrt")
    assert check_results(r, other) == Path("results/fm-schedule-b32-f0.5-sqrt")
