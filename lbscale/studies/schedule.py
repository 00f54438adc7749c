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

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lbscale.errors import LbscaleError
from lbscale.results import CONFIG, read_json, read_jsonl

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


def _evaluations(trial: Path, metric: str) -> pd.DataFrame:
    rows = [r for r in read_jsonl(trial / "metrics.jsonl") if r.get("kind") == "step" and r.get(metric) is not None]
    return pd.DataFrame(rows, columns=["step", "samples_seen", metric, "subset"])


def _first_reach(ev: pd.DataFrame, metric: str, target: float, maximize: bool) -> float | None:
    hit = ev[ev[metric] >= target] if maximize else ev[ev[metric] <= target]
    return float(hit["samples_seen"].iloc[0]) if len(hit) else None


def local_rows(branches: Path) -> pd.DataFrame:
    """The local critical batch per checkpoint of the branch study, with its interval (`report.branch_study`)."""
    from lbscale.report.branch_study import per_checkpoint, read

    table = read([branches])
    most = int(table["factor"].max())
    return pd.DataFrame([{"method": "local critical batch", "label": r["checkpoint"], "samples": float(r["samples"]),
                          "value": r["critical_batch"], "lo": r["lo"], "hi": r["hi"], "kind": r["kind"],
                          "rests_on": f"branches at 1..{most} x the reference's batch, {int(r['repeats'])} repeats "
                                      f"each; {r['why']}"} for _, r in per_checkpoint(table).iterrows()])


def gns_rows(reference: Path) -> pd.DataFrame:
    """B_simple at each kept checkpoint of the reference and at its target, with Fieller's interval."""

    rows = []
    for label, folder in measured_at(reference).items():
        g, info = read_json(folder / "gns.json"), read_json(folder / "info.json") or {}
        if not g:
            continue
        lo, hi = g.get("b_simple_lo"), g.get("b_simple_hi")
        value = g.get("b_simple")
        kind = "none" if value is None or lo is None else ("interval" if hi is not None else "lower")
        rows.append({"method": "B_simple", "label": label, "samples": float(info.get("samples_seen", math.nan)),
                     "value": value, "lo": lo, "hi": hi if hi is not None else math.inf, "kind": kind,
                     "rests_on": f"gradient noise scale, {g.get('groups')} groups of {g.get('k')} x "
                                 f"{g.get('micro_batch')} (Fieller 90%)"})
    return pd.DataFrame(rows)


def measured_at(reference: Path) -> dict[str, Path]:
    """The reference's checkpoints the noise scale is measured at, by label: the kept ones and its target's."""
    from lbscale.train.kept import kept as kept_checkpoints

    return {**kept_checkpoints(reference), "target": reference / "checkpoint"}


def ladder(reference: Path, ev: pd.DataFrame, metric: str, target: float, maximize: bool) -> list[float]:
    """The targets of the B_crit ladder: the reference run's `metric` at its last evaluation at or before each
    kept checkpoint (rounded to 0.01), and the sweep's own target; none in the first quarter of the way from its
    first evaluation to the target (near chance every batch takes a step or two: B_crit there says nothing)."""
    from lbscale.train.kept import kept as kept_checkpoints

    out = []
    floor = float(ev[metric].iloc[0]) + 0.25 * (target - float(ev[metric].iloc[0])) if len(ev) else target
    for folder in kept_checkpoints(reference).values():
        step = (read_json(folder / "info.json") or {}).get("step", 0)
        before = ev[ev["step"] <= step]
        if len(before):
            x = float(before[metric].iloc[-1])  # to 0.01 toward the curve's start: a value it had reached there
            v = math.floor(x * 100 + 1e-9) / 100 if maximize else math.ceil(x * 100 - 1e-9) / 100
            if ((floor <= v < target) if maximize else (floor >= v > target)):  # not at the curve's start
                out.append(v)
    return sorted(set(out), reverse=not maximize) + [target]


