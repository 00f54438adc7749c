"""The result store: per-trial files written atomically (temp file + rename), read back as records.

A trial directory holds trial.yaml (a sweep's resolved config), grid.json (its place in the grid), peers.json
(the other trials of its halving group in the current plan),
config.json, metrics.jsonl, summary.json (written last), checkpoint/, and attempts/ (the summaries of
earlier failed attempts). Whether a process or a SLURM job still works on a trial is
`lbscale.sweep.state`'s question, not the store's."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import tempfile
import time
from pathlib import Path

from lbscale.errors import LbscaleError

CONFIG, METRICS, SUMMARY, CHECKPOINT = "config.json", "metrics.jsonl", "summary.json", "checkpoint"
REQUEUE_EXIT = 75  # a trial's exit code after SIGTERM / SIGUSR1: checkpointed, run again with --resume
CHECKPOINT_INFO = "info.json"  # inside the checkpoint directory: reason, epoch, step, time written
PREEMPTED = "preempted"  # the reason recorded in checkpoint/info.json by that checkpoint
WAITING = "waiting"  # ... by a trial waiting at a rung of synchronous successive halving (exit REQUEUE_EXIT too)
TARGET = "target"  # ... by a trial stopped at its target inside an epoch (its last weights, where it reached it)
PEERS = "peers.json"  # a sweep trial's successive-halving group: {group, members} of the current plan


def umask() -> int:
    """The process's file mode creation mask (read from /proc where it can be: setting it to read it, as
    os.umask does, is a race with other threads creating files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def group_readable(path, directory: bool = False) -> None:
    """The mode `open` or `mkdir` would have given: mkstemp and mkdtemp make their files and folders private to
    their owner (0600, 0700), and a result renamed into place would keep that, unreadable by a colleague."""
    os.chmod(path, (0o777 if directory else 0o666) & ~umask())


@contextlib.contextmanager
def naming(path):
    """An OSError raised without a file name (a write's or fsync's, the HDF5 library's) gets `path`, so that the
    one line the CLI makes of it (errors.os_error_line) says where the disk was full."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, os.strerror(e.errno), str(path)) from e
        raise


def write_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never a part (rename within one directory is atomic); the file
    takes the process umask's mode, as `open` gives it."""
    path = Path(path)
    with naming(path):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o666 & ~umask())
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


_LEFTOVER = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")  # write_atomic's temp files: mkstemp's 8 characters


def remove_leftovers(folder: Path, names, older_than: float = 0.0) -> list[Path]:
    """Remove the temp files of `names` (file names, or shell patterns of them: `*.sh`, every sbatch script a sweep
    writes) that write_atomic left in `folder` when its process was killed; only those (a process removes the names
    it alone writes, never a file of another writer's). `older_than`
    (seconds since the file was last written): where another process may be writing one of these names right now
    (a sweep and its SLURM array tasks both write a trial's trial.yaml, peers.json, ...), a temp file that young
    may be a write in flight, not a leftover."""
    removed, now = [], time.time()
    for p in Path(folder).glob(".*.tmp"):
        m = _LEFTOVER.fullmatch(p.name)
        try:
            stale = m and any(fnmatch.fnmatchcase(m["name"], name) for name in names) and p.is_file() \
                and now - p.stat().st_mtime >= older_than
        except FileNotFoundError:  # renamed into place meanwhile
            continue
        if stale:
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=1, default=str) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_atomic(path, "".join(json.dumps(r, default=str) + "\n" for r in rows))


def read_json(path: Path):
    """A result file's content, or None where it does not exist; a corrupt one is an LbscaleError naming it
    (taking it for absent would rerun a finished trial or hide a failure)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    try:
        return json.loads(text)
    except ValueError as e:  # UnicodeDecodeError is one too
        raise LbscaleError(f"{path}: not valid JSON ({e})") from None


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file ([] where it does not exist); a corrupt line is named."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise LbscaleError(f"{path}:{n}: not valid JSON ({e})") from None
    return rows


RUN, SUBMITTED, TRIAL_YAML = "run.json", "submitted.json", "trial.yaml"
GRID = "grid.json"  # a sweep trial's place in its grid: sweep, batch, GPUs, variant, warm-up, seed
# in a trial directory: the running periods of the SLURM array tasks that ran it ({"periods": [{"start": unix time,
# "seconds"}]}); a sweep's wall budget counts their union (time queued is in none of them)
TASK_PERIODS = "task-periods.json"
ROUNDS = "rounds.json"  # in a results directory: the rounds of `sweep --until-resolved`, each decision and its trials
ATTEMPTS = "attempts"  # summaries of earlier attempts of a retried trial: attempts/summary-1.json, ...
FINISHED = ("completed", "diverged", "pruned")
ENVIRONMENT = "environment"  # a failed trial's cause where the disk or the folders failed it (a rerun retries it)


def archive_summary(trial_dir: Path) -> Path | None:
    """Move a previous attempt's summary.json into attempts/ (numbered), so a retry never loses its record."""
    trial_dir = Path(trial_dir)
    summary = trial_dir / SUMMARY
    if not summary.exists():
        return None
    folder = trial_dir / ATTEMPTS
    folder.mkdir(exist_ok=True)
    n = 1 + sum(1 for _ in folder.glob("summary-*.json"))
    target = folder / f"summary-{n}.json"
    os.replace(summary, target)
    return target


def write_failed_summary(trial_dir: Path, error: str, **fields) -> None:
    """The summary of a trial that ended without a result of its own (the launcher's verdict)."""
    write_json(Path(trial_dir) / SUMMARY, {**fields, "status": "failed", "error": error})
