"""`lbscale prepare folder` of 12-band uint16 GeoTIFFs (class folders, 64 x 64, EuroSAT-sized) vs a raw
tifffile read of the same files (1 and 2 workers), best of 3 in one run."""

import tempfile
from pathlib import Path

import numpy as np
import tifffile

from benchmarks.common import best_seconds, report
from lbscale.data.prepare import prepare

FILES, CLASSES, SIDE, BANDS = 2000, 10, 64, 12


def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tiles"
        paths = []
        for i in range(FILES):
            folder = root / f"class{i % CLASSES}"
            folder.mkdir(parents=True, exist_ok=True)
            paths.append(folder / f"tile{i}.tif")
            tifffile.imwrite(paths[-1], rng.integers(0, 10_000, (SIDE, SIDE, BANDS), dtype=np.uint16),
                             photometric="minisblack", planarconfig="contig")

        def raw():
            for p in paths:
                tifffile.imread(p)

        runs = iter(range(100))

        def run(workers):  # a new output each time: replacing the last one (--force) is not prepare's work
            return lambda: prepare("folder", root, Path(tmp) / f"folder-{workers}-{next(runs)}.h5", workers=workers)

        t_raw = best_seconds(raw)
        t1 = best_seconds(run(1))
        t2 = best_seconds(run(2))
        report("raw tifffile read of 12-band GeoTIFFs, files/s", FILES / t_raw, "file/s")
        report("lbscale prepare folder --workers 1, files/s", FILES / t1, "file/s")
        report("lbscale prepare folder --workers 2, files/s", FILES / t2, "file/s")
        report("RATIO prepare folder (1 worker) / raw read", t_raw / t1, "x")
        report("RATIO prepare folder (2 workers) / raw read", t_raw / t2, "x")


if __name__ == "__main__":
    main()
