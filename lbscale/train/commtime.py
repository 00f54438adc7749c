"""The communication a data-parallel step exposes, measured through DDP's communication hook.

DDP all-reduces each gradient bucket as soon as the backward has produced it, so most of the all-reduce runs
while the backward still computes. What the step still waits for once its own backward is done is the exposed
communication: from the moment the last bucket was handed to the hook to the moment `.backward()` returns,
which is when DDP has waited for every bucket's all-reduce. docs/results.md says what it leaves out.
"""

from __future__ import annotations

import time

import torch


class CommTimer:
    """Seconds one process waited for DDP's gradient all-reduce after its backward produced the last bucket.

    `hook` is DDP's one communication hook: it notes when each bucket arrives, then hands the bucket to `inner`
    (the noise-scale hook, or torch's default all-reduce on the default process group). The loop calls
    `backward_done` after every backward and `take` at the end of the epoch, after synchronizing the device.
    On a GPU the marks are CUDA events on the current stream (NCCL's wait does not block the host); on the CPU,
    host clock readings."""

    def __init__(self, device: torch.device, inner=None):
        if inner is None:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook as inner
        self.inner = inner
        self.cuda = device.type == "cuda"
        self.last = None  # the mark of the latest bucket since the last backward_done
        self.spans: list = []  # CUDA: (last bucket, backward done) event pairs, read by `take`
        self.seconds = 0.0  # CPU: the waits so far

    def _mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def hook(self, state, bucket):
        # a CUDA graph capture cannot record a timing event; such a bucket is left unmarked
        if not (self.cuda and torch.cuda.is_current_stream_capturing()):
            self.last = self._mark()
        return self.inner(state, bucket)

    def backward_done(self) -> None:
        """After `.backward()` returned: one exposed wait, where the backward all-reduced (under `no_sync` no
        bucket arrives and nothing is counted)."""
        if self.last is None:
            return
        end = self._mark()
        if self.cuda:
            self.spans.append((self.last, end))
        else:
            self.seconds += end - self.last
        self.last = None

    def take(self) -> float:
        """The waits since the last call, in seconds (on a GPU: call after synchronizing the device)."""
        seconds = self.seconds + sum(start.elapsed_time(end) for start, end in self.spans) / 1000
        self.seconds, self.spans = 0.0, []
        return seconds
