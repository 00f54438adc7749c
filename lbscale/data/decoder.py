"""JPEG batches -> pixel batches: batched nvjpeg on a GPU, decoder processes on the CPU.

The loader hands over the encoded samples of a batch with their crop boxes and flips (lbscale.data.jpeg);
the decoder returns (n, 3, side, side) pixels. On a GPU the whole batch is one `torchvision.io.decode_jpeg`
call and one batched crop-and-resize (lbscale.data.transforms.crop_resize), run on a side stream from the
loader's background thread, so decoding overlaps the training step. On the CPU, `workers` processes decode
and resize with PIL (scaled DCT decoding, then an antialiased resize), using the cores the rank is given.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch

from lbscale.data import worker_context
from lbscale.data.jpeg import decode_crop


def default_workers(local_world_size: int = 1) -> int:
    """The CPUs this process may run on, shared among the ranks of the node."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(1, local_world_size))


class JpegDecoder:
    """Shared by a trial's loaders; `close()` stops the decoder processes."""

    def __init__(self, device: torch.device | str = "cpu", workers: int = 1, batched: bool | None = None):
        self.device = torch.device(device)
        self.workers = workers
        # batched: one torchvision decode_jpeg call + one batched crop (the GPU path; on the CPU for tests)
        self.batched = self.device.type == "cuda" if batched is None else batched
        self._pool = None
        self._stream = None
        if self.device.type == "cuda":
            self._stream = torch.cuda.Stream(self.device)

    def __call__(self, payloads: list[np.ndarray], boxes: np.ndarray, flips: np.ndarray, side: int):
        """(pixels (n, 3, side, side), ready): uint8 on the CPU, float32 on a GPU; `ready` is the CUDA event
        the consumer waits for before using a GPU batch (None on the CPU)."""
        if self.batched:
            return self._batched(payloads, boxes, flips, side)
        jobs = [(bytes(p), tuple(int(v) for v in b), bool(f), side) for p, b, f in zip(payloads, boxes, flips)]
        out = np.empty((len(jobs), 3, side, side), dtype=np.uint8)
        if self.workers < 1 or len(jobs) < 2:
            for i, job in enumerate(jobs):
                out[i] = decode_crop(job)
        else:
            chunk = max(1, -(-len(jobs) // (2 * self.workers)))
            for i, pixels in enumerate(self._executor().map(decode_crop, jobs, chunksize=chunk)):
                out[i] = pixels
        return torch.from_numpy(out), None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:  # not forks of the trainer, which runs threads (prefetch, gloo)
            self._pool = ProcessPoolExecutor(self.workers, mp_context=worker_context())
        return self._pool

    def _batched(self, payloads, boxes, flips, side):
        from torchvision.io import ImageReadMode, decode_jpeg

        from lbscale.data.transforms import crop_resize

        data = [torch.frombuffer(bytearray(p), dtype=torch.uint8) for p in payloads]
        boxes, flips = torch.from_numpy(np.asarray(boxes)), torch.from_numpy(np.asarray(flips))
        if self._stream is None:
            return crop_resize(decode_jpeg(data, mode=ImageReadMode.RGB), boxes, flips, side), None
        with torch.cuda.stream(self._stream):  # overlaps the training step on the default stream
            images = decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
            out = crop_resize(images, boxes, flips, side)
            ready = torch.cuda.Event()
            ready.record(self._stream)
        return out, ready

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
