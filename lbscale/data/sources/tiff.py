"""Reading (Geo)TIFF bands: a strict fast path for plain uncompressed strips, tifffile for everything else.

BigEarthNet and EuroSAT ship hundreds of thousands of small, uncompressed, strip-organised classic TIFFs.
tifffile parses every tag of every file with general machinery (about 0.2 ms a file); reading the dozen
baseline tags we need with `struct` is several times cheaper. Any file outside that narrow layout
(compression, tiles, BigTIFF, planar separation, odd strips, a second page) goes to tifffile, which also
reports errors; its first series is read whole, so bands stored as pages arrive as bands.
"""

from __future__ import annotations

import logging
import struct

import numpy as np

from lbscale.errors import LbscaleError

# tifffile logs warnings about corrupt files itself; we report them as one error line instead.
logging.getLogger("tifffile").setLevel(logging.ERROR)

WIDTH, LENGTH, BITS, COMPRESSION, OFFSETS, SAMPLES, COUNTS, PLANAR, TILE_WIDTH, SAMPLE_FORMAT = (
    256, 257, 258, 259, 273, 277, 279, 284, 322, 339)
TYPE_SIZE = {3: ("H", 2), 4: ("I", 4)}  # SHORT, LONG: all the baseline tags we read
DTYPES = {(8, 1): "u1", (16, 1): "u2", (16, 2): "i2", (32, 1): "u4", (32, 2): "i4", (32, 3): "f4", (64, 3): "f8"}


def _plain_tiff(data: bytes) -> np.ndarray | None:
    """The image of a classic, uncompressed, strip-organised, chunky TIFF; None when it is anything else."""
    if len(data) < 8 or data[:4] not in (b"II*\0", b"MM\0*"):
        return None
    e = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack_from(e + "I", data, 4)
    if ifd + 2 > len(data):
        return None
    (n,) = struct.unpack_from(e + "H", data, ifd)
    if ifd + 2 + 12 * n > len(data):
        return None
    tags = {}
    for i in range(n):
        code, typ, count = struct.unpack_from(e + "HHI", data, ifd + 2 + 12 * i)
        if typ not in TYPE_SIZE:
            continue
        fmt, size = TYPE_SIZE[typ]
        pos = ifd + 2 + 12 * i + 8
        if count * size > 4:
            (pos,) = struct.unpack_from(e + "I", data, pos)
            if pos + count * size > len(data):
                return None
        tags[code] = struct.unpack_from(f"{e}{count}{fmt}", data, pos)
    nxt = ifd + 2 + 12 * n
    if nxt + 4 > len(data) or struct.unpack_from(e + "I", data, nxt)[0] != 0:
        return None  # more pages (bands, a stack, overviews): tifffile's series says what they are
    spp = tags.get(SAMPLES, (1,))[0]
    bits = set(tags.get(BITS, (1,)))
    if (tags.get(COMPRESSION, (1,))[0] != 1 or TILE_WIDTH in tags or OFFSETS not in tags or COUNTS not in tags
            or len(bits) != 1 or (spp > 1 and tags.get(PLANAR, (1,))[0] != 1)
            or WIDTH not in tags or LENGTH not in tags):
        return None
    fmt = tags.get(SAMPLE_FORMAT, (1,))[0]
    dtype = DTYPES.get((bits.pop(), fmt))
    if dtype is None:
        return None
    w, h = tags[WIDTH][0], tags[LENGTH][0]
    expected = w * h * spp * np.dtype(dtype).itemsize
    offsets, counts = tags[OFFSETS], tags[COUNTS]
    if len(offsets) != len(counts) or sum(counts) < expected or any(o + c > len(data) for o, c in zip(offsets, counts)):
        return None
    if len(offsets) == 1 or all(offsets[i] + counts[i] == offsets[i + 1] for i in range(len(offsets) - 1)):
        raw = data[offsets[0]:offsets[0] + expected]  # contiguous strips: no join needed
    else:
        raw = b"".join(data[o:o + c] for o, c in zip(offsets, counts))[:expected]
    arr = np.frombuffer(raw, dtype=e + dtype).reshape((h, w, spp) if spp > 1 else (h, w))
    return arr.astype(dtype, copy=False) if e == ">" else arr


def read_tiff(path, what: str = "") -> np.ndarray:
    """The first image series of a (Geo)TIFF as (H, W) or (H, W, bands), whether its bands are samples (contiguous
    or planar) or pages; LbscaleError names the file when it is missing, corrupt or not one image of bands."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise LbscaleError(f"{path}: missing{' ' + what if what else ''}") from None
    arr = _plain_tiff(data)
    if arr is not None:
        return arr
    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            series = tif.series[0]
            arr, axes = series.asarray(), series.axes
    except Exception as e:  # tifffile raises TiffFileError, ValueError, struct.error... on corrupt input
        raise LbscaleError(f"{path}: unreadable TIFF ({type(e).__name__}: {e})") from None
    if arr.size == 0:
        raise LbscaleError(f"{path}: unreadable TIFF (no image data)")
    return _height_width_bands(path, arr, axes)


def _height_width_bands(path, arr: np.ndarray, axes: str) -> np.ndarray:
    """tifffile's series array with its axes string (YX, YXS, SYX, QYX, IYX, CYX, ...) -> (H, W) or (H, W, bands).

    The one axis beside Y and X is the bands, whatever tifffile calls it (samples, pages, channels): a GeoTIFF
    writer stores bands as samples, tifffile's imwrite of (bands, H, W) as pages. Two such axes (a stack of
    multi-band images, a time series of them) are refused: which one is the bands is the user's call."""
    keep = [i for i, a in enumerate(axes) if a in "YX" or arr.shape[i] != 1]
    arr, axes = arr.reshape([arr.shape[i] for i in keep]), "".join(axes[i] for i in keep)
    other = [i for i, a in enumerate(axes) if a not in "YX"]
    if "Y" not in axes or "X" not in axes or len(other) > 1:
        raise LbscaleError(f"{path}: TIFF image of shape {arr.shape} (axes {axes}): lbscale reads height, width and "
                           f"one band axis; write one multi-band image per file")
    return arr.transpose([axes.index("Y"), axes.index("X"), *other])
