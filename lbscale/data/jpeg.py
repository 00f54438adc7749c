"""JPEG samples without torch: crop boxes, the CPU decoder, and the checks and conversions of `prepare`.

Kept free of torch so that decoder processes start in a fraction of a second. The boxes are drawn in the
loader (seeded per epoch, rank and batch) and handed to whichever decoder runs, so the CPU decoder and the
GPU one (lbscale.data.decoder) crop the same windows and a resumed epoch crops what the first run did.
"""

from __future__ import annotations

import io
import math

import numpy as np

SCALE = (0.08, 1.0)  # random-resized crop: share of the image area (Inception / torchvision defaults)
RATIO = (3 / 4, 4 / 3)  # ... and aspect ratio range
CENTER_FRACTION = 0.875  # evaluation: resize the short side to S / 0.875, keep the centre S x S (224 of 256)
QUALITY = 90  # re-encoding quality for converted and shrunk files (as FFCV's default)
ATTEMPTS = 10


def random_resized_boxes(sizes: np.ndarray, rng: np.random.Generator, scale=SCALE, ratio=RATIO) -> np.ndarray:
    """torchvision's RandomResizedCrop.get_params for a batch: (n, 4) int64 boxes (top, left, height, width)
    for images of `sizes` (n, 2) = (height, width). Ten tries per image, then the central crop with the ratio
    clamped, as torchvision does; drawn vectorised, so the stream of random numbers is this function's own."""
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
    n = len(sizes)
    height, width = sizes[:, :1].astype(np.float64), sizes[:, 1:].astype(np.float64)
    area = height * width
    target = area * rng.uniform(scale[0], scale[1], (n, ATTEMPTS))
    aspect = np.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1]), (n, ATTEMPTS)))
    w = np.round(np.sqrt(target * aspect)).astype(np.int64)
    h = np.round(np.sqrt(target / aspect)).astype(np.int64)
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = np.argmax(ok, axis=1)
    found = ok[np.arange(n), first]
    h, w = h[np.arange(n), first], w[np.arange(n), first]
    u = rng.random((n, 2))
    top = np.floor(u[:, 0] * (sizes[:, 0] - h + 1)).astype(np.int64)
    left = np.floor(u[:, 1] * (sizes[:, 1] - w + 1)).astype(np.int64)
    boxes = np.stack([top, left, h, w], axis=1)
    if not found.all():  # fallback: the whole image, cut to the ratio range, centred
        H, W = sizes[~found, 0], sizes[~found, 1]
        in_ratio = W / H
        fw = np.where(in_ratio < ratio[0], W, np.where(in_ratio > ratio[1], np.round(H * ratio[1]), W)).astype(np.int64)
        fh = np.where(in_ratio < ratio[0], np.round(W / ratio[0]), H).astype(np.int64)
        boxes[~found] = np.stack([(H - fh) // 2, (W - fw) // 2, fh, fw], axis=1)
    return boxes


def center_boxes(sizes: np.ndarray, fraction: float = CENTER_FRACTION) -> np.ndarray:
    """Resize-then-centre-crop as one box: the central square of side fraction x the short side."""
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
    side = np.maximum(1, np.round(sizes.min(axis=1) * fraction)).astype(np.int64)
    return np.stack([(sizes[:, 0] - side) // 2, (sizes[:, 1] - side) // 2, side, side], axis=1)


def decode_crop(job: tuple) -> np.ndarray:
    """CPU decoder, one image: (jpeg bytes, box, flip, side) -> (3, side, side) uint8.

    The JPEG is decoded at the smallest DCT scale (1/1 .. 1/8, PIL's `draft`) that still leaves the box at
    least `side` pixels wide and high, then the box is resized (PIL bilinear, antialiased) and flipped."""
    from PIL import Image

    data, (top, left, bh, bw), flip, side = job
    im = Image.open(io.BytesIO(data))
    full_w, full_h = im.size
    im.draft("RGB", (math.ceil(full_w * side / bw), math.ceil(full_h * side / bh)))
    sx, sy = full_w / im.size[0], full_h / im.size[1]
    im = im.convert("RGB")
    out = im.resize((side, side), Image.BILINEAR, box=(left / sx, top / sy, (left + bw) / sx, (top + bh) / sy))
    if flip:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(out).transpose(2, 0, 1)


class BadImage(Exception):
    """A file that does not decode (truncated, corrupt, not an image)."""


def read_image_file(path, max_side: int | None = None) -> tuple[bytes, tuple[int, int], np.ndarray]:
    """One raw ImageNet file -> (stored JPEG bytes, (height, width), pixel stats (7,): sum x3, sum of squares
    x3, pixel count). Decoded in full, so a truncated or corrupt file raises BadImage. Baseline three-channel
    JPEGs are stored as they are; the odd files (PNG or CMYK content named .JPEG, greyscale, progressive)
    and images whose short side exceeds `max_side` are converted to RGB (shrunk) and re-encoded, so that
    every stored sample is a baseline YCbCr JPEG that any decoder (nvjpeg included) reads."""
    from PIL import Image

    with open(path, "rb") as fh:
        data = fh.read()
    try:
        im = Image.open(io.BytesIO(data))
        im.load()
        fmt, mode = im.format, im.mode
        progressive = bool(im.info.get("progressive") or im.info.get("progression"))
        rgb = im.convert("RGB")
    except Exception as e:  # PIL raises many types (OSError, SyntaxError, ValueError, DecompressionBombError)
        raise BadImage(f"{path}: not a readable image ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None
    w, h = rgb.size
    shrink = max_side is not None and min(w, h) > max_side
    if shrink:
        f = max_side / min(w, h)
        w, h = max(1, round(w * f)), max(1, round(h * f))
        rgb = rgb.resize((w, h), Image.BICUBIC, reducing_gap=3.0)
    if shrink or fmt != "JPEG" or mode != "RGB" or progressive:
        buf = io.BytesIO()
        rgb.save(buf, format="JPEG", quality=QUALITY)
        data = buf.getvalue()
    px = np.asarray(rgb).reshape(-1, 3)
    stats = np.concatenate([px.sum(axis=0, dtype=np.uint64).astype(np.float64),
                            np.square(px, dtype=np.uint32).sum(axis=0, dtype=np.uint64).astype(np.float64),
                            [float(len(px))]])
    return data, (h, w), stats
