"""What a person sees in a figure file: a PNG that opens, of a readable size, with something drawn on it."""

from pathlib import Path

import numpy as np


def assert_drawn(path: Path, min_colors: int = 3) -> None:
    """`path` is a PNG of at least 400 x 250 pixels in which more than 2 % of the pixels differ from the
    background (the most common colour) and the drawn pixels have at least `min_colors` colours (axes, text and
    data in distinct colours, not a blank frame)."""
    from PIL import Image

    with Image.open(path) as im:
        assert im.format == "PNG", path
        pixels = np.asarray(im.convert("RGB")).reshape(-1, 3)
        size = im.size
    assert size[0] >= 400 and size[1] >= 250, (path, size)
    colours, counts = np.unique(pixels // 16, axis=0, return_counts=True)  # 16 levels a channel
    ink = 1 - counts.max() / counts.sum()
    assert ink > 0.02, (path, ink)
    assert (counts[np.arange(len(counts)) != counts.argmax()] > 20).sum() >= min_colors, (path, len(colours))
