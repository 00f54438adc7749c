"""`prepare folder` keeps what a PNG holds: 16-bit grey as one uint16 band, palette images as RGB / RGBA, bilevel
as 0/255 grey, grey + alpha as two bands; a mode it cannot keep (CMYK, 32-bit ints past uint16, floats, 16-bit
colour that PIL decodes to 8 bits) is one line naming the file and its mode. Every file is written here; the
expected pixels are the arrays written or numpy's palette lookup, and the prepared file is read with h5py."""

import struct
import zlib

import h5py
import numpy as np
import pytest
from PIL import Image

CLASSES = ("dark", "light")


def read_back(path) -> dict:
    """name -> (C, H, W) pixels of every split of a prepared HDF5 file, read with h5py alone."""
    out = {}
    with h5py.File(path, "r") as h5:
        for split in ("train", "val", "test"):
            for name, img in zip(h5[split]["names"][...], h5[split]["images"][...]):
                out[name.decode() if isinstance(name, bytes) else str(name)] = img
    return out


def grey16_folder(root, per_class=6, side=12, seed=0) -> dict:
    """root/<class>/<i>.png, 16-bit grey PNGs (PIL mode I;16) with values over all of 0..65535; name -> (H, W)."""
    rng = np.random.default_rng(seed)
    pixels = {}
    for c in CLASSES:
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            arr = rng.integers(0, 65536, (side, side), dtype=np.uint16)
            arr[0, :2] = 0, 65535
            Image.fromarray(arr).save(root / c / f"{i}.png")
            pixels[f"{c}/{i}.png"] = arr
    return pixels


def test_16_bit_grey_pngs_are_one_uint16_band(tmp_path, run_cli):
    pixels = grey16_folder(tmp_path / "src")
    with Image.open(tmp_path / "src" / "dark" / "0.png") as im:
        assert im.mode == "I;16"  # what Pillow makes of a 16-bit grey PNG
    out = tmp_path / "g.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--quiet")
    assert rc == 0, err
    got = read_back(out)
    assert sorted(got) == sorted(pixels)
    for name, img in got.items():
        with Image.open(tmp_path / "src" / name) as im:
            assert img.dtype == np.uint16 and img.shape == (1, 12, 12)
            np.testing.assert_array_equal(img[0], np.asarray(im))
            np.testing.assert_array_equal(img[0], pixels[name])
    with h5py.File(out, "r") as h5:
        assert h5.attrs["band_names"] == '["gray"]'


def _write_pixels(path, kind, rng):
    """One file of `kind` at `path`; returns the (C, H, W) pixels prepare must store, computed with numpy."""
    if kind in ("P", "P+transparency"):
        idx = rng.integers(0, 16, (10, 10), dtype=np.uint8)
        palette = rng.integers(0, 256, (16, 3), dtype=np.uint8)
        im = Image.frombytes("P", (10, 10), idx.tobytes())
        im.putpalette(palette.ravel().tolist())
        rgb = palette[idx]
        if kind == "P":
            im.save(path)
            return rgb.transpose(2, 0, 1)
        im.save(path, transparency=3)
        return np.dstack([rgb, np.where(idx == 3, 0, 255).astype(np.uint8)]).transpose(2, 0, 1)
    if kind == "1":
        bits = rng.random((10, 10)) < 0.5
        Image.fromarray(bits).save(path)
        return (bits.astype(np.uint8) * 255)[None]
    if kind == "LA":
        la = rng.integers(0, 256, (10, 10, 2), dtype=np.uint8)
        Image.fromarray(la).save(path)
        return la.transpose(2, 0, 1)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind, bands", [("P", ["red", "green", "blue"]),
                                         ("P+transparency", ["red", "green", "blue", "alpha"]),
                                         ("1", ["gray"]), ("LA", ["gray", "alpha"])])
def test_palette_bilevel_and_grey_alpha_pngs(tmp_path, run_cli, kind, bands):
    rng = np.random.default_rng(3)
    expected = {}
    for c in CLASSES:
        (tmp_path / "src" / c).mkdir(parents=True)
        for i in range(3):
            expected[f"{c}/{i}.png"] = _write_pixels(tmp_path / "src" / c / f"{i}.png", kind, rng)
    with Image.open(tmp_path / "src" / "dark" / "0.png") as im:
        assert im.mode == kind.split("+")[0]
    out = tmp_path / "m.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--quiet")
    assert rc == 0, err
    got = read_back(out)
    assert sorted(got) == sorted(expected)
    for name, img in got.items():
        assert img.dtype == np.uint8
        np.testing.assert_array_equal(img, expected[name])
    with h5py.File(out, "r") as h5:
        assert h5.attrs["band_names"] == "[" + ", ".join(f'"{b}"' for b in bands) + "]"


def _png16(path, arr, color_type):
    """A 16-bit PNG by hand (Pillow writes none in colour): IHDR, one zlib IDAT of unfiltered rows, IEND."""
    h, w = arr.shape[:2]
    raw = b"".join(b"\0" + row.astype(">u2").tobytes() for row in arr)

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def _bad_file(path, kind):
    """A 12 x 12 file PIL opens in a mode prepare cannot keep (PIL reads by content: a TIFF named .png opens)."""
    if kind == "CMYK":
        Image.new("CMYK", (12, 12), (10, 20, 30, 40)).save(path, format="JPEG")
    elif kind == "I":
        values = np.full((12, 12), 70_000, dtype=np.int32)
        values[3, 4] = 5
        Image.fromarray(values).save(path, format="TIFF")
    elif kind == "F":
        Image.fromarray(np.full((12, 12), 0.5, dtype=np.float32)).save(path, format="TIFF")
    elif kind == "RGB;16":
        _png16(path, np.full((12, 12, 3), 40_000, dtype=np.uint16), color_type=2)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind, message", [
    ("CMYK", "dark/odd.png: PIL mode CMYK"),
    ("I", "dark/odd.png: PIL mode I with values 5..70000"),
    ("F", "dark/odd.png: PIL mode F"),
    ("RGB;16", "dark/odd.png: a 16-bit RGB image, which PIL decodes to 8 bits per channel"),
])
def test_modes_it_cannot_keep_are_one_line(tmp_path, run_cli, kind, message):
    grey16_folder(tmp_path / "src", per_class=2)
    _bad_file(tmp_path / "src" / "dark" / "odd.png", kind)
    out = tmp_path / "bad.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--quiet")
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not list(tmp_path.glob("*.h5*"))


def test_int32_image_within_uint16_is_kept(tmp_path, run_cli):
    """Mode I (how older Pillows open 16-bit PNGs; here a TIFF of int32 named .png) with values in 0..65535."""
    grey16_folder(tmp_path / "src", per_class=2, side=10)
    arr = np.random.default_rng(4).integers(0, 65536, (10, 10)).astype(np.int32)
    Image.fromarray(arr).save(tmp_path / "src" / "dark" / "odd.png", format="TIFF")
    with Image.open(tmp_path / "src" / "dark" / "odd.png") as im:
        assert im.mode == "I"
    out = tmp_path / "i.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--quiet")
    assert rc == 0, err
    img = read_back(out)["dark/odd.png"]
    assert img.dtype == np.uint16
    np.testing.assert_array_equal(img[0], arr)
