"""`sweep --dry-run --estimate`: the pace as the median of timed windows with its spread, the first window's extra
time paid once per trial, and the confirmation trials still to come counted in the total (by hand, no training)."""

import dataclasses
import math

import pytest

from lbscale.analysis import pricing
from lbscale.sweep import estimate
from lbscale.sweep.preflight import check_plan_data
from lbscale.sweep.confirm import confirmation_to_come
from lbscale.sweep.estimate import ShapeTiming, median_spread, timing_from, timing_steps, trial_seconds
from lbscale.sweep.plan import build_plan
from lbscale.sweep.spec import load_sweep_spec

SPEC = """
name: est
data: {data}
model: test_resnet
epochs: 2
trial: {{optimizer: sgd, lr_scaling: none, device: cpu, target_metric: val_top1, target: 0.9}}
grid:
  batch: [32, 64]
  gpus: [1]
  search:
    base_lr: [0.003, 0.05, 0.4]
    confirm: {{top: 2, seeds: 3}}
"""


def test_the_median_and_the_spread_of_repeated_timings():
    assert median_spread([0.2, 0.1, 5.0]) == (0.2, 0.1, 5.0)  # one disturbed window moves the mean, not the median
    assert median_spread([0.3, 0.1, 0.2, 0.4]) == (pytest.approx(0.25), 0.1, 0.4)
    with pytest.raises(ValueError):
        median_spread([])


def test_the_pace_is_the_median_window_after_the_first_and_the_first_windows_extra_is_start_up():
    # windows of 5 steps: the first (compile, cold caches) 2 s, then 0.5, 0.6, 4.0 (disturbed), 0.5 s
    elapsed = [2.0, 2.5, 3.1, 7.1, 7.6]
    records = [{"kind": "step", "step": 5 * (k + 1), "elapsed_seconds": e, "eval_seconds": 0.1 + 0.1 * (k == 0)}
               for k, e in enumerate(elapsed)]
    t = timing_from(records, wall=12.0, eval_samples=80)
    # windows 0.1, 0.12, 0.8, 0.1 s per step: median 0.11, fastest 0.1, slowest 0.8
    assert t.step_seconds == pytest.approx(0.11) and t.step_range == (pytest.approx(0.1), pytest.approx(0.8))
    assert t.windows == 4 and t.steps == (5, 25) and t.eval_seconds == pytest.approx(0.1)
    assert t.spread == pytest.approx(0.7 / 0.11)
    # 12 s less 7.6 s of training and 0.6 s of evaluations, plus the first window's 2 s beyond 5 x 0.11
    assert t.startup == pytest.approx(12.0 - 7.6 - 0.6 + 2.0 - 0.55)


def test_a_timing_run_spans_the_epochs_its_windows_need_and_a_batch_schedule_stays_in_its_first():
    assert timing_steps(131, False) == (5, 1)
    assert timing_steps(4, False) == (5, 9)  # 35 steps of 4 an epoch
    assert timing_steps(17, True) == (2, 1) and timing_steps(3, True) == (1, 1)


def test_confirmation_trials_still_to_come_are_counted_in_the_total(tiny_h5, tmp_path, monkeypatch, capsys):
    path = tmp_path / "est.yaml"
    path.write_text(SPEC.format(data=tiny_h5))
    spec = load_sweep_spec(path)
    plans = build_plan(spec, tmp_path / "res", 1 << 30)
    check_plan_data(spec.path, plans)  # resolves their steps, as the sweep does before it estimates
    to_come = confirmation_to_come(spec, plans)
    # 2 batches x the 2 best of 3 points x 3 more seeds, each trial as long as its batch's search trials
    assert len(plans) == 6 and len(to_come) == 12
    assert all(q.confirms and q.config.seed in (1, 2, 3) and q.config.prune == "none" for q in to_come)
    assert {q.plan.total_steps for q in to_come if q.plan.global_batch == 32} == {plans[0].plan.total_steps}
    assert confirmation_to_come(spec, plans + to_come) == []  # planned already: not counted twice

    t = ShapeTiming(step_seconds=0.1, eval_seconds=0.2, eval_samples=80, startup=1.0, steps=(5, 35),
                    step_range=(0.08, 0.3), windows=6)
    monkeypatch.setattr(estimate, "time_shape", lambda p, warm: (t, 0.0))
    estimate.print_estimate(plans, retry_failed=False, to_come=to_come)
    out = capsys.readouterr().out.splitlines()
    total = sum(trial_seconds(p, t) for p in plans + to_come)
    assert "confirmation trials counted: 12 still to come" in out[-2]
    assert out[-1].startswith(f"expected duration: about {estimate.clock(total)} (")
    assert " for 18 trials one after another" in out[-1]
    assert "shape b32-g1 (9 trials): 0.1 s per step (the median of 6 windows, steps 5 to 35; 0.08..0.3, spread " \
           "220%)" in out[1]


