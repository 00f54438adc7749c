"""`lbscale sweep` and `lbscale status`: plan the grid and check its data, then dry-run (and estimate), launch
under the results directory's lock, or run one array task; show (and watch) where each trial stands."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from lbscale.errors import LbscaleError
from lbscale.progress import interactive
from lbscale.results import CONFIG, FINISHED, ROUNDS, read_json, remove_leftovers
from lbscale.slurm import SlurmEnv
from lbscale.sweep.array import run_array_task
from lbscale.sweep.preflight import check_plan_data, data_line
from lbscale.sweep.confirm import confirmation, confirmation_to_come
from lbscale.sweep.eta import clock, pace_of, since_news, trial_left
from lbscale.sweep.launch import IN_FLIGHT_SECONDS
from lbscale.sweep.launchers import LAUNCHERS
from lbscale.sweep.lock import LOCK, live_sweep, sweep_lock
from lbscale.sweep.options import SweepOptions, SweepRun
from lbscale.sweep.plan import build_plan, plan_table
from lbscale.sweep.budget import WallBudget, parse_wall
from lbscale.sweep.rounds import Rounds, check_adaptive, parse_budget, replayed
from lbscale.sweep.spec import load_sweep_spec
from lbscale.sweep.state import count_line, sweep_states, trial_dirs
from lbscale.train.config import ENGINES
from lbscale.train.horovod import check_available
from lbscale.sweep.systems import get_system


def run_sweep(spec_path, o: SweepOptions, decide=None) -> int:
    """Plan the grid of `spec_path` and check its data files, then print it (--dry-run, with --estimate its
    expected duration), launch it, or run one of its trials. With --until-resolved, `decide` (studies.resolve)
    (`studies.resolve.decider`) fits the results after each round and plans the next (sweep/rounds.py)."""
    spec = load_sweep_spec(spec_path)
    _check_options(o)
    if o.engine is not None:  # --engine: every trial's, the spec's `engine:` overridden
        spec.trial["engine"] = o.engine
    if o.until_resolved:
        check_adaptive(spec)
    prof = get_system(o.system or spec.system, o.systems_file, account=o.account, partition=o.partition,
                      time=o.time_limit)
    one_task = o.array_task is not None or o.trial is not None
    gpn = prof["gpus_per_node"] if o.launcher == "slurm" or one_task else 1 << 30
    results = Path(o.results or spec.results or Path("results") / spec.name).resolve()
    plans = build_plan(spec, results, gpn, batch=o.batch, gpus=o.gpus, local_batch=o.local_batch, seeds=o.seeds,
                       epochs=o.epochs)
    overrides = {"gpus": o.gpus, "local_batch": o.local_batch, "seeds": o.seeds, "epochs": o.epochs}
    if o.until_resolved and not one_task:
        _check_budget(o.budget, len(plans))
    if o.until_resolved:  # the rounds decided so far, as rounds.json recorded them
        plans += replayed(spec, plans, results, gpn, overrides)
    plans += confirmation(spec, plans)  # the cells whose search has finished: their best points, more seeds
    # absolute paths: array tasks may start in another directory
    if o.systems_file is not None:
        o = replace(o, systems_file=str(Path(o.systems_file).resolve()))
    more = (lambda done: confirmation(spec, done)) if _confirms(spec) else None
    seconds = parse_wall(o.wall) if o.wall else spec.sweep_wall
    wall = (WallBudget(results, seconds, own=not (o.launcher == "slurm" and o.wait))  # --wait: its tasks' time
            if seconds is not None and not one_task and not o.dry_run else None)
    if o.until_resolved and not one_task and not o.dry_run:
        cfg = plans[0].config  # the hardest target: the steps to it are what the rounds resolve
        more = Rounds(spec, o, results, gpn, overrides,
                      decide(cfg.target_metric, cfg.targets[-1], o.ratio) if decide else None, wall).more
    run = SweepRun(spec_path=str(Path(spec_path).resolve()), results=results, system=prof, options=o, more=more,
                   wall=wall, wall_seconds=seconds)
    if one_task:  # checked at submission; a trial's own failure is recorded in its directory (status, report)
        return run_array_task(_pick(plans, o.array_task, o.trial), run)
    if any(p.config.engine == "horovod" for p in plans):  # one line before anything starts where it is missing
        check_available()
    samples = check_plan_data(spec.path, plans)  # before anything is written or started
    if o.dry_run:
        print(plan_table(plans))
        print(f"{len(plans)} trials planned; data checked ({data_line(samples)}); nothing run (--dry-run)",
              flush=True)
        if o.estimate:
            from lbscale.sweep.estimate import print_estimate

            print_estimate(plans, o.retry_failed, warm=o.launcher == "local",
                           to_come=confirmation_to_come(spec, plans), adaptive=o.until_resolved, design=spec.design,
                           wall=seconds)
        return 0
    with sweep_lock(results, o.wait_for_lock):
        # what a sweep killed mid-write left (its trials': write_trial_files; its sbatch scripts': submit)
        remove_leftovers(results, (ROUNDS, LOCK), older_than=IN_FLIGHT_SECONDS)
        return LAUNCHERS[o.launcher]().launch(plans, run)


def _confirms(spec) -> bool:
    """Whether a search of the spec has a confirmation stage."""
    return any(getattr(s, "confirm", None) for s in [spec.search, *spec.variant_search.values()] if s)


def _check_options(o: SweepOptions) -> None:
    if o.launcher not in LAUNCHERS:
        raise LbscaleError(f"--launcher: {o.launcher!r} is not one of {', '.join(LAUNCHERS)}")
    if o.max_concurrent is not None and o.max_concurrent < 1:
        raise LbscaleError("--max-concurrent must be >= 1")
    if o.max_requeues < 0:
        raise LbscaleError("--max-requeues must be >= 0")
    if (o.budget is not None or o.ratio != 4.0) and not o.until_resolved:
        raise LbscaleError("--budget and --ratio go with --until-resolved")
    if o.budget is not None:
        parse_budget(o.budget)
    if o.wall is not None:
        parse_wall(o.wall)
    if o.engine not in (None, *ENGINES):
        raise LbscaleError(f"--engine: {o.engine!r} is not one of {', '.join(ENGINES)}")
    if o.estimate and not o.dry_run:
        raise LbscaleError("--estimate goes with --dry-run: it times the plan's trial shapes instead of running it")


def _check_budget(budget, grid: int) -> None:
    """A budget in trials counts the grid's: one smaller than the grid would be overrun before any round."""
    if budget is None:
        return
    kind, amount = parse_budget(budget)
    if kind == "trials" and amount < grid:
        raise LbscaleError(f"--budget {budget}: the grid alone has {grid} trials (the budget counts trials in all, "
                           f"the grid's included): give {grid} or more")


