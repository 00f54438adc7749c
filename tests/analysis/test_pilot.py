"""The pilot's own shape (analysis/pilot.py) and its prices (analysis/pricing.py), against values by hand."""

import pytest

from lbscale.analysis import pilot as p
from lbscale.analysis.pricing import Costs, per_sample_at


def record(**kw) -> p.PilotRecord:
    return p.PilotRecord({"data": "d.h5"}, 64, 256, 0.05, kw.pop("epochs", 3), 4, p.Timing(0.04, 0.4, 2000, 5.0),
                         "here", **kw)


def test_the_pilot_trains_on_where_it_has_time_left_past_the_largest_stage():
    # three middle trials took 90 s (30 s each, 5 s of it the start-up: 25 s for 3 epochs); a 30-minute budget's
    # pilot has 180 s; the largest stage's three trials at 3 epochs are set aside (90 s) and a start-up (5 s)
    for spent, epochs in ((60.0, 6), (75.0, 4), (80.0, 0), (100.0, 0)):  # 25 s left: 3 more; 10 s: 1; 5 s: none
        assert p.long_epochs(record(seconds=spent, stage_seconds={"mid": 90.0}), 3, 1800) == epochs


def test_the_largest_stage_gets_what_the_pilot_has_left_and_no_more():
    """The largest stage took the middle stage's epochs even where the pilot had spent its limit (limit 180 s, 700 s
    spent: still 4 epochs x 3 trials). Now it gets what is left, at the middle stage's pace per epoch."""
    mid = {"mid": 90.0}  # three trials of 30 s, 5 s of it the start-up: 25 / 3 s an epoch
    # 180 - 60 = 120 s left: 40 s a trial, 35 s past its start-up: 4 epochs, three LRs
    assert p.largest_stage(record(seconds=60.0, stage_seconds=mid), 3, 1800) == (3, 4)
    # 180 - 140 = 40 s: three LRs would get 1 epoch; one LR 35 s past its start-up: 4 epochs
    assert p.largest_stage(record(seconds=140.0, stage_seconds=mid), 3, 1800) == (1, 4)
    # 180 - 115 = 65 s: three LRs 2 epochs (16.7 s past the start-up), fewer than the middle stage's 3; one LR 7
    # (the largest batch needs the most samples to the target: the epochs first)
    assert p.largest_stage(record(seconds=115.0, stage_seconds=mid), 3, 1800) == (1, 7)
    # 10 s left, or the limit long spent: dropped
    assert p.largest_stage(record(seconds=170.0, stage_seconds=mid), 3, 1800) == (0, 0)
    assert p.largest_stage(record(seconds=700.0, epochs=4, stage_seconds=mid), 3, 1800) == (0, 0)
    # plenty of time: at most MAX_PILOT_EPOCHS
    assert p.largest_stage(record(seconds=60.0, stage_seconds=mid), 3, 36000) == (3, p.MAX_PILOT_EPOCHS)


def test_the_pilots_epochs_fit_its_share_or_none_below_two():
    facts = p.DataFacts(3000, 500, 10, "multiclass", "val_top1", 0.1)
    t = p.Timing(0.02, 0.1, 500, 2.0)
    # an epoch at batch 64: 46.875 steps x 0.02 s = 0.9375 s; a whole-split evaluation 0.1 s: 4 an epoch cost
    # half its training, and with the epoch's end 0.5 s: 1.4375 s an epoch, priced 1.3x (a trial's epoch against
    # the timing run's steady pace): 1.86875 s; 7 trials in 180 s: 25.7 s each, 23.7 s past the start-up: 12
    assert p.pilot_evals(t, facts, 64) == 4 and p.pilot_epochs(t, facts, 64, 180.0) == 12
    assert p.pilot_epochs(t, facts, 64, 7 * (2.0 + 5.5 * 1.86875)) == 5
    assert p.pilot_epochs(t, facts, 64, 7 * (2.0 + 1.9 * 1.86875)) is None
    assert p.pilot_seconds_needed(t, facts, 64, 10.0) == pytest.approx(7 * (2.0 + 2 * 1.86875) + 10.0)


def test_the_pilot_counts_its_seconds_in_one_place_and_its_record_reads_back():
    r = record()
    r.spend(12.34)
    r.spend(20.0, "mid")
    r.spend(5.0, "mid")
    assert r.seconds == pytest.approx(37.3) and r.stage_seconds == {"mid": 25.0}
    again = p.PilotRecord.from_json(r.to_json())
    assert again == r and r.to_json()["mid_seconds"] == 25.0
    old = {k: v for k, v in r.to_json().items() if k != "small"}  # kept from before the smallest batch was timed
    assert not p.PilotRecord.from_json(old).small_timed