DESIGNED = """
name: des
data: {data}
model: test_resnet
epochs: 20
wall: 20m
trial: {{optimizer: sgd, lr_scaling: none, device: cpu, target_metric: val_top1, target: 0.9, stop_at_target: true,
        eval_spacing: 0.5, eval_first: 4, eval_subset: 40, prune: asha, prune_min_samples: 320, prune_eta: 3}}
grid:
  batch: [32]
  gpus: [1]
  search:
    base_lr: [0.01, 0.1]
design: {{pilot_seconds: 120, samples_to_target: {{32: 960}}, host: elsewhere}}
"""


def test_a_designed_spec_is_priced_stopped_at_its_target_and_pruned_as_designed(tiny_h5, tmp_path, monkeypatch,
                                                                                capsys):
    path = tmp_path / "des.yaml"
    path.write_text(DESIGNED.format(data=tiny_h5))
    spec = load_sweep_spec(path)
    assert spec.sweep_wall == 20 * 60 - 120
    plans = build_plan(spec, tmp_path / "res", 1 << 30)
    check_plan_data(spec.path, plans)
    t = ShapeTiming(step_seconds=0.1, eval_seconds=0.2, eval_samples=80, startup=1.0, steps=(5, 35),
                    step_range=(0.1, 0.1))
    # by hand: a search trial trains to the rung (320 samples) and half the rest (960 - 320) / 2: 640 samples,
    # 20 steps of 0.1 s; 640 / 560 epochs of whole-split evaluations at 0.2 s; step evaluations at steps 4, 6, 9,
    # 13, 19 (spacing 0.5 from 4, below 31 = the 30 steps to the target + 1) on half the split (40 of 80)
    by_hand = 1.0 + 20 * 0.1 + 640 / 560 * 0.2 + 5 * 0.2 * 0.5
    assert estimate.designed_seconds(plans[0], t, 960.0) == pytest.approx(by_hand)
    # a file with a test split of 400: each finished trial evaluates it once at its end, 400 / 80 x 0.2 s
    # (unpriced before: a Fashion-MNIST grid's 40 trials x about 1.8 s for 10,000 test images, a third of its price)
    tested = dataclasses.replace(t, final_samples=400)
    assert estimate.designed_seconds(plans[0], tested, 960.0) == pytest.approx(by_hand + 400 / 80 * 0.2)
    assert trial_seconds(plans[0], tested) == pytest.approx(trial_seconds(plans[0], t) + 1.0)
    monkeypatch.setattr(estimate, "time_shape", lambda p, warm: (t, 0.0))
    estimate.print_estimate(plans, retry_failed=False, design=spec.design, wall=spec.sweep_wall)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"designed estimate: about {estimate.clock(2 * by_hand)} for 2 trials, stopped at the "
                           "target")
    assert "up to the wall budget (0:18:00)" in last and "the pilot ran on elsewhere, not here" in last


