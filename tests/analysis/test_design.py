"""The designer's decisions (analysis/design.py) on hand-made pilots, against values computed by hand."""

import math

import pytest

from lbscale.analysis import design as d, lr_search, pilot as P, pricing
from lbscale.analysis.pilot import DataFacts, PilotRecord, Timing
from lbscale.analysis.pricing import Costs
from lbscale.errors import LbscaleError

FACTS = DataFacts(60_000, 2000, 10, "multiclass", "val_top1", 0.1)
COSTS = Costs({8: 2e-3, 64: 6e-4, 256: 5e-4}, 2e-4, 1.0)


def record(**kw) -> PilotRecord:
    return PilotRecord({}, kw.pop("mid", 64), kw.pop("largest", 256), 0.05, 3, 4, Timing(0.04, 0.4, 2000, 1.0),
                       "here", **kw)


def every(step: float, values: list[float]) -> list[tuple[float, float]]:
    return [(step * (i + 1), v) for i, v in enumerate(values)]


# batch 64: 0.05 reaches 0.82 at 12,000 samples and levels off at 0.9; 0.01581 at 15,000; 0.1581 never
MID = [(0.01581, every(3000, [0.4, 0.6, 0.7, 0.78, 0.82, 0.85, 0.86, 0.87, 0.87])),
       (0.05, every(3000, [0.5, 0.7, 0.8, 0.82, 0.88, 0.9, 0.9, 0.9, 0.9])),
       (0.1581, every(3000, [0.3, 0.5, 0.6, 0.7, 0.72, 0.74, 0.75, 0.75, 0.75]))]
# batch 256 (at 0.05 x sqrt(4) = 0.1 and a factor sqrt(10) either side): 0.1 reaches 0.82 at 24,000
TOP = [(0.03162, every(6000, [0.2, 0.4, 0.55, 0.65, 0.7, 0.74])),
       (0.1, every(6000, [0.3, 0.6, 0.75, 0.82, 0.86, 0.88])),
       (0.3162, every(6000, [0.2, 0.3, 0.4, 0.5, 0.55, 0.6]))]


def pilot(mid=MID, top=TOP, **kw) -> d.Pilot:
    return P.Pilot(record(**kw), {"mid": mid, "largest": top}, COSTS)


def test_a_pilot_with_a_known_critical_batch_gets_the_batches_around_it_and_the_square_root_rule():
    chosen = d.decide(pilot(), FACTS, wall=1e6)
    plan = chosen.plan
    # the hardest fraction, 0.9 of the way from chance 0.1 to the plateau 0.9: 0.82
    assert plan.target == pytest.approx(0.82) and chosen.chance == 0.1 and chosen.level == pytest.approx(0.9)
    assert chosen.how == "the hardest the budget pays for"
    # E(256) / E(64) = 24,000 / 12,000 = 2 = (1 + 256 / Bc) / (1 + 64 / Bc): Bc = 128
    assert plan.guess == ("value", pytest.approx(128.0))
    # from a quarter of it (32) up, five doublings; E(B) = 8,000 (1 + B / 128)
    assert plan.batches == [32, 64, 128, 256, 512]
    assert plan.samples == pytest.approx({32: 10_000, 64: 12_000, 128: 16_000, 256: 24_000, 512: 40_000})
    assert plan.epochs == {b: 2 for b in plan.batches}  # 3 x 40,000 / 60,000 = 2 at most
    # best LRs 0.05 at 64 and 0.1 at 256: alpha = ln 2 / ln 4 = 0.5, each best known to half a sqrt(10) step:
    # alpha anywhere in 0.5 +- ln sqrt(10) / ln 4 = 0.5 +- 0.83, so 0 to 1: the square-root rule in its middle; 0.1
    # moved back by sqrt(4) is 0.05 again: 4x either side, [0.0125, 0.2]; widened for batch 512 (and 32) so that
    # alpha 0 or 1 keeps its optimum inside: (512 / 64)^(+-0.5) = 2.83
    assert chosen.rule.value == "sqrt" and "anywhere in [0.00, 1.00]" in chosen.rule.why
    assert plan.lr_range.value == (float(f"{0.0125 / 8 ** 0.5:.3g}"), float(f"{0.2 * 8 ** 0.5:.3g}"))
    assert plan.points == lr_search.SEARCH_TRIALS and plan.confirm == pricing.CONFIRM_TOP
    # the bowl about the fastest LR: 15,000 / 12,000 and never
    assert plan.bowl_lr == 0.05 and plan.bowl == {0.3162: 1.25, 1.0: 1.0, 3.162: None}
    # the targets of the trials: a ladder over the last 15% of the way from chance up to 0.82, checked on the whole
    # split (B_crit against the target, report/ladder.py)
    assert plan.ladder == (0.712, 0.739, 0.766, 0.793, 0.82)
    # B_crit predicted at the pilot's plateau, 0.9: the reference run trained on there; the pilot's best curve at
    # batch 64 took 18,000 samples to 0.9 against 12,000 to 0.82, so at batch 8 about 12,000 x 1.5 x 8 / 64
    run = chosen.long_run
    assert (run.target, run.batch, run.stretch) == (0.9, 8, pytest.approx(1.5))
    assert run.samples == pytest.approx(2250) and run.seconds > 0
    assert plan.fits and plan.seconds < chosen.budget == pytest.approx(0.5 * (1e6 - run.seconds))
    assert d.decide(pilot(), FACTS, wall=1e6, for_target=0.8).long_run is None  # the study measures it itself


