"""Sweep spec + CLI overrides -> the list of trials, each with a stable, readable id and resolved numbers."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

from lbscale.train.config import FIELDS, TrialConfig, check_given, load_config, to_dict
from lbscale.sweep.spec import SweepSpec
from lbscale.errors import LbscaleError
from lbscale.ranges import doubling, parse_ints, parse_size
from lbscale.train.plan import Plan, resolve_plan

SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def parse_batches(value) -> list[int]:
    """'8k..65k' (doubling powers of two from 8192 up to 65 x 1024), '512,8000', [512, '8k'] or one size."""
    if isinstance(value, str) and ".." in value:
        lo_text, _, hi_text = value.partition("..")
        out = doubling(parse_size(lo_text), parse_size(hi_text))
        if out is None:
            raise LbscaleError(f"malformed range {value!r}: expected LO..HI with LO a power of two <= HI, e.g. 8k..65k")
        return out
    items = value.split(",") if isinstance(value, str) else (value if isinstance(value, list) else [value])
    sizes = [parse_size(v) for v in items]
    if not sizes or min(sizes) < 1:
        raise LbscaleError(f"malformed batch list {value!r}")
    return sizes


def parse_seeds(value) -> list[int]:
    """3 -> [0, 1, 2]; [0, 5] or '0,5' -> [0, 5]."""
    if isinstance(value, int) and not isinstance(value, bool):
        return list(range(value))
    if isinstance(value, str) and "," not in value:
        try:
            return list(range(int(value)))
        except ValueError:
            raise LbscaleError(f"malformed seeds {value!r}") from None
    items = value.split(",") if isinstance(value, str) else value
    try:
        return [int(v) for v in items]
    except (TypeError, ValueError):
        raise LbscaleError(f"malformed seeds {value!r}") from None


@dataclass
class SweepTrial:
    """One trial of a sweep: its id, resources and the resolved numbers a user checks against a paper. `plan` is
    the trial's own Plan (batches, steps, peak LR: config.json's "plan"); the sweep's plan, which `--dry-run`
    prints, is the list of its SweepTrials (named `plans` in this package)."""

    trial_id: str
    gpus: int
    nodes: int
    config: TrialConfig
    plan: Plan
    variant: str = ""  # the grid's axes besides batch and GPUs, for the report
    warmup: str | None = None
    sweep: str = ""
    dataset: str | None = None  # the name of grid.datasets' entry
    point: int | None = None  # grid.search: which point, and its options
    search: dict | None = None
    tune: bool | None = None  # grid.search.tune: candidates of a tuning (True) or an axis (False)
    peers: tuple = ()  # the other trials of its successive-halving group in this plan (none without pruning)
    batch_field: str = "grid.batch"  # where its batch and data come from, for one-line errors
    data_field: str = "data"
    confirms: bool = False  # a confirmation-stage rerun of its point with another seed (sweep.confirm)
    round: int | None = None  # the --until-resolved round that added it (sweep.rounds)

    def axes(self) -> dict:
        """grid.json: where in its sweep's grid this trial sits."""
        return {"sweep": self.sweep, "trial": self.trial_id, "global_batch": self.plan.global_batch,
                "gpus": self.gpus, "nodes": self.nodes, "variant": self.variant, "warmup": self.warmup,
                "seed": self.config.seed, "dataset": self.dataset, "point": self.point, "search": self.search,
                "tune": self.tune, **({"confirms": True} if self.confirms else {}),
                **({"round": self.round} if self.round else {})}

    @property
    def out(self) -> Path:
        return Path(self.config.out)


def point_id(trial_id: str) -> str:
    """A trial's point: its id without the seed (`b64-g1-sgd-none-p3-s1` -> `b64-g1-sgd-none-p3`), what the
    confirmation stage and the adaptive rounds rerun with other seeds."""
    return trial_id.rsplit("-s", 1)[0]


