"""`lbscale branch TRIAL`: the local critical batch from one run (Merrill, Arora, Groeneveld & Hajishirzi 2025).

From each kept checkpoint of TRIAL (`lbscale train --keep-checkpoints`), one branch trial per factor k trains
k x B for the same number of samples (the window): the parent's weights, optimizer state, RNG and place in the
data, the same micro-batches grouped into k-times larger optimizer steps (same processes, more accumulation),
the LR the parent's schedule has at that place times the rule's factor (linear: k; sqrt: sqrt(k)); factor 1 is
the parent's own continuation. Each branch evaluates the same fixed subset of the evaluation split at the end
of its window; per checkpoint, the largest k x B whose loss there stays within the tolerance of the smaller
batches' best is the local critical batch (`analysis.critical`). Branches are ordinary trial directories,
run by the local launcher (resumable: a rerun skips finished branches); the table (`critical-batch.csv`) and
the figure (`critical-batch.png`) go into the results directory.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lbscale.train.config import FIELDS, NO_PRUNING, load_config
from lbscale.errors import LbscaleError
from lbscale.results import CONFIG, SUMMARY, read_json, read_jsonl
from lbscale.sweep.plan import SweepTrial
from lbscale.train import checkpoint
from lbscale.train.plan import Plan, resolve_plan

RULES = {"linear": lambda k: k, "sqrt": math.sqrt, "none": lambda k: 1.0}
TABLE, FIGURE = "critical-batch.csv", "critical-batch.png"
TARGET = "target"  # the label of a trial's checkpoint where it stopped at its target
# options of the parent that a branch does not share: its own evaluation, no pruning, no target, no checkpoints
RESET = {"keep_checkpoints": None, **NO_PRUNING, "stop_at_target": False, "eval_every": None,
         "eval_every_samples": None, "eval_spacing": None, "eval_first": None, "preempt_after_steps": None,
         "gns_every": None, "gns_at_target": False, "tensorboard": False, "accum_steps": None, "lr_scaling": "none",
         "resume": False}


@dataclass
class BranchLaunch:
    """Where the branches run: here one after another, or as SLURM job arrays (`trial`: inside an array task,
    the branch it runs)."""

    launcher: str = "local"
    system: str = "generic"
    systems_file: str | None = None
    wait: bool = False
    trial: str | None = None


@dataclass
class BranchOptions:
    at: str | None = None  # kept checkpoint labels, comma-separated (default: all)
    factors: str = "1,2,4,8,16"
    window: str = "1ep"  # samples, or Nep (epochs of the parent's train split)
    rule: str = "auto"
    tolerance: float = 0.01
    eval_subset: int | None = None
    results: Path | None = None
    dry_run: bool = False
    tuned: Path | None = None  # a tuned sweep of the same data: its B_crit band on the figure
    ema: float | None = None  # judge by the training loss's moving average (decay per parent batch of samples)
    repeats: int = 1  # each branch this many times, the data order past the branch point re-drawn per repeat
    lrs: dict | None = None  # {batch: peak LR}: each branch at its batch's tuned LR instead of the rule's


def parse_factors(text: str) -> list[int]:
    try:
        out = sorted({int(t) for t in str(text).split(",") if t.strip()})
    except ValueError:
        out = []
    if not out or out[0] < 1:
        raise LbscaleError(f"--factors: {text!r} is not a list of whole numbers >= 1 (e.g. 1,2,4,8)")
    if out[0] != 1:
        raise LbscaleError(f"--factors: {text!r} lacks 1: the parent's own continuation (k = 1) is the baseline the "
                           "larger batches are judged against")
    return out


def _window(text: str, epoch_samples: int) -> int:
    t = str(text).strip()
    try:
        samples = round(float(t[:-2]) * epoch_samples) if t.endswith("ep") else int(t)
    except (ValueError, OverflowError):
        samples = 0
    if samples < 1:
        raise LbscaleError(f"--window: {text!r} is not a number of samples or Nep (epochs of the train split)")
    return samples


def parent_of(trial: Path) -> tuple[dict, dict, dict[str, Path]]:
    """(the parent's config, its plan, its kept checkpoints by label); one line where it has none."""
    described = read_json(Path(trial) / CONFIG)
    if not described:
        raise LbscaleError(f"{trial}: not a trial directory (no {CONFIG})")
    kept = checkpoint.kept(trial)
    target = checkpoint.at_target(trial)
    if target is not None:  # stopped at its target: its checkpoint holds the weights there
        kept[TARGET] = target
    if not kept:
        raise LbscaleError(f"{trial}: no kept checkpoints to branch from (train it with --keep-checkpoints "
                           "10%,25%,50%, or --stop-at-target to branch from where it reached its target)")
    return described["config"], described["plan"], kept


def branch_plans(trial: Path, o: BranchOptions, gpus_per_node: int = 1 << 30) -> tuple[list[SweepTrial], dict]:
    """The branch trials of TRIAL (one per kept checkpoint and factor, on the parent's processes: `gpus_per_node`
    gives the nodes they span) and what they rest on; one line where a checkpoint cannot be branched from or
    has less training left than the window."""
    from lbscale.train.optim import OPTIMIZERS

    trial = Path(trial).resolve()
    config, plan, kept = parent_of(trial)
    labels = [t.strip() for t in o.at.split(",")] if o.at else list(kept)
    missing = [t for t in labels if t not in kept]
    if missing:
        raise LbscaleError(f"--at {missing[0]}: {trial} keeps {', '.join(kept)}")
    rule = OPTIMIZERS[config["optimizer"]].lr_rule if o.rule == "auto" else o.rule
    if rule not in RULES:
        raise LbscaleError(f"--rule: {o.rule!r} is not one of auto, {', '.join(RULES)}")
    untuned = [k for k in parse_factors(o.factors) if o.lrs is not None and k * plan["global_batch"] not in o.lrs]
    if untuned:
        raise LbscaleError(f"--factors: batch {untuned[0] * plan['global_batch']:,} (factor {untuned[0]}) has no tuned "
                           f"LR (tuned at {', '.join(f'{b:,}' for b in sorted(o.lrs))}): leave the factor out")
    window = _window(o.window, plan["epoch_samples"])
    if o.repeats < 1:
        raise LbscaleError(f"--repeats {o.repeats}: at least 1 (3 or more give the local critical batch an interval)")
    run_samples = config["epochs"] * plan["epoch_samples"]
    for label in labels:
        info = checkpoint.kept_info(kept[label])
        if info.get("samples_seen", 0) + window > run_samples:
            raise LbscaleError(f"--window {o.window}: checkpoint {label} has {run_samples - info['samples_seen']:,} "
                               f"samples of the parent's run left, fewer than the window's {window:,}")
    nodes = -(-plan["world_size"] // gpus_per_node)
    results = Path(o.results) if o.results else trial.parent / f"{trial.name}-branches"
    subset = o.eval_subset or config.get("eval_subset") or 1024
    plans = []
    for label in labels:
        for repeat, k in ((r, k) for r in range(o.repeats) for k in parse_factors(o.factors)):
            name = f"{label}-x{k}" + (f"-r{repeat}" if repeat else "")  # repeat 0: the parent's own data order
            options = {**{n: v for n, v in config.items() if n in FIELDS}, **RESET,
                       "global_batch": k * plan["global_batch"], "local_batch": plan["local_batch"],
                       "base_lr": o.lrs[k * plan["global_batch"]] if o.lrs is not None
                       else plan["peak_lr"] * RULES[rule](k), "warmup_epochs": plan["warmup_epochs"],
                       "branch_from": str(kept[label]), "branch_samples": window, "eval_subset": subset,
                       "branch_ema": o.ema, "branch_reseed": repeat or None,
                       "out": str(results / name)}
            cfg = load_config(None, **options)
            p = resolve_plan(cfg, plan["world_size"], plan["train_samples"])
            plans.append(SweepTrial(name, plan["world_size"], nodes, cfg, p, variant=f"x{k}", sweep="branch"))
    _check_windows(plans, Plan(**plan), kept, window, o.window)
    return plans, {"parent": str(trial), "rule": "each batch's tuned LR" if o.lrs is not None else rule,
                   "window": window, "tolerance": o.tolerance,
                   "results": results, "subset": subset, "parent_batch": plan["global_batch"]}


def _check_windows(plans: list[SweepTrial], parent: Plan, kept: dict[str, Path], window: int, asked: str) -> None:
    """One line where a branch's run ends before its window: a larger batch that drops an epoch's last samples
    trains fewer per epoch than its parent, and a branch that never reaches its window's end has no loss to judge."""
    from lbscale.train.branching import branch_progress, kept_progress, samples_left, window_start

    left = {}
    for t in plans:
        start = branch_progress(kept_progress(checkpoint.kept_info(kept[_label(t)]), parent), t.plan.steps_per_epoch,
                                t.plan.accum_steps)
        left[t.trial_id] = samples_left(window_start(start, t.plan), t.plan, t.config.epochs)
    short = min(plans, key=lambda t: left[t.trial_id])
    fit = left[short.trial_id]
    if fit >= window:
        return
    instead = (f"--window {fit:,} or less fits every branch" if fit else
               f"no window fits it: leave out factor {short.plan.global_batch // parent.global_batch} or --at "
               f"{_label(short)}")
    raise LbscaleError(f"--window {asked}: branch {short.trial_id} (batch {short.plan.global_batch:,}) has {fit:,} "
                       f"samples of its run left after checkpoint {_label(short)}, fewer than the window's "
                       f"{window:,}; {instead}")


def _label(branch: SweepTrial) -> str:
    """The checkpoint a branch starts from: kept/<label>, or target."""
    return branch.trial_id.rpartition("-x")[0]


def branch_table(plans: list[SweepTrial], parent: Path, tolerance: float, ema: bool = False) -> pd.DataFrame:
    """Per branch: its checkpoint, the parent's samples and step there, factor, batch, the loss on the fixed
    subset at the window's end (and with `ema` the training loss's moving average over the window), the optimizer
    steps it took; and per checkpoint the local critical batch, judged by the moving average with `ema`, else by
    the subset's loss."""
    from lbscale.analysis.critical import local_critical_batch, local_critical_interval

    rows = []
    for p in plans:
        info = read_json(Path(p.config.branch_from) / "info.json") or {}
        summary = read_json(p.out / SUMMARY) or {}
        ends = [r for r in read_jsonl(p.out / "metrics.jsonl") if r.get("kind") == "step"]
        loss = ends[-1].get("val_loss", ends[-1].get("test_loss")) if ends else None
        smoothed = ends[-1].get("train_loss_ema") if ends else None
        if summary.get("status") == "diverged":
            loss = smoothed = math.inf
        start = info.get("step", 0) * info.get("global_batch", 0) // p.plan.global_batch
        rows.append({"parent": Path(parent).name,
                     "checkpoint": _label(p),
                     "samples": info.get("samples_seen"),
                     "parent_step": info.get("step"), "factor": p.plan.global_batch // info.get("global_batch", 1),
                     "batch": p.plan.global_batch, "repeat": p.config.branch_reseed or 0,
                     "lr": p.plan.peak_lr, "loss": loss,
                     "train_loss_ema": smoothed, "status": summary.get("status", "not run"),
                     "steps": ends[-1]["step"] - start if ends else None})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    judged = "train_loss_ema" if ema else "loss"
    critical = {}
    for cp, g in df.groupby("checkpoint", sort=False):
        base = int(g.loc[g["factor"] == 1, "batch"].iloc[0]) if (g["factor"] == 1).any() else int(g["batch"].min())
        if g["repeat"].max() > 0:  # repeats: the interval from their scatter
            losses = {int(b): dict(zip(h["repeat"], h[judged])) for b, h in g.groupby("batch")}
            r = local_critical_interval(losses, tolerance, base=base)
            critical[cp] = (r.value, r.why, r.lo, r.hi, r.kind, r.repeats)
        else:  # one run per batch: the batches tried on either side, as the report brackets it
            critical[cp] = (*local_critical_batch(dict(zip(g["batch"], g[judged])), tolerance, base=base),
                            None, None, None, 1)
    for i, column in enumerate(("critical_batch", "why", "critical_lo", "critical_hi", "critical_kind", "repeats")):
        df[column] = df["checkpoint"].map(lambda c, i=i: critical[c][i])
    return df


def run_branches(plans: list[SweepTrial], results: Path) -> int:
    """Run the branches that have not finished, one after another on this machine (warm-started, resumable);
    the failures."""
    from lbscale.sweep.follow import SweepProgress
    from lbscale.sweep.launch import LocalLauncher, select, write_trial_files
    from lbscale.sweep.lock import sweep_lock

    with sweep_lock(results, False):
        write_trial_files(plans)
        todo = select(plans, retry_failed=True)
        print(f"{len(plans) - len(todo)} of {len(plans)} branches already finished; running {len(todo)}", flush=True)
        return LocalLauncher().run_rounds(todo, SweepProgress()) if todo else 0


def draw(df: pd.DataFrame, parent: Path, path: Path, tuned: pd.DataFrame | None = None) -> None:
    """Local critical batch vs the parent's training progress (samples), as the report draws it (a bound as an
    open triangle at its end, the interval as a band); the parent's gradient noise scale over training beside it
    where it measured one (--gns-every); a tuned sweep's B_crit with its interval as a band where given
    (`--tuned`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lbscale.report.branch_study import figure, per_checkpoint

    fig = figure(per_checkpoint(df), df)  # the report's figure of the same table, then what only the command has
    ax, tried = fig.axes[0], sorted(df["batch"].unique())
    gns = [r for r in read_jsonl(Path(parent) / "metrics.jsonl") if r.get("gns_b_simple")]
    if gns:
        ax.plot([r["samples_seen"] for r in gns], [r["gns_b_simple"] for r in gns], color="C1", lw=1,
                label="gradient noise scale B_simple (parent)")
    from lbscale.report.numbers import estimate_cell, whole

    for i, row in enumerate((tuned if tuned is not None else pd.DataFrame()).itertuples()):
        if row.b_crit_kind in ("interval", "lower", "upper"):  # the band: its interval, an open end to the axis
            lo = row.b_crit_lo if row.b_crit_lo > 0 else tried[0] / 1.5
            hi = row.b_crit_hi if math.isfinite(row.b_crit_hi) else tried[-1] * 1.5
            ax.axhspan(lo, hi, color=f"C{i + 2}", alpha=0.15, lw=0)
            if row.b_crit_kind == "interval":
                ax.axhline(row.b_crit, color=f"C{i + 2}", ls="--", lw=1)
            cell = estimate_cell(row.b_crit, row.b_crit_lo, row.b_crit_hi, row.b_crit_kind, whole)
            ax.plot([], [], color=f"C{i + 2}", lw=6, alpha=0.3,
                    label=f"tuned sweep's B_crit, {row.variant}: {cell} (band: its 90% interval, "
                          f"target {row.target:g})")
    ax.set_ylim(tried[0] / 1.5, tried[-1] * 1.5)
    ax.set_title(f"Local critical batch over training: {Path(parent).name} (open triangles: bounds)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _command(trial: Path, o: BranchOptions, how: BranchLaunch, results: Path) -> list[str]:
    """`lbscale branch` as an array task runs it again: the same branches, the one of its task."""
    cmd = [sys.executable, "-m", "lbscale.cli", "branch", str(Path(trial).resolve()), "--factors", o.factors,
           "--window", str(o.window), "--rule", o.rule, "--tolerance", str(o.tolerance), "--results", str(results),
           "--launcher", "slurm", "--system", how.system]
    for flag, value in (("--at", o.at), ("--eval-subset", o.eval_subset), ("--systems", how.systems_file),
                        ("--ema", o.ema), ("--repeats", o.repeats if o.repeats > 1 else None)):
        if value is not None:
            cmd += [flag, str(value)]
    return cmd


def _slurm(plans: list[SweepTrial], trial: Path, o: BranchOptions, how: BranchLaunch, results: Path) -> str | None:
    """Inside an array task: run its branch (the outcome line). Else submit the arrays and, with `wait`, wait for
    them (None: go on to the table); without, say what to run once they end."""
    from lbscale import slurm
    from lbscale.sweep.array import run_array_task
    from lbscale.sweep.options import SweepOptions, SweepRun
    from lbscale.sweep.submit import SlurmLauncher
    from lbscale.sweep.systems import get_system

    run = SweepRun(spec_path=str(results / "branch"), results=results,
                   system=get_system(how.system, how.systems_file), options=SweepOptions(launcher="slurm"),
                   command=_command(trial, o, how, results))
    if how.trial is not None:
        chosen = [p for p in plans if p.trial_id == how.trial]
        if not chosen:
            names = ", ".join(p.trial_id for p in plans)
            raise LbscaleError(f"--trial {how.trial}: not a branch of this study ({names})")
        code = run_array_task(chosen[0], run)
        if code:
            raise SystemExit(code)
        return f"branch {how.trial} done; results in {results / how.trial}"
    jobs = SlurmLauncher.submit(plans, run)
    if how.wait and jobs:
        slurm.wait_for_jobs(jobs)
        return None
    if not jobs:
        return None
    return (f"{len(jobs)} job array(s) submitted; follow them with: lbscale status {results}; once they end, run "
            "this command again for the table and the figure")


def _judged_by(parent: Path, subset: int) -> str:
    """The loss the branches are judged by: on `subset` samples of the parent's evaluation split, or on all of it
    where the subset is not smaller (the loader takes the whole split then)."""
    described = read_json(parent / CONFIG) or {}
    split = described.get("eval_split") or described.get("config", {}).get("eval_split", "val")
    size = described.get("eval_samples")
    if size is None:  # a parent of an lbscale before config.json recorded the split's size: ask its file
        from lbscale.data.formats import open_prepared

        try:
            with open_prepared(described["config"]["data"]) as data:
                size = data.size(split) if data.has_split(split) else None
        except (LbscaleError, OSError, KeyError):
            size = None
    if size is not None and subset >= size:
        return f"the loss on the whole {split} split ({size:,} samples)"
    return f"the loss on {subset:,} samples of the {split} split"


def run_study(trial: Path, o: BranchOptions, how: BranchLaunch | None = None) -> str:
    """Plan, run (unless a dry run), tabulate and draw; the outcome line."""
    from lbscale.report import tuned_critical_batch
    from lbscale.report.render import markdown

    if o.tuned:  # a bad --tuned stops before anything runs
        tuned_critical_batch(o.tuned)

    how = how or BranchLaunch()
    if how.launcher == "slurm":
        from lbscale.sweep.systems import get_system

        plans, what = branch_plans(trial, o, get_system(how.system, how.systems_file)["gpus_per_node"])
    else:
        plans, what = branch_plans(trial, o)
    results = what["results"]
    points = len(plans) // len(parse_factors(o.factors)) // o.repeats
    print(f"{len(plans)} branches of {what['parent']}: factors {o.factors} from {points} kept checkpoints"
          + (f", {o.repeats} repeats each (the data order re-drawn past the branch point)" if o.repeats > 1 else "")
          + f", {what['window']:,} samples each, LR rule {what['rule']}, judged by "
          + (f"the training loss's moving average (decay {o.ema:g} per {what['parent_batch']:,} samples)" if o.ema
             else _judged_by(Path(what["parent"]), what["subset"])), flush=True)
    if o.dry_run:
        for p in plans:
            print(f"  {p.trial_id}: batch {p.plan.global_batch}, accumulation {p.plan.accum_steps}, "
                  f"LR {p.plan.peak_lr:.4g}")
        return f"branch dry run: {len(plans)} branches planned into {results}; nothing run"
    if how.launcher == "slurm":
        said = _slurm(plans, trial, o, how, results)
        if said is not None:
            return said
        failures = sum((read_json(p.out / SUMMARY) or {"status": "failed"})["status"] == "failed" for p in plans)
    else:
        failures = run_branches(plans, results)
    df = branch_table(plans, what["parent"], o.tolerance, ema=o.ema is not None)
    df.to_csv(results / TABLE, index=False)
    draw(df, what["parent"], results / FIGURE, tuned_critical_batch(o.tuned) if o.tuned else None)
    print(markdown(df.drop(columns=["why"])), end="")
    from lbscale.report.branch_study import cell, per_checkpoint

    found = "; ".join(f"{r['checkpoint']}: {cell(r)}" for _, r in per_checkpoint(df).iterrows())
    steps = int(df["steps"].fillna(0).sum())
    failed = f", {failures} failed" if failures else ""
    return (f"branch study of {Path(what['parent']).name}: local critical batch {found} ({len(df)} branches, "
            f"{steps:,} optimizer steps{failed}); written to {results}")