def test_a_given_target_the_middle_batch_never_reached_is_refused():
    with pytest.raises(LbscaleError, match="--target 0.95: the pilot's best trial at batch 64 did not reach it"):
        d.decide(pilot(), FACTS, wall=1e6, target=0.95)


def test_a_budget_that_pays_for_no_full_study_cuts_it_or_names_the_wall_that_would_do():
    """A budget that paid for no target still wrote the full study (one batch dropped at most, 6 search points and
    the confirmation kept, priced at several times its share). Now the study is cut (4 batches, then 4 search
    points, the best point alone confirmed, 3 batches) as far as it must, and where even that is priced past all
    the pilot left, one line names the --wall that would do."""
    full = d.decide(pilot(), FACTS, wall=4000.0)
    assert full.how == "the hardest the budget pays for" and len(full.plan.batches) == 5 and full.plan.fits
    cut = d.decide(pilot(), FACTS, wall=800.0)
    assert cut.how == "the hardest the budget pays for with the study cut" and cut.plan.fits
    assert (len(cut.plan.batches), cut.plan.points, cut.plan.confirm) == (3, d.REDUCED_TRIALS, d.REDUCED_TOP)
    assert cut.plan.seconds <= cut.budget == pytest.approx(0.5 * (800 - cut.long_run.seconds))
    none = d.decide(pilot(), FACTS, wall=200.0)  # the smallest study: past its share, inside what is left
    assert none.how.startswith("the easiest allowed; the budget pays for none") and not none.plan.fits
    assert none.budget < none.plan.seconds <= none.left
    assert none.plan.target == pytest.approx(d.c.target_value(0.1, 0.9, 0.7))
    with pytest.raises(LbscaleError, match=r"--wall 1m: the smallest study .* give --wall of at least \d+m"):
        d.decide(pilot(), FACTS, wall=60.0)


def test_a_pilot_that_never_rose_above_chance_places_no_target():
    flat = every(100.0, [0.1 + 0.01 * (s % 2) for s in range(1, 9)])  # 0.10-0.11 on 500 images: chance's noise
    facts = DataFacts(3000, 500, 10, "multiclass", "val_top1", 0.1)
    with pytest.raises(LbscaleError, match="never rose above chance"):
        d.choose_target(None, pilot([(0.05, flat)], [(0.1, flat)]), facts, 500.0, pricing.Choice((0.01, 0.2), "r"),
                        "sqrt", (0.0, 1.0))


@pytest.mark.parametrize("top_lr, span, rule", [(0.05, (0.0, 0.83), "sqrt"), (0.1, (0.0, 1.0), "sqrt"),
                                                 (0.2, (0.17, 1.0), "sqrt"), (0.0125, (-1.83, -0.17), "none")])
def test_the_lr_rule_sits_in_the_middle_of_what_the_pilots_two_batches_allow(top_lr, span, rule):
    """The pilot's best LRs are a sqrt(10) step apart at best: alpha from two of them is known to +- ln sqrt(10) /
    ln 4 = 0.83. Where the two runs here chose "none" (alpha -0.05 and -0.33) the studies measured 0.60 [0.40,
    0.96]; the span such pilots allow holds it."""
    top = [(top_lr, every(6000, [0.3, 0.6, 0.9])), (top_lr * 10, every(6000, [0.1, 0.2, 0.3]))]
    lo, hi, alpha = lr_search.alpha_span(pilot(top=top))
    assert (lo, hi) == pytest.approx(span, abs=0.005) and alpha == pytest.approx(math.log(top_lr / 0.05) / math.log(4))
    assert lr_search.lr_choice(pilot(top=top))[0].value == rule


