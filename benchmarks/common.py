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
