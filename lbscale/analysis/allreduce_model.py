"""A scaling model for communication: the alpha-beta cost of ring all-reduce, its fit to measured all-reduce
times (`lbscale bench allreduce`), its file, and the time per epoch it predicts at other GPU counts.

Ring all-reduce of n bytes over p processes moves D = 2 (p-1)/p n bytes per process (the BigEarthNet LARS
paper's D = 2 (N-1) K / N) in 2 (p-1) steps, each paying the latency alpha once:
    T(p, n) = 2 (p-1) alpha + 2 (p-1)/p n beta        (beta: seconds per byte, 1 / bandwidth)
Pure arithmetic: no torch here. See docs/scaling-model.md for the assumptions.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lbscale.errors import LbscaleError
from lbscale.results import read_json, write_json

MiB = 1024 ** 2
DDP_BUCKET_BYTES = 25 * MiB  # DistributedDataParallel's bucket_cap_mb default


def ring_allreduce_seconds(p: int, nbytes: float, alpha: float, beta: float, buckets: int = 1) -> float:
    """Seconds of a ring all-reduce of `nbytes` over `p` processes, sent as `buckets` all-reduces (each pays the
    latency term; the bytes are paid once): buckets 2 (p-1) alpha + 2 (p-1)/p nbytes beta. 0 at p = 1."""
    if p <= 1:
        return 0.0
    return buckets * 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta


def _design(points: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Rows (latency steps, bytes moved) of each point's T = alpha x1 + beta x2, and the measured seconds."""
    x = np.array([[2.0 * (pt["procs"] - 1), 2.0 * (pt["procs"] - 1) / pt["procs"] * pt["bytes"]] for pt in points])
    return x, np.array([float(pt["seconds"]) for pt in points])


def fit_alpha_beta(points: list[dict]) -> dict:
    """Non-negative least-squares alpha, beta of the ring formula over points {procs, bytes, seconds} (procs >= 2),
    minimising the relative error so that latency-bound small messages count as much as the big ones."""
    points = [pt for pt in points if pt["procs"] >= 2]  # one process: no communication to fit
    if not points:
        raise LbscaleError("all-reduce fit: no points with 2 or more processes")
    if any(not pt["seconds"] > 0 for pt in points):
        raise LbscaleError("all-reduce fit: every measured time must be > 0 seconds")
    x, t = _design(points)
    a = x / t[:, None]  # relative error: (x w - t) / t = a w - 1
    scale = np.linalg.norm(a, axis=0)  # columns differ by ~1e8 (steps vs bytes): balance them before solving
    b = a / scale
    sv = np.linalg.svd(b, compute_uv=False)
    if sv[-1] < 1e-9 * sv[0]:
        raise LbscaleError(f"all-reduce fit: {len(points)} point(s) cannot separate alpha from beta: measure at "
                           "least two message sizes (or two process counts)")
    ones = np.ones(len(t))
    u = np.linalg.lstsq(b, ones, rcond=None)[0]
    if (u < 0).any():  # the constrained optimum lies on an axis: the better of alpha = 0 and beta = 0
        candidates = []
        for j in range(2):
            v = np.zeros(2)
            v[j] = max(0.0, float(b[:, j] @ ones) / float(b[:, j] @ b[:, j]))
            candidates.append((float(np.sum((b @ v - 1) ** 2)), j, v))
        u = min(candidates, key=lambda c: (c[0], c[1]))[2]
    alpha, beta = (float(v) for v in u / scale)
    rel = a @ np.array([alpha, beta]) - 1
    return {"alpha_seconds": alpha, "beta_seconds_per_byte": beta,
            "bandwidth_GBps": 1 / beta / 1e9 if beta > 0 else None,
            "fitted_on_procs": sorted({int(pt["procs"]) for pt in points}),
            "rms_relative_error": float(np.sqrt(np.mean(rel ** 2)))}


