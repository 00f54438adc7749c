"""Work shared with a forked child process: a large report's two heavy loops, reading trial directories and
drawing figures, each take both cores of a two-core machine where that is safe, and this process's own
preparation (importing matplotlib) runs while the child reads."""

from __future__ import annotations

import gc
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


def start(child) -> None:
    """Start a forked child with this process's objects frozen for the garbage collector (`gc.freeze`, as
    Python's documentation advises before a fork): the child's collections then never walk the parent's objects,
    which would write to every page they lie on and make the child copy them (a report over 2,000 trials: the
    children's CPU 2.60 s against 2.73 s on median of five alternating runs each)."""
    gc.freeze()
    try:
        child.start()
    finally:
        gc.unfreeze()


def next_taken(taken, end: int) -> int | None:
    """The index of the next item nobody has taken from the shared counter `taken` (a multiprocessing Value), or
    None where all `end` are taken."""
    with taken.get_lock():
        i = taken.value
        taken.value += 1
    return i if i < end else None


def stop_taking(taken, end: int) -> None:
    """No chunk is taken after this: one has failed, and the error is what the caller will see."""
    with taken.get_lock():
        taken.value = end


def _take(fn, chunks, taken, conn) -> None:
    """The child's side of `shared`: the next chunk nobody has taken, until none is left; sends {index: result}."""
    done = {}
    while (i := next_taken(taken, len(chunks))) is not None:
        try:
            done[i] = fn(chunks[i])
        except BaseException as e:  # the parent raises it where a process going in order would have met it
            done[i] = e
            stop_taking(taken, len(chunks))
            break
    conn.send(done)
    conn.close()


def shared(fn, items: list, chunks: int = 16, first=None) -> list:
    """[fn(chunk) for each of `chunks` consecutive chunks of items], the chunks taken in turn by this process and a
    forked child from one shared counter, so that neither waits on the other: this process first runs `first()`
    (work that must happen here, such as an import the next step needs) while the child already reads. Results
    come back in the chunks' order; an exception is raised as one process going through the chunks in order would
    meet it (the earliest chunk's), once the chunks already taken are done: a failed chunk stops both processes
    from taking more. An interrupt stops the child at once."""
    n = max(1, min(chunks, len(items)))
    bounds = [round(i * len(items) / n) for i in range(n + 1)]
    parts = [items[a:b] for a, b in zip(bounds, bounds[1:])]
    fork = multiprocessing.get_context("fork")
    taken = fork.Value("i", 0)
    receive, send = fork.Pipe(duplex=False)
    child = fork.Process(target=_take, args=(fn, parts, taken, send))
    start(child)
    send.close()
    done, mine = _DIED, {}
    try:
        if first is not None:
            first()
        while (i := next_taken(taken, len(parts))) is not None:
            try:
                mine[i] = fn(parts[i])
            except Exception as e:  # the child finishes the chunk it holds (an earlier one may fail too)
                mine[i] = e
                stop_taking(taken, len(parts))
                break
        try:
            done = receive.recv()
        except EOFError:
            pass
    except BaseException:
        child.terminate()
        raise
    finally:
        child.join()
        receive.close()
    if done is _DIED:
        raise RuntimeError(f"the child process that shared {len(items)} items died (exit {child.exitcode})")
    results = {**done, **mine}
    for i in sorted(results):
        if isinstance(results[i], BaseException):
            raise results[i]
    missing = [i for i in range(len(parts)) if i not in results]
    if missing:  # a chunk neither took: only after an exception, raised above
        raise RuntimeError(f"chunks {missing} of {len(parts)} were not read")
    return [results[i] for i in range(len(parts))]
