"""The loop's small state objects without training: the divergence monitor and the epoch clock, each checked
on hand-made sequences and through its state_dict (what a checkpoint carries), and the cross-rank check."""

import math
from types import SimpleNamespace

import pytest

from lbscale.train.monitors import DivergenceMonitor, EpochClock


def test_divergence_counts_the_steps_actually_above_the_threshold():
    # factor 2 over the first check's mean 1.0; window 6 steps. Checks at steps 4, 8, 9 (an early end of epoch
    # after 1 step), 12: above at 8 (4 steps), 9 (1 step), 12 (3 steps) = 8 >= 6 only at step 12. The old
    # count added check_every (4) at every check: 4 + 4 at step 9 already.
    m = DivergenceMonitor(factor=2.0, window=6)
    assert [m.update(loss, step) for loss, step in ((1.0, 4), (2.5, 8), (2.5, 9), (2.5, 12))] == \
        [False, False, False, True]
    assert m.above_steps == 8


def test_divergence_resets_below_the_threshold_and_flags_non_finite():
    m = DivergenceMonitor(factor=2.0, window=4)
    assert not m.update(1.0, 2) and not m.update(3.0, 4) and not m.update(1.5, 6)  # back below: reset
    assert m.above_steps == 0 and not m.update(3.0, 8)  # 2 steps above again, not 4
    assert m.update(math.nan, 9) and m.update(math.inf, 10)


def test_divergence_state_survives_a_checkpoint():
    m = DivergenceMonitor(2.0, 8)
    m.update(1.0, 4)
    m.update(2.5, 8)
    resumed = DivergenceMonitor(2.0, 8)
    resumed.load_state_dict(m.state_dict())
    assert resumed.update(2.5, 10) is False and resumed.update(2.5, 12) is True  # 4 + 2 + 2 steps


def test_epoch_clock_adds_the_seconds_before_a_preemption():
    before = EpochClock()
    before.add(data=1.5, compute=10.0, step_eval=0.25)
    before.count(384)
    resumed = EpochClock()
    resumed.load_state_dict(before.state_dict())
    resumed.add(data=0.5, compute=4.0, step_eval=0.5)
    resumed.count(160)
    # step evaluations are carried too, and never counted as training time
    assert resumed.timing() == {"train_seconds": 16.0, "data_seconds": 2.0, "compute_seconds": 14.0,
                                "comm_seconds": 0.0, "step_eval_seconds": 0.75}
    assert resumed.images == 544
    resumed.reset()
    assert resumed.timing() == {"train_seconds": 0.0, "data_seconds": 0.0, "compute_seconds": 0.0,
                                "comm_seconds": 0.0, "step_eval_seconds": 0.0}
    old = EpochClock()  # a checkpoint of lbscale before step evaluations
    old.load_state_dict({"seconds": {"data": 1.0, "compute": 2.0}, "images": 10})
    assert old.timing()["step_eval_seconds"] == 0.0


def test_epoch_clock_counts_communication_as_training_time_apart_from_compute():
    before = EpochClock()
    before.add(data=1.0, compute=6.0, comm=2.5, step_eval=0.5)
    before.count(64)
    state = before.state_dict()
    assert state["seconds"]["comm"] == 2.5
    resumed = EpochClock()
    resumed.load_state_dict(state)
    resumed.add(data=0.5, compute=3.0, comm=0.25)
    assert resumed.timing() == {"train_seconds": 13.25, "data_seconds": 1.5, "compute_seconds": 9.0,
                                "comm_seconds": 2.75, "step_eval_seconds": 0.5}
    t = resumed.timing()
    assert t["train_seconds"] == t["data_seconds"] + t["compute_seconds"] + t["comm_seconds"]
    resumed.reset()
    assert resumed.timing()["comm_seconds"] == 0.0
    # a checkpoint of lbscale before communication was timed apart: its all-reduce wait is in compute
    old = EpochClock()
    old.load_state_dict({"seconds": {"data": 1.0, "compute": 2.0, "step_eval": 0.5}, "images": 10})
    assert old.timing() == {"train_seconds": 3.0, "data_seconds": 1.0, "compute_seconds": 2.0, "comm_seconds": 0.0,
                            "step_eval_seconds": 0.5}
    old.add(comm=1.0)
    assert old.timing()["comm_seconds"] == 1.0 and old.timing()["train_seconds"] == 4.0


def test_epoch_clock_refuses_unknown_kinds():
    with pytest.raises(KeyError):
        EpochClock().add(eval=1.0)  # evaluation is timed apart, not training time


def test_measurements_at_the_target_are_neither_training_time_nor_in_the_pace(monkeypatch):
    """A clock by hand: 3 steps of 10 images, a second apart of training each after the first (the warm-up step),
    with a 0.5 s step evaluation and a 3 s measurement at the target (--gns-at-target) between them."""
    import lbscale.train.monitors as monitors

    now = [0.0]
    monkeypatch.setattr(monitors.time, "perf_counter", lambda: now[0])
    pace = monitors.PaceMeter(1, 1, lambda: None, False)
    pace.start()
    now[0] = 1.0
    pace.step(10)  # the warm-up step: the pace is measured from here
    now[0] = 2.0
    pace.step(10)
    pace.eval_seconds += 0.5
    pace.aside_seconds += 3.0
    now[0] = 6.5
    pace.step(10)
    assert pace.elapsed() == 3.0  # 6.5 s, less 0.5 s of evaluation and 3 s of measurement
    assert pace.finish(6.5) == (20 / 2.0, None)  # 20 images in the 2 s of training after the warm-up


def test_the_cross_rank_check_by_hand_on_one_process():
    """Due at --check-every, the preemption step and an epoch's end; the loss since the last check goes to the
    divergence monitor, then starts again; a signal or the preemption step stops; a diverged trial stops at once
    only where it must."""
    import torch

    from lbscale.train.checkpoint import Progress
    from lbscale.train.monitors import CrossRankCheck, TrainLoss

    cfg = SimpleNamespace(check_every=4, preempt_after_steps=6, on_divergence="stop")
    loss = TrainLoss(torch.device("cpu"))
    check = CrossRankCheck(cfg, SimpleNamespace(micro_batches_per_epoch=10, global_batch=32), loss,
                           DivergenceMonitor(2.0, 1), None)
    assert [s for s in range(1, 10) if check.due(Progress(step=s, batch=s))] == [4, 6, 8]
    assert check.due(Progress(step=3, batch=10))  # an epoch's end
    for value in (1.0, 3.0):
        loss.add(torch.tensor(value, dtype=torch.float64))
    assert check(Progress(step=4), False) is None and check.divergence.initial_loss == 2.0
    assert loss.window.tolist() == [0.0, 0.0] and loss.epoch.tolist() == [4.0, 2.0] and loss.epoch_mean() == 2.0
    assert check(Progress(step=5), True) == "stop" and check(Progress(step=6), False) == "stop"
    loss.add(torch.tensor(5.0, dtype=torch.float64))
    p = Progress(epoch=1, step=8)
    assert check(p, False) == "diverged" and p.diverged_at == {"epoch": 2, "step": 8}
