"""Loader images/s vs a raw contiguous h5py read of the same file (SAT-4 sized: 28x28x4 uint8)."""

import tempfile
from pathlib import Path

import h5py
import numpy as np

from benchmarks.common import best_seconds, report
from lbscale.data.formats import create_writer
from lbscale.data.formats.base import DatasetMeta
from lbscale.data.loader import ShardedLoader

N = 200_000
BATCH = 2048


def make_file(path: Path) -> None:
    meta = DatasetMeta("bench", "multiclass", ["a", "b", "c", "d"], ["R", "G", "B", "NIR"], "bench")
    rng = np.random.default_rng(0)
    with create_writer("hdf5", path, meta, "bench") as w:
        for _ in range(0, N, 20_000):
            w.append("train", rng.integers(0, 256, (20_000, 4, 28, 28), dtype=np.uint8),
                     rng.integers(0, 4, 20_000))
        w.finish()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sat4-like.h5"
        make_file(path)

        def raw():
            with h5py.File(path, "r") as f:
                ds = f["train/images"]
                for a in range(0, N - BATCH + 1, BATCH):
                    ds[a:a + BATCH]

        loader = ShardedLoader(path, "train", 0, 1, local_batch=BATCH, seed=0)
        memory = ShardedLoader(path, "train", 0, 1, local_batch=BATCH, seed=0, in_memory=True)

        def epoch(ld):
            ld.set_epoch(ld.epoch + 1)
            for _ in ld:
                pass

        n_used = (N // BATCH) * BATCH
        t_raw = best_seconds(raw)
        t_loader = best_seconds(lambda: epoch(loader))
        t_mem = best_seconds(lambda: epoch(memory))
        report("raw contiguous h5py read, img/s", n_used / t_raw, "img/s")
        report("lbscale loader (shuffled, sharded), img/s", n_used / t_loader, "img/s", "target >= 50,000")
        report("lbscale loader in-memory mode, img/s", n_used / t_mem, "img/s")
        report("RATIO loader / raw h5py read", t_raw / t_loader, "x", "target >= 0.8")


if __name__ == "__main__":
    main()
