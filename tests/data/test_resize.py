"""`--size` shrinks with an antialiased filter: the triangle filter of PIL's BILINEAR (and torch's antialias=True),
its support widened by the reduction factor, so each output pixel averages its whole source footprint; enlarging
stays plain bilinear with half-pixel centres. References: PIL resizing the same "F" (float32) image, and means
worked out by hand."""

import numpy as np
import pytest
from PIL import Image

from lbscale.data.sources.base import resize


def _pil(image: np.ndarray, size: int) -> np.ndarray:
    """PIL's BILINEAR resize of one (H, W) float32 band to size x size."""
    return np.asarray(Image.fromarray(image.astype(np.float32)).resize((size, size), Image.BILINEAR))


@pytest.mark.parametrize("shape, size", [
    ((48, 48), 24),  # 2x
    ((48, 48), 16),  # 3x
    ((120, 120), 50),  # 2.4x
    ((40, 30), 16),  # 2.5x and 1.875x
    ((10, 40), 20),  # enlarged along H, shrunk along W
])
def test_shrinking_matches_pil_bilinear(shape, size):
    rng = np.random.default_rng(sum(shape) + size)
    image = rng.random(shape, dtype=np.float32) * 1000
    got = resize(image[None], size)
    assert got.shape == (1, size, size) and got.dtype == np.float32
    np.testing.assert_allclose(got[0], _pil(image, size), rtol=1e-5, atol=1e-3)


def test_integer_factor_is_the_block_mean_of_a_periodic_image():
    """With a factor k the triangle gives each residue mod k the same total weight, so on an image that repeats a
    k x k tile every output pixel clear of the edges is the tile's mean; at the edges the triangle is cut off and
    renormalised (factor 3: weights 1/4, 3/8, 1/4, 1/8 over the first four pixels)."""
    tile = np.array([[0, 90, 30], [60, 240, 120], [210, 150, 180]], dtype=np.float32)
    image = np.tile(tile, (6, 6))  # 18 x 18 -> 6 x 6
    got = resize(image[None], 6)[0]
    np.testing.assert_allclose(got[1:-1, 1:-1], tile.mean(), rtol=1e-6)  # 120: the centre pixel alone is 240
    edge = np.array([1 / 4, 3 / 8, 1 / 4, 1 / 8])
    corner = edge @ image[:4, :4] @ edge
    assert got[0, 0] == pytest.approx(corner, rel=1e-6)
    u8 = resize(image.astype(np.uint8)[None], 6)[0]
    assert u8.dtype == np.uint8 and (u8[1:-1, 1:-1] == 120).all() and u8[0, 0] == np.rint(corner)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_integer_types_are_rounded_and_clipped(dtype):
    top = np.iinfo(dtype).max
    rng = np.random.default_rng(7)
    image = rng.integers(0, top + 1, (45, 45)).astype(dtype)
    image[:9, :9] = top  # a saturated corner stays saturated, never wraps
    got = resize(image[None], 20)[0]
    assert got.dtype == dtype and got[0, 0] == top
    reference = np.clip(np.rint(_pil(image.astype(np.float32), 20)), 0, top)
    assert np.abs(got.astype(np.int64) - reference).max() <= 1  # a half rounded either way in float32


def test_enlarging_is_unchanged_bilinear():
    img = np.array([[[0, 100], [0, 100]]], dtype=np.uint8)  # a horizontal ramp, 2 x 2 -> 4 x 4
    assert resize(img, 4)[0].tolist() == [[0, 25, 75, 100]] * 4
    band = np.random.default_rng(8).random((20, 20), dtype=np.float32)
    np.testing.assert_allclose(resize(band[None], 60)[0], _pil(band, 60), rtol=1e-5, atol=1e-6)
