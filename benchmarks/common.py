"""Helpers for the benchmarks: best-of-N timing within one run, and a ratio line."""

import time


def best_seconds(fn, repeat: int = 3) -> float:
    """Shortest wall time of `repeat` calls (the least disturbed by a noisy machine)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def report(name: str, value: float, unit: str, target: str = "") -> str:
    line = f"{name:<58} {value:>12.2f} {unit:<8} {target}"
    print(line, flush=True)
    return line


def pace_seconds() -> float:
    """Seconds for a fixed piece of pure-Python work (10 million additions), timed just before a benchmark in the
    same run: this machine's pace at that moment, to read the benchmark's figure against (a fixed loop's time
    varied by up to 58 % within an hour on the development machine, docs/benchmarks.md: a figure measured while
    the machine is slow is slow too)."""
    t0 = time.perf_counter()
    s = 0
    for i in range(10_000_000):
        s += i
    return time.perf_counter() - t0