def _variant_name(options: dict) -> str:
    defaults = {k: FIELDS[k].default for k in ("optimizer", "lr_scaling")}
    merged = {**defaults, **options}
    return f"{merged['optimizer']}-{merged['lr_scaling']}"


def _warmup_tag(w) -> str:
    return "wauto" if str(w) == "auto" else f"w{float(w):g}"


def _cells(spec: SweepSpec, batch, gpus, local_batch) -> list[tuple[int, int | None, int | None, str, str]]:
    """(global batch, GPUs or None, local batch or None, where, the batch's field) of every grid cell: the
    Cartesian batch x GPUs, or the spec's paired points (which --batch / --gpus then select from). A value that
    does not parse names the spec and its field (or the option that gave it)."""
    def parsed(field, fn, *args):
        try:
            return fn(*args)
        except LbscaleError as e:
            raise LbscaleError(f"{spec.path}: {field}: {e}") from None

    local = parsed("--local-batch", parse_size, local_batch) if local_batch is not None else (
        parsed("grid.local_batch", parse_size, spec.local_batch) if spec.local_batch is not None else None)
    gpu_list = parsed("--gpus", parse_ints, gpus, "gpus") if gpus is not None else (
        parsed("grid.gpus", parse_ints, spec.gpus, "gpus") if spec.gpus is not None and not spec.points else None)
    if not spec.points:
        field = "--batch" if batch is not None else "grid.batch"
        batches = parsed(field, parse_batches, batch if batch is not None else spec.batch)
        return [(b, g, local, "", field) for b in batches for g in (gpu_list or [None])]
    default_gpus = parsed("grid.gpus", parse_ints, spec.gpus, "gpus") if spec.gpus is not None else [None]
    if len(default_gpus) > 1:
        raise LbscaleError(f"{spec.path}: with grid.points, grid.gpus is one default GPU count, not a list")
    cells = []
    for i, row in enumerate(spec.points):
        b = parsed(f"grid.points[{i}].batch", parse_size, row["batch"])
        g = (parsed(f"grid.points[{i}].gpus", parse_ints, row["gpus"], "gpus")[0] if row.get("gpus") is not None
             else default_gpus[0])
        lb = local if local_batch is not None else (
            parsed(f"grid.points[{i}].local_batch", parse_size, row["local_batch"])
            if row.get("local_batch") is not None else local)
        cells.append((b, g, lb, f"grid.points[{i}] (batch {row['batch']}, gpus {g if g else '-'}): ",
                      f"grid.points[{i}].batch"))
    if batch is not None:
        wanted = set(parsed("--batch", parse_batches, batch))
        cells = [c for c in cells if c[0] in wanted]
    if gpu_list is not None:
        cells = [c for c in cells if c[1] in gpu_list]
    if not cells:
        raise LbscaleError(f"{spec.path}: no grid point matches --batch {batch or '-'} --gpus {gpus or '-'}")
    return cells


def _resources(b: int, g: int | None, local: int | None, gpus_per_node: int) -> tuple[int, int, int | None]:
    """GPUs, nodes and accumulation steps of one cell; a batch that does not divide is an error."""
    if g is None:
        if local is None:
            g = 1
        elif b % local:
            raise LbscaleError(f"batch {b} is not a multiple of local batch {local}")
        else:
            g = b // local
    accum = None
    if local is not None:
        if b % (g * local):
            raise LbscaleError(f"batch {b} is not divisible by {g} GPUs x local batch {local}")
        accum = b // (g * local)
    elif b % g:
        raise LbscaleError(f"batch {b} is not divisible by {g} GPUs")
    nodes = math.ceil(g / gpus_per_node)
    if nodes > 1 and g % gpus_per_node:
        raise LbscaleError(f"{g} GPUs span {nodes} nodes but are not a multiple of {gpus_per_node} GPUs per node")
    return g, nodes, accum


