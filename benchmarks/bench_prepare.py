"""BigEarthNet prepare patches/s vs a raw tifffile read of the same patches (1 and 2 workers)."""

import tempfile
import warnings
from pathlib import Path

import tifffile

from benchmarks.common import best_seconds, report
from lbscale.data.prepare import prepare
from lbscale.data.sources.bigearthnet import BANDS
from tests.fixtures.make_bigearthnet import write_patch

PATCHES = 600


def official_train_names(n: int) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import bigearthnet_common.base as base

        return sorted(base.get_s2_patches_from_original_train_split())[:n]


def main() -> None:
    names = official_train_names(PATCHES)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ben"
        for i, name in enumerate(names):
            write_patch(root, name, ["Pastures", "Mixed forest"], seed=i)

        def raw():
            for name in names:
                for b in BANDS:
                    tifffile.imread(root / name / f"{name}_{b}.tif")

        def run(workers):
            out = Path(tmp) / f"ben-{workers}.h5"
            return lambda: prepare("bigearthnet", root, out, workers=workers, force=True)

        run(1)()  # warm-up: loads bigearthnet-common's split and snow/cloud tables (cached afterwards)
        t_raw = best_seconds(raw)
        t1 = best_seconds(run(1))
        t2 = best_seconds(run(2))
        report("raw tifffile read of 12 bands, patches/s", PATCHES / t_raw, "patch/s")
        report("lbscale prepare bigearthnet --workers 1, patches/s", PATCHES / t1, "patch/s")
        report("lbscale prepare bigearthnet --workers 2, patches/s", PATCHES / t2, "patch/s")
        report("RATIO prepare (1 worker) / raw read", t_raw / t1, "x", "target >= 0.8")
        report("RATIO prepare (2 workers) / raw read", t_raw / t2, "x", "target >= 1.6")


if __name__ == "__main__":
    main()