def test_the_prices_take_each_stages_median_pace_and_the_smallest_batchs_timing():
    c = p.costs(record(small={"batch": 8, "step_seconds": 0.016}), {64: [1000.0, 2000.0, 1500.0], 256: [4000.0]})
    assert c.per_sample == pytest.approx({64: 1 / 1500, 256: 1 / 4000, 8: 0.002})
    assert c.per_eval_example == pytest.approx(0.4 / 2000) and c.startup == 5.0


def test_a_steps_price_runs_through_every_batch_the_pilot_timed():
    # the pilot's trials ran 0.0006 s a sample at batches 64 and 256 (no fixed cost between them) and 0.002 at
    # batch 8 (16 ms a step): a step's seconds run straight between the timed batches: at 16, 16 ms + 8 / 56 of
    # the way to 64's 38.4 ms = 19.2 ms, 0.0012 s a sample; at 128, 0.0006 a sample
    costs = Costs({8: 0.002, 64: 0.0006, 256: 0.0006}, 0.0, 0.0)
    assert per_sample_at(costs, 8) == pytest.approx(0.002)
    assert per_sample_at(costs, 16) == pytest.approx(0.0192 / 16)
    assert per_sample_at(costs, 32) == pytest.approx((0.016 + 0.0224 * 24 / 56) / 32)
    assert per_sample_at(costs, 128) == pytest.approx(0.0006)
    # outside the timed batches the nearest two's line goes on where it has a fixed cost (8 to 64: 12.8 ms + 0.4 ms
    # a sample; at 4, 14.4 ms a step), else a sample costs what it cost at the nearest (64 to 256 have none)
    assert per_sample_at(costs, 4) == pytest.approx(0.0144 / 4) and per_sample_at(costs, 1024) == pytest.approx(0.0006)
    two = Costs({64: (0.01 + 64e-4) / 64, 256: (0.01 + 256e-4) / 256}, 0.0, 0.0)
    assert per_sample_at(two, 128) == pytest.approx((0.01 + 128e-4) / 128)


def test_chance_is_what_a_constant_predictor_scores_on_the_split():
    import numpy as np

    # two classes, 90% class 0: predicting 0 for every image scores 0.9, not 1 / 2
    skewed = np.array([0] * 90 + [1] * 10)
    assert p.chance_level("multiclass", "val_top1", skewed, 2) == pytest.approx(0.9)
    # ten classes 19, 17, ..., 1 images: top-5 takes the five commonest, (19 + 17 + 15 + 13 + 11) / 100
    ten = np.repeat(np.arange(10), [19, 17, 15, 13, 11, 9, 7, 5, 3, 1])
    assert p.chance_level("multiclass", "val_top5", ten, 10) == pytest.approx(0.75)
    assert p.chance_level("multiclass", "val_top1", np.repeat(np.arange(4), 25), 4) == pytest.approx(0.25)
    # three labels on 10 images with 8, 3 and 1 positives: predicting {0} alone: TP 8, FP 2, FN 4, F1 16 / 22;
    # {0, 1}: TP 11, FP 9, FN 1: 22 / 32; all three: TP 12, FP 18: 24 / 42
    multi = np.zeros((10, 3), dtype=np.uint8)
    multi[:8, 0], multi[:3, 1], multi[:1, 2] = 1, 1, 1
    assert p.chance_level("multilabel", "val_f1_micro", multi, 3) == pytest.approx(16 / 22)
    # macro: each label always predicted, 2 n / (n + N): 16 / 18, 6 / 13, 2 / 11, averaged
    assert p.chance_level("multilabel", "val_f1_macro", multi, 3) == pytest.approx((16 / 18 + 6 / 13 + 2 / 11) / 3)
    assert p.chance_level("multilabel", "val_precision", multi, 3) == pytest.approx(0.8)
    assert p.chance_level("multilabel", "val_recall", multi, 3) == 1.0
    assert p.chance_level("multiclass", "val_loss", skewed, 2) is None


def _curve(values: list[float], step: float = 1000.0) -> list[tuple[float, float]]:
    return [(step * (i + 1), v) for i, v in enumerate(values)]


RISING = _curve([0.1 + 0.07 * i for i in range(12)])  # still rising at its end: 0.80 against 0.59 a quarter before
LOWER = _curve([0.1 + 0.03 * i for i in range(12)])


