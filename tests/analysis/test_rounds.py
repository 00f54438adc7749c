"""The round planner of `sweep --until-resolved`: a pure function from the fit's answer and each batch's search to
the trials of the next round (or why it stops), on hand-made states."""

import math

import pytest

from lbscale.analysis.rounds import Answer, BatchState, Point, plan_round


def _batch(b, reached=True, lrs=(0.01, 0.03, 0.1, 0.3), best=1, seeds=1):
    points = tuple(Point(lr, f"b{b}-p{i}", seeds if i == best else 1) for i, lr in enumerate(lrs))
    return BatchState(b, reached, points, best if reached else None)


STUDY = [_batch(b) for b in (32, 64, 128, 256)]


def _kinds(r):
    return [(a.kind, a.batch) for a in r.actions]


def test_a_narrow_interval_stops_the_sweep():
    r = plan_round(Answer("interval", 60.0, 200.0), STUDY, ratio=4.0)
    assert r.stop.startswith("resolved") and "3.3" in r.stop and not r.actions


def test_a_lower_bound_adds_the_next_doubling_past_the_largest_batch():
    r = plan_round(Answer("lower", 300.0, math.inf), STUDY, trials_per_batch=4)
    assert r.stop is None and _kinds(r) == [("batch", 512)]
    assert "B_crit > 300" in r.actions[0].why


def test_an_upper_bound_adds_the_half_of_the_smallest_batch():
    r = plan_round(Answer("upper", 0.0, 20.0), STUDY, trials_per_batch=4)
    assert _kinds(r) == [("batch", 16)] and "B_crit < 20" in r.actions[0].why


def test_not_resolved_adds_both_sides_and_seeds():
    r = plan_round(Answer("none", 0.0, math.inf), STUDY, trials_per_batch=4)
    kinds = _kinds(r)
    assert kinds[:2] == [("batch", 512), ("batch", 16)]
    # and one more seed at each batch's best point
    assert sorted(a.key for a in r.actions if a.kind == "seeds") == sorted(f"b{b}-p1" for b in (32, 64, 128, 256))


def test_no_batch_past_the_limits():
    r = plan_round(Answer("lower", 300.0, math.inf), STUDY, max_batch=256, trials_per_batch=4)
    assert ("batch", 512) not in _kinds(r)
    assert r.actions and all(a.kind == "seeds" for a in r.actions)  # what is left: seeds
    assert any("256 is the largest batch" in n for n in r.notes)


def test_an_optimum_on_the_edge_of_the_lr_range_extends_it_by_the_grid_step():
    study = [_batch(32, best=0), _batch(64, best=3), _batch(128), _batch(256)]
    r = plan_round(Answer("interval", 40.0, 400.0), study)
    lr = [a for a in r.actions if a.kind == "lr"]
    assert [(a.batch, a.key) for a in lr] == [(32, "b32-p0"), (64, "b64-p3")]
    step = (0.3 / 0.01) ** (1 / 3)  # the points' mean ratio
    assert lr[0].lr == pytest.approx(0.01 / step) and lr[1].lr == pytest.approx(0.3 * step)
    assert "edge" in lr[0].why


def test_a_wide_interval_adds_seeds_where_the_answer_is_decided():
    r = plan_round(Answer("interval", 40.0, 400.0), STUDY)
    # batches within [lo / 2, 2 hi]: 32..256 all; the best point, one seed each
    seeds = [a for a in r.actions if a.kind == "seeds"]
    assert {a.batch for a in seeds} == {32, 64, 128, 256} and all(a.seeds == 1 for a in seeds)
    r = plan_round(Answer("interval", 150.0, 700.0), STUDY)
    assert {a.batch for a in r.actions if a.kind == "seeds"} == {128, 256}


def test_the_budget_cuts_a_round_and_stops_the_sweep_when_spent():
    r = plan_round(Answer("none", 0.0, math.inf), STUDY, trials_per_batch=4, trials_left=5)
    assert sum(a.trials(4) for a in r.actions) <= 5 and _kinds(r)[0] == ("batch", 512)
    r = plan_round(Answer("none", 0.0, math.inf), STUDY, trials_per_batch=4, trials_left=0)
    assert r.stop.startswith("budget spent") and not r.actions


