"""Evaluation in a trial: the passes themselves (`Evaluator`) and the schedule of evaluations inside an epoch
(`EvalSchedule`: every N steps, every N training samples, at geometrically spaced steps, at a successive-halving
rung), with what follows from
one: the target reached, a rung's decision; and the measurement a trial takes where it first reaches its target
(`noise_scale_at_target`, `NoiseAtTarget`).

Every pass runs through the unwrapped module, never the DDP wrapper: DDP's forward broadcasts buffers, so a rank
with fewer evaluation batches than another (or none) would wait in that broadcast for ever. Passes are collective
through the metrics' sync, which every rank joins whatever its shard.
"""

from __future__ import annotations

import math
import time

import torch

from lbscale.analysis.evaluations import NEAR_SE, clearly_below, geometric_steps
from lbscale.results import write_json
from lbscale.train.config import TrialConfig
from lbscale.task import Task, binomial_se
from lbscale.train.checkpoint import Progress
from lbscale.train.metrics import TaskMetrics
from lbscale.train.plan import Plan
from lbscale.train.pruning import Pruner
from lbscale.train.summary import RecordBook


class Evaluator:
    """`{split}_*` metrics of a split (or of the step-evaluation subset) through `module` (the unwrapped network,
    possibly compiled)."""

    def __init__(self, module, inputs, task: Task, num_classes: int, device: torch.device, autocast, loss_fn):
        self.module, self.inputs, self.autocast, self.loss_fn = module, inputs, autocast, loss_fn
        self.metrics = {split: TaskMetrics(task, num_classes, device, split) for split in inputs.evaluation}

    @torch.no_grad()
    def evaluate(self, split: str, subset: bool = False) -> dict:
        """One pass over `split` (or its fixed subset: the step evaluations'); empty where the file has none."""
        if split not in self.inputs.evaluation:
            return {}
        self._accumulate(split, self.inputs.step if subset else self.inputs.evaluation[split])
        return self.metrics[split].compute()

    def _accumulate(self, split: str, loader) -> None:
        """One pass over `loader`'s batches into `split`'s metrics (not computed)."""
        self.module.eval()
        for batch in loader:
            x, y = self.inputs(batch, train=False)
            with self.autocast():
                logits = self.module(x)
            self.metrics[split].update(logits, y, self.loss_fn(logits, y))

    @torch.no_grad()
    def check(self, split: str, below) -> tuple[dict, int | None]:
        """The whole split near a target, read in parts (`inputs.check`, a fixed random order): after each part but
        the last, `below(metrics so far, images read, split size)` may stop it. (metrics, images read) where it
        stopped, (metrics of the whole split, None) where it read it all. Every rank reads its shard of every part
        it reaches and computes after each: the same collective calls on all ranks, and the same decision."""
        parts = self.inputs.check
        if not parts:
            return self.evaluate(split), None
        total, read = sum(len(p.only) for p in parts), 0
        for k, part in enumerate(parts):
            self._accumulate(split, part)
            read += len(part.only)
            if k < len(parts) - 1 and below(so_far := self.metrics[split].peek(), read, total):
                self.metrics[split].compute()  # resets
                return so_far, read
        return self.metrics[split].compute(), None

    def test_figures(self, records: list[dict]) -> dict | None:
        """The test figures the papers report, of the model a trial ends with (collective): where test is the
        evaluation split, those of its last whole-split evaluation (the last epoch's, or the step evaluation a
        trial stopped at its target with), else one evaluation of the test split now; None where the file has
        no test split."""
        if "test" not in self.inputs.evaluation:
            return None
        if self.inputs.cfg.eval_split == "test":
            last = next((r for r in reversed(records) if not r.get("partial") and r.get("subset") is None), {})
            return {k: v for k, v in last.items() if k.startswith("test_")}
        return self.evaluate("test")


