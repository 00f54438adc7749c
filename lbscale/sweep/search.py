"""The search axis of a sweep spec (`grid.search`): trial options sampled per (batch, variant), as the tuned
batch-size studies do (Shallue et al. 2020, Nado et al. 2021: every batch size gets its own tuned learning rate,
momentum and warm-up).

    search:
      trials: 16              # points drawn from the distributions below
      sampler: sobol          # sobol | halton | random (scipy.stats.qmc, scrambled, seeded)
      seed: 0
      base_lr: {loguniform: [1.0e-3, 10]}
      momentum: {one_minus_loguniform: [1.0e-3, 0.3]}   # 1 - m log-uniform: 0.7 .. 0.999
      warmup_epochs: {choice: [0, 2, 5]}
      weight_decay: [1.0e-4, 5.0e-4]                    # a plain list: every value (a grid)
      tune: true              # false: the points are an axis (one curve each in the report), not a tuning
      confirm: {top: 2, seeds: 2}   # once a cell's search has finished, its 2 best points with 2 more seeds

Every (batch, variant) cell gets the same points (point k means the same draw in every cell; a scaling rule
still scales base_lr per batch), so the same spec always yields the same trials, whatever --batch selects.
Sampled values are rounded to 4 significant digits (for one_minus_loguniform the draw x, not 1 - x), so
trial.yaml shows what ran.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field


from lbscale.analysis.sampling import loguniform, round_value, unit_points
from lbscale.errors import LbscaleError

SAMPLERS = {"sobol": "scrambled Sobol' sequence (balanced for a power-of-two number of trials)",
            "halton": "scrambled Halton sequence",
            "random": "independent uniform draws"}
DISTRIBUTIONS = {"loguniform": "log-uniform in [lo, hi]", "uniform": "uniform in [lo, hi]",
                 "one_minus_loguniform": "1 - x, x log-uniform in [lo, hi] (momentum close to 1)",
                 "choice": "one of the listed values, equally likely"}
SEARCH_KEYS = {"trials", "sampler", "seed", "tune", "confirm"}
# set by the grid itself (batch, seeds, data, the halving group) or per run, never a point's
NOT_SEARCHED = {"out", "resume", "preempt_after_steps", "seed", "global_batch", "data", "prune_group"}


@dataclass
class SearchSpace:
    """Sampled dimensions (option -> (distribution, arguments)), grid dimensions (option -> values)."""

    sampled: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    trials: int = 1
    sampler: str = "sobol"
    seed: int = 0
    tune: bool = True  # False: the points are an axis of the grid (one curve each), not candidates of a tuning
    confirm: tuple | None = None  # (top K points, S more seeds) rerun once a cell's search has finished

    @property
    def names(self) -> set[str]:
        return set(self.sampled) | set(self.grid)

    def points(self) -> list[dict]:
        """Every point: the sampled draws x the grid's values, in a stable order."""
        draws = [{}]
        if self.sampled:
            u = unit_points(len(self.sampled), self.trials, self.sampler, self.seed)
            draws = [{name: _transform(dist, args, x) for (name, (dist, args)), x in zip(self.sampled.items(), row)}
                     for row in u]
        grid = [dict(zip(self.grid, values)) for values in itertools.product(*self.grid.values())]
        return [{**d, **g} for d in draws for g in grid]


def _transform(dist: str, args, u: float):
    if dist == "choice":
        return args[min(int(u * len(args)), len(args) - 1)]
    lo, hi = args
    if dist == "uniform":
        return round_value(lo + u * (hi - lo))
    x = loguniform(lo, hi, u)
    # the draw is rounded, never 1 - x: rounding 1 - 1e-5 to 4 digits would give momentum 1.0
    return 1.0 - x if dist == "one_minus_loguniform" else x


