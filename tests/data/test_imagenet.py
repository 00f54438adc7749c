"""ImageNet: prepare from the three folder layouts (odd files converted, bad files named or skipped), the JPEG
input path (crop boxes, batched crop-and-resize, CPU decoder), and training / resume / DDP / sweep from JPEG."""

import io
import json

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from lbscale.data.decoder import JpegDecoder
from lbscale.data.formats import open_prepared
from lbscale.data.jpeg import center_boxes, decode_crop, random_resized_boxes
from lbscale.data.loader import ShardedLoader
from lbscale.data.transforms import crop_resize
from tests.fixtures.make_imagenet import ODD, WNIDS, WORDS, jpeg_bytes, make_imagenet
from tests.train.helpers import run_train, summary

COMMON = ["--model", "test_resnet", "--quiet", "--check-every", "2", "--device", "cpu", "--crop-size", "32"]


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    """(folder, prepared file, truth) of the re-distribution's layout (flat val + LOC_val_solution.csv)."""
    from lbscale.data.prepare import prepare

    root = tmp_path_factory.mktemp("imagenet")
    truth = make_imagenet(root / "src", layout="loc")
    prepare("imagenet", root / "src", root / "in.h5", workers=2, command="test")
    return root / "src", root / "in.h5", truth


def _decoded(data: np.ndarray) -> Image.Image:
    im = Image.open(io.BytesIO(data.tobytes()))
    im.load()
    return im


@pytest.mark.parametrize("layout", ["folders", "loc", "devkit"])
def test_prepare_layouts_labels_and_odd_files(layout, tmp_path, run_cli, imagenet):
    if layout == "loc":
        src, out, truth = imagenet
    else:
        src, out = tmp_path / "src", tmp_path / "in.h5"
        truth = make_imagenet(src, layout=layout)
        rc, stdout, err = run_cli("prepare", "imagenet", "--src", src, "--out", out, "--val-fraction", "0")
        assert rc == 0, err
        assert "train 240, val 0, test 40" in stdout
    with open_prepared(out) as f:
        assert f.class_names == WNIDS and f.encoding == "jpeg" and f.band_names == ["R", "G", "B"]
        words = json.loads(json.loads(f.attrs["notes"])["class_words"])
        assert words == (WORDS if layout != "folders" else [""] * 4)
        for split, official in (("train", "train"), ("val", "train"), ("test", "val")):
            names, labels, images, sizes = f.names(split), f.labels(split), f.images(split), f.labels(split, "sizes")
            assert [truth[official][n] for n in names] == labels.tolist()
            for data, size in zip(images.take(range(len(names))), sizes):
                im = _decoded(data)
                # every stored sample is a baseline RGB JPEG of the recorded size, odd files included
                assert im.format == "JPEG" and im.mode == "RGB" and not im.info.get("progressive")
                assert (im.height, im.width) == tuple(size)
        assert f.size("train") + f.size("val") == 240 and f.size("test") == 40
        mean = f.mean
    assert np.all((mean > 30) & (mean < 230))
    assert run_cli("data", "check", out)[0] == 0


def test_odd_files_are_converted_and_plain_ones_kept_byte_for_byte(imagenet):
    src, out, _ = imagenet
    with open_prepared(out) as f:
        stored = {}
        for split in ("train", "val"):
            stored.update(zip(f.names(split), f.images(split).take(range(f.size(split)))))
    for kind, (c, i) in ODD.items():
        name = f"train/{WNIDS[c]}/{WNIDS[c]}_{i}.JPEG"
        assert stored[name].tobytes() != (src / name).read_bytes(), kind  # re-encoded
    plain = f"train/{WNIDS[0]}/{WNIDS[0]}_0.JPEG"
    assert stored[plain].tobytes() == (src / plain).read_bytes()


def test_max_side_caps_the_short_side(tmp_path, run_cli):
    make_imagenet(tmp_path / "src", per_class=8, val_per_class=2)
    rc, _, err = run_cli("prepare", "imagenet", "--src", tmp_path / "src", "--out", tmp_path / "s.h5",
                         "--max-side", "30")
    assert rc == 0, err
    with open_prepared(tmp_path / "s.h5") as f:
        sizes = np.concatenate([f.labels(s, "sizes") for s in f.splits()])
    assert sizes.min(axis=1).max() <= 30 and sizes.max() > 30  # the long side keeps the aspect ratio