def test_a_search_point_is_priced_on_the_pilots_bowl_by_hand():
    """The pilot's LRs at 1/sqrt(10), 1 and sqrt(10) x its best took 1.5x, 1x and never the best's samples."""
    bowl = {0.3162: 1.5, 1: 1.0, 3.162: None}
    assert pricing.bowl_factor(bowl, 1.0) == pytest.approx(1.0)
    assert pricing.bowl_factor(bowl, 10 ** -0.25) == pytest.approx(1.5 ** 0.5, rel=1e-3)  # halfway in log LR
    # past the last LR that reached it, within half a step (0.25 decades): rising as the inner segment falls
    assert pricing.bowl_factor(bowl, 1.5) == pytest.approx(1.5 ** (math.log10(1.5) / 0.5), rel=1e-3)
    assert pricing.bowl_factor(bowl, 2.0) is None  # 0.30 decades out: it trains its whole budget
    assert pricing.bowl_factor(bowl, 0.2) == pytest.approx(1.5 * 1.5 ** (math.log10(0.3162 / 0.2) / 0.5), rel=1e-3)
    assert pricing.bowl_factor({1: 1.0, 3.162: None}, 10 ** 0.125) == pytest.approx(1.3, rel=1e-3)  # one reached
    assert pricing.bowl_factor({1: None}, 1.0) is None
    # a point that never reaches the target trains its budget; with a rung, all to the rung and half the rest
    assert pricing.designed_samples(100.0, None, None, budget=900.0) == 900.0
    assert pricing.designed_samples(100.0, 40.0, 1.5, budget=900.0) == 40.0 + (150.0 - 40.0) / 2
    assert pricing.designed_samples(100.0, 40.0, None, budget=900.0) == 40.0 + (900.0 - 40.0) / 2


def test_a_checks_price_is_the_share_of_the_split_it_reads_by_simulation():
    """check_share (binomial parts) against checks run on permuted 0/1 splits (sampling without replacement) at
    the same whole values, NEAR_SE subset errors below the target up to it; a split too small to cut is read
    whole."""
    import numpy as np

    from lbscale.analysis.evaluations import check_share
    from lbscale.analysis.evaluations import clearly_below

    rng = np.random.default_rng(11)
    target, subset, n = 0.8, 100, 1600
    se = math.sqrt(0.8 * 0.2 / subset)
    shares = []
    for value in np.linspace(target - 2 * se, target, 9):
        ones, read = int(round(value * n)), 0
        for _ in range(300):
            x, seen = rng.permutation(np.r_[np.ones(ones), np.zeros(n - ones)]), n
            for look in (200, 400, 800):
                if clearly_below(x[:look].mean(), target, look, n):
                    seen = look
                    break
            read += seen
        shares.append(read / 300 / n)
    assert check_share(target, subset, n) == pytest.approx(np.mean(shares), abs=0.04)
    assert 0.3 < check_share(target, subset, n) < 0.8
    assert check_share(0.8, 100, 30) == 1.0


def test_a_trials_checks_read_the_whole_split_at_the_crossing_and_a_share_of_it_before():
    from lbscale.analysis.evaluations import check_reads

    # none; the crossing's own (its value at the target or past it: no look stops it); it and three misses at
    # 0.55 of the split each
    assert check_reads(0, 0.55) == 0.0
    assert check_reads(1, 0.55) == 1.0
    assert check_reads(4, 0.55) == pytest.approx(1 + 3 * 0.55)


def test_a_trial_stopped_at_its_target_is_evaluated_up_to_the_crossings_own_evaluation():
    from lbscale.analysis.evaluations import evals_to, near_evals, spaced_evals

    # first at step 23, each at most 30% after the last (floor): 23, 29, 37, 48, 62, 80, 104. A batch whose crossing
    # lies at step 94 finds it at step 104, the first evaluation past it. make demo-real, 2026-12-06: the designer
    # counted no whole-split check where its subset came near the target only at the crossing (near_from 1), not
    # even the crossing's own, and predicted 10.0% where its evaluations took 21%
    assert evals_to(23, 0.3, 94) == [23, 29, 37, 48, 62, 80, 104]
    assert near_evals(23, 0.3, 94, 1.0) == 1  # the crossing's own check
    assert near_evals(23, 0.3, 94, 0.75) == 2  # from step 70.5 on: 80 and 104
    # a crossing on an evaluation's step is found there
    assert evals_to(23, 0.3, 80)[-1] == 80 and near_evals(23, 0.3, 80, 1.0) == 1
    # a trial that ends after 94 steps without its target (pruned, or out of epochs) is evaluated below them
    assert spaced_evals(23, 0.3, 94) == 6
