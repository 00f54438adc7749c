"""A trial's inputs: its loaders (the train shard, each evaluation split, the fixed step-evaluation subset), the
JPEG decoder where the data is encoded, and what turns a loader's batch into the network's input on the
device (normalisation, augmentation, channels_last) with its targets."""

from __future__ import annotations

import torch

from lbscale.train.config import TrialConfig
from lbscale.data.decoder import JpegDecoder, default_workers
from lbscale.data.formats.base import PreparedFile
from lbscale.analysis.evaluations import MIN_LOOK, check_parts
from lbscale.data.loader import ShardedLoader
from lbscale.data.transforms import AUGMENT, Normalize
from lbscale.task import Task
from lbscale.train.plan import Plan


class TrialInputs:
    """Loaders and the batch-to-input path of one rank. `augment_rng` is the rank's augmentation generator (a
    checkpoint carries its state per rank)."""

    def __init__(self, data: PreparedFile, cfg: TrialConfig, plan: Plan, task: Task, rank: int,
                 local_world_size: int, device: torch.device, augmentation: str):
        self.cfg, self.task, self.device, self.augmentation = cfg, task, device, augmentation
        self.encoded = data.encoding != "raw"
        self.decoder = None
        jpeg = {}
        if self.encoded:  # one decoder for all loaders: nvjpeg on a GPU, processes on the CPU
            workers = cfg.decode_workers if cfg.decode_workers is not None else default_workers(local_world_size)
            self.decoder = JpegDecoder(device, workers)
            jpeg = {"decoder": self.decoder, "crop_size": cfg.crop_size or 224}
        common = dict(rank=rank, world_size=plan.world_size, seed=cfg.seed, in_memory=cfg.in_memory,
                      label_key=cfg.label_set, **jpeg)
        self.train = ShardedLoader(data, "train", local_batch=plan.local_batch, drop_last=cfg.last_batch == "drop",
                                   even=True, random_crop=cfg.augment, **common)
        eval_batch = cfg.eval_batch or plan.local_batch
        self.evaluation = {split: ShardedLoader(data, split, local_batch=eval_batch, drop_last=False, even=False,
                                                **common)
                           for split in ("val", "test") if data.has_split(split) and data.size(split) > 0}
        # step evaluations: a fixed, seeded subset of the evaluation split, or all of it
        self.step = self.evaluation.get(cfg.eval_split)
        self.step_subset = None
        if cfg.eval_subset and self.step is not None:
            self.step = ShardedLoader(data, cfg.eval_split, local_batch=eval_batch, drop_last=False, even=False,
                                      subset=cfg.eval_subset, **common)
            self.step_subset = None if self.step.only is None else len(self.step.only)
        # a whole-split check near the target (on a subset's value) reads the split in parts, and may stop early
        self.check = ([ShardedLoader(data, cfg.eval_split, local_batch=eval_batch, drop_last=False, even=False,
                                     only=part, **common)
                       for part in check_parts(self.step.n, min_look=max(MIN_LOOK, plan.world_size))]
                      if self.step_subset is not None else None)
        # the examples a step evaluation's value rests on: its noise at a pruning rung
        self.step_samples = (self.step_subset or self.step.n) if self.step is not None else None
        self.normalize = Normalize(data.mean, data.std, device)
        self.rank = rank
        self.augment_rng = torch.Generator().manual_seed(self.augment_seed())

    def augment_seed(self, reseed: int = 0) -> int:
        """The rank's augmentation seed; a branch's repeat (`--branch-reseed`) draws from its own."""
        return self.cfg.seed * 100_003 + self.rank + 7_919 * reseed

    def __call__(self, batch, train: bool):
        """The network's input and the loss targets of a loader's batch, on the device."""
        if batch.ready is not None:  # decoded on the loader's CUDA stream
            torch.cuda.current_stream(self.device).wait_event(batch.ready)
            batch.images.record_stream(torch.cuda.current_stream(self.device))
        x = self.normalize(batch.images.to(self.device, non_blocking=True))
        if train and self.cfg.augment and not self.encoded:  # JPEG data: cropped and flipped at decode
            x = AUGMENT[self.augmentation](x, self.augment_rng)
        if self.cfg.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, self.task.targets(batch.labels.to(self.device, non_blocking=True))

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.close()