def noise_scale_at_target(model, data, inputs, task: Task, cfg: TrialConfig, local_batch: int, step: int,
                          device: torch.device) -> dict:
    """gns.json's record (source `target`) of a trial's weights at optimizer step `step`, measured as `lbscale gns`
    measures a checkpoint's (`train.noise_measure.measure_at`: micro-batches of 32, or of the local batch where smaller,
    8 to a group, 16 groups, drawn by the trial's seed) through the trial's input path without augmentation. On a
    copy of `model`, so that the trial's BatchNorm statistics and gradients stay its own; `measure_at` restores
    torch's RNG: the trial trains on as it would without it."""
    import copy

    from lbscale.train.noise_measure import GROUPS, K, MICRO_BATCH, measure_at

    jpeg = {"decoder": inputs.decoder, "crop_size": cfg.crop_size or 224} if inputs.encoded else None
    return measure_at(copy.deepcopy(model), data, task, cfg.label_set, lambda b: inputs(b, train=False),
                      min(MICRO_BATCH, local_batch), K, GROUPS, cfg.seed, step, "target", device,
                      loader_options=jpeg)


class NoiseAtTarget:
    """--gns-at-target: after an evaluation that first reached the target (the hardest), the noise scale at those
    weights (`noise_scale_at_target`); every rank measures the same weights alike, so no collective. gns.json is
    written into `out` (rank 0's; None on the others)."""

    def __init__(self, cfg: TrialConfig, model, data, inputs, task: Task, local_batch: int, device: torch.device,
                 out=None):
        self.cfg, self.model, self.data, self.inputs, self.task = cfg, model, data, inputs, task
        self.local_batch, self.device, self.out = local_batch, device, out

    def after(self, before: dict | None, progress: Progress) -> float:
        """After an evaluation (`before`: the target's hit before it, where one had): the measurement where it
        first reached the target; its seconds, which are not training time."""
        if before is not None or progress.target_hit is None or not self.cfg.gns_at_target:
            return 0.0
        from lbscale.analysis.gns import GNS_FILE

        t0 = time.perf_counter()
        record = noise_scale_at_target(self.model, self.data, self.inputs, self.task, self.cfg, self.local_batch,
                                       progress.step, self.device)
        if self.out is not None:
            write_json(self.out / GNS_FILE, record)
        return time.perf_counter() - t0


def near_target(value: float, target: float, n: int, maximize: bool) -> bool:
    """Whether a value on an evaluation subset of `n` samples meets `target` or could, within NEAR_SE binomial
    standard errors (p (1 - p) at least 1/n; task metrics that grow with quality are proportions in [0, 1]); a loss
    has no such error, so only a met target counts."""
    if value is None or not math.isfinite(value):
        return False
    if not maximize:
        return value <= target
    return value >= target - NEAR_SE * binomial_se(value, n)