def test_the_pilots_course_stage_by_stage_from_what_it_measured():
    # middle batch 64 at 0.05 and a factor sqrt(10) either side; its best (0.05) inside and still rising; 60 s spent,
    # the middle stage 90 s: 3 more epochs fit past the largest stage (the trained-on test above): 6 in all
    rec = record(seconds=60.0, stage_seconds={"mid": 90.0})
    step = p.next_step(rec, {}, 1800, 10_000)
    assert (step.name, step.batch, step.epochs) == ("mid", 64, 3)
    assert step.lrs == pytest.approx((0.05 / 10 ** 0.5, 0.05, 0.05 * 10 ** 0.5))
    mid = [(0.01581, LOWER), (0.05, RISING), (0.1581, LOWER)]
    assert p.next_step(rec, {"mid": mid}, 1800, 10_000) == p.Step("long", 64, (0.05,), 6)
    assert rec.epochs_long == 6  # decided once, at the seconds spent then
    rec.seconds = 140.0  # the long trial spent 80 s: one LR of 4 epochs left at the largest batch (test above)
    stages = {"mid": mid, "long": [(0.05, RISING)]}
    assert p.next_step(rec, stages, 1800, 10_000) == p.Step("largest", 256, (0.1,), 4)  # 0.05 x sqrt(256 / 64)
    assert (rec.lrs_largest, rec.epochs_largest) == (1, 4)
    assert p.next_step(rec, {**stages, "largest": [(0.1, LOWER)]}, 1800, 10_000) is None
    rec.seconds = 400.0  # a kept pilot takes the course it decided, whatever it spent since
    assert p.next_step(rec, stages, 1800, 10_000) == p.Step("largest", 256, (0.1,), 4)


def test_a_best_at_an_edge_gets_one_more_lr_past_it_and_a_dropped_stage_ends_the_pilot():
    rec = record(epochs_long=0, epochs_largest=0, lrs_largest=0)
    top = [(0.01581, LOWER), (0.05, LOWER), (0.1581, RISING)]
    step = p.next_step(rec, {"mid": top}, 1800, 10_000)
    assert step.name == "mid" and step.lrs == pytest.approx((0.01581, 0.05, 0.1581, 0.1581 * 10 ** 0.5))
    four = [*top, (0.5, LOWER)]
    assert p.next_step(rec, {"mid": four}, 1800, 10_000) is None  # no long trial, the largest stage dropped


def test_what_the_pilot_measured_takes_the_longer_curve_and_leaves_out_the_cut_trials():
    from lbscale.errors import LbscaleError

    rec = record()
    longer = _curve([0.1 + 0.07 * i for i in range(12)] + [0.9, 0.9])
    stages = {"mid": [(0.01581, LOWER), (0.05, RISING), (0.1581, [])], "long": [(0.05, longer)],
              "largest": [(0.1, [])]}
    # 0.1581 diverged before its first evaluation: its summary has a partial epoch's images/s, and no curve
    got = p.measured(rec, stages, {64: {0.01581: 100.0, 0.05: 200.0, 0.1581: 50.0}, 256: {}}, 1800)
    assert got.stages == {"mid": [(0.01581, LOWER), (0.05, longer)], "largest": []}
    # the middle batch at its kept trials' median (of 100 and 200: 200 images/s, not 100 with the diverged one's 50);
    # the largest, with none, at the timing run's 0.04 s / 64
    assert got.costs.per_sample == {64: pytest.approx(1 / 200), 256: pytest.approx(0.04 / 64)}
    with pytest.raises(LbscaleError, match="measured no curve at batch 64 within its limit \\(180 s\\)"):
        p.measured(rec, {"mid": [(0.05, [])]}, {}, 1800)


def test_a_pilot_too_slow_for_its_limit_names_the_wall_that_would_do():
    # 6,400 train images at batch 64 and 1 s a step: 100 s of training an epoch, 8 whole-split evaluations of 1 s
    # (half the training caps them at 8) and one at its end: 109 s an epoch, x 1.3 past the timing run's pace. Two
    # epochs for 7 trials with a 5 s start-up each and the 10 s the timing used: 7 (5 + 2 x 141.7) + 10 = 2,028.8 s
    # (33.8 min); the pilot takes a tenth of the wall: at least 339m
    from lbscale.errors import LbscaleError

    facts = p.DataFacts(6400, 1000, 10, "multiclass", "val_top1", 0.1)
    slow = p.Timing(1.0, 1.0, 1000, 5.0)
    with pytest.raises(LbscaleError, match=r"^--wall: the pilot needs about 33\.8 min for 2 epochs a trial at this "
                                           r"pace \(1 s a step at batch 64\); give --wall of at least 339m"):
        p.new_record({}, facts, 0.05, slow, None, 10.0, 1200.0, "here")
    rec = p.new_record({}, facts, 0.05, p.Timing(0.01, 1.0, 1000, 5.0), None, 10.0, 1200.0, "here")
    assert (rec.mid, rec.largest, rec.seconds) == (64, 512, 10.0)  # the timing runs' seconds spent on it
