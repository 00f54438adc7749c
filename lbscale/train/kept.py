"""A trial's checkpoints as files, without torch: the kept checkpoints (`--keep-checkpoints`) by label, a kept
checkpoint's info, whether a trial has a resume checkpoint and whether it holds the step that reached the target.
`train.checkpoint` (which saves and loads them, with torch) re-exports these; commands that only list or read
them (`lbscale schedule`'s derivation) import them from here and stay clear of torch's import."""

from __future__ import annotations

from pathlib import Path

from lbscale.errors import LbscaleError
from lbscale.results import CHECKPOINT, CHECKPOINT_INFO, SUMMARY, read_json


KEPT = "kept"  # beside the resume checkpoint: kept/<label>/, the checkpoints --keep-checkpoints keeps


def kept(out: Path) -> dict[str, Path]:
    """The kept checkpoints of a trial directory, by label, in step order."""
    folder = Path(out) / KEPT
    found = [d for d in folder.iterdir() if (d / "model.pt").exists()] if folder.is_dir() else []
    steps = {d: (read_json(d / CHECKPOINT_INFO) or {}).get("step", 0) for d in found}
    return {d.name: d for d in sorted(found, key=lambda d: steps[d])}


def kept_info(folder: Path) -> dict:
    """A kept checkpoint's info.json, with the batches a branch needs; one line where it lacks them."""
    info = read_json(Path(folder) / CHECKPOINT_INFO) or {}
    if not (Path(folder) / "model.pt").exists() or "local_batch" not in info:
        raise LbscaleError(f"{folder}: not a kept checkpoint of this lbscale (train with --keep-checkpoints)")
    return info


def exists(out: Path) -> bool:
    return (out / CHECKPOINT / "model.pt").exists()


def at_target(out: Path) -> Path | None:
    """The checkpoint of a trial that stopped at its target, where it holds the weights of the step that reached
    it (`lbscale gns --best`, `lbscale branch --at target`); None otherwise (an earlier lbscale checkpointed such a
    trial only at an epoch's end)."""
    out = Path(out)
    summary = read_json(out / SUMMARY) or {}
    if summary.get("stopped") != "target" or not exists(out):
        return None
    info = read_json(out / CHECKPOINT / CHECKPOINT_INFO) or {}
    return out / CHECKPOINT if info.get("step") == summary.get("steps_to_target") else None