def build_plan(spec: SweepSpec, results: Path, gpus_per_node: int, batch=None, gpus=None, local_batch=None,
               seeds=None, epochs=None) -> list[SweepTrial]:
    """Every trial of the grid, in a stable order; any inconsistency is an LbscaleError before anything runs.

    Pure: no data file is read here, so step counts are None until `sweep.preflight.check_plan_data` resolves them
    against the opened files."""
    cells = _cells(spec, batch, gpus, local_batch)
    seed_list = parse_seeds(seeds if seeds is not None else spec.seeds)
    variants = spec.variants or {_variant_name(spec.trial): {}}
    warmups = spec.warmup if spec.warmup is not None else [None]
    datasets = spec.datasets or {None: spec.trial.get("data")}
    _check_names(spec, variants, datasets)
    grid_sets = {"warmup_epochs": spec.warmup is not None, "epochs": epochs is not None,
                 "local_batch": local_batch is not None or spec.local_batch is not None or bool(spec.points)}
    grid_sets["accum_steps"] = grid_sets["local_batch"]
    points = {name: _points_of(spec, name, options, grid_sets) for name, options in variants.items()}
    plans = []
    for b, g, local, where, field in cells:
        try:
            g, nodes, accum = _resources(b, g, local, gpus_per_node)
        except LbscaleError as e:
            raise LbscaleError(f"{spec.path}: {where or f'{field} {b}: '}{e}") from None
        cell = _Cell(b, g, nodes, local, accum, field)
        for dataset, variant in itertools.product(datasets.items(), variants.items()):
            for w, point, seed in itertools.product(warmups, points[variant[0]], seed_list):
                plans.append(_sweep_trial(spec, results, cell, dataset, variant, w, point, seed, epochs))
    for name, arm, cell in _schedule_cells(spec, cells, gpus_per_node):  # the batch-schedule arms
        for dataset, (vname, options) in itertools.product(datasets.items(), variants.items()):
            variant = (f"{vname}-{name}", {**options, **arm})
            for w, point, seed in itertools.product(warmups, points[vname], seed_list):
                plans.append(_sweep_trial(spec, results, cell, dataset, variant, w, point, seed, epochs))
    ids = [p.trial_id for p in plans]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise LbscaleError(f"{spec.path}: grid.points repeat a (batch, gpus) row: trial {dup} twice")
    _assign_peers(plans)
    return plans


def _schedule_cells(spec: SweepSpec, cells: list, gpus_per_node: int) -> list[tuple[str, dict, "_Cell"]]:
    """(name, the arm's trial options, cell) of each grid.batch_schedule arm: at its first batch, on each GPU
    count of the grid."""
    from lbscale.train.batch_schedule import SYNTAX_EPOCH, BatchSchedule

    out = []
    for name, arm in spec.batch_schedules.items():
        text = arm["batch_schedule"]
        if not SAFE_ID.match(name):
            raise LbscaleError(f"{spec.path}: batch_schedule name {name!r} may use letters, digits, '.', '_' and '-' "
                               "only")
        where = f"{spec.path}: grid.batch_schedule.{name}: "
        try:
            first = BatchSchedule.parse(text, SYNTAX_EPOCH, first=arm.get("global_batch"), ordered=False).first
        except LbscaleError as e:
            raise LbscaleError(f"{where}{e}") from None
        for g in dict.fromkeys(c[1] for c in cells):
            local = next((c[2] for c in cells if c[1] == g), None)
            try:
                g_, nodes, accum = _resources(first, g, local, gpus_per_node)
            except LbscaleError as e:
                raise LbscaleError(f"{where}{e}") from None
            out.append((name, arm, _Cell(first, g_, nodes, local, accum, f"grid.batch_schedule.{name}")))
    return out


@dataclass(frozen=True)
class _Cell:
    """One (batch, GPUs) cell of the grid, its resources resolved."""

    batch: int
    gpus: int
    nodes: int
    local: int | None
    accum: int | None
    field: str  # where its batch comes from: grid.batch, grid.points[i].batch or --batch