class EvalSchedule:
    """When a trial evaluates inside an epoch, and what it does with the result: records it, notes the first
    evaluation at the target, publishes a rung and takes the rung's decision."""

    def __init__(self, cfg: TrialConfig, plan: Plan, task: Task, evaluator: Evaluator, book: RecordBook,
                 pruner: Pruner | None, is_main: bool, decide, gns=None):
        self.cfg, self.plan, self.task, self.evaluator, self.book = cfg, plan, task, evaluator, book
        self.pruner, self.is_main, self.decide, self.gns = pruner, is_main, decide, gns
        self.geometric = (set(geometric_steps(cfg.eval_first or 1, cfg.eval_spacing, plan.total_steps))
                          if cfg.eval_spacing else set())

    @property
    def any(self) -> bool:
        """Whether the trial evaluates inside epochs at all (its records then carry step_eval_seconds)."""
        return bool(self.cfg.eval_every or self.cfg.eval_every_samples or self.geometric or self.pruner)

    def due(self, step: int, samples_before: int, samples_after: int) -> bool:
        """After optimizer step `step`, which took the training samples seen from `samples_before` to
        `samples_after` (all ranks, counted as trained: a kept partial last batch is smaller)."""
        every, samples = self.cfg.eval_every, self.cfg.eval_every_samples
        return (bool(every and step % every == 0)
                or bool(samples and samples_after // samples > samples_before // samples)
                or step in self.geometric
                or bool(self.pruner and self.pruner.rung_at(step)))

    def run(self, progress: Progress, trained_seconds: float, samples_seen: int) -> str | None:
        """Evaluate now (collective) and record it; then 'target' (reached, with --stop-at-target), 'pruned' or
        'wait' (successive halving at a rung), or None to train on. An evaluation on the step subset that first
        meets a target is confirmed on the whole split at once (a second record, subset null): the target counts
        only there."""
        record = self._evaluate(progress, trained_seconds, samples_seen, subset=True)
        rung = self.pruner.rung_at(progress.step) if self.pruner else None
        if rung and self.is_main:  # published first: a trial that stops at its target is still a peer
            self.pruner.publish(rung, progress.step, record.get(self.pruner.metric, float("nan")),
                                self.evaluator.inputs.step_samples)
        if record["subset"] is not None and self._near(progress, record):
            record = self._check(progress, trained_seconds, samples_seen)
        if self.note_target(record, progress) and self.cfg.stop_at_target:
            return "target"
        return self.decide() if rung else None

    def evaluate_now(self, progress: Progress, trained_seconds: float, samples_seen: int, subset: bool,
                     extra: dict | None = None) -> dict:
        """One evaluation outside the schedule (a branch's at the end of its window, with `extra` figures),
        recorded (collective)."""
        return self._evaluate(progress, trained_seconds, samples_seen, subset, extra)

    def _evaluate(self, progress: Progress, trained_seconds: float, samples_seen: int, subset: bool,
                  extra: dict | None = None) -> dict:
        te = time.perf_counter()
        metrics = self.evaluator.evaluate(self.cfg.eval_split, subset=subset)
        return self._record(progress, trained_seconds, samples_seen, {**metrics, **(extra or {})},
                            time.perf_counter() - te, self.evaluator.inputs.step_subset if subset else None)

    def _record(self, progress: Progress, trained_seconds: float, samples_seen: int, metrics: dict,
                seconds: float, subset: int | None) -> dict:
        return self.book.step_evaluation(
            progress.step, progress.epoch + progress.batch / self.plan.micro_batches_per_epoch, samples_seen,
            {**metrics, **(self.gns.now() if self.gns else {})}, trained_seconds, seconds, subset)

    def _check(self, progress: Progress, trained_seconds: float, samples_seen: int) -> dict:
        """The whole split where a subset's value came near a target (`Evaluator.check`), stopped once its value so
        far is `clearly_below` every target not yet met: then recorded as an evaluation of the images it read
        (`subset`), with `check` (the images read) on the record either way; a stopped check is a miss, and it
        bounds the crossing from below as a whole-split miss does (`report.tuned.steps_to_result`)."""
        metric = self.cfg.target_metric
        open_targets = [t for t in self.cfg.targets if f"{t:g}" not in progress.target_hits]

        def below(metrics: dict, n: int, total: int) -> bool:
            return (self.task.higher_is_better(metric) and bool(open_targets)
                    and all(clearly_below(metrics.get(metric), t, n, total) for t in open_targets))

        te = time.perf_counter()
        metrics, read = self.evaluator.check(self.cfg.eval_split, below)
        return self._record(progress, trained_seconds, samples_seen,
                            {**metrics, "check": read or self.evaluator.inputs.step.n},
                            time.perf_counter() - te, read)

    def _near(self, progress: Progress, record: dict) -> bool:
        """Whether a subset's `record` meets a target no whole-split evaluation has met yet, or comes within its
        noise of one (`near_target`): the whole split then decides, and a miss there is the evaluation before the
        crossing."""
        metric, n = self.cfg.target_metric, record["subset"]
        if not metric or metric not in record:
            return False
        return any(near_target(record[metric], t, n, self.task.higher_is_better(metric)) for t in self.cfg.targets
                   if f"{t:g}" not in progress.target_hits)

    def _missed(self, progress: Progress, record: dict) -> list[float]:
        """The targets `record` meets that no whole-split evaluation has met yet."""
        metric = self.cfg.target_metric
        if not metric or metric not in record:
            return []
        return [t for t in self.cfg.targets if f"{t:g}" not in progress.target_hits
                and self.task.reached(metric, record[metric], t)]

    def note_target(self, record: dict, progress: Progress) -> bool:
        """Note, per target, the first whole-split evaluation (step or epoch) at or past it; True once the
        hardest target has been reached (its hit is `progress.target_hit`, the summary's steps to target)."""
        if record.get("subset") is not None:
            return progress.target_hit is not None  # a subset's value decides nothing
        for t in self._missed(progress, record):
            progress.target_hits[f"{t:g}"] = {"steps_to_target": record["step"], "epochs_to_target": record["epoch"],
                                              "seconds_to_target": record["elapsed_seconds"]}
        targets = self.cfg.targets
        if targets and f"{targets[-1]:g}" in progress.target_hits:
            progress.target_hit = progress.target_hits[f"{targets[-1]:g}"]
        return progress.target_hit is not None
