"""The batch schedule derived from the local critical batch over training, and McCandlish's cost of a fraction:
hand-made checkpoints with the schedule worked out by hand, the closed form at points computed by hand."""

import math

import pytest

from lbscale.analysis.schedule import Checkpoint, cost_at_fraction, derive, log_ratio_interval, schedule_text


def test_the_batch_follows_the_lower_end_in_doublings_and_never_shrinks():
    cps = [Checkpoint("a", 1000, 64.0, 128.0, "interval"),     # 64 / 32 -> 64
           Checkpoint("b", 4000, 256.0, math.inf, "lower"),    # 256 -> 256
           Checkpoint("c", 9000, 128.0, 256.0, "interval")]    # lower than now: stays 256
    switches, notes = derive(cps, first=32, fraction=1.0, largest=512)
    assert [(s.samples, s.batch) for s in switches] == [(0, 32), (1000, 64), (4000, 256)]
    assert "[64, 128]" in switches[1].reason and "> 256" in switches[2].reason
    assert any("checkpoint c" in n and "stays 256" in n for n in notes)
    assert "not extrapolated" in notes[-1] and "9,000" in notes[-1]
    assert schedule_text(switches, {32: 0.02, 64: 0.03, 256: 0.06}) == "32@0:0.02,64@1000:0.03,256@4000:0.06"
    assert schedule_text(switches) == "32@0,64@1000,256@4000"


def test_a_fraction_keeps_the_batch_under_the_critical_batch():
    cps = [Checkpoint("a", 1000, 256.0, 512.0, "interval")]
    assert [s.batch for s in derive(cps, 32, 0.5, 4096)[0]] == [32, 128]   # 0.5 x 256 = 128
    assert [s.batch for s in derive(cps, 32, 0.4, 4096)[0]] == [32, 64]    # 0.4 x 256 = 102: 64
    assert [s.batch for s in derive(cps, 48, 1.0, 4096)[0]] == [48, 192]   # doublings of the first: 96, 192 (384>256)


def test_unresolved_and_upper_bounds_hold_the_batch_and_the_largest_measured_caps_it():
    cps = [Checkpoint("a", 500, None, None, "none"), Checkpoint("b", 800, 0.0, 64.0, "upper"),
           Checkpoint("c", 2000, 2048.0, math.inf, "lower")]
    switches, notes = derive(cps, 32, 1.0, 256)
    assert [(s.samples, s.batch) for s in switches] == [(0, 32), (2000, 256)]
    assert "capped at the study's largest batch 256" in switches[1].reason
    assert "not resolved" in notes[0] and "< 64" in notes[1]


def test_bad_arguments():
    with pytest.raises(ValueError):
        derive([], 64, 1.0, 32)
    with pytest.raises(ValueError):
        derive([], 32, 1.5, 64)


def test_mccandlish_cost_of_a_fraction():
    # (S/S_min - 1)(E/E_min - 1) = 1 and B = E / S in units of B_crit = E_min / S_min: at B = f B_crit,
    # S/S_min = 1 + 1/f and E/E_min = 1 + f, by hand at three points
    assert cost_at_fraction(1.0) == (2.0, 2.0)
    assert cost_at_fraction(0.5) == (3.0, 1.5)
    s, e = cost_at_fraction(0.25)
    assert (s, e) == (5.0, 1.25) and math.isclose((s - 1) * (e - 1), 1.0)


def test_the_ratio_interval_against_a_hand_computed_welch():
    a, b = [100.0, 110.0, 121.0], [200.0, 200.0, 220.0]
    ratio, lo, hi = log_ratio_interval(a, b, 0.9)
    la = [math.log(x) for x in a]
    lb = [math.log(x) for x in b]
    ma, mb = sum(la) / 3, sum(lb) / 3
    va = sum((x - ma) ** 2 for x in la) / 2 / 3
    vb = sum((x - mb) ** 2 for x in lb) / 2 / 3
    dof = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    from scipy import stats
    half = stats.t.ppf(0.95, dof) * math.sqrt(va + vb)
    assert math.isclose(ratio, math.exp(ma - mb))
    assert math.isclose(lo, math.exp(ma - mb - half)) and math.isclose(hi, math.exp(ma - mb + half))
    assert log_ratio_interval([1.0], [2.0, 3.0])[1:] == (0.0, math.inf)