def _check_names(spec: SweepSpec, variants: dict, datasets: dict) -> None:
    """Variant and dataset names become parts of trial ids (directory names)."""
    for kind, names in (("variant", variants), ("dataset", datasets)):
        for name in names:
            if name is not None and not SAFE_ID.match(name):
                raise LbscaleError(f"{spec.path}: {kind} name {name!r} may use letters, digits, '.', '_' and '-' "
                                   "only")


def _points_of(spec: SweepSpec, variant: str, options: dict, grid_sets: dict) -> list[tuple[int | None, dict]]:
    """The searched points of a variant ((None, {}) without a search); an option the grid or the variant also
    sets is refused, as every point would overwrite it silently."""
    space = spec.variant_search.get(variant, spec.search)
    if not space:
        return [(None, {})]
    where = "grid.search" if variant not in spec.variant_search else f"variant {variant}'s search"
    clash = sorted(k for k in space.names if grid_sets.get(k))
    if clash:
        raise LbscaleError(f"{spec.path}: {where} sets {clash[0]}, which the grid (or --{clash[0]}) "
                           "sets too; search it or give it, not both")
    # both "variants" would train the same
    clash = sorted(space.names & set(options))
    if clash:
        raise LbscaleError(f"{spec.path}: {where} sets {clash[0]}, which variant {variant} sets too; "
                           "search it or give it in the variant, not both")
    return list(enumerate(space.points()))


def _at_batch(by_batch: dict, batch: int, past) -> int:
    """A batch's value from a `{batch: value}` mapping: its own; else the next larger batch's; past the largest,
    past(the largest's value, the largest batch)."""
    if batch in by_batch:
        return by_batch[batch]
    larger = [b for b in by_batch if b > batch]
    if larger:
        return by_batch[min(larger)]
    top = max(by_batch)
    return past(by_batch[top], top)


def epochs_at(by_batch: dict, batch: int) -> int:
    """A batch's epochs from `epochs: {batch: epochs}`: its own; else the next larger batch's (the samples to a
    target grow with the batch, so a larger one's budget is enough); past the largest, the largest's times
    batch / largest (samples grow at most in proportion to the batch): a batch the rounds add beyond the grid."""
    return _at_batch(by_batch, batch, lambda n, top: math.ceil(n * batch / top))


