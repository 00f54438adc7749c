"""The alpha-beta cost of ring all-reduce (T = 2 (p-1) alpha + 2 (p-1)/p n beta; the BigEarthNet LARS paper's
D = 2 (N-1) K / N bytes moved per GPU), its fit to measurements, its file, and the epoch-time prediction."""

import json
import math
import random

import numpy as np
import pytest

from lbscale.analysis.allreduce_model import (
    check_fit,
    fit_alpha_beta,
    load_allreduce,
    predict_epoch_seconds,
    ring_allreduce_seconds,
    save_allreduce,
)
from lbscale.errors import LbscaleError

ALPHA, BETA = 30e-6, 1 / 1.2e9  # 30 us, 1.2 GB/s
SIZES = [4096 * 2 ** i for i in range(15)]  # 4 KiB .. 64 MiB


def _points(procs, noise=0.0, seed=0):
    rng = random.Random(seed)
    return [{"procs": p, "bytes": n,
             "seconds": ring_allreduce_seconds(p, n, ALPHA, BETA) * math.exp(rng.gauss(0.0, noise))}
            for p in procs for n in SIZES]


def test_ring_formula_by_hand():
    assert ring_allreduce_seconds(1, 10 ** 9, ALPHA, BETA) == 0.0  # one process moves nothing
    # p = 2: 2 alpha + n beta
    assert ring_allreduce_seconds(2, 1000, 1e-5, 1e-9) == pytest.approx(2e-5 + 1e-6)
    # p = 4: 6 alpha + 1.5 n beta
    assert ring_allreduce_seconds(4, 4e6, 1e-5, 1e-9) == pytest.approx(6e-5 + 6e-3)
    # p = 8, 3 buckets: each bucket pays the latency, the bytes are paid once: 3 * 14 alpha + 1.75 n beta
    assert ring_allreduce_seconds(8, 8e6, 1e-5, 1e-9, buckets=3) == pytest.approx(42e-5 + 14e-3)


@pytest.mark.parametrize("procs", [(2, 4, 8), (2,)])
def test_fit_recovers_alpha_and_beta_exactly(procs):
    fit = fit_alpha_beta(_points(procs))
    assert fit["alpha_seconds"] == pytest.approx(ALPHA, rel=1e-6)
    assert fit["beta_seconds_per_byte"] == pytest.approx(BETA, rel=1e-6)
    assert fit["bandwidth_GBps"] == pytest.approx(1.2, rel=1e-6)
    assert fit["fitted_on_procs"] == list(procs)
    assert fit["rms_relative_error"] < 1e-9


@pytest.mark.parametrize("procs", [(2, 4, 8), (2,)])
def test_fit_recovers_alpha_and_beta_under_noise(procs):
    fit = fit_alpha_beta(_points(procs, noise=0.05, seed=1))
    assert fit["alpha_seconds"] == pytest.approx(ALPHA, rel=0.1)
    assert fit["beta_seconds_per_byte"] == pytest.approx(BETA, rel=0.1)
    assert 0.02 < fit["rms_relative_error"] < 0.1  # the noise shows in the error, it is not fitted away


def test_fit_never_returns_a_negative_latency():
    # times that fall below the bandwidth line at small messages would want alpha < 0
    points = [{"procs": 2, "bytes": n, "seconds": n * BETA - 1e-7 * (n < 10 ** 5)} for n in SIZES]
    points = [p for p in points if p["seconds"] > 0]
    fit = fit_alpha_beta(points)
    assert fit["alpha_seconds"] == 0.0
    assert fit["beta_seconds_per_byte"] > 0


def _rms_relative(points, alpha, beta):
    errs = [ring_allreduce_seconds(p["procs"], p["bytes"], alpha, beta) / p["seconds"] - 1 for p in points]
    return math.sqrt(sum(e * e for e in errs) / len(errs))


def test_fit_minimises_the_relative_error():
    # relative weighting, so that 4 KiB messages (latency) count as much as 64 MiB ones (bandwidth): no nearby
    # (alpha, beta) has a smaller rms relative error; an unweighted fit would follow the big messages alone
    points = _points((2, 4, 8), noise=0.2, seed=2)
    fit = fit_alpha_beta(points)
    a, b = fit["alpha_seconds"], fit["beta_seconds_per_byte"]
    assert fit["rms_relative_error"] == pytest.approx(_rms_relative(points, a, b))
    for da, db in [(1.02, 1), (0.98, 1), (1, 1.02), (1, 0.98)]:
        assert _rms_relative(points, a * da, b * db) > fit["rms_relative_error"]


def test_fit_needs_two_sizes_or_two_process_counts():
    with pytest.raises(LbscaleError, match="message sizes"):
        fit_alpha_beta([{"procs": 2, "bytes": 4096, "seconds": 1e-4}] * 3)
    with pytest.raises(LbscaleError, match="no points"):
        fit_alpha_beta([])


