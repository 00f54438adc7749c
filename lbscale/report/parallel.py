"""Work shared with a forked child process: a large report's two heavy loops, reading trial directories and
drawing figures, each take both cores of a two-core machine where that is safe."""

from __future__ import annotations

import multiprocessing
import os
import sys


def can_fork() -> bool:
    """Whether a forked child may share the work: a POSIX machine with more than one core, and no torch loaded. A
    child forked while torch's or openTSNE's worker threads run (a notebook, a test after training, `lbscale
    filter`) can inherit a lock one of them held and hang, as it once did in CI; `lbscale report` itself never
    imports torch."""
    return ((os.cpu_count() or 1) > 1 and "fork" in multiprocessing.get_all_start_methods()
            and "torch" not in sys.modules)


_DIED = object()


def _send(fn, items, conn) -> None:
    try:
        result = fn(items)
    except BaseException as e:  # the parent raises it, once its own half has not raised first
        result = e
    conn.send(result)
    conn.close()


def halves(fn, items: list) -> list:
    """[fn(first half of items), fn(second half)], the second computed by a forked child and sent back pickled. An
    exception is raised as one process going through the items in order would meet it: the first half's first."""
    half = len(items) // 2
    fork = multiprocessing.get_context("fork")
    receive, send = fork.Pipe(duplex=False)
    child = fork.Process(target=_send, args=(fn, items[half:], send))
    child.start()
    send.close()
    try:
        first = fn(items[:half])
    except BaseException:
        child.terminate()
        child.join()
        raise
    second = _DIED
    try:
        second = receive.recv()
    except EOFError:
        pass
    finally:
        child.join()
        receive.close()
    if second is _DIED:
        raise RuntimeError(f"the child process that took {len(items) - half} of {len(items)} items died "
                           f"(exit {child.exitcode})")
    if isinstance(second, BaseException):
        raise second
    return [first, second]
