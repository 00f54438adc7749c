"""`lbscale schedule RESULTS --batch B`: from the critical batch over training to a batch-size schedule, and the
spec that checks it by running it.

Measured once (kept beside the tuned sweep, under RESULTS/schedule-bB; a rerun reuses what is there):
- the reference run: the sweep's best trial at batch B trained again with kept checkpoints at 1/8, 1/4 and 1/2 of
  the steps it took to the target and at the target (the same config and seed; stopped at the target);
- the local critical batch at each checkpoint (`lbscale branch` on the reference, `--repeats`: its interval);
- the gradient noise scale B_simple at each checkpoint (`lbscale gns` on the kept weights).
Derived from those and from the sweep itself (`derive`: seconds, nothing trained): the critical batch over
training by the three methods (B_crit of the tuned sweep at a ladder of targets, each placed where the reference
run reached it), one table and one figure; the schedule that follows the local critical batch's lower ends
(`analysis.schedule.derive`), every batch at the sweep's measured best LR; and the spec that runs it beside the
best fixed batch and the schedule's last batch (`lbscale sweep SPEC`, then `lbscale report`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lbscale.errors import LbscaleError
from lbscale.results import CONFIG, read_json

TABLE, FIGURE, SPEC = "over-training.csv", "over-training.png", "schedule.yaml"
SHARES = (8, 4, 2)  # the reference's kept checkpoints: 1/8, 1/4, 1/2 of its steps to the target (and the target)


@dataclass
class ScheduleOptions:
    batch: int
    fraction: float = 1.0
    repeats: int = 3
    factors: str = "1,2,4,8,16"
    window: str = "1ep"
    rule: str = "tuned"  # the branches' LR: each batch's tuned LR, or a rule (auto, linear, sqrt, none)
    tolerance: float = 0.01
    seeds: int = 3
    variant: str | None = None
    out: Path | None = None  # the spec (default RESULTS/schedule-bB/schedule.yaml)
    measure: bool = True
    force: bool = False


def _study(results: Path, o: ScheduleOptions):
    """The tuned sweep (study, metric, target, maximize) and its best trials of the one arm; one line where it is
    not one, has no target, or has several arms and none named."""
    from lbscale.report import tuned, tuned_study

    study, metric, target, maximize = tuned_study(results, "a schedule needs each batch's tuned LR")
    if target is None:
        raise LbscaleError(f"{results}: its trials have no target: no steps to a target to schedule for")
    best = tuned.best_trials(study.trials, study.steps, metric, target, maximize)
    arms = sorted(best["variant"].dropna().unique())
    if len(arms) > 1 and o.variant is None:
        raise LbscaleError(f"{results}: {len(arms)} arms ({', '.join(arms)}); name one with --variant")
    if o.variant is not None:
        if o.variant not in arms:
            raise LbscaleError(f"--variant {o.variant}: {results} has {', '.join(arms)}")
        best = best[best["variant"] == o.variant]
    best = best[best["reached"].astype(bool)].sort_values("global_batch")
    if o.batch not in set(best["global_batch"]):
        have = ", ".join(f"{b:,}" for b in best["global_batch"])
        raise LbscaleError(f"--batch {o.batch}: no trial of {results} at that batch reached the target (reached at "
                           f"{have or 'no batch'})")
    if o.rule not in ("tuned", "auto", "linear", "sqrt", "none"):
        raise LbscaleError(f"--rule: {o.rule!r} is not one of tuned, auto, linear, sqrt, none")
    if o.rule == "tuned":  # every branch at a batch the sweep tuned: checked before the reference trains
        from lbscale.studies.branch import parse_factors

        tuned = set(int(b) for b in best["global_batch"])
        untuned = [k for k in parse_factors(o.factors) if k * o.batch not in tuned]
        if untuned:
            raise LbscaleError(f"--factors: batch {untuned[0] * o.batch:,} (factor {untuned[0]} of --batch "
                               f"{o.batch}) has no tuned LR in {results} (it reached the target at "
                               f"{', '.join(f'{b:,}' for b in sorted(tuned))}): leave the factor out")
    if not 0 < o.fraction <= 1:
        raise LbscaleError(f"--fraction {o.fraction:g}: the share of the local critical batch's lower end the batch "
                           "may grow to, in (0, 1]")
    return study, metric, target, maximize, best


def check_reach(best: pd.DataFrame, o: ScheduleOptions, train_samples: int) -> None:
    """The largest batch the schedule may reach must fit the train split and the reference's processes."""
    largest = int(best["global_batch"].max())
    if largest > train_samples:
        raise LbscaleError(f"the study's largest batch {largest:,} is more than the train split ({train_samples:,})")


def _folder(results: Path, o: ScheduleOptions) -> Path:
    return Path(results) / f"schedule-b{o.batch}"