def parse_search(raw, where: str, known_options) -> SearchSpace | None:
    """grid.search from YAML, checked: unknown options, distributions and samplers are one-line errors."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise LbscaleError(f"{where}: grid.search must map trial options to distributions or lists")
    space = SearchSpace(trials=raw.get("trials", 1), sampler=str(raw.get("sampler", "sobol")), seed=raw.get("seed", 0),
                        tune=raw.get("tune", True))
    if not isinstance(space.tune, bool):
        raise LbscaleError(f"{where}: grid.search.tune must be true or false")
    space.confirm = _confirm(raw.get("confirm"), where, space.tune)
    if not isinstance(space.trials, int) or isinstance(space.trials, bool) or space.trials < 1:
        raise LbscaleError(f"{where}: grid.search.trials must be an integer >= 1")
    if not isinstance(space.seed, int) or isinstance(space.seed, bool):
        raise LbscaleError(f"{where}: grid.search.seed must be an integer")
    if space.sampler not in SAMPLERS:
        raise LbscaleError(f"{where}: grid.search.sampler {space.sampler!r} is not one of {', '.join(SAMPLERS)}")
    for key, spec in raw.items():
        if key in SEARCH_KEYS:
            continue
        name = str(key).replace("-", "_")
        if name not in known_options or name in NOT_SEARCHED:
            raise LbscaleError(f"{where}: grid.search: {key!r} is not a trial option that can be searched")
        if isinstance(spec, list):
            if not spec:
                raise LbscaleError(f"{where}: grid.search.{key}: an empty list")
            space.grid[name] = spec
            continue
        if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in DISTRIBUTIONS:
            raise LbscaleError(f"{where}: grid.search.{key}: expected a list of values or one of "
                               f"{', '.join(f'{{{d}: ...}}' for d in DISTRIBUTIONS)}")
        dist, args = next(iter(spec.items()))
        space.sampled[name] = (dist, _check_args(dist, args, f"{where}: grid.search.{key}"))
    if not space.sampled and not space.grid:
        raise LbscaleError(f"{where}: grid.search names no trial option")
    if space.trials > 1 and not space.sampled:
        raise LbscaleError(f"{where}: grid.search.trials needs a distribution to draw from (lists are a grid)")
    return space


def _confirm(raw, where: str, tune: bool) -> tuple | None:
    """grid.search.confirm: {top: K, seeds: S} -> (K, S); a one-line error for anything else."""
    if raw is None:
        return None
    if not tune:
        raise LbscaleError(f"{where}: grid.search.confirm reruns the best points of a tuning; with tune: false "
                           "the points are an axis and there is no best to confirm")
    if isinstance(raw, dict) and set(raw) - {"top", "seeds"}:  # a typo names itself
        extra = ", ".join(sorted(map(str, set(raw) - {"top", "seeds"})))
        raise LbscaleError(f"{where}: grid.search.confirm: unknown key {extra} (it takes top and seeds)")
    if isinstance(raw, dict) and {"top", "seeds"} - set(raw):
        missing = " and ".join(sorted({"top", "seeds"} - set(raw)))
        raise LbscaleError(f"{where}: grid.search.confirm must be {{top: K, seeds: S}}: {missing} is missing")
    if not isinstance(raw, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in raw.values()):
        raise LbscaleError(f"{where}: grid.search.confirm must be {{top: K, seeds: S}} with integers >= 1")
    return raw["top"], raw["seeds"]


def _check_args(dist: str, args, where: str):
    if dist == "choice":
        if not isinstance(args, list) or not args:
            raise LbscaleError(f"{where}: choice takes a non-empty list of values")
        return args
    try:
        lo, hi = (float(a) for a in args)
    except (TypeError, ValueError):
        raise LbscaleError(f"{where}: {dist} takes [lo, hi], two numbers") from None
    if not lo < hi or (dist != "uniform" and lo <= 0):
        raise LbscaleError(f"{where}: {dist} needs lo < hi{'' if dist == 'uniform' else ' and lo > 0'}")
    if dist == "one_minus_loguniform" and hi >= 1:
        raise LbscaleError(f"{where}: one_minus_loguniform needs hi < 1 (the value is 1 - x)")
    return [lo, hi]
