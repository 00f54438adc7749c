"""The optimum of one batch's search: numpy arrays in, arrays out (the report's tuned analysis, `report/tuned.py`,
feeds them a DataFrame group at a time) for the tables and figures; the fits read every trial
(`report.steps_model`).

A batch's search is a set of points (LRs, in log) each trained with one or more seeds; a trial reached the target
in S steps or did not. A point's steps are the geometric mean over its seeds, and a point counts only where every
seed of it reached the target. The best point has the fewest steps; where both its neighbours in LR reached
the target too, the parabola through the three (log steps over log LR) places the optimum between grid points
(its vertex, kept inside the neighbours), so LR* and S* are not stuck on the search grid; elsewhere the best
point is the optimum. A best point at the lowest or highest LR searched is on the edge: the optimum may lie
outside the search.
"""

from __future__ import annotations

import numpy as np


def point_index(lrs: np.ndarray, points: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct points' log LRs in increasing order, each trial's index among them); trials of one search
    point share it (`points`, e.g. grid.json's point id), else trials of one LR."""
    keys = np.asarray(points if points is not None else lrs)
    uniq, first, index = np.unique(keys, return_index=True, return_inverse=True)
    x = np.log(np.asarray(lrs, dtype=float)[first])
    order = np.argsort(x, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return x[order], rank[index]


def optimum(x: np.ndarray, index: np.ndarray, log_steps: np.ndarray, weights: np.ndarray) -> dict:
    """The optimum of one batch under R weightings of its trials. x: the points' log LR (P, increasing); index:
    each trial's point (T,); log_steps: each trial's log steps to target, NaN where it did not reach it (T,);
    weights: (R, T) counts (all ones for the data itself). Returns arrays of R: `log_lr`, `log_steps` (NaN where no
    point reached the target), `best` (the best point's index, -1 where none) and `refined` (the parabola
    placed it)."""
    weights = np.atleast_2d(weights).astype(float)
    r_count, p_count = len(weights), len(x)
    missed = np.isnan(log_steps)
    drawn = _per_point(weights, index, p_count)  # (R, P): how many trials of each point a resample holds
    misses = _per_point(weights * missed, index, p_count)
    sums = _per_point(weights * np.where(missed, 0.0, log_steps), index, p_count)
    reached = (drawn > 0) & (misses == 0)
    mean = np.where(reached, sums / np.where(drawn > 0, drawn, 1.0), np.inf)
    best = np.argmin(mean, axis=1)
    rows = np.arange(r_count)
    any_reached = reached[rows, best]
    cols = np.arange(p_count)[None, :]
    present = drawn > 0
    left = np.where(present & (cols < best[:, None]), cols, -1).max(axis=1)
    right = np.where(present & (cols > best[:, None]), cols, p_count).min(axis=1)
    inside = any_reached & (left >= 0) & (right < p_count)
    left_c, right_c = np.clip(left, 0, p_count - 1), np.clip(right, 0, p_count - 1)
    inside &= reached[rows, left_c] & reached[rows, right_c]
    x0, x1, x2 = x[left_c], x[best], x[right_c]
    y0, y1, y2 = mean[rows, left_c], mean[rows, best], mean[rows, right_c]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        # the parabola y = a (x - x1)^2 + b (x - x1) + y1 through the three points
        d0, d2 = x0 - x1, x2 - x1
        a = ((y0 - y1) / d0 - (y2 - y1) / d2) / (d0 - d2)
        b = (y0 - y1) / d0 - a * d0
        refined = inside & np.isfinite(a) & (a > 0)
        vertex = np.clip(-b / (2 * a), d0, d2)
        low = np.minimum(a * vertex ** 2 + b * vertex + y1, y1)
    log_lr = np.where(refined, x1 + vertex, x1)
    out_steps = np.where(refined, low, y1)
    return {"log_lr": np.where(any_reached, log_lr, np.nan), "log_steps": np.where(any_reached, out_steps, np.nan),
            "best": np.where(any_reached, best, -1), "refined": refined & any_reached}


def _per_point(values: np.ndarray, index: np.ndarray, points: int) -> np.ndarray:
    """(R, P) sums of `values` (R, T) over each point's trials: values @ member, member the (T, P) indicator of
    each trial's point. Where no point has more than two trials (a search of one seed per point, two where a
    confirmation stage added one), added directly, a point's k-th trials at once: a sum of one or two numbers is
    the product's to the last bit, without the T x P matrix (2,000 x 2,000 at 2,000 points of one seed). More
    seeds are summed by the product, whose order of additions is BLAS's."""
    order = np.argsort(index, kind="stable")
    first = np.r_[0, np.flatnonzero(np.diff(index[order])) + 1]  # where each point's trials begin
    rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))  # a trial's place in its point
    if len(rank) and rank.max() > 1:
        member = np.zeros((len(index), points))
        member[np.arange(len(index)), index] = 1.0
        return values @ member
    out = np.zeros((len(values), points))
    for k in (0, 1):
        at = order[rank == k]
        out[:, index[at]] += values[:, at]
    return out
