"""`lbscale bench allreduce`: all-reduce time over message sizes and process counts, and its alpha-beta fit.

The command starts itself once per process count: `torchrun --standalone` on this machine, `srun --ntasks=P`
inside a SLURM allocation. Each of those runs is `python -m lbscale.studies.allreduce` (the worker below); its
rank 0 writes the measured times to a scratch file next to --out (on a cluster rank 0 may run on another node
than this process, so the scratch file must sit on a shared file system, as the output does). The math is in
`lbscale.analysis.allreduce_model`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from lbscale.analysis.allreduce_model import check_fit, check_summary, fit_alpha_beta, save_allreduce
from lbscale.errors import ERROR_PREFIX, LbscaleError, error_line
from lbscale.progress import is_quiet
from lbscale.results import read_json, write_json
from lbscale.slurm import SlurmEnv, port_for_job
from lbscale.ranges import doubling, parse_ints

UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
BYTES = re.compile(r"^\s*(\d+)\s*([kmg]?)i?b?\s*$", re.IGNORECASE)
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
FLOAT32 = 4


def parse_bytes(text: str) -> int:
    """'4096' -> 4096, '4K' -> 4096, '64M' -> 64 MiB, '1G' -> 1 GiB (powers of 1024)."""
    m = BYTES.match(text)
    if not m or int(m.group(1)) < 1:
        raise LbscaleError(f"--sizes: malformed size {text!r} (e.g. 4096, 4K, 64M)")
    n = int(m.group(1)) * UNITS[m.group(2).lower()]
    if n % FLOAT32:
        raise LbscaleError(f"--sizes: {text!r} is not a multiple of 4 bytes (the messages are float32 tensors)")
    return n


def parse_sizes(value: str) -> list[int]:
    """'4K..64M' (doubling from LO, a power of two, up to HI) or a list '4K,1M,64M': message sizes in bytes."""
    if ".." in value:
        lo_text, _, hi_text = value.partition("..")
        sizes = doubling(parse_bytes(lo_text), parse_bytes(hi_text))
        if sizes is None:
            raise LbscaleError(f"--sizes: malformed range {value!r}: expected LO..HI with LO a power of two "
                               "<= HI, e.g. 4K..64M")
        return sizes
    return sorted({parse_bytes(v) for v in value.split(",")})


def _parse_procs(value: str, option: str) -> list[int]:
    procs = sorted(set(parse_ints(value, f"{option} process counts (e.g. 2,4,8)")))
    if procs[0] < 2:
        raise LbscaleError(f"{option}: all-reduce needs 2 or more processes, got {value!r}")
    return procs


@dataclass
class AllreduceOptions:
    procs: str = "2,4"
    sizes: str = "4K..64M"
    repeats: int = 20
    warmup: int = 5
    backend: str | None = None  # None: nccl where the workers see GPUs, else gloo
    system: str = "local"
    out: Path | None = None
    fit_procs: str | None = None


def run_allreduce_bench(o: AllreduceOptions) -> tuple[dict, str]:
    """Measure at every process count, fit, write the file; returns the document and the outcome line."""
    procs, sizes = _parse_procs(o.procs, "--procs"), parse_sizes(o.sizes)
    fit_procs = _parse_procs(o.fit_procs, "--fit-procs") if o.fit_procs else procs
    if not set(fit_procs) <= set(procs):
        raise LbscaleError(f"--fit-procs {o.fit_procs}: fit only on measured process counts (--procs {o.procs})")
    if len(sizes) < 2 and len(fit_procs) < 2:  # T = 2 (p-1) alpha + 2 (p-1)/p n beta: one equation, two unknowns
        raise LbscaleError(f"--sizes {o.sizes} at one process count cannot separate alpha from beta: give two or "
                           "more sizes (e.g. 4K..64M) or fit on two or more process counts")
    if o.repeats < 1 or o.warmup < 0:
        raise LbscaleError(f"--repeats must be >= 1 and --warmup >= 0, got {o.repeats} and {o.warmup}")
    if not SAFE_NAME.match(o.system):
        raise LbscaleError(f"--system {o.system!r}: use letters, digits, '.', '_' and '-' (it names the file)")
    slurm = SlurmEnv.current()
    if slurm.in_multitask_step:
        raise LbscaleError("run `lbscale bench allreduce` once inside the allocation (salloc or an sbatch script), "
                           "not under srun: it starts its own srun steps")
    out = Path(o.out or f"allreduce-{o.system}.json")
    step = _step(o.system, slurm) if slurm.in_job else {}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=out.parent.resolve(), prefix=".allreduce-"))
    except OSError as e:
        raise LbscaleError(f"--out {out}: cannot write there ({e.strerror})") from None
    try:
        runs = [_measure(p, i, sizes, o, slurm, scratch, step) for i, p in enumerate(procs)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    try:
        return _document(runs, fit_procs, o, slurm, out)
    except OSError as e:
        raise LbscaleError(f"--out {out}: cannot write there ({e.strerror})") from None


def _step(system: str, slurm: SlurmEnv) -> dict:
    """Inside an allocation, where --system names a cluster profile: its srun arguments and the step's
    environment as a sweep's array task sets them (NCCL / Gloo interfaces, the rendezvous address with the
    profile's suffix). Another name is a label only."""
    from lbscale.slurm import step_env
    from lbscale.sweep.systems import get_system, load_systems

    if system not in load_systems():
        return {"srun_args": [], "env": {}}
    prof = get_system(system)
    return {"srun_args": [str(a) for a in prof.get("srun_args") or []], "env": step_env(slurm, prof)}


