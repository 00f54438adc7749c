"""`lbscale train` in every process: where it runs (rank, world, device), a finished trial left alone, the trial
built and checked before any output or process group, and every way out closed cleanly (a failed summary where a
trial raised, the TensorBoard writer, the DDP wrapper before the process group)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from lbscale.train.config import TrialConfig
from lbscale.errors import LbscaleError
from lbscale.results import SUMMARY, read_json, write_json
from lbscale.slurm import SlurmEnv
from lbscale.train import distributed as dist
from lbscale.train.columns import write_columns
from lbscale.train.threads import trial_threads, usable_cpus
from lbscale.train.trial import Trial


def run_trial(cfg: TrialConfig) -> int:
    """Entry point of `lbscale train` in every process; returns the exit code."""
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
    trial.backend = dist.init(env, cfg.backend, device)
    clean = False
    try:
        code = trial.run()
        clean = True
        return code
    except Exception as e:
        if env.is_main and out.is_dir():
            summary = trial.summary("failed", f"{type(e).__name__}: {e}", [])
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
