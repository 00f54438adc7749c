"""Trials started warm: a local sweep's one-process trials are forked from a server that has imported torch,
timm and lbscale's trial code once, instead of each trial paying that import (about 8 s on a 2-core machine,
more than a demo trial's training) in a fresh interpreter.

The server is multiprocessing's forkserver with those modules preloaded. A trial forked from it is the same
`lbscale train` command a fresh process would run (tests/sweep/test_warm.py checks its records are bit-identical),
with its output in the trial's train.log and SIGTERM on the death of its parent (the server, which exits with
the sweep). Nothing in the server has run a torch operation, so no thread pool is forked.
Set LBSCALE_WARM_START=0 to start every trial as a fresh process.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

from lbscale.train.threads import prepare_process

PRELOAD = ["lbscale.train.entry", "lbscale.data.loader"]  # the trial's code, beside the module it is run by
ENV_SWITCH = "LBSCALE_WARM_START"
STARTED = "LBSCALE_STARTED_WARM"  # set in a forked trial: its config.json says "started": "warm"


def enabled() -> bool:
    return (os.environ.get(ENV_SWITCH, "1") != "0" and "forkserver" in multiprocessing.get_all_start_methods()
            and main_is_safe())


def main_is_safe() -> bool:
    """Whether a forked child may prepare itself from this process's __main__ (multiprocessing imports it again
    as __mp_main__): lbscale's own command (the console script or `python -m lbscale.cli`), a package's
    __main__ (`python -m pytest`, skipped by multiprocessing) or none (an interpreter prompt, a notebook). A
    user's script that starts a sweep would run again in every trial without its `if __name__ == "__main__"`
    guard: it gets fresh processes."""
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return name == "lbscale.cli" or name.endswith("__main__")
    path = getattr(main, "__file__", None)
    return path is None or os.path.basename(path) == "lbscale"


def _context(module: str):
    # the server imports torch, and OpenMP reads its wait policy then, once for every trial forked from it
    prepare_process()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([module, *PRELOAD])
    _start_deaf(ctx)
    return ctx


def _start_deaf(ctx) -> None:
    """Start the server with Ctrl-C ignored from its first instruction: multiprocessing ignores SIGINT in the
    server only once its preload is imported, and a Ctrl-C during those seconds printed the import's 49-line
    KeyboardInterrupt traceback after the sweep's own one line. The disposition passes through the server's exec;
    its trials take the default back (`_child`). From the main thread only (signal's rule); elsewhere as before."""
    import signal
    import threading
    from multiprocessing import forkserver

    if threading.current_thread() is not threading.main_thread():
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, old)


def _nothing() -> None:
    pass


def ready(module: str) -> None:
    """Start the server and wait until it has imported what it preloads (a first fork of nothing)."""
    proc = _context(module).Process(target=_nothing)
    proc.start()
    proc.join()


def _child(module: str, args: list[str], log_path: str, env: dict, pdeathsig) -> None:
    """In the forked trial: output to the log, the sweep's environment, then the command module's main (`lbscale
    train`'s), as `python -m MODULE ARGS` would run it."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh `lbscale train`: Ctrl-C stops it
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(env, **{STARTED: "1"})
    if pdeathsig is not None:
        pdeathsig()
    import importlib

    sys.argv = ["lbscale", *args]
    sys.exit(importlib.import_module(module).main(args))


class WarmTrial:
    """A forked trial with the part of subprocess.Popen's interface that run_process uses."""

    def __init__(self, module: str, args: list[str], log_path: str, env: dict, pdeathsig=None):
        self._proc = _context(module).Process(target=_child, args=(module, args, log_path, env, pdeathsig),
                                              daemon=False)
        self._proc.start()
        self.pid = self._proc.pid

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired("lbscale train", timeout)
        return self._proc.exitcode


def command(argv: list[str], module: str) -> tuple[str, list[str]] | None:
    """(module, its arguments) where argv runs `module` with this interpreter (`python -m lbscale.cli train ...`,
    a one-process trial: the launcher names its trial module), else None (torchrun, srun: started as processes)."""
    head = [sys.executable, "-m", module]
    return (module, argv[len(head):]) if argv[:len(head)] == head else None