def bcrit_rows(study, metric: str, target: float, maximize: bool, reference: Path, variant) -> pd.DataFrame:
    """B_crit of the tuned sweep at each target of the ladder (each its own fit of the report's steps model),
    placed at the samples where the reference run first reached it. Below the sweep's own target the trials'
    evaluations of a subset count too (they were evaluated on the whole split only near their target); said."""
    from lbscale.analysis.intervals import LEVEL
    from lbscale.report import steps_model
    from lbscale.report.critical_batch import observations
    from lbscale.report.tuned import trial_outcomes

    ev, rows = _evaluations(reference, metric), []
    subset = "subset" in study.steps and study.steps["subset"].notna().any()
    for t in ladder(reference, ev, metric, target, maximize):
        steps = study.steps.drop(columns=["subset"]) if (t != target and subset) else study.steps
        outcomes = trial_outcomes(study.trials, steps, metric, t, maximize)
        if variant is not None:
            outcomes = outcomes[outcomes["variant"] == variant]
        model = steps_model.fit(observations(outcomes, "peak_lr"), LEVEL, quantities=("b_crit",))  # the report's
        e = model.estimates.get("b_crit") if model is not None else None  # B_crit, only its profile computed
        fit = {"b_crit": e.value, "b_crit_lo": e.lo, "b_crit_hi": e.hi, "b_crit_kind": e.kind} if e else {}
        n = int(outcomes["reached"].astype(bool).sum())
        on = "their subset and whole-split evaluations" if (t != target and subset) else "whole-split evaluations"
        placed = ev if t != target or "subset" not in ev else ev[ev["subset"].isna()]  # as its fit: whole split
        rows.append({"method": "B_crit", "label": f"{metric} {t:g}", "samples": _first_reach(placed, metric, t,
                                                                                              maximize),
                     "value": fit.get("b_crit"), "lo": fit.get("b_crit_lo"), "hi": fit.get("b_crit_hi"),
                     "kind": fit.get("b_crit_kind") or "none",
                     "rests_on": f"the tuned sweep's fit at {metric} {t:g}: {n} trials reached it ({on}); placed "
                                 "where the reference run reached it"})
    return pd.DataFrame(rows)


def disagreements(table: pd.DataFrame) -> list[str]:
    """Where two estimates at (about) the same place in training have intervals that do not overlap."""
    def span(r):
        lo = r["lo"] if pd.notna(r["lo"]) else 0.0
        hi = r["hi"] if pd.notna(r["hi"]) else math.inf
        return lo, hi

    out = []
    at = table[table["kind"] != "none"]
    local = at[at["method"] == "local critical batch"]
    for _, r in local.iterrows():
        for method in ("B_simple", "B_crit"):
            other = at[at["method"] == method].dropna(subset=["samples"])
            if other.empty:
                continue
            o = other.iloc[(other["samples"] - r["samples"]).abs().argsort().iloc[0]]
            (a0, a1), (b0, b1) = span(r), span(o)
            if a1 < b0 or b1 < a0:
                out.append(f"at {r['samples']:,.0f} samples ({r['label']}) the local critical batch "
                           f"{_cell(r)} and {method} {_cell(o)} ({o['label']}) disagree beyond their intervals")
    return out


def _cell(r) -> str:
    from lbscale.report.numbers import estimate_cell, whole

    if r["kind"] == "none" or r["value"] is None or (isinstance(r["value"], float) and math.isnan(r["value"])):
        return "not resolved"
    return estimate_cell(r["value"], r["lo"], r["hi"], r["kind"], whole)


def over_training(results: Path, o: ScheduleOptions, parts) -> pd.DataFrame:
    """The three estimates over training, one table (method, label, samples, value, lo, hi, kind, rests_on)."""
    study, metric, target, maximize, best = parts
    folder = _folder(results, o)
    reference = folder / "reference"
    frames = [bcrit_rows(study, metric, target, maximize, reference, o.variant), local_rows(branches_of(results, o)),
              gns_rows(reference)]
    return pd.concat([f for f in frames if len(f)], ignore_index=True)