def _pick(plans, array_task, trial):
    if trial is not None:
        for p in plans:
            if p.trial_id == trial:
                return p
        raise LbscaleError(f"no trial {trial!r} in this sweep")
    if array_task is None:
        array_task = SlurmEnv.current().array_task_id
        if array_task is None:
            raise LbscaleError("--array-task: no task id given and SLURM_ARRAY_TASK_ID is not set")
    if not 0 <= array_task < len(plans):
        raise LbscaleError(f"--array-task {array_task}: the sweep has {len(plans)} trials (0..{len(plans) - 1})")
    return plans[array_task]


def status_table(results, now: float | None = None) -> str:
    """The trials under `results`: state, epoch, last metric, job, elapsed and time left; the sweep's time left
    where trials are still to run; the count of states last."""
    return _status(results, time.time() if now is None else now)[0]


def _status(results, now: float) -> tuple[str, list[dict]]:
    results = Path(results)
    if not results.is_dir():
        raise LbscaleError(f"{results}: no such results directory")
    states = sweep_states(results)
    if not states:
        raise LbscaleError(f"{results}: no trials (directories with a trial.yaml, or a trial's own config.json)")
    lefts = _time_left(results, states, now)
    head = ["trial", "state", "epoch", "metric", "job", "elapsed", "left"]
    rows = []
    for s, left in zip(states, lefts):
        epoch = f"{s['epoch']}/{s['epochs']}" if s["epochs"] else str(s["epoch"])
        metric = f"{s['metric']}={s['value']:.4f}" if s["metric"] and s["value"] is not None else "-"
        rows.append([s["trial"], s["state"], epoch, metric, s["job"] or "-", clock(s["elapsed"] or None),
                     clock(left)])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    reasons = [f"{s['trial']}: {s['error']}" for s in states if s["state"] == "failed" and s["error"]]
    return "\n".join([fmt.format(*head).rstrip(), *(fmt.format(*r).rstrip() for r in rows),
                      *(["failed:", *(f"  {r}" for r in reasons)] if reasons else []),
                      *_left_line(states, lefts), count_line([s["state"] for s in states])]), states


def _time_left(results: Path, states: list[dict], now: float) -> list[float | None]:
    """Each trial's time left (None: ended, or nothing to estimate it from): a running one at its own pace, one
    to run at the pace of the trials that ran (eta.py)."""
    dirs = trial_dirs(results)
    samples = {}  # train samples per data file, from the trials that started: the steps of those that did not
    for d in dirs:
        config = read_json(d / CONFIG) or {}
        if (config.get("plan") or {}).get("train_samples"):
            samples[(config.get("config") or {}).get("data")] = config["plan"]["train_samples"]
    paces = [pace_of(d, s, samples) for d, s in zip(dirs, states)]
    ran = [t for t in paces if t.step]
    return [None if s["state"] in (*FINISHED, "failed")
            else trial_left(t, ran, since_news(d, now) if s["state"] == "running" else 0.0)
            for d, s, t in zip(dirs, states, paces)]


def _left_line(states: list[dict], lefts: list[float | None]) -> list[str]:
    open_ = [(s["state"], left) for s, left in zip(states, lefts) if s["state"] not in (*FINISHED, "failed")]
    if not open_:
        return []
    running = sum(state == "running" for state, _ in open_)
    unknown = sum(left is None for _, left in open_)
    if unknown == len(open_):
        return ["time left: not known until a trial has written a record"]
    total = sum(left for _, left in open_ if left is not None)
    parts = [f"{running} running at {'its' if running == 1 else 'their'} own pace"] if running else []
    if len(open_) > running:
        parts.append(f"{len(open_) - running} to run at the pace of the trials run")
    if unknown:
        parts.append(f"{unknown} not estimated yet: no trial has a record")
    return [f"time left: about {clock(total)} ({', '.join(parts)})"]


def watch_status(results, every: float) -> int:
    """Redraw the status table every `every` seconds until no trial runs or waits in a queue and no sweep holds
    the results directory; Ctrl-C stops watching. The last line is the count of states."""
    shown = states = None
    try:
        while True:
            table, states = _status(results, time.time())
            news = [(s["trial"], s["state"], s["epoch"], s["value"]) for s in states]
            if interactive():
                print("\033[H\033[J" + table, flush=True)  # the terminal's screen, redrawn
            elif news != shown:  # in a log: the table again only when a trial moved
                print(table, flush=True)
            shown = news
            if not (any(s["state"] in ("running", "submitted") for s in states) or live_sweep(Path(results))):
                return 0
            time.sleep(every)
    except KeyboardInterrupt:
        print("stopped watching" + (f"; {count_line([s['state'] for s in states])}" if states else ""), flush=True)
        return 0