def test_the_search_covers_each_batchs_optimum_whatever_alpha_in_the_span():
    base = pricing.Choice((0.01, 0.1), "base")
    # batches 16..256 about 64 under the square-root rule, alpha 0 to 1: (256 / 64)^0.5 = 2 up, (16 / 64)^-0.5 = 2
    # down at either end, so 2x either side
    wide = lr_search.covering(base, (0.0, 1.0), "sqrt", [16, 32, 64, 128, 256], 64)
    assert wide.value == (0.005, 0.2) and "alpha 0.00 to 1.00" in wide.why
    # alpha pinned at the rule's own: nothing to widen
    assert lr_search.covering(base, (0.5, 0.5), "sqrt", [16, 256], 64) is base
    # the linear rule with alpha 0.4 to 1: at 256, 4^(0.4 - 1) = 0.435 down; at 16, 0.25^(0.4 - 1) = 2.30 up
    assert lr_search.covering(base, (0.4, 1.0), "linear", [16, 256], 64).value == (0.00435, 0.23)


def test_one_more_lr_past_the_edge_where_the_best_is_at_one():
    assert P.edge_lr(MID) is None
    low_best = [(0.01, every(1, [0.9])), (0.03, every(1, [0.5]))]
    assert P.edge_lr(low_best) == pytest.approx(0.01 / P.LR_STEP)
    assert P.edge_lr(list(reversed(low_best))) == pytest.approx(0.01 / P.LR_STEP)
    high_best = [(0.01, every(1, [0.5])), (0.03, every(1, [0.9]))]
    assert P.edge_lr(high_best) == pytest.approx(0.03 * P.LR_STEP)


def test_the_grid_price_counts_each_trials_test_split_once_at_its_end():
    from dataclasses import replace

    facts = DataFacts(3000, 500, 10, "multiclass", "val_top1", 0.1)
    costs = Costs({64: 1e-3, 256: 8e-4}, 2e-4, 0.5)
    ev = pricing.EvalChoice(100, 0.3, {32: 23, 64: 15, 128: 11}, 0.0, 64, 0.5, 0.8, (0.0, 64))
    ratios, batches = [0.5, 1.0, 2.0], [32, 64, 128]
    args = (batches, {32: 3000.0, 64: 4000.0, 128: 6000.0}, costs)
    rest = (ev, None, {0.5: 1.5, 1: 1.0, 2: 1.6}, ratios, {32: 3, 64: 4, 128: 6})
    without = pricing.grid_seconds(*args, facts, *rest)
    # three search points and the confirmation's reruns a batch, each evaluating 10,000 test images at 2e-4 s
    extra = len(batches) * (len(ratios) + pricing.CONFIRM_TOP) * 10_000 * 2e-4
    assert pricing.grid_seconds(*args, replace(facts, test=10_000), *rest) == pytest.approx(without + extra)


def test_where_no_evaluation_fits_its_share_the_choice_says_what_the_crossings_own_check_costs():
    # a step costs 0.01 s fixed + 1e-4 s a sample; the whole 1,500-image split 0.375 s (2.5e-4 s an image)
    costs = Costs({64: (0.01 + 64e-4) / 64, 256: (0.01 + 256e-4) / 256}, 2.5e-4, 0.5)
    facts = DataFacts(3000, 1500, 10, "multiclass", "val_top1", 0.1)
    near = {n: 0.5 for n in (1500, 1000, 500, 250, 100)}
    # batch 32 reaches the target after 3,200 samples: 100 steps of 0.0132 s = 1.32 s, 0.375 / 1.32 = 28.4%;
    # batch 64 after 4,800: 75 steps of 0.0164 s = 1.23 s, 30.5%: batch 64 binds
    ev = pricing.evaluation_choice([32, 64], {32: 3200.0, 64: 4800.0}, costs, facts, near, 0.8)
    assert ev.share > 0.10
    assert ev.floor == (pytest.approx(0.375 / 1.23), 64)
    # each batch evaluated from a quarter of its own predicted steps on: 100 / 4 and 75 / 4
    assert ev.first == {32: 25, 64: 18}
    # a long training: the subset fits, and the floor is small
    ev = pricing.evaluation_choice([32, 64], {32: 320_000.0, 64: 480_000.0}, costs, facts, near, 0.8)
    assert ev.share <= 0.10 and ev.floor == (pytest.approx(0.375 / 123), 64)


def test_the_lr_range_widens_to_cover_every_lr_fastest_to_the_chosen_target():
    # at batch 64 the pilot's 0.01581 and 0.05 reached val_top1 0.77 at the same evaluation (6,000 samples), 0.005
    # later, 0.1581 never; the range, 4x either side of the best final value (0.01581), was [0.00395, 0.0632]
    stage = [(0.005, [(3000, 0.6), (6000, 0.72), (9000, 0.78)]), (0.01581, [(3000, 0.7), (6000, 0.775)]),
             (0.05, [(3000, 0.69), (6000, 0.771)]), (0.1581, [(3000, 0.5), (6000, 0.6)])]
    at = P.at_target(pilot(stage, []), 0.77, FACTS.val, (), 2.0)
    assert at.fastest_lrs == [0.01581, 0.05]
    assert at.guess == ("none", 64.0) and not at.reached_top  # no larger batch: B_crit taken at the middle one
    assert P.at_target(pilot(stage, []), 0.99, FACTS.val, (), 2.0) is None  # none reached it: nothing to read
    rng = lr_search.widened(pricing.Choice((0.00395, 0.0632), "4x either side of 0.01581"), [0.01581, 0.05], 64)
    assert rng.value == (0.00395, 0.2)
    assert "widened to 4x past 0.01581 and 0.05, the pilot's LRs fastest to the target at batch 64" in rng.why
    same = pricing.Choice((0.001, 0.5), "r")  # inside already: unchanged, reason and all
    assert lr_search.widened(same, [0.01581, 0.05], 64) is same


