"""Figures on the GPU, printed and written to LBSCALE_GPU_FIGURES (never timed assertions): the training
benchmark's ratio (lbscale train / a bare torch loop, benchmarks/bench_train.py on the GPU) and ResNet-50's
img/s at 224 px in bf16 through `lbscale train`."""

import json

import pytest

pytestmark = pytest.mark.gpu


def test_training_benchmark_ratio_on_the_gpu(cuda, figure):
    from benchmarks.bench_train import compare

    r = compare("cuda", pairs=3)
    assert r["bare"] > 0 and r["lbscale"] > 0 and len(r["ratios"]) == 3
    figure("bench_train on the GPU (ResNet-50, 28 px x 4, batch 128, LAMB, fp32): bare loop img/s", round(r["bare"]))
    figure("bench_train on the GPU: lbscale train img/s", round(r["lbscale"]))
    figure("bench_train on the GPU: RATIO lbscale / bare (median of 3 pairs; target >= 0.95)",
           f"{r['ratio']:.3f} (pairs {', '.join(f'{x:.3f}' for x in r['ratios'])})")
    figure("bench_train on the GPU: data wait share of the epoch", f"{100 * r['data_wait']:.2f}%")


def test_resnet50_bf16_img_per_second_at_224_px(cuda, tmp_path, lbscale, figure):
    from lbscale.data.prepare import prepare

    data = tmp_path / "224.h5"
    prepare("synthetic", None, data, count=1300, bands=3, size=224, classes=10, val_fraction=0.02,
            test_fraction=0.0, command="test")
    out = tmp_path / "r50"
    rc, _, err = lbscale("train", "--data", data, "--out", out, "--model", "resnet50", "--global-batch", "128",
                         "--optimizer", "lamb", "--base-lr", "0.002", "--lr-scaling", "none", "--epochs", "3",
                         "--warmup-epochs", "0", "--schedule", "constant", "--precision", "bf16", "--in-memory",
                         "--channels-last", "--timing-warmup-steps", "3", "--device", "cuda", "--quiet")
    assert rc == 0, err
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "completed" and s["images_per_second"] > 0
    figure("ResNet-50, 224 px, bf16, batch 128, channels_last, in memory: lbscale train img/s",
           round(s["images_per_second"]))
