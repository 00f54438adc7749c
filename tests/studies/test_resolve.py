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
    # the pruned p1 came closer (0.78) but did not run its budget: p0's is what a longer budget would extend
    assert (s[128].reached, s[128].best, s[128].short) == (False, None, "b128-p0")