def test_truncated_file_is_named_or_skipped(tmp_path, run_cli):
    make_imagenet(tmp_path / "src", per_class=20, val_per_class=2, truncated=True)
    out = tmp_path / "bad.h5"
    rc, _, err = run_cli("prepare", "imagenet", "--src", tmp_path / "src", "--out", out)
    assert rc == 2 and "n01443537_1.JPEG: not a readable image" in err and "--skip-bad" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists() and not list(tmp_path.glob(".bad.h5*"))
    rc, stdout, err = run_cli("prepare", "imagenet", "--src", tmp_path / "src", "--out", out, "--skip-bad",
                              "--val-fraction", "0")
    assert rc == 0 and "train 79," in stdout
    with open_prepared(out) as f:
        assert json.loads(json.loads(f.attrs["notes"])["skipped"]) == ["train/n01443537/n01443537_1.JPEG"]
        assert "train/n01443537/n01443537_1.JPEG" not in f.names("train")
        assert "train/n01443537/n01443537_2.JPEG" in f.names("train")


def test_same_file_names_in_train_and_val_are_different_samples(tmp_path, run_cli):
    # train/<wnid>/<wnid>_0.JPEG and val/<wnid>/<wnid>_0.JPEG are two images: names are paths in the source
    src, out = tmp_path / "src", tmp_path / "in.h5"
    truth = make_imagenet(src, per_class=6, val_per_class=3, val_like_train=True)
    rc, stdout, err = run_cli("prepare", "imagenet", "--src", src, "--out", out, "--val-fraction", "0.2")
    assert rc == 0 and "test 12" in stdout, err
    with open_prepared(out) as f:
        assert sorted(f.names("test")) == sorted(truth["val"])  # val/n01440764/n01440764_0.JPEG, ...
        assert sorted(f.names("train") + f.names("val")) == sorted(truth["train"])
        for split, official in (("train", "train"), ("val", "train"), ("test", "val")):
            assert [truth[official][n] for n in f.names(split)] == f.labels(split).tolist()
    assert run_cli("data", "check", out) == (0, f"{out}: OK\n", "")


def test_one_source_file_in_two_splits_is_still_leakage(tmp_path, run_cli):
    # a val file that is a link to a train file is the same sample: the check must flag it
    src, out = tmp_path / "src", tmp_path / "in.h5"
    make_imagenet(src, per_class=6, val_per_class=3, val_like_train=True)
    shared = f"train/{WNIDS[2]}/{WNIDS[2]}_4.JPEG"
    (src / "val" / WNIDS[2] / "copy.JPEG").symlink_to(src / shared)
    rc, stdout, err = run_cli("prepare", "imagenet", "--src", src, "--out", out, "--val-fraction", "0")
    assert rc == 0 and "test 13" in stdout, err
    rc, _, err = run_cli("data", "check", out)
    assert rc == 2 and err == f"lbscale: error: {out}: test and train share 1 samples (e.g. {shared})\n"


@pytest.mark.parametrize("case, needle", [
    ("no-labels", "images in no class folders; give their labels with --val-labels"),
    ("missing-row", "ILSVRC2012_val_00000003.JPEG: no label in"),
    ("unknown-wnid", "labelled n09999999, which has no train folder"),
    ("tfrecord", "--format tfrecord does not store JPEG-encoded samples"),
    ("no-train", "no train/ folder"),
])
def test_bad_imagenet_inputs_one_line_exit_2(case, needle, tmp_path, run_cli):
    src = tmp_path / "src"
    make_imagenet(src, per_class=3, val_per_class=2, layout="folders" if case == "no-train" else "loc")
    extra = []
    csv = src / "LOC_val_solution.csv"
    if case == "no-labels":
        csv.unlink()
    elif case == "missing-row":
        csv.write_text("\n".join(line for line in csv.read_text().splitlines() if "_00000003" not in line) + "\n")
    elif case == "unknown-wnid":
        csv.write_text(csv.read_text().replace(WNIDS[0], "n09999999").replace(WNIDS[1], "n09999999")
                       .replace(WNIDS[2], "n09999999").replace(WNIDS[3], "n09999999"))
    elif case == "tfrecord":
        extra = ["--format", "tfrecord"]
    elif case == "no-train":
        (src / "train").rename(src / "training")
    rc, _, err = run_cli("prepare", "imagenet", "--src", src, "--out", tmp_path / "o.h5", *extra)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o.h5").exists()


# --- the JPEG input path ------------------------------------------------------------------------------------

