"""The JPEG input path: decoded training crops per second, and training from JPEG vs from the same images as pixels.

ImageNet-like files: 500 x 375 JPEGs of about 90 KB (smooth colour fields with texture), prepared with
`lbscale prepare imagenet`. (1) the decoder alone turns batches of 128 into 224 px random-resized crops: on
the CPU with one decoder process (the per-core rate) and with one per core, and with nvjpeg on a GPU where
one is visible. (2) `lbscale train` of ResNet-50 (one epoch, LAMB, fp32 on the CPU, bf16 on a GPU) from the
JPEG file and from a pixel file of the same images stored at the crop size, which gets the same random-resized
crop and flip as a batched tensor op; the ratio is JPEG img/s / pixel img/s (target on a GPU: >= 0.95). On the
CPU the model runs at 112 px so that the benchmark stays short; the decoders then share the cores with it."""

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from benchmarks.common import report
from lbscale.train.config import load_config
from lbscale.data.decoder import JpegDecoder, default_workers
from lbscale.data.formats import open_prepared
from lbscale.data.formats.base import DatasetMeta
from lbscale.data.formats.hdf5 import Hdf5Writer
from lbscale.data.jpeg import center_boxes, random_resized_boxes
from lbscale.data.prepare import prepare
from lbscale.results import read_json
from lbscale.train.entry import run_trial

FILES, CLASSES, BATCH = 512, 4, 128


def make_folder(root: Path) -> None:
    rng = np.random.default_rng(0)
    for k in range(FILES):
        coarse = rng.uniform(0, 255, (8, 6, 3)).astype(np.uint8)
        im = Image.fromarray(coarse).resize((500, 375), Image.BICUBIC)
        px = np.clip(np.asarray(im, dtype=np.float32) + rng.normal(0, 12, (375, 500, 3)), 0, 255).astype(np.uint8)
        folder = root / "train" / f"n0000000{k % CLASSES}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(px).save(folder / f"img_{k}.JPEG", quality=90)


def decode_rate(path: Path, decoder: JpegDecoder, side: int = 224, rounds: int = 2) -> float:
    with open_prepared(path) as f:
        images, sizes = f.images("train"), f.labels("train", "sizes")
        payloads = [np.array(p) for p in images.take(range(len(images)))]
    rng = np.random.default_rng(0)
    decoder(payloads[:BATCH], random_resized_boxes(sizes[:BATCH], rng), np.zeros(BATCH, bool), side)  # start-up
    done, t0 = 0, time.perf_counter()
    for _ in range(rounds):
        for a in range(0, len(payloads) - BATCH + 1, BATCH):
            out, ready = decoder(payloads[a:a + BATCH], random_resized_boxes(sizes[a:a + BATCH], rng),
                                 rng.random(BATCH) < 0.5, side)
            if ready is not None:
                ready.synchronize()
            done += BATCH
    return done / (time.perf_counter() - t0)


def pixel_copy(jpeg: Path, out: Path, side: int) -> None:
    """The same images as pixels at the crop size (centre crops), for the training comparison."""
    with open_prepared(jpeg) as f:
        images, sizes, labels = f.images("train"), f.labels("train", "sizes"), f.labels("train")
        decoder = JpegDecoder("cpu", 0)
        pixels, _ = decoder(images.take(range(len(images))), center_boxes(sizes, 1.0), np.zeros(len(sizes), bool),
                            side)
        meta = DatasetMeta("imagenet-pixels", "multiclass", f.class_names, ["R", "G", "B"], "bench")
    with Hdf5Writer(out, meta, "bench") as w:
        w.append("train", pixels.numpy(), labels)
        w.finish()


def train_rate(data: Path, out: Path, device: str, side: int, jpeg: bool) -> float:
    extra = {"crop_size": side} if jpeg else {"augmentation": "rrc-flip"}
    cfg = load_config(None, data=str(data), out=str(out), model="resnet50", global_batch=32 if device == "cpu" else 256,
                      optimizer="lamb", base_lr=0.001, lr_scaling="none", epochs=1, timing_warmup_steps=2,
                      warmup_epochs="0", schedule="constant", device=device,
                      precision="fp32" if device == "cpu" else "bf16", **extra)
    assert run_trial(cfg) == 0
    return read_json(out / "summary.json")["images_per_second"]


def main() -> None:
    cores = default_workers()
    gpu = torch.cuda.is_available()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_folder(tmp / "src")
        size = sum(p.stat().st_size for p in (tmp / "src").rglob("*.JPEG")) / FILES
        t0 = time.perf_counter()
        prepare("imagenet", tmp / "src", tmp / "in.h5", val_fraction=0, test_fraction=0, workers=cores,
                command="bench")
        report(f"prepare imagenet, {FILES} files of {size / 1024:.0f} KB, {cores} workers", FILES /
               (time.perf_counter() - t0), "img/s")
        one = decode_rate(tmp / "in.h5", JpegDecoder("cpu", 1))
        report("JPEG -> 224 px train crops, CPU, 1 decoder process", one, "img/s", "(per core)")
        pool = JpegDecoder("cpu", cores)
        try:
            many = decode_rate(tmp / "in.h5", pool)
        finally:
            pool.close()
        report(f"JPEG -> 224 px train crops, CPU, {cores} decoder processes", many, "img/s",
               f"({many / one:.2f}x one process on {cores} cores)")
        if gpu:
            report("JPEG -> 224 px train crops, GPU (nvjpeg, batched crop)", decode_rate(tmp / "in.h5",
                   JpegDecoder("cuda")), "img/s", "(target >= 8,000 on an H100)")
        side, device = (224, "cuda") if gpu else (112, "cpu")
        pixel_copy(tmp / "in.h5", tmp / "px.h5", side)
        os.environ.setdefault("OMP_NUM_THREADS", str(cores))
        from_jpeg = train_rate(tmp / "in.h5", tmp / "run-jpeg", device, side, True)
        from_pixels = train_rate(tmp / "px.h5", tmp / "run-px", device, side, False)
        report(f"lbscale train ResNet-50 {side} px from JPEG ({device})", from_jpeg, "img/s")
        report(f"lbscale train ResNet-50 {side} px from pixels ({device})", from_pixels, "img/s")
        report("  JPEG / pixels", from_jpeg / from_pixels, "ratio", "(target on a GPU: >= 0.95)")


if __name__ == "__main__":
    main()