def test_no_batch_reached_stops_with_what_to_change():
    study = [_batch(b, reached=False) for b in (32, 64)]
    r = plan_round(Answer("none", 0.0, math.inf), study)
    assert r.stop.startswith("no batch reached the target") and not r.actions


def test_a_side_past_a_batch_that_missed_the_target_is_not_extended():
    # the largest batch never reached the target: a larger one would not either; say so, add seeds instead
    study = STUDY + [_batch(512, reached=False)]
    r = plan_round(Answer("lower", 300.0, math.inf), study, trials_per_batch=4)
    assert ("batch", 1024) not in _kinds(r)
    assert any("512 did not reach the target" in n for n in r.notes)


def test_a_rounds_actions_are_described_one_line_per_batch_and_per_reason_for_seeds():
    from lbscale.analysis.rounds import describe

    added = [{"action": {"kind": "batch", "batch": 512, "why": "open above 256"}, "trials": [{}] * 6},
             {"action": {"kind": "lr", "batch": 64, "lr": 0.61234, "why": "edge"}, "trials": [{}]},
             {"action": {"kind": "seeds", "batch": 32, "why": "wide"}, "trials": [{}]},
             {"action": {"kind": "seeds", "batch": 32, "why": "wide"}, "trials": [{}]},
             {"action": {"kind": "seeds", "batch": 64, "why": "wide"}, "trials": [{}]}]
    assert describe(added) == ["batch 512 (6 trials): open above 256", "LR 0.6123 at batch 64: edge",
                               "3 more seeds at batches 32, 64: wide"]


def test_the_answer_as_rounds_json_keeps_it_in_words():
    from lbscale.analysis.rounds import answer_text

    assert answer_text({"kind": "interval", "value": 145.2, "lo": 106.1, "hi": 2080.4}) == "~ 145 [106, 2,080]"
    assert answer_text({"kind": "lower", "value": None, "lo": 300.0, "hi": None}) == "> 300"
    assert answer_text({"kind": "upper", "value": None, "lo": None, "hi": 20.0}) == "< 20"
    assert answer_text({"kind": "none", "value": 173.0, "lo": None, "hi": None}) == "not resolved"


def test_a_batch_that_ran_out_of_budget_gets_its_best_lr_again_with_twice_the_epochs():
    # batch 512 trained its whole budget without reaching the target (its best value at point 2): the upper end
    # stays open because of the budget, not the data; the point that came closest runs again, twice as long
    short = BatchState(512, False, tuple(Point(lr, f"b512-p{i}") for i, lr in enumerate((0.01, 0.03, 0.1, 0.3))),
                       None, short="b512-p2")
    r = plan_round(Answer("lower", 300.0, math.inf), STUDY + [short], trials_per_batch=4)
    budget = [a for a in r.actions if a.kind == "budget"]
    assert [(a.batch, a.key) for a in budget] == [(512, "b512-p2")] and "twice the epochs" in budget[0].why
    assert ("batch", 1024) not in _kinds(r)
    # pruned or diverged everywhere (nothing ran its budget): nothing to extend, the note stays
    pruned = BatchState(512, False, short.points, None)
    r = plan_round(Answer("lower", 300.0, math.inf), STUDY + [pruned], trials_per_batch=4)
    assert not [a for a in r.actions if a.kind == "budget"]
    assert any("512 did not reach the target" in n for n in r.notes)


def test_a_round_the_budget_cuts_to_nothing_stops_as_budget_spent():
    # B_crit > 50: the next doubling past batch 64 needs a whole batch (3 trials), 2 are left; both optima are
    # interior (no LR to add) and the open side takes the seeds' place: nothing fits, so the rounds stop here
    # (an empty round without a stop would be recorded again on every rerun)
    study = [_batch(32, lrs=(0.01, 0.03, 0.1)), _batch(64, lrs=(0.01, 0.03, 0.1))]
    r = plan_round(Answer("lower", 50.0, math.inf), study, trials_left=2, trials_per_batch=3)
    assert not r.actions and r.stop.startswith("budget spent: B_crit is still > 50"), r
    assert "batch 128 needs 3 trials, 2 left" in r.stop


