"""The epoch's last partial batch: `--last-batch keep` trains it (Keras `fit`'s count, a full pass of the data),
`drop` leaves it out; time per epoch is reported for a full pass either way."""

import json
import math

import pytest
import torch

from lbscale.train.config import TrialConfig
from lbscale.train.plan import resolve_plan
from tests.train.helpers import summary


def _plan(n, batch, world, last_batch, local=None, epochs=1):
    cfg = TrialConfig(data="x.h5", out="o", global_batch=batch, local_batch=local, last_batch=last_batch,
                      epochs=epochs)
    return resolve_plan(cfg, world, n)


def test_sat6_at_65k_trains_its_whole_epoch_with_keep():
    # SAT-6: 324,000 train images; 65,536 on 32 GPUs (local 2048): 10,125 per rank.
    drop, keep = _plan(324_000, 65_536, 32, "drop"), _plan(324_000, 65_536, 32, "keep")
    assert drop.steps_per_epoch == 4 and drop.epoch_samples == 4 * 65_536  # 262,144: 81% of the data
    assert keep.steps_per_epoch == 5 and keep.epoch_samples == 324_000  # ceil(10,125 / 2,048) = 5
    assert keep.micro_batches_per_epoch == 5


def test_keep_counts_per_rank_shards_and_accumulation():
    # 1,000 samples on 3 ranks: 333 each (1 left out this epoch); local 16 x accum 4: 21 micro-batches
    # (20 x 16 + 13), 6 steps (5 x 4 micro + 1 micro).
    p = _plan(1000, 192, 3, "keep", local=16)
    assert (p.accum_steps, p.micro_batches_per_epoch, p.steps_per_epoch, p.epoch_samples) == (4, 21, 6, 999)
    d = _plan(1000, 192, 3, "drop", local=16)
    assert (d.micro_batches_per_epoch, d.steps_per_epoch, d.epoch_samples) == (20, 5, 960)


def test_a_one_sample_last_batch_is_left_out():
    # 545 per rank at local 32: 17 full batches and 1 sample, which BatchNorm cannot train on
    p = _plan(545, 32, 1, "keep")
    assert p.micro_batches_per_epoch == 17 and p.epoch_samples == 544


def test_imagenet_goyal_step_count():
    # 90 epochs of 1,281,167 at 8,192 on 256 GPUs (local 32): Keras' count, 157 per epoch; drop: 156
    assert _plan(1_281_167, 8192, 256, "keep", epochs=90).total_steps == 90 * 157
    assert _plan(1_281_167, 8192, 256, "drop", epochs=90).total_steps == 90 * 156


def _params(out):
    return torch.load(out / "checkpoint" / "model.pt", weights_only=False)["model"]


def test_a_partial_accumulated_step_equals_one_partial_batch(synthetic_h5, tmp_path, run_cli):
    # 2,100 train samples at 64: the 33rd step holds 52 samples; 16 x 4 micro-batches (the last step 16, 16,
    # 16, 4) must give the gradient of the one batch of 52, each micro-batch weighted by its share.
    base = ["--data", synthetic_h5, "--model", "test_convnext", "--global-batch", "64", "--optimizer", "sgd",
            "--base-lr", "0.05", "--epochs", "1", "--no-augment", "--quiet", "--last-batch", "keep"]
    assert run_cli("train", *base, "--out", tmp_path / "acc", "--local-batch", "16")[0] == 0
    assert run_cli("train", *base, "--out", tmp_path / "big", "--accum-steps", "1")[0] == 0
    assert summary(tmp_path / "acc")["steps"] == 33 == summary(tmp_path / "big")["steps"]
    a, b = _params(tmp_path / "acc"), _params(tmp_path / "big")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


def test_time_per_epoch_is_for_a_full_pass(tiny_h5, tmp_path, run_cli):
    # 560 train samples at 48: drop trains 11 x 48 = 528; keep trains 12 steps, all 560
    for mode, trained in (("drop", 528), ("keep", 560)):
        out = tmp_path / mode
        rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--global-batch", "48", "--epochs", "2",
                             "--model", "test_resnet", "--quiet", "--device", "cpu", "--last-batch", mode)
        assert rc == 0, err
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == ([11, 22] if mode == "drop" else [12, 24])
        for r in rows:
            assert r["samples"] == trained
            assert r["full_pass_seconds"] == pytest.approx(r["train_seconds"] * 560 / trained)
        assert summary(out)["mean_epoch_seconds"] == pytest.approx(rows[1]["full_pass_seconds"])
        assert math.isfinite(summary(out)["final"]["train_loss"])


def test_keep_refuses_a_batch_larger_than_the_split():
    from lbscale.errors import LbscaleError

    with pytest.raises(LbscaleError, match="larger than the train split"):
        _plan(1000, 2048, 1, "keep")
