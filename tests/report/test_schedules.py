"""The batch-schedule table: each arm beside the fixed-batch controls of its variant at its first and last batch,
steps saved by hand."""

from types import SimpleNamespace

import pandas as pd

from lbscale.report.schedules import schedule_table


def _trial(name, variant, batch, schedule, steps, final):
    seconds = None if steps is None else steps / 10
    return ({"trial": name, "variant": variant, "global_batch": batch, "batch_schedule": schedule,
             "final_val_top1": final}, {"trial": name, "steps": steps, "seconds": seconds})


def test_arm_beside_its_controls_with_the_steps_saved():
    rows = [_trial("a0", "sgd-grow", 32, "32@0,128@512", 28, 0.97),
            _trial("a1", "sgd-grow", 32, "32@0,128@512", 32, 0.98),
            _trial("s0", "sgd", 32, None, 38, 0.99), _trial("s1", "sgd", 32, None, 42, 0.97),
            _trial("l0", "sgd", 128, None, 36, 0.97), _trial("l1", "sgd", 128, None, None, 0.95),
            _trial("o0", "sgd", 64, None, 50, 0.98)]  # a control at another batch: not beside the arm
    study = SimpleNamespace(trials=pd.DataFrame([r[0] for r in rows]))
    t = schedule_table(study, "val_top1", 0.97, pd.DataFrame([r[1] for r in rows]))
    d = t.display
    assert list(d["Arm"]) == ["sgd-grow", "sgd (control at 32)", "sgd (control at 128)"]
    assert list(d["Reached"]) == ["2 of 2", "2 of 2", "1 of 2"]
    assert list(d["Arm's steps saved"]) == ["-", "25%", "17%"]  # 1 - 30 / 40, 1 - 30 / 36
    assert d["Final val_top1"].iloc[2].startswith("0.960 ± ")
    assert t.tidy["steps_saved"].iloc[1] == 0.25


def test_no_arm_no_table():
    study = SimpleNamespace(trials=pd.DataFrame([{"trial": "s0", "variant": "sgd", "global_batch": 32,
                                                  "batch_schedule": None}]))
    assert schedule_table(study, "val_top1", 0.9, pd.DataFrame([{"trial": "s0", "steps": 3, "seconds": 1}])) is None