def _document(runs: list[dict], fit_procs: list[int], o: AllreduceOptions, slurm: SlurmEnv, out: Path):
    import torch

    points = [{"procs": r["procs"], "bytes": pt["bytes"], "seconds": pt["seconds"], "nodes": len(set(r["hosts"]))}
              for r in runs for pt in r["points"]]
    fit = fit_alpha_beta([pt for pt in points if pt["procs"] in fit_procs])
    hosts = sorted({h for r in runs for h in r["hosts"]})
    doc = {"system": o.system, "backend": runs[0]["backend"], "device": runs[0]["device"],
           "launcher": "srun" if slurm.in_job else "torchrun", "hosts": hosts, "nodes": len(hosts),
           "torch": torch.__version__, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "dtype": "float32", "repeats": o.repeats, "warmup": o.warmup, "points": points, "fit": fit}
    others = [pt for pt in points if pt["procs"] not in fit_procs]
    if others:
        doc["check"] = check_fit(others, fit)
        doc["check_summary"] = check_summary(doc["check"])
    save_allreduce(out, doc)
    return doc, outcome_line(doc, out)


def outcome_line(doc: dict, out: Path) -> str:
    fit = doc["fit"]
    bw = fit["bandwidth_GBps"]
    line = (f"allreduce fit ({doc['backend']}, {','.join(map(str, fit['fitted_on_procs']))} processes): "
            f"alpha {fit['alpha_seconds'] * 1e6:.3g} us, "
            + (f"bandwidth {bw:.3g} GB/s" if bw is not None else "bandwidth unbounded (beta 0)")
            + f", rms error {fit['rms_relative_error'] * 100:.0f}%")
    if "check" in doc:
        at = ",".join(str(p) for p in doc["check_summary"]["by_procs"])
        line += f"; predicted/measured at {at} processes: median {doc['check_summary']['median_ratio']:.2f}"
    return line + f"; saved {out} (next: lbscale report RESULTS --allreduce {out})"