def test_seeds_are_not_added_where_the_curve_misfits_the_batches_beyond_doubt():
    """The digits study designed by `lbscale design` (20 min): B_crit [2, 121] with lack of fit at p = 0.0002; ten
    rounds each added a seed at every batch and the interval never narrowed (seeds shrink the noise within a batch,
    not the batches' scatter about the curve). Where lack of fit is rejected at p < 0.01 and only seeds are left
    to add, the rounds stop and say why and what would help."""
    misfit = Answer("interval", 2.0, 121.0, lack_of_fit_p=0.0002)
    r = plan_round(misfit, STUDY, ratio=4.0)
    assert r.stop and r.stop.startswith("the curve does not describe the batches") and "p = 0.0002" in r.stop
    assert not r.actions
    # a milder misfit (chance rejects 10% of true curves at its level): seeds as before
    assert _kinds(plan_round(Answer("interval", 2.0, 121.0, lack_of_fit_p=0.05), STUDY, ratio=4.0))
    # an open side is still closed by a batch past it, misfit or not
    r = plan_round(Answer("lower", 300.0, math.inf, lack_of_fit_p=0.0002), STUDY, trials_per_batch=4)
    assert r.stop is None and ("batch", 512) in _kinds(r)


def test_an_interval_end_more_than_a_doubling_past_the_batches_gets_a_batch_toward_it():
    """The class-folder study designed by `lbscale design` (30 min): B_crit [52, 364] .. [55, 606] on batches
    16..256 for 16 rounds of seeds, the steps still falling 23% a doubling at 256; an end more than a doubling past
    the batches is extrapolated, and the next doubling measures it."""
    r = plan_round(Answer("interval", 50.0, 600.0), STUDY, trials_per_batch=4)
    assert _kinds(r)[0] == ("batch", 512) and "more than a doubling past batch 256" in r.actions[0].why
    assert {a.batch for a in r.actions if a.kind == "seeds"} == {32, 64, 128, 256}  # seeds as before
    # within a doubling of the batches: seeds only (on the adaptive benchmark, a batch added wherever an end lay
    # past the largest resolved fewer studies where B_crit lies past the batches: 63% against 72%)
    assert all(a.kind == "seeds" for a in plan_round(Answer("interval", 40.0, 500.0), STUDY).actions)
    # a lower end more than a halving below the smallest batch: half the smallest
    r = plan_round(Answer("interval", 10.0, 200.0), STUDY, trials_per_batch=4)
    assert _kinds(r)[0] == ("batch", 16) and "more than a halving below batch 32" in r.actions[0].why
    assert all(a.kind == "seeds" for a in plan_round(Answer("interval", 17.0, 200.0), STUDY).actions)
    # never past the data's limit
    r = plan_round(Answer("interval", 50.0, 600.0), STUDY, max_batch=256)
    assert all(a.kind == "seeds" for a in r.actions) and any("largest batch the data allow" in n for n in r.notes)


def test_no_smaller_batch_where_its_evaluations_would_cost_more_than_its_training():
    """make demo-real on a loaded machine: the rounds added batches 16, 8 and 4, the evaluations at batch 8 125.8%
    of its training. A batch below the smallest is priced by the evaluations' measured share of training at the
    two smallest batches (the share grows by their ratio per halving); past 100% it is not added, and the round
    says where the answer cannot be bought."""
    from dataclasses import replace

    measured = [replace(_batch(16), eval_share=0.8), replace(_batch(32), eval_share=0.5), _batch(64), _batch(128)]
    r = plan_round(Answer("upper", 0.0, 20.0), measured, trials_per_batch=4)
    # 0.8 x 0.8 / 0.5 = 1.28 at batch 8
    assert ("batch", 8) not in _kinds(r)
    assert any("batch 8 is not added: its evaluations would take about 128% of its training" in n for n in r.notes)
    cheap = [replace(_batch(16), eval_share=0.3), replace(_batch(32), eval_share=0.2), _batch(64), _batch(128)]
    assert ("batch", 8) in _kinds(plan_round(Answer("upper", 0.0, 20.0), cheap, trials_per_batch=4))
    # one measured share: it stays as measured
    one = [replace(_batch(16), eval_share=1.1), _batch(32), _batch(64)]
    assert ("batch", 8) not in _kinds(plan_round(Answer("upper", 0.0, 20.0), one, trials_per_batch=4))
