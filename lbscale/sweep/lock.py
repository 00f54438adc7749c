"""One results directory, one sweep: `<results>/sweep.lock` holds the host and pid of the sweep process that
launches into it. A second sweep on this host is refused (or waits, --wait-for-lock); a lock left by a process
of this host that no longer runs is taken over, with a line saying so; one of another host is reported, as this
host cannot see its processes. SLURM array tasks (`lbscale sweep --trial`) take no lock: each claims its own
trial through run.json, and their sweep may hold this lock while it waits for them.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from lbscale.errors import LbscaleError
from lbscale.results import read_json, remove_leftovers, write_json

LOCK = "sweep.lock"
POLL_SECONDS = 2.0  # --wait-for-lock: how often the lock is looked at again


@contextmanager
def sweep_lock(results: Path, wait: bool = False, busy: str | None = None):
    """Hold the results directory's lock while the body runs (created with the directory where needed). `busy`:
    what a refusal says of the holder where another command than a sweep takes the lock (it then cannot wait)."""
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    mine = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _pid_start(os.getpid()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "command": shlex.join(["lbscale", *sys.argv[1:]])}
    announced = False
    while (held := _take(results, mine)) is not None:
        if not wait:
            raise LbscaleError(_busy(results, held, busy))
        if not announced:
            print(f"{results}: waiting for the sweep of pid {held.get('pid')} on {held.get('host')} (since "
                  f"{held.get('started')}) to finish", flush=True)
            announced = True
        time.sleep(POLL_SECONDS)
    try:
        yield
    finally:
        with _guard(results):
            if read_json(results / LOCK) == mine:  # never remove a lock another process has taken since
                (results / LOCK).unlink(missing_ok=True)


def live_sweep(results: Path) -> bool:
    """Whether a sweep process of this host holds the results directory now."""
    held = read_json(Path(results) / LOCK)
    return bool(held) and held.get("host") == socket.gethostname() and _alive(held)


def _take(results: Path, mine: dict) -> dict | None:
    """Write our lock unless a live sweep holds one: None once taken, else the holder's lock. Under the directory's
    flock every lock file is written whole or not at all, so a temp file of the lock found there is a killed
    process's leftover, however young, and goes."""
    path = results / LOCK
    with _guard(results) as exclusive:
        if exclusive:
            remove_leftovers(results, (LOCK,))
        held = read_json(path)
        if held:
            if held.get("host") != mine["host"] or _alive(held):
                return held
            print(f"{path}: took over the lock of pid {held.get('pid')} on {held.get('host')}, which no longer "
                  f"runs (started {held.get('started')}: {held.get('command')})", flush=True)
        write_json(path, mine)
    return None


def _busy(results: Path, held: dict, busy: str | None = None) -> str:
    what = f"{held.get('started')}: {held.get('command')}"
    if held.get("host") == socket.gethostname():
        if busy:
            return (f"{results}: {busy} (pid {held.get('pid')}, since {what}); wait for it to finish, or give "
                    "another --results")
        return (f"{results}: another sweep runs into this results directory (pid {held.get('pid')} on "
                f"{held.get('host')}, since {what}); wait for it with --wait-for-lock, or give another --results")
    return (f"{results / LOCK}: a sweep of pid {held.get('pid')} on {held.get('host')} holds this results directory "
            f"(since {what}); {socket.gethostname()} cannot tell whether it still runs: remove the file if it does "
            "not")


@contextmanager
def _guard(results: Path):
    """Look and write as one step for the processes of this host: an flock on the directory itself; yields
    whether it holds one. Where the file system refuses flock (some Lustre mounts), two sweeps started in the same
    instant may both pass."""
    fd = os.open(results, os.O_RDONLY)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
            exclusive = True
        except (ImportError, OSError):
            exclusive = False
        yield exclusive
    finally:
        os.close(fd)  # releases the flock


def _alive(held: dict) -> bool:
    """Whether the lock's process still runs here: its pid exists and, where the lock recorded when that
    process started, it is the same process (a pid the system has given to another since is dead)."""
    try:
        pid = int(held.get("pid", 0))
        if pid <= 0:  # os.kill(0) would ask about our own process group
            return False
        os.kill(pid, 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    start = held.get("pid_start")
    return start is None or _pid_start(pid) in (None, start)


def _pid_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat field 22); None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
