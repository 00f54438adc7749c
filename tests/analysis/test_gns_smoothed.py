"""The noise scale near the current step: exponential moving averages of |G|^2 and tr(Sigma), bias-corrected,
against hand values; on a run whose |G|^2 falls 100x it tracks the end, where the whole-run ratio does not."""

import numpy as np
import pytest

from lbscale.analysis.gns import NoiseScale, SmoothedNoiseScale, estimate


def _pair(g2: float, trace: float, b: float = 8, big: float = 64):
    """Squared norms at batches b and big whose estimates are exactly (g2, trace): |G_b|^2 = g2 + trace / b."""
    return g2 + trace / b, g2 + trace / big, b, big


def test_the_estimates_are_averaged_before_the_ratio_by_hand():
    s = SmoothedNoiseScale(decay=0.5)
    s.add(*_pair(4.0, 100.0))
    assert s.b_simple == pytest.approx(25.0)  # one measurement: its own ratio (the bias correction cancels)
    s.add(*_pair(2.0, 100.0))
    # EMA with decay 0.5 from zero: after the first, 0.5 x 4; after the second, 0.5 x that + 0.5 x 2 (the
    # bias correction divides both by the same weight, so the ratio is theirs)
    g2 = 0.5 * (0.5 * 4.0) + 0.5 * 2.0
    trace = 0.5 * (0.5 * 100.0) + 0.5 * 100.0
    assert s.b_simple == pytest.approx(trace / g2)
    assert estimate(*_pair(2.0, 100.0)) == pytest.approx((2.0, 100.0))


def test_the_smoothed_scale_tracks_the_end_of_a_run_whose_gradient_shrinks():
    # |G|^2 falls 100x over training with tr(Sigma) fixed: B_simple grows from 100 to 10,000
    whole, near = NoiseScale(), SmoothedNoiseScale()
    for g2 in np.geomspace(1.0, 0.01, 400):
        whole.add(*_pair(g2, 100.0))
        near.add(*_pair(g2, 100.0))
    assert near.b_simple == pytest.approx(100.0 / 0.01, rel=0.15)  # the last few measurements' scale
    assert whole.b_simple < 0.15 * near.b_simple  # the whole run's ratio of means sits near its start
