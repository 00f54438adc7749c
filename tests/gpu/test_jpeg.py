"""The ImageNet input path on a GPU: nvjpeg (torchvision.io.decode_jpeg on the device) decodes and crops a
batch as the CPU path does, and a trial trains from a prepared JPEG file with it."""

import json

import pytest

from tests.gpu.conftest import need

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def imagenet(cuda, tmp_path_factory):
    need("PIL", "torchvision")
    from lbscale.data.prepare import prepare
    from tests.fixtures.make_imagenet import make_imagenet

    root = tmp_path_factory.mktemp("imagenet")
    make_imagenet(root / "src", layout="loc")
    prepare("imagenet", root / "src", root / "in.h5", workers=4, command="test")
    return root / "in.h5"


def test_nvjpeg_crops_match_the_cpu_decoder(cuda, imagenet, figure):
    import numpy as np

    from lbscale.data.decoder import JpegDecoder
    from lbscale.data.formats import open_prepared
    from lbscale.data.jpeg import random_resized_boxes

    with open_prepared(imagenet) as f:
        payloads = [np.asarray(f.images("train")[i]) for i in range(64)]
        sizes = np.asarray(f.labels("train", "sizes")[:64])  # (height, width) of each stored JPEG
    rng = np.random.default_rng(0)
    boxes, flips = random_resized_boxes(sizes, rng), rng.random(64) < 0.5
    gpu, ready = JpegDecoder(cuda)(payloads, boxes, flips, 32)
    assert ready is not None  # decoded on the decoder's own stream, an event to wait on
    ready.synchronize()
    assert gpu.device.type == "cuda" and gpu.shape == (64, 3, 32, 32)
    cpu, _ = JpegDecoder("cpu", batched=True)(payloads, boxes, flips, 32)  # torchvision's libjpeg, same crops
    diff = float((gpu.float().cpu() - cpu.float()).abs().mean())
    # two decoders of noisy 4:2:0 JPEGs: they differ in chroma upsampling by a few levels (3.7 on an H200);
    # the CPU decoder and PIL's are held to the same bound in tests/data/test_imagenet.py. A wrong channel
    # order, crop or flip is tens of levels off.
    assert diff < 6, diff
    figure("nvjpeg vs torchvision's CPU decode, same 32 px crops of the fixture's JPEGs: mean difference, levels",
           f"{diff:.2f}")


def test_trial_trains_from_jpeg_with_nvjpeg(cuda, imagenet, tmp_path, lbscale, figure):
    out = tmp_path / "jpeg"
    rc, stdout, err = lbscale("train", "--data", imagenet, "--out", out, "--global-batch", "32", "--optimizer",
                              "nesterov", "--base-lr", "0.1", "--epochs", "3", "--eval-split", "test",
                              "--crop-size", "32", "--precision", "bf16", "--model", "test_resnet", "--quiet",
                              "--check-every", "2", "--device", "cuda")
    assert rc == 0, err
    assert "trial completed: test_top1" in stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "completed" and s["final"]["test_top1"] > 0.6, s["final"]  # 4 colour classes
    config = json.loads((out / "config.json").read_text())
    assert config["augmentation"] == "rrc-flip" and config["device"].startswith("cuda")
    figure("JPEG trial (nvjpeg, 32 px crops) test_top1 after 3 epochs", round(s["final"]["test_top1"], 3))