def first_at(by_batch: dict, batch: int) -> int:
    """A batch's first evaluation step from `eval_first: {batch: step}`: its own; else the next larger batch's (a
    larger batch takes fewer steps to a target, so its first step is no later a share of the smaller's); past the
    largest, the largest's x largest / batch (no later a share of the steps even under perfect scaling)."""
    return _at_batch(by_batch, batch, lambda step, top: max(1, step * top // batch))


def _sweep_trial(spec: SweepSpec, results: Path, cell: _Cell, dataset: tuple, variant: tuple, w, point: tuple,
                seed: int, epochs) -> SweepTrial:
    """One trial of a cell: its id, its resolved config and plan (steps unknown until the data is read)."""
    (dname, dpath), (vname, voptions), (k, values) = dataset, variant, point
    tags = ([f"b{cell.batch}", f"g{cell.gpus}"] + ([dname] if dname is not None else []) + [vname]
            + ([_warmup_tag(w)] if w is not None else []))
    trial_id = "-".join(tags + ([f"p{k}"] if k is not None else []) + [f"s{seed}"])
    options = {**spec.trial, **voptions, **values, "global_batch": cell.batch, "seed": seed,
               "out": str(results / trial_id)}
    if options.get("prune", "none") != "none":  # halving compares the points of one cell
        options.setdefault("prune_group", "-".join(tags))
    if dname is not None:
        options["data"] = dpath
    if epochs is not None:
        options["epochs"] = epochs
    elif spec.epochs_by_batch:
        options["epochs"] = epochs_at(spec.epochs_by_batch, cell.batch)
    if spec.first_by_batch and "eval_first" not in voptions and "eval_first" not in values:
        options["eval_first"] = first_at(spec.first_by_batch, cell.batch)
    if w is not None:
        options["warmup_epochs"] = str(w)
    if cell.local is not None:
        options.update(local_batch=cell.local, accum_steps=cell.accum)
    _check_named(spec, vname, voptions, values, options.get("optimizer") or FIELDS["optimizer"].default)
    try:
        cfg = load_config(None, **options)
        resolved = resolve_plan(cfg, cell.gpus, None)
    except LbscaleError as e:
        raise LbscaleError(f"trial {trial_id}: {e}") from None
    data_field = (f"grid.datasets.{dname}" if dname is not None
                  else f"grid.variants.{vname}.data" if "data" in voptions else "data")
    tune = spec.variant_search.get(vname, spec.search).tune if k is not None else None
    return SweepTrial(trial_id, cell.gpus, cell.nodes, cfg, resolved, vname, None if w is None else str(w), spec.name,
                     dname, k, values or None, tune, batch_field=cell.field, data_field=data_field)


def _check_named(spec: SweepSpec, vname: str, voptions: dict, values: dict, optimizer: str) -> None:
    """An optimizer option the spec names (common trial options, the variant's, its search's) that the variant's
    optimizer does not read: refused at any value, naming the spec's field (`config.check_given`)."""
    of = f" (variant {vname})" if spec.variants else ""
    search = f"grid.variants.{vname}.search" if vname in spec.variant_search else "grid.search"
    check_given(optimizer, {**{k: f"{spec.path}: trial: {k}{of}" for k in spec.trial},
                            **{k: f"{spec.path}: grid.variants.{vname}: {k}" for k in voptions},
                            **{k: f"{spec.path}: {search}: {k}{of}" for k in values}})


def _assign_peers(plans: list[SweepTrial]) -> None:
    """Each pruned trial's peers: the other trials of its halving group in this plan, and no others (a trial
    directory left from an earlier plan with more points or seeds must never hold a group back)."""
    groups: dict[str, list[str]] = {}
    for p in plans:
        if p.config.prune != "none":
            groups.setdefault(p.config.prune_group, []).append(p.trial_id)
    for p in plans:
        if p.config.prune != "none":
            p.peers = tuple(t for t in groups[p.config.prune_group] if t != p.trial_id)


def plan_table(plans: list[SweepTrial]) -> str:
    """The dry-run table: what each trial will run with."""
    head = ["trial", "global", "local", "gpus", "nodes", "accum", "peak_lr", "warmup", "warmup_steps", "steps"]
    searched = any(p.search for p in plans)
    if searched:
        head.append("search")
    def show(v):
        return "?" if v is None else str(v)

    rows = []
    for p in plans:
        r = p.plan
        rows.append([p.trial_id, str(r.global_batch), str(r.local_batch), str(p.gpus), str(p.nodes),
                     str(r.accum_steps), f"{r.peak_lr:.6g}", f"{r.warmup_epochs:g} ep", show(r.warmup_steps),
                     _steps(p)] + ([" ".join(f"{k}={v}" for k, v in (p.search or {}).items())]
                                             if searched else []))
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head)] + [fmt.format(*r) for r in rows]
    if plans and plans[0].plan.total_steps is None:
        lines.append("(steps need the prepared data file; it does not exist yet)")
    return "\n".join(lines)


def _steps(p: SweepTrial) -> str:
    """A trial's optimizer steps: as its batch schedule takes them (batch@... shown after), else the plan's."""
    from dataclasses import asdict

    from lbscale.train.batch_schedule import BatchSchedule, run_steps

    r = p.plan
    if r.total_steps is None or not p.config.batch_schedule:
        return "?" if r.total_steps is None else str(r.total_steps)
    last = BatchSchedule.parse(p.config.batch_schedule, r.epoch_samples, first=r.global_batch).last
    return f"{run_steps(p.config.batch_schedule, p.config.epochs, asdict(r))} (to batch {last})"


def trial_yaml(p: SweepTrial) -> dict:
    return {k: v for k, v in to_dict(p.config).items() if v is not None and k != "resume"}