def test_check_compares_prediction_with_measurement():
    fit = fit_alpha_beta(_points((2,)))
    measured = [dict(p, seconds=p["seconds"] * 2) for p in _points((4,))]  # the fabric is twice as slow at 4
    rows = check_fit(measured, fit)
    assert [r["procs"] for r in rows] == [4] * len(SIZES)
    assert all(r["ratio"] == pytest.approx(0.5) for r in rows)  # predicted / measured
    assert rows[0]["predicted"] == pytest.approx(ring_allreduce_seconds(4, SIZES[0], ALPHA, BETA))


def test_predict_epoch_by_hand():
    # alpha 10 us, beta 1 ns/B; 50 MB of gradients in 25 MB buckets = 2 buckets.
    # ring at 2 GPUs: 2 buckets * 2 * 1 * 10 us + 2 * 1/2 * 50e6 * 1e-9 = 40 us + 50 ms = 0.05004 s
    # measured at K0 = 2: 0.3 s per step, of which 0.025 s exposed comm -> f = 0.025 / 0.05004, compute 0.275 s
    # ring at 8 GPUs: 2 * 2 * 7 * 10 us + 2 * 7/8 * 50e6 * 1e-9 = 280 us + 87.5 ms = 0.08778 s
    # exposed at 8: f * 0.08778; steps per epoch: 100000 / (8 * 32) = 390.625
    f = 0.025 / 0.05004
    comm8 = f * 0.08778
    r = predict_epoch_seconds(8, train_samples=100_000, local_batch=32, measured_gpus=2, step_seconds=0.3,
                              comm_seconds=0.025, gradient_bytes=50e6, alpha=1e-5, beta=1e-9, bucket_bytes=25e6)
    assert r.buckets == 2
    assert r.exposed_fraction == pytest.approx(f)
    assert r.compute_seconds == pytest.approx(0.275)
    assert r.comm_seconds == pytest.approx(comm8)
    assert r.steps_per_epoch == pytest.approx(390.625)
    assert r.epoch_seconds == pytest.approx(390.625 * (0.275 + comm8))
    assert r.comm_efficiency_loss == pytest.approx(comm8 / (0.275 + comm8))


def test_predict_strong_scaling_by_hand():
    # the global batch 2 x 32 = 64 fixed: 100000 / 64 = 1562.5 steps per epoch at every K; the measured step
    # (K0 = 2, as in test_predict_epoch_by_hand: compute 0.275 s, f = 0.025 / 0.05004) at 8 GPUs computes a
    # quarter of the batch per GPU: 0.275 * 2/8 = 0.06875 s, plus the exposed ring f * 0.08778
    f = 0.025 / 0.05004
    r = predict_epoch_seconds(8, train_samples=100_000, local_batch=32, measured_gpus=2, step_seconds=0.3,
                              comm_seconds=0.025, gradient_bytes=50e6, alpha=1e-5, beta=1e-9, bucket_bytes=25e6,
                              regime="strong")
    assert r.steps_per_epoch == pytest.approx(1562.5)
    assert r.compute_seconds == pytest.approx(0.06875)
    assert r.comm_seconds == pytest.approx(f * 0.08778)
    assert r.epoch_seconds == pytest.approx(1562.5 * (0.06875 + f * 0.08778))
    # at the measured count both regimes give the measured step back
    same = predict_epoch_seconds(2, train_samples=100_000, local_batch=32, measured_gpus=2, step_seconds=0.3,
                                 comm_seconds=0.025, gradient_bytes=50e6, alpha=1e-5, beta=1e-9, bucket_bytes=25e6,
                                 regime="strong")
    assert same.epoch_seconds == pytest.approx(1562.5 * 0.3)
    with pytest.raises(LbscaleError, match="regime"):
        predict_epoch_seconds(8, train_samples=100_000, local_batch=32, measured_gpus=2, step_seconds=0.3,
                              comm_seconds=0.025, gradient_bytes=50e6, alpha=1e-5, beta=1e-9, regime="both")


def test_predict_from_one_gpu_assumes_no_overlap():
    # K0 = 1: nothing to calibrate, f = 1. Ring at 4: 1 bucket * 6 * 1e-5 + 1.5 * 1e6 * 1e-9 = 0.00156 s
    r = predict_epoch_seconds(4, train_samples=1000, local_batch=10, measured_gpus=1, step_seconds=0.1,
                              comm_seconds=None, gradient_bytes=1e6, alpha=1e-5, beta=1e-9)
    assert r.exposed_fraction == 1.0
    assert r.comm_seconds == pytest.approx(0.00156)
    assert r.epoch_seconds == pytest.approx(25 * (0.1 + 0.00156))
    # one GPU predicted: no communication at all
    one = predict_epoch_seconds(1, train_samples=1000, local_batch=10, measured_gpus=1, step_seconds=0.1,
                                comm_seconds=None, gradient_bytes=1e6, alpha=1e-5, beta=1e-9)
    assert one.comm_seconds == 0.0 and one.comm_efficiency_loss == 0.0
    assert one.epoch_seconds == pytest.approx(100 * 0.1)