# trial options the spec leaves out: the grid, the search and the sweep set them, or they name this machine
LEFT_OUT = {"out", "global_batch", "seed", "data", "model", "epochs", "resume", "prune", "prune_group",
            "prune_min_steps", "prune_min_samples", "prune_eta", "prune_metric", "keep_checkpoints", "gns_every",
            "preempt_after_steps", "batch_schedule", "branch_from", "branch_samples", "branch_reseed", "branch_ema",
            "gns_at_target"}


def _trial_options(config: dict) -> dict:
    """A trial's options that differ from lbscale's defaults (what a spec's trial block writes)."""
    from lbscale.train.config import FIELDS

    def same(a, b):
        return a == b or (isinstance(a, (list, tuple)) and list(a) == list(b or []))
    return {k: v for k, v in config.items() if k in FIELDS and k not in LEFT_OUT
            and not same(v, FIELDS[k].default)}


def _lr_of(best: pd.DataFrame, batch: int) -> tuple[float, float]:
    row = best[best["global_batch"] == batch].iloc[0]
    return float(row["peak_lr"]), float(row["base_lr"])


def plan_schedule(table: pd.DataFrame, best: pd.DataFrame, o: ScheduleOptions):
    """(switches, notes, the best fixed batch, the LR per batch): the schedule that follows the local critical
    batch's lower ends (`analysis.schedule.derive`) up to the largest batch the sweep tuned, each batch at its
    best trial's LR."""
    from lbscale.analysis.schedule import Checkpoint, derive

    local = table[table["method"] == "local critical batch"]
    cps = [Checkpoint(r["label"], int(r["samples"]), None if pd.isna(r["lo"]) else float(r["lo"]),
                      None if pd.isna(r["hi"]) else float(r["hi"]), r["kind"]) for _, r in local.iterrows()]
    tuned = best[best["global_batch"] >= o.batch]
    largest = int(tuned["global_batch"].max())
    switches, notes = derive(cps, o.batch, o.fraction, largest)
    missing = [s.batch for s in switches if s.batch not in set(best["global_batch"])]
    if missing:  # a doubling of --batch the sweep never tuned (its grid is not in doublings of it)
        raise LbscaleError(f"the schedule reaches batch {missing[0]:,}, where the sweep tuned no LR (its batches: "
                           f"{', '.join(f'{b:,}' for b in best['global_batch'])}): give a --batch whose doublings "
                           "are the sweep's batches")
    at_target = local.loc[local["label"] == "target", "samples"]
    for sw in switches[1:]:
        if len(at_target) and sw.samples >= float(at_target.iloc[0]):
            notes.append(f"the switch to {sw.batch:,} at {sw.samples:,} samples is where the reference reached the "
                         "target: a run to this target gains little from it (a longer run, to a harder target, may)")
    fewest = int(best.loc[best["steps_to_target"].astype(float).idxmin(), "global_batch"])
    lrs = {int(b): _lr_of(best, int(b))[0] for b in best["global_batch"]}
    return switches, notes, fewest, lrs