def test_random_resized_boxes_follow_torchvision_rules():
    rng = np.random.default_rng(0)
    sizes = np.stack([rng.integers(20, 400, 2000), rng.integers(20, 400, 2000)], axis=1)
    boxes = random_resized_boxes(sizes, np.random.default_rng(1))
    top, left, h, w = boxes.T
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= sizes[:, 0]).all() and (left + w <= sizes[:, 1]).all()
    big = sizes.min(axis=1) >= 100  # where rounding to whole pixels hardly matters
    area, ratio = (h * w / (sizes[:, 0] * sizes[:, 1]))[big], (w / h)[big]
    assert area.min() > 0.075 and area.max() <= 1.0  # area 8% .. 100%, ratio 3/4 .. 4/3 up to rounding
    assert ratio.min() > 0.72 and ratio.max() < 1.38
    # the same distribution as torchvision's own sampler (rejection makes large boxes of elongated images rare)
    from torchvision.transforms import RandomResizedCrop

    torch.manual_seed(0)
    theirs = np.array([RandomResizedCrop.get_params(torch.empty(1, int(a), int(b)), [0.08, 1.0], [3 / 4, 4 / 3])
                       for a, b in sizes])
    their_area = theirs[:, 2] * theirs[:, 3] / (sizes[:, 0] * sizes[:, 1])
    ours = h * w / (sizes[:, 0] * sizes[:, 1])
    for q in (0.1, 0.25, 0.5, 0.75, 0.9):
        assert abs(np.quantile(ours, q) - np.quantile(their_area, q)) < 0.04, q
    assert np.array_equal(boxes, random_resized_boxes(sizes, np.random.default_rng(1)))  # seeded
    # a sliver no 3/4..4/3 box of >= 8% fits: torchvision's fallback, the whole height at ratio 4/3, centred
    assert random_resized_boxes(np.array([[10, 400]]), np.random.default_rng(0)).tolist() == [[0, 193, 10, 13]]
    assert center_boxes(np.array([[256, 320]])).tolist() == [[16, 48, 224, 224]]  # 224 of a 256 short side


def test_batched_crop_resize_equals_per_image_interpolate():
    rng = np.random.default_rng(0)
    images = [torch.randint(0, 256, (3, int(h), int(w)), dtype=torch.uint8) for h, w in rng.integers(9, 90, (20, 2))]
    sizes = np.array([im.shape[1:] for im in images])
    boxes = random_resized_boxes(sizes, rng)
    flips = rng.random(20) < 0.5
    out = crop_resize(images, torch.from_numpy(boxes), torch.from_numpy(flips), (24, 40), chunk=7)
    assert out.shape == (20, 3, 24, 40) and out.dtype == torch.float32
    for im, (t, x, h, w), flip, got in zip(images, boxes, flips, out):
        ref = F.interpolate(im[None, :, t:t + h, x:x + w].float(), size=(24, 40), mode="bilinear",
                            align_corners=False)[0]
        torch.testing.assert_close(got, ref.flip(-1) if flip else ref, rtol=1e-5, atol=1e-3)


def test_cpu_decoder_same_crops_for_any_worker_count_and_close_to_the_reference():
    rng = np.random.default_rng(0)
    pixels = [np.clip(rng.normal(128, 40, (int(h), int(w), 3)).cumsum(axis=1) / np.arange(1, w + 1)[None, :, None],
                      0, 255).astype(np.uint8) for h, w in rng.integers(40, 120, (9, 2))]  # smooth rows
    payloads = [np.frombuffer(jpeg_bytes(p), dtype=np.uint8) for p in pixels]
    sizes = np.array([p.shape[:2] for p in pixels])
    boxes, flips = random_resized_boxes(sizes, rng), rng.random(9) < 0.5
    inline, _ = JpegDecoder("cpu", workers=0)(payloads, boxes, flips, 32)
    pool = JpegDecoder("cpu", workers=2)
    try:
        parallel, _ = pool(payloads, boxes, flips, 32)
    finally:
        pool.close()
    assert inline.dtype == torch.uint8 and inline.shape == (9, 3, 32, 32) and torch.equal(inline, parallel)
    decoded = [torch.from_numpy(np.asarray(_decoded(p)).transpose(2, 0, 1).copy()) for p in payloads]
    reference = crop_resize(decoded, torch.from_numpy(boxes), torch.from_numpy(flips), 32)
    assert (inline.float() - reference).abs().mean() < 6  # PIL's scaled decode + antialiased resize vs bilinear
    batched, ready = JpegDecoder("cpu", batched=True)(payloads, boxes, flips, 32)  # the GPU path's code, on the CPU
    assert ready is None and batched.dtype == torch.float32
    torch.testing.assert_close(batched, reference, rtol=0, atol=3.0)  # torchvision's libjpeg vs PIL's
    assert decode_crop((payloads[0].tobytes(), tuple(boxes[0]), bool(flips[0]), 32)).shape == (3, 32, 32)


def test_loader_crops_are_seeded_per_batch_and_resume_exactly(imagenet):
    _, path, _ = imagenet
    loader = ShardedLoader(path, "train", 0, 1, local_batch=16, seed=3, random_crop=True, crop_size=24)
    loader.set_epoch(1)
    first = list(loader)
    assert len(first) == len(loader) and first[0].images.shape == (16, 3, 24, 24)
    again = list(loader.iterate(start_batch=4))  # a resumed epoch decodes what the interrupted one did
    assert all(torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) for a, b in zip(first[4:], again))
    loader.set_epoch(2)
    assert not torch.equal(next(iter(loader)).images, first[0].images)
    evaluation = ShardedLoader(path, "test", 0, 1, local_batch=16, drop_last=False, even=False, crop_size=24)
    assert sum(len(b.labels) for b in evaluation) == 40


