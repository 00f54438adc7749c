"""What HDF5's Fletcher32 checksums cost: writing, reading through HDF5 (verified), the loader's mapped chunks
(each chunk verified once, the first time a loader reads it: its first epoch; later epochs read without a check)
and `lbscale data check`, with and without checksums on the same SAT-4 sized data."""

import tempfile
from pathlib import Path

import h5py
import numpy as np

from benchmarks.common import best_seconds, report
from lbscale.data.formats.base import DatasetMeta
from lbscale.data.formats.hdf5 import Hdf5Writer
from lbscale.data.inspect import examine
from lbscale.data.loader import ShardedLoader

N = 100_000  # 28x28x4 uint8: 314 MB of pixels
BLOCK = 20_000
BATCH = 2048


def write(path: Path, images: np.ndarray, labels: np.ndarray, checksums: bool) -> None:
    meta = DatasetMeta("bench", "multiclass", ["a", "b", "c", "d"], ["R", "G", "B", "NIR"], "bench")
    with Hdf5Writer(path, meta, "bench", checksums=checksums) as w:
        for a in range(0, N, BLOCK):
            w.append("train", images[a:a + BLOCK], labels[a:a + BLOCK])
        w.finish()


def h5py_read(path: Path) -> None:
    with h5py.File(path, "r") as f:  # batch-sized contiguous reads through HDF5's filter pipeline
        ds = f["train/images"]
        for a in range(0, N - BATCH + 1, BATCH):
            ds[a:a + BATCH]


def loader_epoch(loader: ShardedLoader) -> None:
    loader.set_epoch(loader.epoch + 1)
    for _ in loader:
        pass


def paired_best(fns: dict, repeat: int = 5) -> dict:
    """Best-of-`repeat` seconds of each function, the runs interleaved so that a busy spell of the machine
    slows both sides of a ratio alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for key, fn in fns.items():
            best[key] = min(best[key], best_seconds(fn, repeat=1))
    return best


def main() -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (N, 4, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 4, N)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {flag: Path(tmp) / f"{'with' if flag else 'without'}.h5" for flag in (True, False)}
        t_write = paired_best({flag: lambda flag=flag: write(paths[flag], images, labels, flag) for flag in paths})
        t_read = paired_best({flag: lambda flag=flag: h5py_read(paths[flag]) for flag in paths})
        loaders = {flag: ShardedLoader(paths[flag], "train", 0, 1, local_batch=BATCH, seed=0) for flag in paths}
        assert all(ld.views is not None for ld in loaders.values())  # both map their chunks
        t_loader = paired_best({flag: lambda flag=flag: loader_epoch(loaders[flag]) for flag in paths}, repeat=9)
        # a new loader's first epoch: every chunk's checksum computed before it is first read
        t_first = paired_best({flag: lambda flag=flag: loader_epoch(
            ShardedLoader(paths[flag], "train", 0, 1, local_batch=BATCH, seed=0)) for flag in paths}, repeat=5)
        t_check = best_seconds(lambda: examine(paths[True]), repeat=2)
    mb, n_used = images.nbytes / 1e6, (N // BATCH) * BATCH
    report("write without checksums, MB/s", mb / t_write[False], "MB/s")
    report("write with Fletcher32, MB/s", mb / t_write[True], "MB/s")
    report("RATIO write time with / without checksums", t_write[True] / t_write[False], "x")
    report("h5py batch reads without checksums, MB/s", mb / t_read[False], "MB/s")
    report("h5py batch reads, Fletcher32 verified, MB/s", mb / t_read[True], "MB/s")
    report("RATIO h5py read time with / without checksums", t_read[True] / t_read[False], "x")
    report("loader epoch (mapped chunks), img/s without checksums", n_used / t_loader[False], "img/s")
    report("loader later epoch (mapped chunks, verified already), img/s with", n_used / t_loader[True], "img/s")
    report("RATIO loader later epoch time with / without checksums", t_loader[True] / t_loader[False], "x",
           "target <= 1.05")
    report("loader first epoch (every chunk verified), img/s with", n_used / t_first[True], "img/s")
    report("RATIO loader first epoch time with / without checksums", t_first[True] / t_first[False], "x")
    report("lbscale data check (every chunk verified), MB/s", mb / t_check, "MB/s")


if __name__ == "__main__":
    main()