def _measure(p: int, index: int, sizes: list[int], o: AllreduceOptions, slurm: SlurmEnv, scratch: Path,
             step: dict) -> dict:
    """One torchrun / srun run of the worker at `p` processes; its rank 0's measurements."""
    result = scratch / f"procs-{p}.json"
    worker = ["-m", "lbscale.studies.allreduce", "--sizes", ",".join(map(str, sizes)), "--repeats", str(o.repeats),
              "--warmup", str(o.warmup), "--out", str(result)] + (["--backend", o.backend] if o.backend else [])
    env = dict(os.environ)
    if slurm.in_job:
        env.update(step["env"])
        # a port per step, apart from the job's own (a trial of the same job may hold that one)
        env["LBSCALE_MASTER_PORT"] = str(port_for_job(slurm.job_id) + 1 + index)
        argv = ["srun", f"--ntasks={p}", "--kill-on-bad-exit=1", *step["srun_args"], sys.executable, *worker]
    else:
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={p}", *worker]
    if not is_quiet():
        print(f"allreduce: {p} processes ({argv[0] if slurm.in_job else 'torchrun'}), {len(sizes)} sizes x "
              f"{o.repeats} repeats", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise LbscaleError(f"{argv[0]}: not found (SLURM_JOB_ID is set, so the bench starts srun steps)") from None
    run = read_json(result)
    if done.returncode != 0 or run is None:
        raise LbscaleError(f"all-reduce at {p} processes failed (exit {done.returncode}): "
                           f"{_why(done.stdout + done.stderr)}")
    if not is_quiet():
        print(f"allreduce: {p} processes done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return run


def _why(output: str) -> str:
    """The line that says what went wrong: a worker's own error line, else the last error-looking line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    own = error_line(lines)
    if own is not None:
        return own
    for line in reversed(lines):
        if "error" in line.lower() and not set(line) <= set("=-*"):
            return line
    return lines[-1] if lines else "no output"


# --- the worker: one rank under torchrun or srun ---------------------------------------------------------
def measure_worker(sizes: list[int], repeats: int, warmup: int, backend: str | None, out: Path) -> None:
    """Time `repeats` all-reduces per size (after `warmup` untimed ones); rank 0 writes the medians of the
    per-repeat slowest rank."""
    import torch

    from lbscale.train import distributed as d

    env = d.detect_env()
    if env.world_size < 2:
        raise LbscaleError("the all-reduce worker runs under torchrun or srun with 2 or more processes")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl" and not torch.cuda.is_available():
        raise LbscaleError("--backend nccl: no GPU visible here; measure with --backend gloo")
    device = d.pick_device("cuda" if backend == "nccl" else "cpu", env)
    d.init(env, backend, device)
    try:
        hosts = d.all_gather_object(socket.gethostname())
        points = [{"bytes": n, "seconds": _time_size(n, repeats, warmup, device)} for n in sizes]
        if env.is_main:
            write_json(out, {"procs": env.world_size, "backend": backend, "hosts": hosts, "points": points,
                             "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"})
    except BaseException:
        d.teardown(clean=False)
        raise
    d.teardown()


def _time_size(nbytes: int, repeats: int, warmup: int, device) -> float:
    import torch
    import torch.distributed as dist

    from lbscale.train.distributed import timed_all_reduce

    x = torch.zeros(nbytes // FLOAT32, dtype=torch.float32, device=device)  # zeros: sums never overflow
    for _ in range(warmup):
        dist.all_reduce(x)
    times = [timed_all_reduce(x) for _ in range(repeats)]
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a collective ends when its slowest rank does
    return statistics.median(slowest.tolist())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lbscale.studies.allreduce",
                                     description="One rank of `lbscale bench allreduce` (under torchrun or srun).")
    parser.add_argument("--sizes", required=True, help="Comma-separated message sizes in bytes.")
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--backend", choices=["nccl", "gloo"])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        measure_worker([int(v) for v in args.sizes.split(",")], args.repeats, args.warmup, args.backend, args.out)
    except LbscaleError as e:
        print(f"{ERROR_PREFIX}{e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