def test_train_from_jpeg_learns_and_resumes_exactly(imagenet, tmp_path, run_cli):
    _, path, _ = imagenet
    base = ["--data", path, "--global-batch", "32", "--optimizer", "nesterov", "--base-lr", "0.1", "--epochs", "3",
            "--eval-split", "test", "--decode-workers", "1", *COMMON]
    rc, out, err = run_cli("train", *base, "--out", tmp_path / "whole")
    assert rc == 0, err
    assert "trial completed: test_top1" in out
    whole = summary(tmp_path / "whole")
    assert whole["final"]["test_top1"] > 0.6  # 4 colour classes: chance 0.25
    config = json.loads((tmp_path / "whole" / "config.json").read_text())
    assert config["augmentation"] == "rrc-flip" and config["config"]["crop_size"] == 32
    rc, _, _ = run_cli("train", *base, "--out", tmp_path / "cut", "--preempt-after-steps", "8")
    assert rc == 75
    assert run_cli("train", *base, "--out", tmp_path / "cut", "--resume")[0] == 0
    assert summary(tmp_path / "cut")["param_digests"] == whole["param_digests"]


@pytest.mark.parametrize("args, needle", [
    (["--augmentation", "flip-rot90"], "JPEG data is augmented at decode time"),
    (["--crop-size", "4"], "--crop-size must be >= 8"),
])
def test_jpeg_training_options_refused(imagenet, tmp_path, run_cli, args, needle):
    rc, _, err = run_cli("train", "--data", imagenet[1], "--out", tmp_path / "t", "--global-batch", "32",
                         *COMMON[:-2], *args)
    assert rc == 2 and needle in err


def test_crop_size_on_pixel_data_refused(tiny_h5, tmp_path, run_cli):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "t", "--crop-size", "32", "--quiet")
    assert rc == 2 and "apply to JPEG data" in err


@pytest.mark.slow
def test_two_process_ddp_from_jpeg(imagenet, tmp_path):
    out = tmp_path / "ddp"
    r = run_train("--data", imagenet[1], "--out", out, "--global-batch", "32", "--optimizer", "lamb", "--base-lr",
                  "0.005", "--epochs", "1", "--decode-workers", "1", *COMMON, nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    s = summary(out)
    assert s["status"] == "completed" and s["world_size"] == 2 and s["param_digests"][0] == s["param_digests"][1]


@pytest.mark.slow
def test_sweep_and_report_from_jpeg(imagenet, tmp_path, run_cli):
    spec = tmp_path / "in.yaml"
    spec.write_text(f"""
name: in-small
data: {imagenet[1]}
model: test_resnet
epochs: 2
trial: {{optimizer: sgd, base_lr: 0.1, ref_batch: 32, crop_size: 24, decode_workers: 0, eval_split: test,
        device: cpu, check_every: 1, timing_warmup_steps: 1}}
grid:
  batch: [16, 64]
  seeds: 1
""")
    results = tmp_path / "res"
    rc, out, err = run_cli("sweep", spec, "--results", results, "--quiet")
    assert rc == 0, err
    for d in sorted(p for p in results.iterdir() if (p / "summary.json").exists()):
        assert summary(d)["status"] == "completed"
    rc, out, err = run_cli("report", results, "--out", tmp_path / "rep", "--format", "md")
    assert rc == 0, err
    assert "Accuracy (test)" in "".join(p.read_text() for p in (tmp_path / "rep").glob("*.md"))


def test_jpeg_file_layout(imagenet):
    with h5py.File(imagenet[1], "r") as h5:
        g = h5["train"]
        assert g["images"].dtype == np.uint8 and g["images"].ndim == 1
        n = g["labels"].shape[0]
        assert g["offsets"].shape == (n,) and g["lengths"].shape == (n,) and g["sizes"].shape == (n, 2)
        assert int(g["offsets"][-1] + g["lengths"][-1]) == g["images"].shape[0]
        assert h5.attrs["encoding"] == "jpeg"


def test_prepare_imagenet_help_lists_it(run_cli):
    rc, out, _ = run_cli("prepare", "--help")
    assert rc == 0 and "imagenet" in out and "--max-side" in out


def test_filter_refuses_jpeg_data(imagenet, tmp_path, run_cli):
    rc, _, err = run_cli("filter", "--data", imagenet[1], "--model", "resnet18", "--pretrained", "--out",
                         tmp_path / "f.h5")
    assert rc == 2 and "JPEG-encoded samples; lbscale filter reads pixel files" in err
    assert not (tmp_path / "f.h5").exists()
