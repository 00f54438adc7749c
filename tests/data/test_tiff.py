"""The plain-TIFF fast path reads exactly what tifffile reads, and hands everything else to tifffile."""

import glob
import warnings

import numpy as np
import pytest
import tifffile

from lbscale.data.sources.tiff import _plain_tiff, read_tiff
from lbscale.errors import LbscaleError
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