def spec_text(results: Path, o: ScheduleOptions, parts, table: pd.DataFrame, planned) -> str:
    """The check's sweep spec: the derived schedule as an arm (a comment per switch naming its measurement), the
    best fixed batch, the schedule's last batch and its first as fixed controls, each at its tuned LR, `--seeds`
    seeds each
    (fresh seeds: the sweep's best trials were picked at seed 0), stopped at the sweep's target, unpruned."""
    import yaml

    from lbscale.analysis.schedule import cost_at_fraction, schedule_text

    study, metric, target, maximize, best = parts
    switches, notes, fewest, lrs = planned
    row = best[best["global_batch"] == fewest].iloc[0]
    config = (read_json(Path(row["results"]) / row["trial"] / CONFIG) or {})["config"]
    trial = {"optimizer": config["optimizer"], **_trial_options(config), "base_lr": _lr_of(best, fewest)[1]}
    if "momentum" in config and config["optimizer"] in ("sgd", "lars"):
        trial["momentum"] = config["momentum"]
    trial.update({"stop_at_target": True, "target": target, "target_metric": metric})
    last = switches[-1].batch
    arms = {"derived": {"schedule": schedule_text(switches, lrs), "base_lr": _lr_of(best, o.batch)[1]}}
    for b in dict.fromkeys((last, o.batch)):  # its last batch, and its first (Merrill et al.'s comparison)
        if b != fewest:
            arms[f"fixed-{b}"] = {"schedule": f"{b}@0", "base_lr": _lr_of(best, b)[1]}
    steps, samples = cost_at_fraction(o.fraction)
    lines = [f"# The batch-size schedule derived by `lbscale schedule {results} --batch {o.batch} --fraction "
             f"{o.fraction:g}`, beside the fixed batches it must beat, {o.seeds} seeds each, stopped at {metric} "
             f"{target:g}:",
             f"#   lbscale sweep {o.out or _folder(results, o) / SPEC} && lbscale report {check_results(results, o)}",
             "# The schedule follows the local critical batch of a reference run (batch "
             f"{o.batch}'s best trial again, checkpoints at 1/8, 1/4, 1/2 of its steps to the target): the batch"
             f" doubles where {o.fraction:g} x the interval's lower end allows (Merrill et al. 2025). For comparison, "
             f"on McCandlish et al.'s curve a batch at {o.fraction:g} x B_crit (theirs, another quantity: "
             f"docs/studies.md) takes {steps:g} x the minimum steps and {samples:g} x the minimum samples.",
             "# Every batch at the sweep's best LR there (peak LR; base LR under the sweep's scaling rule)."]
    for s in switches:
        lines.append(f"#   {s.batch:,} from {s.samples:,} samples, LR {lrs[s.batch]:.4g}: {s.reason}")
    lines += [f"#   {n}" for n in notes]
    lines += [f"# Beside it: {d}" for d in disagreements(table)]
    lines.append(f"# Controls: batch {fewest:,} (the sweep's fewest steps to the target, "
                 f"{int(row['steps_to_target'])} at seed {int(row.get('seed', 0) or 0)}), LR {lrs[fewest]:.4g}"
                 + (f"; batch {last:,} (the schedule's last), LR {lrs[last]:.4g}" if last != fewest else "")
                 + (f"; batch {o.batch:,} (its first, the reference's), LR {lrs[o.batch]:.4g}"
                    if o.batch not in (fewest, last) else ""))
    body = {"name": f"{Path(results).name}-schedule", "data": config["data"], "model": config["model"],
            "epochs": config["epochs"], "results": str(check_results(results, o)),
            "trial": trial, "grid": {"batch": [fewest], "gpus": [int(row.get("gpus") or 1)],
                                     "seeds": fresh_seeds(study, o.seeds),
                                     "batch_schedule": arms}}
    import textwrap

    wrapped = [w for line in lines for w in textwrap.wrap(line, 116, break_on_hyphens=False, subsequent_indent=
                                                          "#     " if line.startswith("#   ") else "# ")]
    return "\n".join(wrapped) + "\n" + yaml.safe_dump(body, sort_keys=False, width=1000)


def fresh_seeds(study, n: int) -> list[int]:
    """`n` seeds none of the sweep's trials used: its best trials were picked for their steps, partly their seed's
    luck, and a control run at that seed again would keep the luck."""
    used = pd.to_numeric(study.trials.get("seed", pd.Series(dtype=float)), errors="coerce").max()
    start = int(used) + 1 if pd.notna(used) else 1
    return list(range(start, start + n))