def check_fit(points: list[dict], fit: dict) -> list[dict]:
    """The fit's prediction beside each measured point: {procs, bytes, measured, predicted, ratio} with
    ratio = predicted / measured (above 1: the model is pessimistic there)."""
    rows = []
    for pt in points:
        pred = ring_allreduce_seconds(pt["procs"], pt["bytes"], fit["alpha_seconds"], fit["beta_seconds_per_byte"])
        rows.append({"procs": pt["procs"], "bytes": pt["bytes"], "measured": pt["seconds"], "predicted": pred,
                     "ratio": pred / pt["seconds"]})
    return rows


def check_summary(rows: list[dict]) -> dict:
    """The median predicted / measured ratio of `check_fit`'s rows, overall and per process count."""
    by_procs = {}
    for row in rows:
        by_procs.setdefault(row["procs"], []).append(row["ratio"])
    return {"median_ratio": statistics.median(r["ratio"] for r in rows),
            "by_procs": {str(p): statistics.median(v) for p, v in sorted(by_procs.items())}}


# --- the file ------------------------------------------------------------------------------------------------
def _number(value, minimum: float, strict: bool) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and (value > minimum if strict else value >= minimum))


def validate_allreduce(doc, where: str) -> dict:
    """The document if it has a usable fit and points; else an LbscaleError naming `where` and the first problem."""
    if not isinstance(doc, dict):
        raise LbscaleError(f"{where}: expected a JSON object with 'fit' and 'points' "
                           "(the file `lbscale bench allreduce` writes)")
    fit = doc.get("fit")
    if not isinstance(fit, dict):
        raise LbscaleError(f"{where}: no 'fit' object (the file `lbscale bench allreduce` writes has one)")
    for key in ("alpha_seconds", "beta_seconds_per_byte"):
        if not _number(fit.get(key), 0, strict=False):
            raise LbscaleError(f"{where}: fit.{key} must be a number >= 0, got {fit.get(key)!r}")
    points = doc.get("points")
    if not isinstance(points, list):
        raise LbscaleError(f"{where}: 'points' must be a list of {{procs, bytes, seconds}}")
    for i, pt in enumerate(points):
        if not (isinstance(pt, dict) and isinstance(pt.get("procs"), int) and pt["procs"] >= 1
                and _number(pt.get("bytes"), 0, strict=True) and _number(pt.get("seconds"), 0, strict=True)):
            raise LbscaleError(f"{where}: points[{i}] must be {{procs, bytes, seconds}} with numbers > 0, got {pt!r}")
    return doc


def load_allreduce(path: Path) -> dict:
    """A validated all-reduce file: doc['fit']['alpha_seconds'] and ['beta_seconds_per_byte'] feed the model."""
    if Path(path).exists() and not Path(path).is_file():
        raise LbscaleError(f"{path}: not a file (give the JSON file `lbscale bench allreduce` writes)")
    try:
        doc = read_json(path)
    except OSError as e:
        raise LbscaleError(f"{path}: cannot read it ({e.strerror})") from None
    if doc is None:
        raise LbscaleError(f"{path}: no such file (write one with `lbscale bench allreduce`)")
    return validate_allreduce(doc, str(path))


def save_allreduce(path: Path, doc: dict) -> None:
    """Validate, then write atomically."""
    write_json(Path(path), validate_allreduce(doc, str(path)))


# --- the prediction ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EpochPrediction:
    """Time per epoch at `gpus` GPUs and its split per step (seconds)."""

    gpus: int
    epoch_seconds: float
    step_seconds: float  # compute + comm
    compute_seconds: float  # data + compute without communication (weak scaling: the same at every GPU count)
    comm_seconds: float  # exposed communication: exposed_fraction x ring_seconds
    ring_seconds: float  # the full ring all-reduce of the gradients at `gpus`
    exposed_fraction: float
    steps_per_epoch: float
    buckets: int

    @property
    def comm_efficiency_loss(self) -> float:
        """The share of a step spent waiting for communication: 1 - compute / (compute + comm)."""
        return self.comm_seconds / self.step_seconds if self.step_seconds > 0 else 0.0


REGIMES = ("weak", "strong")


