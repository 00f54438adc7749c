"""The local critical batch rule (Merrill et al. 2025) on hand-made losses."""

import math

from lbscale.analysis.critical import local_critical_batch


def test_largest_batch_within_tolerance_of_the_smaller_ones():
    # 64 and 128 match 32 within 0.02; 256 is 0.05 worse than the best smaller loss (1.00 at 128)
    assert local_critical_batch({32: 1.01, 64: 1.02, 128: 1.00, 256: 1.05, 512: 1.30}, 0.02)[0] == 128
    # a looser tolerance lets 256 in, not 512
    assert local_critical_batch({32: 1.01, 64: 1.02, 128: 1.00, 256: 1.05, 512: 1.30}, 0.06)[0] == 256


def test_every_factor_within_is_a_lower_bound_and_none_without_losses():
    batch, why = local_critical_batch({32: 1.0, 64: 1.0, 128: 0.99}, 0.01)
    assert batch == 128 and "at least 128" in why
    assert local_critical_batch({}, 0.01)[0] is None
    assert local_critical_batch({32: math.nan, 64: math.inf}, 0.01)[0] is None


def test_a_diverged_branch_is_never_within():
    assert local_critical_batch({32: 1.0, 64: math.nan, 128: 1.0}, 0.01)[0] == 128  # 128 matches 32 again
    assert local_critical_batch({32: 1.0, 64: 1.0, 128: math.inf}, 0.01)[0] == 64


def test_moving_average_by_hand():
    from lbscale.analysis.critical import ema_update

    state = [0.0, 0.0, 32]
    for v in (1.0, 2.0):
        state = ema_update(state, v, 0.5)
    # weights (1 - d) d^(n - 1 - i): 0.25 and 0.5; bias-corrected: (0.25 x 1 + 0.5 x 2) / 0.75
    assert math.isclose(state[0] / state[1], 1.25 / 0.75) and state[2] == 32
    assert ema_update([0.0, 0.0, 1], 3.0, 0.9)[0] / ema_update([0.0, 0.0, 1], 3.0, 0.9)[1] == 3.0


def test_the_k1_branch_is_the_baseline_and_required():
    # the k = 1 branch (the parent's own continuation, batch 32) failed: the smallest surviving factor silently
    # became the baseline and 128 was called critical; now no answer, and why
    batch, why = local_critical_batch({32: math.nan, 64: 1.00, 128: 1.005}, 0.01, base=32)
    assert batch is None and "k = 1 branch (batch 32) has no loss" in why
    batch, why = local_critical_batch({64: 1.00, 128: 1.005}, 0.01, base=32)
    assert batch is None and "k = 1 branch (batch 32)" in why
    assert local_critical_batch({32: 1.0, 64: 1.005, 128: 1.2}, 0.01, base=32)[0] == 64