def test_the_search_ratios_are_the_points_the_sweep_plans():
    from lbscale.sweep.search import SearchSpace

    space = SearchSpace(sampled={"base_lr": ("loguniform", (0.0125, 0.2))}, trials=lr_search.SEARCH_TRIALS,
                        sampler="halton")
    assert lr_search.search_ratios((0.0125, 0.2), 0.05) == [pt["base_lr"] / 0.05 for pt in space.points()]


def test_a_multilabel_target_rests_on_the_labels_not_on_the_worst_lr():
    """F1 has no 1 / K: the lowest first evaluation of any pilot curve stood in for chance, so a pilot whose F1 rose
    from ~0 to 0.80 before its first evaluation was refused, and one diverged LR (F1 0.02) moved the target from
    0.66 to 0.632. Now chance is the best constant predictor's F1 on the val split's labels."""
    import numpy as np

    from lbscale.analysis.pilot import chance_level

    labels = (np.random.default_rng(0).random((2000, 19)) < 0.15).astype(np.uint8)
    chance = chance_level("multilabel", "val_f1_micro", labels, 19)
    facts = DataFacts(60_000, 2000, 19, "multilabel", "val_f1_micro", chance)
    rising = [(lr, every(3000, [0.8 + 0.01 * i for i in range(9)])) for lr in (0.01581, 0.05)]
    diverged = (0.1581, every(3000, [0.02] * 9))
    top = [(lr, every(6000, [0.78 + 0.015 * i for i in range(6)])) for lr in (0.03162, 0.1)]
    plain = d.decide(pilot(rising, top), facts, wall=1e6)
    with_diverged = d.decide(pilot([*rising, diverged], top), facts, wall=1e6)
    assert plain.chance == with_diverged.chance == pytest.approx(chance) and 0.2 < chance < 0.3
    assert plain.plan.target == with_diverged.plan.target > 0.8


def test_the_critical_batchs_guess_reads_the_crossing_between_evaluations():
    """Two evaluations an epoch of 60,000 images: the first at or past the target said 30,000 samples where the
    curve crossed it at 18,000 (read linearly between the two evaluations around it)."""
    mid = [(0.05, [(30_000, 0.5), (60_000, 0.75), (90_000, 0.8), (120_000, 0.8)]),
           (0.01581, [(30_000, 0.3), (60_000, 0.5), (90_000, 0.6), (120_000, 0.62)])]
    top = [(0.1, [(30_000, 0.2), (60_000, 0.45), (90_000, 0.65), (120_000, 0.7)]),
           (0.03162, [(30_000, 0.1), (60_000, 0.2), (90_000, 0.3), (120_000, 0.4)])]
    plan = d.plan_for(0.35, pilot(mid, top), FACTS, 1e9, pricing.Choice((0.01, 0.2), "r"))
    # batch 64: 0.05 is past 0.35 at its first evaluation (nothing before it to read between): 30,000; 0.01581
    # crosses it at 30,000 + 30,000 x 0.05 / 0.2 = 37,500
    assert plan.s_mid == 30_000 and plan.bowl == {0.3162: 1.25, 1.0: 1.0}
    # batch 256: between (30,000, 0.2) and (60,000, 0.45): 30,000 + 30,000 x 0.15 / 0.25 = 48,000 (not 60,000)
    assert plan.s_top == pytest.approx(48_000)
    # the guess from those: r = 1.6 = (1 + 256 / Bc) / (1 + 64 / Bc): Bc = (256 - 1.6 x 64) / 0.6 = 256
    assert plan.guess == ("value", pytest.approx(256.0))


def test_a_pilot_that_ran_no_larger_batch_centres_the_study_on_its_middle_batch():
    # the largest stage dropped (the pilot's limit left no room) or all its trials cut before a curve: B_crit is
    # not guessed, taken at the middle batch (64): batches from a quarter of it, 16, up four doublings to 256
    chosen = d.decide(pilot(MID, []), FACTS, wall=1e6)
    assert chosen.plan.guess == ("none", 64.0) and chosen.plan.batches == [16, 32, 64, 128, 256]