def predict_epoch_seconds(gpus: int, *, train_samples: float, local_batch: float, measured_gpus: int,
                          step_seconds: float, comm_seconds: float | None, gradient_bytes: float, alpha: float,
                          beta: float, bucket_bytes: float = DDP_BUCKET_BYTES, regime: str = "weak") -> EpochPrediction:
    """Seconds per epoch at `gpus` GPUs, from one measured step at `measured_gpus` with `local_batch` images per
    GPU per step. Weak scaling (the default): the per-GPU batch is fixed, so an epoch is
    train_samples / (gpus x local_batch) steps and the compute per step stays. Strong scaling: the global batch
    measured_gpus x local_batch is fixed, so the steps per epoch stay and each GPU's batch, and with it (linearly)
    its compute per step, shrinks by measured_gpus / gpus.

    step_seconds: measured training seconds per step at measured_gpus (an epoch's train_seconds / steps: data +
    compute + the exposed communication); comm_seconds: of those, the exposed communication per step (the
    epoch's comm_seconds / steps), or None where not measured. gradient_bytes: the model's gradients (4 x
    trainable parameters in fp32), all-reduced in ceil(gradient_bytes / bucket_bytes) buckets over one ring of
    all GPUs. The exposed fraction f = comm_seconds / ring(measured_gpus), clipped to [0, 1], is 1 (no overlap)
    where nothing calibrates it (one GPU measured, or comm not measured: then the step is taken to hold the
    whole ring); the exposed wait at `gpus` is comm_seconds + f x (ring(gpus) - ring(measured_gpus)), so a wait
    above the whole ring (a congested fabric) is carried as measured, and at measured_gpus the prediction is the
    measurement exactly.
    All arguments are plain numbers; bad ones are LbscaleErrors."""
    for name, value, minimum, strict in (("train_samples", train_samples, 0, True),
                                         ("local_batch", local_batch, 0, True),
                                         ("step_seconds", step_seconds, 0, True),
                                         ("gradient_bytes", gradient_bytes, 0, False), ("alpha", alpha, 0, False),
                                         ("beta", beta, 0, False), ("bucket_bytes", bucket_bytes, 0, True)):
        if not _number(value, minimum, strict):
            raise LbscaleError(f"scaling model: {name} must be a number {'>' if strict else '>='} 0, got {value!r}")
    if regime not in REGIMES:
        raise LbscaleError(f"scaling model: regime must be one of {', '.join(REGIMES)}, got {regime!r}")
    for name, value in (("gpus", gpus), ("measured_gpus", measured_gpus)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LbscaleError(f"scaling model: {name} must be an integer >= 1, got {value!r}")
    if comm_seconds is not None and not (_number(comm_seconds, 0, strict=False) and comm_seconds < step_seconds):
        raise LbscaleError(f"scaling model: comm_seconds must be >= 0 and below step_seconds ({step_seconds}), "
                           f"got {comm_seconds!r}")
    buckets = max(1, math.ceil(gradient_bytes / bucket_bytes))
    ring0 = ring_allreduce_seconds(measured_gpus, gradient_bytes, alpha, beta, buckets)
    if comm_seconds is None:  # not measured: the step is assumed to hold the whole ring (no overlap)
        comm_seconds = min(ring0, step_seconds)
    exposed = min(1.0, comm_seconds / ring0) if ring0 > 0 else 1.0
    share = 1.0 if regime == "weak" else measured_gpus / gpus  # of the measured per-GPU batch, at `gpus`
    ring = ring_allreduce_seconds(gpus, gradient_bytes, alpha, beta, buckets)
    # the measured step, changed by what differs at `gpus`: the compute scales with the per-GPU batch, the
    # exposed wait with the ring (f x (ring - ring0); a wait above the whole ring stays as measured). Written
    # as differences, so at the measured count it is the measurement itself, to the last bit.
    compute = (step_seconds - comm_seconds) * share
    comm = comm_seconds + exposed * (ring - ring0)
    step = step_seconds - (1.0 - share) * (step_seconds - comm_seconds) + exposed * (ring - ring0)
    steps = train_samples / (gpus * local_batch * share)
    return EpochPrediction(gpus=gpus, epoch_seconds=steps * step, step_seconds=step,
                           compute_seconds=compute, comm_seconds=comm, ring_seconds=ring, exposed_fraction=exposed,
                           steps_per_epoch=steps, buckets=buckets)