def branches_of(results: Path, o: ScheduleOptions) -> Path:
    """The branch study's folder: one per LR rule (a rerun with another rule must not resume the other's
    branches, which trained at other LRs)."""
    return _folder(results, o) / ("branches" if o.rule == "tuned" else f"branches-{o.rule}")


def reference_trial(results: Path, best: pd.DataFrame, o: ScheduleOptions):
    """The reference run's SweepTrial: the best trial at --batch again, kept checkpoints at 1/8, 1/4, 1/2 of its
    steps to the target, stopped at the target, unpruned."""
    from lbscale.sweep.plan import SweepTrial
    from lbscale.train.config import FIELDS, NO_PRUNING, load_config
    from lbscale.train.plan import resolve_plan

    row = best[best["global_batch"] == o.batch].iloc[0]
    parent = Path(row["results"]) / row["trial"]
    described = read_json(parent / CONFIG) or {}
    config, plan = described.get("config"), described.get("plan")
    if not config or not plan:
        raise LbscaleError(f"{parent}: no config.json: the best trial at batch {o.batch} cannot be trained again")
    steps = int(row["steps_to_target"])
    keep = sorted({max(1, steps // s) for s in SHARES})
    if len(keep) < len(SHARES) or keep[-1] >= steps:
        raise LbscaleError(f"batch {o.batch}'s best trial reached the target in {steps} steps: too few for "
                           "checkpoints at 1/8, 1/4 and 1/2 of them; use a smaller --batch")
    options = {**{n: v for n, v in config.items() if n in FIELDS}, **NO_PRUNING, "stop_at_target": True,
               "keep_checkpoints": ",".join(f"{s}st" for s in keep), "resume": False, "gns_every": None,
               "preempt_after_steps": None, "out": str(_folder(results, o) / "reference")}
    cfg = load_config(None, **options)
    p = resolve_plan(cfg, plan["world_size"], plan["train_samples"])
    check_reach(best, o, plan["train_samples"])
    return SweepTrial("reference", plan["world_size"], 1, cfg, p, variant=f"reference-b{o.batch}", sweep="reference"), \
        parent


def measure(results: Path, best: pd.DataFrame, o: ScheduleOptions) -> Path:
    """Train the reference run, branch from its checkpoints, measure the noise scale at each (each step skipped
    where its results are there); the reference's directory."""
    from lbscale.studies.branch import BranchOptions, run_study
    from lbscale.studies.gns import measure_trial
    from lbscale.sweep.follow import SweepProgress
    from lbscale.sweep.launch import LocalLauncher, select, write_trial_files

    ref, parent = reference_trial(results, best, o)
    write_trial_files([ref])
    if select([ref], retry_failed=True):
        print(f"reference run: {parent.name} again, checkpoints kept at {ref.config.keep_checkpoints} and the "
              "target", flush=True)
        LocalLauncher().run_rounds([ref], SweepProgress())
    if (read_json(ref.out / "summary.json") or {}).get("stopped") != "target":
        raise LbscaleError(f"{ref.out}: the reference run did not stop at its target; see its train.log")
    branches = branches_of(results, o)
    _same_branches(branches, o)
    if not (branches / "critical-batch.csv").is_file() or o.force:
        lrs = {int(b): float(lr) for b, lr in zip(best["global_batch"], best["peak_lr"])} if o.rule == "tuned" \
            else None  # each branch at its batch's tuned LR: the LR the schedule would give it
        print(run_study(ref.out, BranchOptions(factors=o.factors, window=o.window, rule="auto" if lrs else o.rule,
                                               tolerance=o.tolerance, results=branches, repeats=o.repeats, lrs=lrs)),
              flush=True)
    from lbscale.report.over_training import measured_at

    for folder in measured_at(ref.out).values():
        if not (folder / "gns.json").is_file() or o.force:
            measure_trial(ref.out, kept=folder)
    return ref.out


BRANCH_OPTIONS = ("factors", "window", "tolerance", "repeats")


OPTIONS_FILE = "schedule-options.json"


def _other_options(branches: Path, o: ScheduleOptions) -> str | None:
    """'measured with --X a, asked b' where the branch study there was measured with other options; None where
    it was not measured or with these."""
    had = read_json(branches / OPTIONS_FILE)
    asked = {k: getattr(o, k) for k in BRANCH_OPTIONS}
    if had is None or had == asked:
        return None
    diff = next(k for k in BRANCH_OPTIONS if had.get(k) != asked[k])
    return f"measured with --{diff} {had.get(diff)}, asked {asked[diff]}"


def _same_branches(branches: Path, o: ScheduleOptions) -> None:
    """The branch study's options, recorded beside it: a rerun with others measures again with --force (the old
    branches removed: a branch of another window or factor must not be resumed as this one's), else is one line."""
    import shutil

    from lbscale.results import write_json

    other = _other_options(branches, o)
    if other and not o.force:
        raise LbscaleError(f"{branches}: {other}: give --force to measure the branches again (or the same options "
                           "to reuse them)")
    if o.force and branches.exists():
        shutil.rmtree(branches)
    if other or o.force or not (branches / OPTIONS_FILE).is_file():
        branches.mkdir(parents=True, exist_ok=True)
        write_json(branches / OPTIONS_FILE, {k: getattr(o, k) for k in BRANCH_OPTIONS})


def _measured(results: Path, o: ScheduleOptions) -> None:
    """What the derivation reads is there, measured with these options; one line where not."""
    other = _other_options(branches_of(results, o), o)
    if other:
        raise LbscaleError(f"{branches_of(results, o)}: {other}: derive with the options it was measured with, or "
                           "measure again (--force)")
    folder = _folder(results, o)
    for what, path in (("the reference run", folder / "reference" / "summary.json"),
                       ("its branch study", branches_of(results, o) / "critical-batch.csv")):
        if not path.is_file():
            raise LbscaleError(f"{folder}: {what} is not there yet (no {path.name}): run lbscale schedule "
                               "without --no-measure to measure it")


def over_training(results: Path, o: ScheduleOptions, parts) -> pd.DataFrame:
    """The three estimates over training, one table (method, label, samples, value, lo, hi, kind, rests_on)."""
    study, metric, target, maximize, best = parts
    folder = _folder(results, o)
    reference = folder / "reference"
    from lbscale.report.over_training import bcrit_rows, gns_rows, local_rows

    frames = [bcrit_rows(study, metric, target, maximize, reference, o.variant), local_rows(branches_of(results, o)),
              gns_rows(reference)]
    return pd.concat([f for f in frames if len(f)], ignore_index=True)


def check_results(results: Path, o: ScheduleOptions) -> Path:
    """Where the check's trials go: beside the sweep's results, RESULTS-schedule-bB (with -fF and -RULE where not
    the defaults): one folder per derivation, so that another --batch, --fraction or --rule never runs into the
    trials of this one."""
    tags = [f"b{o.batch}"] + ([f"f{o.fraction:g}"] if o.fraction != 1 else []) + \
        ([o.rule] if o.rule != "tuned" else [])
    return Path(results).parent / f"{Path(results).name}-schedule-{'-'.join(tags)}"


def run_schedule(results: Path, o: ScheduleOptions) -> str:
    """Measure what is missing (unless --no-measure), derive, write the table, the figure and the spec; the
    outcome line."""
    from lbscale.analysis.schedule import plan, schedule_text
    from lbscale.report.over_training import cell, disagreements, draw
    from lbscale.report.render import markdown
    from lbscale.studies.schedule_spec import spec_text

    results = Path(results)
    parts = _study(results, o)
    out = Path(o.out) if o.out else _folder(results, o) / SPEC
    if o.out and out.is_dir():
        raise LbscaleError(f"--out {out}: a directory; give the spec's file name (e.g. {out / SPEC})")
    if o.out and out.exists() and not o.force:
        raise LbscaleError(f"--out {out}: exists; give --force to replace it")
    if o.measure:
        measure(results, parts[4], o)
    _measured(results, o)
    table = over_training(results, o, parts)
    planned = plan(table, parts[4], o.batch, o.fraction)
    folder = _folder(results, o)
    table.to_csv(folder / TABLE, index=False)
    draw(table, planned[0], sorted(int(b) for b in parts[4]["global_batch"]), folder / FIGURE,
         f"Critical batch over training: {results.name}, from batch {o.batch} (open triangles: bounds)")
    shown = table.assign(estimate=[cell(r) for _, r in table.iterrows()])
    print(markdown(shown[["method", "label", "samples", "estimate", "rests_on"]]), end="")
    for line in disagreements(table) + planned[1]:
        print(f"- {line}")
    switches, lrs = planned[0], planned[3]
    if len(switches) == 1:  # nothing to check: a spec would run the reference batch against itself
        if not o.out and out.exists():
            out.unlink()  # an earlier derivation's spec must not be run as this one's
        return (f"no schedule from batch {o.batch} for {results.name}: at no checkpoint did the local critical "
                f"batch's interval have a lower end above {o.batch} (more --repeats, with --force, would resolve it, "
                f"or another --batch); the three estimates in {folder / TABLE} and {folder / FIGURE}; no check written")
    text = spec_text(results, o, parts, table, planned, out, check_results(results, o))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(f"lbscale train ... --global-batch {o.batch} --batch-schedule {schedule_text(switches, lrs)}")
    path = " -> ".join(f"{s.batch:,}@{s.samples:,}" for s in switches)
    return (f"schedule of {results.name} from batch {o.batch}: {path} (samples; follows the local critical batch's "
            f"lower ends x {o.fraction:g}); the three estimates in {folder / TABLE} and {folder / FIGURE}; the check "
            f"in {out} (lbscale sweep {out})")
