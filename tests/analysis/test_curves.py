"""Reading a pilot's curves (analysis/curves.py) against hand-computed cases."""

import pytest

from lbscale.analysis import curves


def test_b_crit_from_two_batches_inverts_mccandlish_samples():
    # E(B) = 1000 (1 + B / 100): E(64) = 1640, E(256) = 3560 -> B_crit = 100 exactly
    assert curves.b_crit_from_two(64, 1640.0, 256, 3560.0) == ("value", pytest.approx(100.0))
    # no more samples at the larger batch: perfect scaling up to it
    assert curves.b_crit_from_two(64, 1000.0, 256, 990.0) == ("above", 256.0)
    # samples grow with the batch 1:1 (same steps): no saving, B_crit below the smaller batch
    assert curves.b_crit_from_two(64, 1000.0, 256, 4000.0) == ("below", 64.0)


def test_samples_at_follows_the_curve():
    # E(B) = E_min (1 + B / Bc), Bc = 128: E(32) = 1.25 E_min, E(512) = 5 E_min
    assert curves.samples_at(512, 32, 1250.0, 128.0) == pytest.approx(5000.0)


def test_samples_to_a_target_is_the_first_evaluation_at_or_past_it():
    curve = [(100, 0.3), (200, 0.55), (300, 0.5), (400, 0.7)]
    assert curves.samples_to(curve, 0.55) == 200
    assert curves.samples_to(curve, 0.6) == 400
    assert curves.samples_to(curve, 0.9) is None


def test_the_plateau_is_the_best_running_mean_and_says_whether_it_still_rises():
    flat = [0.2, 0.5, 0.7, 0.8, 0.81, 0.80, 0.81, 0.80]
    p = curves.plateau(flat, 1000)
    assert p.level == pytest.approx((0.81 + 0.80 + 0.81) / 3)
    assert not p.rising
    # last quarter 0.78, 0.80 against 0.70, 0.72 on 1000 examples: a gain of 0.08, SE of the difference ~0.014
    rising = [0.3, 0.5, 0.6, 0.65, 0.70, 0.72, 0.78, 0.80]
    assert curves.plateau(rising, 1000).rising
    # the same gain measured on 20 examples is within the noise (SE ~0.1)
    assert not curves.plateau(rising, 20).rising


def test_the_ranking_settles_where_the_final_best_leads_beyond_noise_from_then_on():
    # on 1000 examples at ~0.5 a difference has SE ~0.022; 2 SE ~0.045
    a = [(100, 0.30), (200, 0.50), (300, 0.60), (400, 0.70)]
    b = [(100, 0.32), (200, 0.48), (300, 0.50), (400, 0.55)]
    c = [(100, 0.31), (200, 0.40), (300, 0.45), (400, 0.50)]
    assert curves.settled_samples([a, b, c], 1000) == 300
    # a lead that comes and goes: settled only from its last return
    d = [(100, 0.30), (200, 0.60), (300, 0.50), (400, 0.70)]
    e = [(100, 0.30), (200, 0.45), (300, 0.49), (400, 0.50)]
    assert curves.settled_samples([d, e], 1000) == 400
    # within the noise at every point: never settles
    f = [(100, 0.30), (200, 0.40)]
    g = [(100, 0.31), (200, 0.39)]
    assert curves.settled_samples([f, g], 1000) is None


def test_the_batch_range_brackets_the_guess_within_the_limits():
    # B_crit 100: from 16 (a quarter, rounded down to a power of two... 25 -> 16) up four doublings to 256
    assert curves.batch_range(("value", 100.0), 8, 1024) == (16, 256)
    # a guess past the largest batch the budget pays for: the top five doublings below it
    assert curves.batch_range(("above", 256.0), 8, 512) == (32, 512)
    # a guess below the smallest batch: from the smallest
    assert curves.batch_range(("below", 16.0), 8, 1024) == (8, 128)
    # a narrow window keeps what fits
    assert curves.batch_range(("value", 100.0), 16, 64) == (16, 64)


def test_target_sits_at_its_fraction_between_chance_and_plateau():
    assert curves.target_value(0.1, 0.9, 0.7) == pytest.approx(0.66)
    assert curves.target_value(0.1, 0.85, 0.9) == pytest.approx(0.775)
    assert curves.target_value(0.1, 0.8512, 0.9) == pytest.approx(0.777)  # 0.77608 rounded up
    assert curves.binomial_se(0.5, 100) == pytest.approx(0.05)


def test_a_range_the_budget_cannot_pay_for_loses_its_top_batch_unless_the_top_must_stay_past_the_guess():
    assert curves.trimmed(16, 256, ("value", 50.0)) == (16, 128)  # 128 is still a doubling past 50
    assert curves.trimmed(16, 256, ("value", 75.0)) == (32, 256)  # 128 would be < 2 x 75: the smallest goes
    assert curves.trimmed(16, 256, ("above", 256.0)) == (16, 128)  # no value to stay past


def test_where_a_subset_comes_near_the_target_is_read_between_the_pilots_evaluations():
    # the pilot evaluates every 1,500 samples; at 250 images the binomial SE at 0.78 is 0.0262, so the subset comes
    # within 2 SE from 0.7276 on: between 3,000 (0.70) and 4,500 (0.75), at 3,000 + 1,500 x 0.0276 / 0.05 = 3,829;
    # the target between 4,500 (0.75) and 6,000 (0.79), at 5,625: 0.681. Read at the evaluations alone it was
    # 4,500 / 6,000 = 0.75; make demo-real of 2026-12-06 read 1.0 (its curve passed both between two evaluations)
    # and had its whole split checked 2 - 3 times a trial where the designer counted one
    curve = [(1500, 0.60), (3000, 0.70), (4500, 0.75), (6000, 0.79)]
    se = (0.78 * 0.22 / 250) ** 0.5
    near, at = 3000 + 1500 * (0.78 - 2 * se - 0.70) / 0.05, 4500 + 1500 * 0.03 / 0.04
    assert curves.near_fraction(curve, 0.78, 250, 2.0) == pytest.approx(near / at)
    # both between the same two evaluations: still apart
    jump = [(1500, 0.60), (3000, 0.70), (4500, 0.80)]
    assert curves.near_fraction(jump, 0.78, 250, 2.0) == pytest.approx(
        (3000 + 1500 * (0.78 - 2 * se - 0.70) / 0.10) / (3000 + 1500 * 0.08 / 0.10))
    # reached at the first evaluation: nothing before it to read between
    assert curves.near_fraction([(1500, 0.80)], 0.78, 250, 2.0) == 1.0
    assert curves.near_fraction(curve, 0.95, 250, 2.0) == 1.0  # never reached