def test_predict_clips_the_exposed_fraction():
    # more exposed comm measured than the ring predicts (a congested fabric): f is clipped to 1
    r = predict_epoch_seconds(4, train_samples=1000, local_batch=10, measured_gpus=2, step_seconds=1.0,
                              comm_seconds=0.5, gradient_bytes=1e6, alpha=1e-5, beta=1e-9)
    assert r.exposed_fraction == 1.0
    assert r.compute_seconds == pytest.approx(0.5)


def test_predict_rejects_impossible_input():
    kw = dict(train_samples=1000, local_batch=10, measured_gpus=2, gradient_bytes=1e6, alpha=1e-5, beta=1e-9)
    with pytest.raises(LbscaleError, match="comm_seconds"):
        predict_epoch_seconds(4, step_seconds=0.1, comm_seconds=0.2, **kw)
    with pytest.raises(LbscaleError, match="gpus"):
        predict_epoch_seconds(0, step_seconds=0.1, comm_seconds=0.0, **kw)


def _doc():
    points = _points((2, 4))
    return {"system": "local", "backend": "gloo", "points": points, "fit": fit_alpha_beta(points)}


def test_file_round_trip(tmp_path):
    path = tmp_path / "allreduce-local.json"
    save_allreduce(path, _doc())
    doc = load_allreduce(path)
    assert doc["fit"]["alpha_seconds"] == pytest.approx(ALPHA)
    assert len(doc["points"]) == 2 * len(SIZES)


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"system": "x", "points": []}), "'fit'"),
    (json.dumps({"system": "x", "points": [], "fit": {"alpha_seconds": -1, "beta_seconds_per_byte": 1e-9}}),
     "alpha_seconds"),
    (json.dumps({"system": "x", "points": [], "fit": {"alpha_seconds": 1e-5, "beta_seconds_per_byte": "fast"}}),
     "beta_seconds_per_byte"),
    (json.dumps({"system": "x", "fit": {"alpha_seconds": 1e-5, "beta_seconds_per_byte": 1e-9},
                 "points": [{"procs": 2, "bytes": 4096}]}), r"points\[0\]"),
])
def test_malformed_file_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "allreduce.json"
    path.write_text(text)
    with pytest.raises(LbscaleError, match=message) as e:
        load_allreduce(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(LbscaleError, match="no such file"):
        load_allreduce(tmp_path / "absent.json")
    with pytest.raises(LbscaleError, match="not a file"):
        load_allreduce(tmp_path)


def test_predict_at_the_measured_count_is_the_measurement_by_hand():
    # defect: f was capped at 1 but the whole measured comm (0.03 s) subtracted; the ring at 2 GPUs is
    # 2 * 1/2 * 1e8 * 1e-10 = 0.01 s, so the prediction was (0.10 - 0.03 + 0.01) * 100 = 8.0 s, not 10.0 s
    r = predict_epoch_seconds(2, train_samples=6400, local_batch=32, measured_gpus=2, step_seconds=0.10,
                              comm_seconds=0.03, gradient_bytes=1e8, alpha=0, beta=1e-10)
    assert r.steps_per_epoch == 100
    assert r.epoch_seconds == 10.0


def test_predict_at_the_measured_count_is_the_measurement_for_random_inputs():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        measured = int(rng.integers(1, 64))
        step = float(10 ** rng.uniform(-3, 1))
        comm = None if rng.random() < 0.2 else float(step * rng.uniform(0, 0.999))
        kw = dict(train_samples=float(rng.integers(1, 10 ** 7)), local_batch=float(rng.integers(1, 4096)),
                  measured_gpus=measured, step_seconds=step, comm_seconds=comm,
                  gradient_bytes=float(10 ** rng.uniform(0, 10)), alpha=float(10 ** rng.uniform(-7, -2)),
                  beta=float(10 ** rng.uniform(-12, -8)), bucket_bytes=float(10 ** rng.uniform(5, 8)),
                  regime=str(rng.choice(["weak", "strong"])))
        r = predict_epoch_seconds(measured, **kw)
        steps = kw["train_samples"] / (measured * kw["local_batch"])
        assert r.step_seconds == step, kw
        assert r.epoch_seconds == steps * step, kw
