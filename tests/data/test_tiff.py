"""The plain-TIFF fast path reads exactly what tifffile reads, and hands everything else to tifffile; every way
a (Geo)TIFF lays out its bands reaches the prepared file as the bands tifffile.imread reads."""

import glob
import warnings

import numpy as np
import pytest
import tifffile

from lbscale.data.sources.tiff import _plain_tiff, read_tiff
from lbscale.errors import LbscaleError
from tests.data.test_folder_modes import read_back
from tests.fixtures.make_bigearthnet import geotiff_tags


def _example_bands():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from bigearthnet_common.example_data import get_s2_example_folder_path

        return sorted(glob.glob(str(get_s2_example_folder_path() / "*" / "*.tif")))


def test_fast_path_equals_tifffile_on_real_bands():
    paths = _example_bands()
    assert len(paths) == 72
    for p in paths:
        fast = _plain_tiff(open(p, "rb").read())
        assert fast is not None, p  # the real bands take the fast path
        np.testing.assert_array_equal(fast, tifffile.imread(p))


@pytest.mark.parametrize("kw", [
    {},
    {"rowsperstrip": 7},
    {"byteorder": ">"},
    {"photometric": "minisblack", "planarconfig": "contig", "shape": (16, 12, 13)},
])
def test_fast_path_layouts(tmp_path, kw):
    shape = kw.pop("shape", (33, 17))
    arr = np.random.default_rng(0).integers(0, 60000, size=shape, dtype=np.uint16)
    tifffile.imwrite(tmp_path / "a.tif", arr, extratags=geotiff_tags(33), **kw)
    fast = _plain_tiff((tmp_path / "a.tif").read_bytes())
    assert fast is not None
    np.testing.assert_array_equal(fast, arr)
    assert fast.dtype == np.uint16 and fast.dtype.isnative


@pytest.mark.parametrize("kw", [{"compression": "zlib"}, {"tile": (16, 16)}])
def test_other_layouts_fall_back_to_tifffile(tmp_path, kw):
    arr = np.random.default_rng(1).integers(0, 60000, size=(32, 32), dtype=np.uint16)
    tifffile.imwrite(tmp_path / "b.tif", arr, **kw)
    assert _plain_tiff((tmp_path / "b.tif").read_bytes()) is None
    np.testing.assert_array_equal(read_tiff(tmp_path / "b.tif"), arr)


def test_truncated_strip_is_an_error(tmp_path):
    arr = np.ones((40, 40), dtype=np.uint16)
    tifffile.imwrite(tmp_path / "c.tif", arr)
    data = (tmp_path / "c.tif").read_bytes()
    (tmp_path / "c.tif").write_bytes(data[:-100])
    with pytest.raises(LbscaleError, match="c.tif"):
        read_tiff(tmp_path / "c.tif")


# How tifffile and GeoTIFF writers lay out the bands of one image (rasterio / GDAL write either planar separate,
# INTERLEAVE=BAND, or contiguous samples, INTERLEAVE=PIXEL; tifffile's planarconfig options write the same
# layouts, so rasterio is not needed), and which axis of `tifffile.imread`'s array holds the bands.
LAYOUTS = {
    "pages": ({}, "CHW"),  # imwrite's default for (12, H, W): 12 one-band pages, series axes QYX
    "planar separate": ({"planarconfig": "separate", "photometric": "minisblack"}, "CHW"),  # one page, SYX
    "contig minisblack": ({"planarconfig": "contig", "photometric": "minisblack"}, "HWC"),  # one page, YXS
    "contig rgb + extrasamples": ({"planarconfig": "contig", "photometric": "rgb", "extrasamples": [0] * 9}, "HWC"),
    "one band": ({}, "HW"),
}


def _write_layout(root, layout, per_class=3, side=24) -> dict:
    """root/<class>/<i>.tif, 12 uint16 bands (1 for "one band") as GeoTIFFs; name -> what tifffile.imread reads."""
    kw, order = LAYOUTS[layout]
    rng = np.random.default_rng(5)
    read = {}
    for c in ("crop", "water"):
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            chw = rng.integers(0, 65536, (1 if order == "HW" else 12, side, side), dtype=np.uint16)
            arr = {"CHW": chw, "HWC": chw.transpose(1, 2, 0), "HW": chw[0]}[order]
            tifffile.imwrite(root / c / f"{i}.tif", arr, extratags=geotiff_tags(side), **kw)
            read[f"{c}/{i}.tif"] = tifffile.imread(root / c / f"{i}.tif")
            np.testing.assert_array_equal(read[f"{c}/{i}.tif"], arr)  # tifffile reads back what it wrote
    return read


def _as_chw(arr: np.ndarray, order: str) -> np.ndarray:
    return arr.transpose(2, 0, 1) if order == "HWC" else arr[None] if order == "HW" else arr


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_band_layout_through_prepare_folder(tmp_path, run_cli, layout):
    read = _write_layout(tmp_path / "src", layout)
    order = LAYOUTS[layout][1]
    out = tmp_path / "t.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--quiet")
    assert rc == 0, err
    got = read_back(out)
    assert sorted(got) == sorted(read)
    for name, img in got.items():
        assert img.dtype == np.uint16 and img.shape == (1 if order == "HW" else 12, 24, 24)
        np.testing.assert_array_equal(img, _as_chw(read[name], order))


def test_a_multi_page_file_never_takes_the_fast_path(tmp_path):
    pages = np.random.default_rng(6).integers(0, 60000, (3, 8, 8), dtype=np.uint16)
    tifffile.imwrite(tmp_path / "p.tif", pages, photometric="minisblack")  # plain uncompressed strips, 3 pages
    with tifffile.TiffFile(tmp_path / "p.tif") as tif:
        assert len(tif.pages) == 3
    assert _plain_tiff((tmp_path / "p.tif").read_bytes()) is None
    np.testing.assert_array_equal(read_tiff(tmp_path / "p.tif").transpose(2, 0, 1), tifffile.imread(tmp_path / "p.tif"))


@pytest.mark.parametrize("shape, kw", [
    ((2, 3, 8, 8), {}),  # pages of 3 planar samples: series axes QSYX
    ((2, 3, 8, 8), {"imagej": True, "metadata": {"axes": "TCYX"}}),  # a time series of 3-band images
])
def test_several_non_spatial_axes_are_one_line(tmp_path, run_cli, shape, kw):
    (tmp_path / "src" / "a").mkdir(parents=True)
    tifffile.imwrite(tmp_path / "src" / "a" / "x.tif", np.zeros(shape, dtype=np.uint16), **kw)
    out = tmp_path / "bad.h5"
    rc, _, err = run_cli("prepare", "folder", "--src", tmp_path / "src", "--out", out, "--quiet")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "a/x.tif: " in err and "one band axis" in err
    assert not out.exists() and not list(tmp_path.glob("*.h5*"))
