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


def test_a_ratio_of_steps_read_between_evaluations_and_with_misses():
    """The schedule check's savings from the seeds that reached only: an arm with 1 of 3 seeds against a fixed
    batch with 3 of 3 printed a bare '37% fewer', and seeds that crossed at the same evaluation tied ('36 [36, 36]%
    fewer'). Each trial's steps lie between the evaluation before its crossing and the one that met it (high inf:
    it missed, at least the steps it ran)."""
    import math

    from scipy import stats

    from lbscale.analysis.schedule import bracketed_ratio, log_ratio_interval

    tied_a, tied_b = [(20, 24)] * 3, [(32, 38)] * 3
    point, lo, hi, kind = bracketed_ratio(tied_a, tied_b)
    # the point from the evaluations that met the target (24 over 38); the ends as far as the brackets go: 20 / 38
    # and 24 / 32, each a Welch interval of identical values (no spread: the bracket alone)
    assert kind == "interval" and point == pytest.approx(24 / 38)
    assert (lo, hi) == (pytest.approx(20 / 38), pytest.approx(24 / 32))
    a, b = [(20, 24), (24, 28), (28, 33)], [(32, 38), (38, 44), (32, 38)]
    point, lo, hi, kind = bracketed_ratio(a, b)
    assert lo == pytest.approx(log_ratio_interval([20, 24, 28], [38, 44, 38])[1])
    assert hi == pytest.approx(log_ratio_interval([24, 28, 33], [32, 38, 32])[2])
    assert point == pytest.approx(stats.gmean([24, 28, 33]) / stats.gmean([38, 44, 38]))
    # a miss of the arm (at least 60 steps): it may need any number more, so no upper end, and no point
    missed = [(20, 24), (60, math.inf), (60, math.inf)]
    point, lo, hi, kind = bracketed_ratio(missed, b)
    assert point is None and hi == math.inf and kind == "lower"
    assert lo == pytest.approx(log_ratio_interval([20, 60, 60], [38, 44, 38])[1])
    # a miss of the fixed batch: no lower end
    assert bracketed_ratio(a, [(32, 38), (50, math.inf)])[3] == "upper"
    # a crossing at the first evaluation (nothing before it): its steps may be any fewer
    assert bracketed_ratio([(0, 24), (20, 24)], b)[1] == 0.0
    assert bracketed_ratio([(60, math.inf)], [(50, math.inf)])[3] == "none"
