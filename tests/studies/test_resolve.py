"""What the rounds' decisions read from a study (studies.resolve.states), on a hand-made outcomes frame: each batch's
points by LR, the best one where the target was reached, and where it was not, the point that came closest in a
trial that ran its whole budget."""

import pandas as pd

from lbscale.studies.resolve import states


def test_batch_states_by_hand():
    rows = [  # batch 64 reached (p1 best: fewer steps); batch 128 never did: p0 ran its budget, p1 was pruned
        ("b64-p0-s0", 64, 0.01, "completed", True, 300, 0.81), ("b64-p1-s0", 64, 0.1, "completed", True, 120, 0.82),
        ("b64-p1-s1", 64, 0.1, "completed", True, 130, 0.81),
        ("b128-p0-s0", 128, 0.01, "completed", False, None, 0.74),
        ("b128-p1-s0", 128, 0.1, "pruned", False, None, 0.78)]
    o = pd.DataFrame(rows, columns=["trial", "global_batch", "peak_lr", "state", "reached", "steps_to_target",
                                    "best_value"]).assign(variant="sgd", results="r", point=[0, 1, 1, 0, 1])
    s = {x.batch: x for x in states(o, 0.8, True)}
    assert [p.key for p in s[64].points] == ["b64-p0", "b64-p1"] and [p.seeds for p in s[64].points] == [1, 2]
    assert (s[64].reached, s[64].best, s[64].short) == (True, 1, None)
    # the pruned p1 came closer (0.78) but did not run its budget: p0's trial is what a longer budget would extend
    assert (s[128].reached, s[128].best, s[128].short) == (False, None, "b128-p0-s0")


def _batch32(rows):
    """Batch 32's outcomes from (trial, point, seed, state, reached, steps, best value)."""
    o = pd.DataFrame(rows, columns=["trial", "point", "seed", "state", "reached", "steps_to_target", "best_value"])
    return o.assign(global_batch=32, peak_lr=o["point"].map({0: 0.02, 1: 0.1}), variant="sgd", results="r")


def test_a_batch_that_missed_names_the_trial_a_longer_budget_extends():
    # point 0's seed 0 missed at 2 epochs and reached the target at 4 (the longer run supersedes it: not in the
    # outcomes); its seed 1 missed at 2 epochs: that trial, not seed 0 once more, is the one to run twice as long
    o = _batch32([("b32-p0-e4-s0", 0, 0, "completed", True, 68, 0.96),
                  ("b32-p0-s1", 0, 1, "completed", False, None, 0.93),
                  ("b32-p1-s0", 1, 0, "completed", False, None, 0.60)])
    (s,) = states(o, 0.95, True)
    assert (s.reached, s.best, s.short) == (False, None, "b32-p0-s1")
    # the longer run missed too: it is the one extended (the sweep runs it with twice its epochs again)
    o = _batch32([("b32-p0-e4-s0", 0, 0, "completed", False, None, 0.94),
                  ("b32-p1-s0", 1, 0, "completed", False, None, 0.60)])
    assert states(o, 0.95, True)[0].short == "b32-p0-e4-s0"
