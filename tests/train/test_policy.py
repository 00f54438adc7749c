"""LR policy: scaling rules, warm-up and schedules, in optimizer steps, against the papers' values."""

import math

import pytest

from lbscale.train.policy import LRPolicy, auto_warmup_epochs, peak_lr


@pytest.mark.parametrize("batch, eta", [(512, 0.2), (8192, 3.2), (16384, 6.4), (32768, 12.8)])
def test_linear_rule_bigearthnet_lars(batch, eta):
    # BigEarthNet + LARS: eta = 0.1 * k * n / 256, with k * n the global batch
    assert peak_lr(0.1, batch, 256, "linear") == pytest.approx(eta)


@pytest.mark.parametrize("batch, factor", [(8192, 1.0), (16384, math.sqrt(2)), (32768, 2.0), (65536, math.sqrt(8))])
def test_sqrt_rule_sat_lamb(batch, factor):
    # SAT-4/6 + LAMB: the square-root rule from the 8k reference batch
    assert peak_lr(0.01, batch, 8192, "sqrt") == pytest.approx(0.01 * factor)


def test_no_scaling_and_bad_rule():
    assert peak_lr(0.1, 65536, 256, "none") == 0.1
    with pytest.raises(ValueError):
        peak_lr(0.1, 512, 256, "cubic")


def test_auto_warmup_scales_with_batch():
    # warm-up in proportion to global batch / reference warm-up batch (5 epochs at 8k)
    assert auto_warmup_epochs(8192, ref_batch=8192, ref_epochs=5) == 5
    assert auto_warmup_epochs(32768, ref_batch=8192, ref_epochs=5) == 20
    assert auto_warmup_epochs(4096, ref_batch=8192, ref_epochs=5) == 2.5


def test_linear_warmup_then_poly():
    p = LRPolicy(peak=1.0, steps_per_epoch=10, epochs=10, warmup_epochs=2, schedule="poly", power=2.0,
                 warmup_start_lr=0.0)
    assert p.warmup_steps == 20 and p.total_steps == 100
    assert p.lr(0) == pytest.approx(1.0 / 20)  # the first step already moves
    assert p.lr(9) == pytest.approx(0.5)
    assert p.lr(19) == pytest.approx(1.0)
    assert p.lr(20) == pytest.approx(1.0)
    assert p.lr(60) == pytest.approx((1 - 40 / 80) ** 2)
    assert p.lr(99) == pytest.approx((1 - 79 / 80) ** 2)


def test_multistep_bigearthnet_milestones():
    # x0.1 at epoch 30, x0.01 at 60, x0.001 at 80, after 5 warm-up epochs
    p = LRPolicy(peak=3.2, steps_per_epoch=100, epochs=90, warmup_epochs=5, schedule="multistep",
                 milestones=(30, 60, 80), factors=(0.1, 0.01, 0.001))
    assert p.lr(5 * 100) == pytest.approx(3.2)
    assert p.lr(30 * 100 - 1) == pytest.approx(3.2)
    assert p.lr(30 * 100) == pytest.approx(0.32)
    assert p.lr(60 * 100) == pytest.approx(0.032)
    assert p.lr(85 * 100) == pytest.approx(0.0032)


def test_multistep_default_factors_are_powers_of_gamma():
    p = LRPolicy(peak=1.0, steps_per_epoch=1, epochs=10, warmup_epochs=0, schedule="multistep", milestones=(3, 6))
    assert [round(p.lr(s), 6) for s in (0, 3, 6)] == [1.0, 0.1, 0.01]


def test_cosine_and_constant():
    c = LRPolicy(peak=2.0, steps_per_epoch=10, epochs=10, warmup_epochs=0, schedule="cosine")
    assert c.lr(0) == pytest.approx(2.0) and c.lr(50) == pytest.approx(1.0) and c.lr(100) == pytest.approx(0.0)
    k = LRPolicy(peak=0.5, steps_per_epoch=10, epochs=10, warmup_epochs=1, schedule="constant")
    assert k.lr(5) == pytest.approx(0.3) and k.lr(50) == 0.5


def test_warmup_without_decay_start_lr_and_clamp():
    p = LRPolicy(peak=1.0, steps_per_epoch=10, epochs=2, warmup_epochs=5, schedule="poly", warmup_start_lr=0.1)
    assert p.warmup_steps == 20  # clamped to the whole run
    assert p.lr(0) == pytest.approx(0.1 + 0.9 / 20)


def test_zero_warmup_starts_at_peak():
    p = LRPolicy(peak=0.4, steps_per_epoch=10, epochs=5, warmup_epochs=0, schedule="poly", power=1.0)
    assert p.lr(0) == pytest.approx(0.4) and p.lr(25) == pytest.approx(0.2)


def test_table_rows():
    p = LRPolicy(peak=1.0, steps_per_epoch=4, epochs=3, warmup_epochs=1, schedule="cosine")
    rows = p.table()
    assert len(rows) == 12 and rows[0][0] == 0 and rows[-1][0] == 11
