"""`lbscale train` in every process: where it runs (rank, world, device), a finished trial left alone, the trial
built and checked before any output or process group, and every way out closed cleanly (a failed summary where a
trial raised, the TensorBoard writer, the DDP wrapper before the process group)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from lbscale.analysis.gns import GNS_FILE
from lbscale.errors import LbscaleError, os_error_line
from lbscale.results import CONFIG, ENVIRONMENT, METRICS, SUMMARY, read_json, remove_leftovers, write_json
from lbscale.slurm import SlurmEnv
from lbscale.train import checkpoint
from lbscale.train.config import TrialConfig
from lbscale.train import distributed as dist
from lbscale.train import horovod
from lbscale.train.columns import COLUMNS, write_columns
from lbscale.train.pruning import RUNGS_FILE
from lbscale.train.threads import trial_threads, usable_cpus
from lbscale.train.trial import Trial


def run_trial(cfg: TrialConfig) -> int:
    """Entry point of `lbscale train` in every process; returns the exit code."""
    if cfg.engine == "horovod":  # one line before anything starts where this node lacks it
        horovod.check_available()
    env = dist.detect_env()
    # its share of the CPUs, not one thread per core of the node for every process (threads.py)
    threads = trial_threads(os.environ, usable_cpus(), env.local_world_size,
                            SlurmEnv.current().cpus_per_task if env.launcher == "slurm" else None,
                            most=torch.get_num_threads())
    if threads is not None:
        torch.set_num_threads(threads)
    out = Path(cfg.out)
    if (out / SUMMARY).exists() and not cfg.resume:
        raise LbscaleError(f"{out}: holds a finished trial ({read_json(out / SUMMARY)['status']}); "
                           "use another --out")
    if (out / SUMMARY).exists() and cfg.resume:
        return 0  # nothing left to do
    device = dist.pick_device(cfg.device, env)
    trial = Trial(cfg, env, device, None)  # validates data and plan before any process group or output
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
        # what an earlier attempt killed mid-write left; only the files a trial alone writes (a sweep writes others)
        remove_leftovers(out, (CONFIG, METRICS, SUMMARY, COLUMNS, GNS_FILE, RUNGS_FILE))
        checkpoint.remove_partial(out)
    trial.backend = dist.init(env, cfg.backend, device, cfg.engine)
    clean = False
    try:
        code = trial.run()
        clean = True
        return code
    except Exception as e:
        if env.is_main and out.is_dir():
            line = os_error_line(e) if isinstance(e, OSError) else None
            # a user error (a corrupted chunk of the data file) is its one line, as the CLI prints it; a bug its type
            reason = str(e) if isinstance(e, LbscaleError) else line or f"{type(e).__name__}: {e}"
            summary = trial.summary("failed", reason, [])
            if line:  # a full disk, a folder it may not write: not the trial's fault, so a rerun retries it
                summary["cause"] = ENVIRONMENT
            with contextlib.suppress(Exception):  # the copy only saves a report time: never hide the error
                write_columns(out)
            write_json(out / SUMMARY, summary)
        raise
    finally:
        if trial.inputs is not None:
            trial.inputs.close()
        trial.book.scalars.close()  # every way out: finished, preempted, waiting at a rung, failed
        if env.world_size > 1 and trial.train_step is not None:
            dist.release_ddp(trial.train_step)
        dist.teardown(clean)