def check_results(results: Path, o: ScheduleOptions) -> Path:
    """Where the check's trials go: beside the sweep's results, RESULTS-schedule-bB (with -fF and -RULE where not
    the defaults): one folder per derivation, so that another --batch, --fraction or --rule never runs into the
    trials of this one."""
    tags = [f"b{o.batch}"] + ([f"f{o.fraction:g}"] if o.fraction != 1 else []) + \
        ([o.rule] if o.rule != "tuned" else [])
    return Path(results).parent / f"{Path(results).name}-schedule-{'-'.join(tags)}"


def draw(table: pd.DataFrame, switches, batches: list[int], path: Path, title: str) -> None:
    """The three estimates against the reference run's samples (log-log): a point with its interval, an open
    triangle at a bound's end (up: at least, down: below), nothing where not resolved; the derived schedule as a
    step line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    styles = {"B_crit": ("C0", "s", -0.03), "local critical batch": ("C1", "o", 0.0), "B_simple": ("C2", "D", 0.03)}
    shown = table[(table["kind"] != "none") & table["samples"].notna()]
    floor, ceil = batches[0] / 4, batches[-1] * 4
    for method, (color, marker, shift) in styles.items():
        g = shown[shown["method"] == method]
        for _, r in g.iterrows():
            x = r["samples"] * 10 ** shift
            lo = r["lo"] if pd.notna(r["lo"]) and r["lo"] > 0 else floor
            hi = r["hi"] if pd.notna(r["hi"]) and math.isfinite(r["hi"]) else ceil
            ax.plot([x, x], [lo, hi], color=color, lw=2, alpha=0.45)
            at, m = {"lower": (r["lo"], "^"), "upper": (r["hi"], "v")}.get(r["kind"], (r["value"], marker))
            ax.plot([x], [at], m, color=color, mfc="none" if m in "^v" else color)
        ax.plot([], [], marker, color=color, label=f"{method} (90% interval)")
    xs = [s.samples for s in switches[1:]] or [shown["samples"].min()]
    right = max(shown["samples"].max(), max(xs)) * 1.5
    left = shown["samples"].min() / 1.5
    steps_x = [left] + [s.samples for s in switches[1:]] + [right]
    steps_y = [s.batch for s in switches] + [switches[-1].batch]
    ax.step(steps_x, steps_y, where="post", color="k", lw=1.2, label="the derived schedule")
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_ylim(floor, ceil)
    ticks = [b for b in (2 ** i for i in range(30)) if floor <= b <= ceil]
    ax.set_yticks(ticks, [f"{b:,}" for b in ticks])
    ax.set_xlabel("training samples of the reference run (B_crit: where it reached that target)")
    ax.set_ylabel("batch")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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


def run_schedule(results: Path, o: ScheduleOptions) -> str:
    """Measure what is missing (unless --no-measure), derive, write the table, the figure and the spec; the
    outcome line."""
    from lbscale.analysis.schedule import schedule_text
    from lbscale.report.render import markdown

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
    planned = plan_schedule(table, parts[4], o)
    folder = _folder(results, o)
    table.to_csv(folder / TABLE, index=False)
    draw(table, planned[0], sorted(int(b) for b in parts[4]["global_batch"]), folder / FIGURE,
         f"Critical batch over training: {results.name}, from batch {o.batch} (open triangles: bounds)")
    shown = table.assign(estimate=[_cell(r) for _, r in table.iterrows()])
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
    text = spec_text(results, o, parts, table, planned)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(f"lbscale train ... --global-batch {o.batch} --batch-schedule {schedule_text(switches, lrs)}")
    path = " -> ".join(f"{s.batch:,}@{s.samples:,}" for s in switches)
    return (f"schedule of {results.name} from batch {o.batch}: {path} (samples; follows the local critical batch's "
            f"lower ends x {o.fraction:g}); the three estimates in {folder / TABLE} and {folder / FIGURE}; the check "
            f"in {out} (lbscale sweep {out})")
