"""The `lbscale` command line: each command parses its options and calls one function."""

from __future__ import annotations

import signal
import shlex
import sys
from pathlib import Path

import click

from lbscale.data.formats.base import IMAGERY
from lbscale.data.sources import SOURCES
from lbscale.data.sources.base import prepare_options
from lbscale.errors import ERROR_PREFIX, LbscaleError, os_error_line
from lbscale.progress import set_quiet
from lbscale.sweep.launchers import LAUNCHERS
from lbscale.train import noise_measure
from lbscale.train.models import MODELS, TIMM_SMALL_MODELS
from lbscale.train.threads import prepare_process


class Number(click.ParamType):
    """A finite float within (lo, hi), each end open or closed: Click's FloatRange lets NaN (it fails every
    comparison) and infinity through, so a range is checked here once, at parsing, as one line and exit 2."""

    name = "number"

    def __init__(self, lo: float | None = None, hi: float | None = None, lo_open: bool = True, hi_open: bool = True):
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open

    def convert(self, value, param, ctx):
        import math

        try:
            x = float(value)
        except (TypeError, ValueError):
            x = math.nan
        ok = math.isfinite(x) and (self.lo is None or (x > self.lo if self.lo_open else x >= self.lo)) \
            and (self.hi is None or (x < self.hi if self.hi_open else x <= self.hi))
        if not ok:
            bounds = [f"{'>' if self.lo_open else '>='} {self.lo:g}" if self.lo is not None else None,
                      f"{'<' if self.hi_open else '<='} {self.hi:g}" if self.hi is not None else None]
            raise LbscaleError(f"{param.opts[0]}: {value} is not a finite number "
                               f"{' and '.join(b for b in bounds if b)}")
        return x


def _quiet(ctx, param, value):
    if value:
        set_quiet(True)
    return value


quiet_option = click.option("--quiet", is_flag=True, expose_value=False, callback=_quiet, is_eager=True,
                            help="No progress bars.")


@click.group()
@quiet_option
@click.version_option(package_name="lbscale")
def cli():
    """Batch-size scaling studies: prepare datasets, train trials, sweep grids, follow their status."""


def _source_options(fn):
    """One CLI option per name the sources declare (their SourceOption), by the rule of prepare_options."""
    for name, (spec, default) in reversed(prepare_options(SOURCES).items()):
        if spec.type is bool:
            fn = click.option(spec.flag, name, is_flag=True, help=spec.help)(fn)
        else:
            kind = click.Choice(spec.choices, case_sensitive=spec.case_sensitive) if spec.choices else spec.type
            fn = click.option(spec.flag, name, type=kind, default=default, show_default=default is not None,
                              help=spec.help)(fn)
    return fn


@cli.command()
@click.argument("dataset", type=click.Choice(list(SOURCES)))
@click.option("--src", type=click.Path(path_type=Path), help="Raw dataset file or folder (not for "
              + ", ".join(name for name, source in SOURCES.items() if not source.needs_src) + ").")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Prepared HDF5 file or TFRecord dir.")
@click.option("--format", "fmt", type=click.Choice(["hdf5", "tfrecord"]), default="hdf5", show_default=True)
@click.option("--val-fraction", type=float, default=0.1, show_default=True,
              help="Share of train carved out as a stratified, seeded val split where the source has none.")
@click.option("--test-fraction", type=float, default=0.2, show_default=True,
              help="Share carved out as test where the source has no test split (EuroSAT, synthetic).")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Reader processes beside the writing process ("
                   + ", ".join(name for name, source in SOURCES.items() if "workers" in source.common)
                   + "); 0 reads in-process.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-train", type=int, help="Keep this many train samples (stratified by class, seeded by --seed) "
                                             "and leave the rest out: a documented subset for a quick study.")
@click.option("--force", is_flag=True, help="Replace an existing output.")
@_source_options
@click.option("--imagery", type=click.Choice(list(IMAGERY)),
              help="What the pixels show, recorded in place of what prepare infers (arrays: unknown); "
                   "`augmentation: auto` trains by it: " + ", ".join(f"{k} {v}" for k, v in IMAGERY.items()) + ".")
@quiet_option
def prepare(dataset, src, out, fmt, val_fraction, test_fraction, workers, seed, max_train, force, imagery, **options):
    """Convert DATASET from --src into a prepared HDF5 file (or TFRecord shards) at --out."""
    from lbscale.data.prepare import outcome_line
    from lbscale.data.prepare import prepare as run_prepare

    if workers < 0:
        raise LbscaleError("--workers must be >= 0")
    # Source-specific options only where given: prepare refuses one the dataset does not read.
    ctx = click.get_current_context()
    specific = {name: value for name, value in options.items()
                if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT}
    counts = run_prepare(dataset, src, out, fmt, val_fraction, test_fraction, seed, workers, force,
                         command=shlex.join(["lbscale", *sys.argv[1:]]), max_train=max_train, imagery=imagery,
                         **specific)
    click.echo(outcome_line(out, counts))


prepare.help += "\n\n\b\nDatasets:\n" + "\n".join(f"  {n:<12} {c.help}" for n, c in SOURCES.items())


def _trial_options(fn):
    """One CLI option per TrialConfig field (None = not given, so YAML values stand)."""
    from lbscale.train.config import FIELDS

    for name in reversed(list(FIELDS)):
        f = FIELDS[name]
        flag = name.replace("_", "-")
        if f.type == "bool":
            fn = click.option(f"--{flag}/--no-{flag}", name, default=None, help=f.metadata["help"])(fn)
        elif "choices" in f.metadata:
            fn = click.option(f"--{flag}", name, type=click.Choice(list(f.metadata["choices"])), default=None,
                              help=f.metadata["help"])(fn)
        else:
            kind = {"int": int, "float": float}.get(f.type, str)
            fn = click.option(f"--{flag}", name, type=kind, default=None, help=f.metadata["help"])(fn)
    return fn


@cli.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="YAML trial config; options override.")
@_trial_options
@quiet_option
def train(config_path, **options):
    """Train one trial (1 process, or one rank under torchrun / srun) and write its result files."""
    from lbscale.train.config import check_given, load_config
    from lbscale.train.distributed import detect_env
    from lbscale.train.entry import run_trial
    from lbscale.train.summary import outcome_line

    cfg = load_config(config_path, **options)
    check_given(cfg.optimizer, {k: f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None})
    code = run_trial(cfg)
    line = outcome_line(cfg.out) if detect_env().is_main and code == 0 else None
    if line:
        click.echo(line)
    if code:
        sys.exit(code)


train.help += "\n\n\b\nModels for small images (--model; or any timm name):\n" + "\n".join(
    [f"  {n:<15} {m.help}" for n, m in MODELS.items()] + [f"  {n:<15} {h}" for n, h in TIMM_SMALL_MODELS.items()])


@cli.command()
@click.argument("data", type=click.Path(path_type=Path))
@click.option("--model", required=True, help="The network (as lbscale train --model).")
@click.option("--wall", required=True, help="The study's wall-clock budget, pilot included: 20m, 90min, 1.5h "
              "(wall time on this machine, not GPU-hours; the spec carries it to the sweep).")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="The spec to write (my-study.yaml).")
@click.option("--target", type=float, help="The target of --metric (default: the hardest the budget pays for, at "
              "least 0.7 of the way from chance to the pilot's plateau).")
@click.option("--for-target", type=float, help="Where the real run ends: B_crit is predicted there (`lbscale "
              "predict`), and the reference run's time is set aside (default: the pilot's plateau).")
@click.option("--metric", help="The target metric (default: the task's primary metric on val).")
@click.option("--optimizer", default="sgd", show_default=True, help="The study's optimizer.")
@click.option("--lr", type=float, help="The pilot's middle LR at its middle batch (default per optimizer).")
@click.option("--results", type=click.Path(path_type=Path), help="The study's results directory (default "
              "results/<spec name>); the pilot is kept beside it in <results>-pilot.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--fresh", is_flag=True, help="Measure the pilot again instead of reusing the kept one.")
@click.option("--force", is_flag=True, help="Replace an existing --out.")
@quiet_option
def design(data, **options):
    """Design a batch-size study of DATA from a pilot: target, batches, LR range, evaluations, pruning, epochs."""
    from lbscale.studies.design import DesignOptions, design as run_design

    print(run_design(DesignOptions(data=data, **options)))


@cli.command()
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--launcher", type=click.Choice(list(LAUNCHERS)), default="local", show_default=True,
              help="; ".join(f"{name}: {cls.help}" for name, cls in LAUNCHERS.items()))
@click.option("--batch", help="Global batches: a range like 8k..65k (doubling), or a list like 512,8000.")
@click.option("--gpus", help="GPU (process) counts per trial, e.g. 4,8.")
@click.option("--nproc-per-node", "nproc", type=int, help="local: processes per trial (torchrun); same as --gpus N.")
@click.option("--local-batch", help="Per-GPU batch; GPUs = global / local where --gpus is not given.")
@click.option("--seeds", help="A count (3) or a list (0,5).")
@click.option("--epochs", type=int, help="Override the spec's epochs.")
@click.option("--results", type=click.Path(path_type=Path), help="Results directory (default results/<name>).")
@click.option("--system", help="Cluster profile (jureca-dc, juwels-booster, jureca-k80, deep-esb, summit, generic).")
@click.option("--systems", "systems_file", type=click.Path(path_type=Path), help="Your own profiles (YAML).")
@click.option("--account", help="SLURM account (overrides the profile).")
@click.option("--partition", help="SLURM partition (overrides the profile).")
@click.option("--time", "time_limit", help="SLURM time limit (overrides the profile).")
@click.option("--dry-run", is_flag=True, help="Check the data files and print the plan (batches, GPUs, accum, peak "
                                             "LR, warm-up, steps) only.")
@click.option("--estimate", is_flag=True, help="With --dry-run: time a few steps of each trial shape here and print "
                                               "the sweep's expected duration.")
@click.option("--no-submit", is_flag=True, help="slurm: write the sbatch scripts, do not submit.")
@click.option("--wait", is_flag=True, help="slurm: wait until the submitted arrays have finished.")
@click.option("--max-concurrent", type=int, help="slurm: array tasks running at once (--array=...%M).")
@click.option("--retry-failed", is_flag=True, help="Run failed trials again (resuming their checkpoints).")
@click.option("--requeue", is_flag=True, help="slurm: checkpoint on SIGUSR1 before the time limit and requeue.")
@click.option("--max-requeues", type=int, default=3, show_default=True,
              help="slurm --requeue: a trial preempted more often than this is marked failed.")
@click.option("--array-task", type=int, help="Run trial K of the plan (inside a SLURM array task).")
@click.option("--trial", help="Run the trial with this id (inside a SLURM array task).")
@click.option("--wait-for-lock", is_flag=True, help="Where another sweep runs into the same results directory, wait "
                                                    "for it to end instead of refusing.")
@click.option("--until-resolved", is_flag=True, help="After the grid, fit B_crit and run rounds of trials (batches "
              "past an open side, LRs past an edge, seeds where it is wide) until its interval's hi / lo <= --ratio "
              "or --budget is spent; each round is written to rounds.json and shown in the report.")
@click.option("--budget", help="With --until-resolved: N trials in all (the grid's included), or H GPU-hours (12h).")
@click.option("--wall", help="A wall-clock budget for this sweep's own running time (20m, 90min, 1.5h; queued time "
              "not counted): no trial or round starts past it, a running trial is checkpointed at 1.1x it (a rerun "
              "resumes). Default: the spec's `wall` less its designer's pilot.")
@click.option("--ratio", type=Number(lo=1), default=4.0, show_default=True,
              help="With --until-resolved: stop once B_crit's interval has hi / lo at most this.")
@click.option("--engine", type=click.Choice(["ddp", "horovod"]), help="Every trial's data-parallel engine: ddp "
              "(DistributedDataParallel; torchrun, srun) or horovod (Horovod's DistributedOptimizer; horovodrun, srun "
              "with a Gloo rendezvous; make horovod). Default: the spec's trial.engine, else ddp.")
@click.option("--follow-up", is_flag=True, hidden=True,
              help="Inside the SLURM job that plans the next stage: submit nothing where a trial failed for the "
                   "disk or its folders.")
@quiet_option
def sweep(spec, nproc, no_submit, **options):
    """Train the grid of SPEC: batch x GPUs x variant x warm-up x seed, locally or as SLURM job arrays."""
    from lbscale.sweep.command import SweepOptions, run_sweep

    if nproc is not None:
        if options["gpus"] is not None:
            raise LbscaleError("give --gpus or --nproc-per-node, not both")
        options["gpus"] = str(nproc)
    decide = None
    if options["until_resolved"]:
        from lbscale.studies.resolve import decider as decide
    code = run_sweep(spec, SweepOptions(submit=not no_submit, **options), decide)
    if code:
        sys.exit(code)


@cli.command()
@click.argument("results", type=click.Path(path_type=Path))
@click.option("--watch", type=Number(lo=0), is_flag=False, flag_value=5.0, default=None, metavar="[SECONDS]",
              help="Redraw the table every SECONDS (5) until every trial has ended; Ctrl-C stops watching.")
def status(results, watch):
    """A table of the trials under RESULTS (or of one trial directory): state, epoch reached, last metric, SLURM job,
    elapsed, time left."""
    from lbscale.sweep.command import status_table, watch_status

    if watch is not None:
        sys.exit(watch_status(results, watch))
    click.echo(status_table(results))


@cli.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path),
              help="Report directory (default reports/<name of RESULTS>); an earlier report there is replaced, "
                   "any other folder refused.")
@click.option("--format", "formats", default="md,latex,csv,html", show_default=True,
              help="Comma-separated: md, latex, csv, html (figures are always written).")
@click.option("--metric", default="auto", show_default=True,
              help="Metric of the tables and figures: auto (the task's primary metric), val_top1, val_f1_micro, ...")
@click.option("--compare", help="Published numbers beside your own: a NAME shipped in lbscale/published "
                                "(sat4-lamb, sat6-lamb, bigearthnet-lars, mlperf-resnet50, imagenet-records, "
                                "imagenet-records-steps, cifar10-filter, cifar10-filter-wd) "
                                "or a CSV file.")
@click.option("--target", help="Target value of --metric for steps / time to target and the critical batch, or "
                                "several (0.90,0.95,0.97: B_crit per target; default: the trials' own --target).")
@click.option("--allreduce", type=click.Path(path_type=Path),
              help="The all-reduce fit of `lbscale bench allreduce`: predict each scaling series' time per epoch "
                   "at its GPU counts and beyond (docs/scaling-model.md).")
@click.option("--predict-gpus", help="With --allreduce: GPU counts to predict, e.g. 128,1024 (default: doubling "
                                     "from twice the largest measured up to 1024).")
@click.option("--gpu-budget", type=click.IntRange(min=1),
              help="With --allreduce: the fastest configuration (batch, GPUs) to the target within this many GPUs.")
@click.option("--deadline", type=Number(lo=0),
              help="With --allreduce: the cheapest configuration (GPU-hours) reaching the target within HOURS.")
@click.option("--predict-at", help="Predict B_crit at this target (or several) from the ladder of targets the sweep "
                                   "measured (default: every target `lbscale predict` trained a reference run to).")
def report(results, out, formats, metric, compare, target, allreduce, predict_gpus, gpu_budget, deadline,
           predict_at):
    """Tables and figures of the trials under RESULTS (one or more sweeps or trial directories)."""
    from lbscale.report import ReportOptions, write_report

    if (gpu_budget or deadline) and allreduce is None:
        raise LbscaleError("--gpu-budget and --deadline need --allreduce FILE (the fit `lbscale bench allreduce` "
                           "writes): time to target at GPU counts not run is predicted from it")
    fmts = tuple(f.strip() for f in formats.split(",") if f.strip())
    _, line = write_report(list(results), ReportOptions(out, fmts, metric, compare, target, allreduce,
                                                        predict_gpus, gpu_budget, deadline, predict_at))
    click.echo(line)


@cli.command()
@click.argument("trial", type=click.Path(path_type=Path))
@click.option("--data", "data_path", help="Prepared file (default: the trial's own --data).")
@click.option("--micro-batch", type=int, default=noise_measure.MICRO_BATCH, show_default=True,
              help="The small batch b.")
@click.option("--k", type=int, default=noise_measure.K, show_default=True,
              help="Micro-batches per big batch (B = k x b).")
@click.option("--groups", type=int, default=noise_measure.GROUPS, show_default=True, help="Measurements averaged.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--best", is_flag=True, help="TRIAL is a tuned sweep's results: measure each batch's best trial where "
                                           "it stopped at its target (the report's B_simple at the target).")
@quiet_option
def gns(trial, data_path, micro_batch, k, groups, seed, best):
    """Gradient noise scale B_simple of TRIAL's checkpoint: the predicted critical batch."""
    from lbscale.analysis.gns import GNS_FILE
    from lbscale.studies.gns import measure_trial

    if not best:
        r = measure_trial(trial, data_path, micro_batch, k, groups, seed)
        click.echo(f"gradient noise scale B_simple = {_gns_text(r, groups)} (predicted critical batch; |G|^2 "
                   f"{r['g2']:.4g}, tr(Sigma) {r['trace']:.4g}, {groups} groups of {k} x {micro_batch}); written to "
                   f"{trial / GNS_FILE}")
        return
    from lbscale.studies.pick import best_at_target

    trials = best_at_target(trial)
    if not trials:
        raise LbscaleError(f"{trial}: no batch's best trial stopped at its target (nothing to measure there: "
                           "run the sweep with stop_at_target)")
    for d in trials:
        r = measure_trial(d, data_path, micro_batch, k, groups, seed)
        click.echo(f"  {d.name} (step {r['step']:,}): B_simple = {_gns_text(r, groups)}")
    n = len(trials)
    click.echo(f"gradient noise scale at the target of the best trial{'s' if n != 1 else ''} of {n} "
               f"batch{'es' if n != 1 else ''} ({groups} groups of {k} x {micro_batch} each); written to each trial's "
               f"{GNS_FILE} (lbscale report {trial} shows them)")


def _gns_text(r: dict, groups: int) -> str:
    """B_simple with its interval, or why it has none."""
    from lbscale.analysis.gns import MIN_GROUPS

    b, lo, hi, iv = r["b_simple"], r["b_simple_lo"], r["b_simple_hi"], r["interval"]
    shown = f"{b:,.0f}" if b is not None else "undefined (|G|^2 estimate <= 0: measure more groups)"
    if iv is None:
        spread = (f"no interval from {groups} groups (--groups {MIN_GROUPS} or more)" if groups < MIN_GROUPS else
                  "no interval (the groups' tr(Sigma) estimates lie below zero, or one is not a number)")
    else:
        ends = f"[{lo:,.0f}, {f'{hi:,.0f}]' if hi is not None else 'inf)'}"
        spread = (f"{ends}: {iv['level']:.0%} {iv['method']}"
                  + ("; |G|^2 not resolved from zero: unbounded" if hi is None else ""))
    return f"{shown} {spread}"


@cli.command()
@click.argument("trial", type=click.Path(path_type=Path))
@click.option("--at", help="Kept checkpoints to branch from, by label (default: all of TRIAL's kept/; 'target': where "
                           "a trial stopped at its target).")
@click.option("--batch", type=int, help="TRIAL is a tuned sweep's results: branch from its best trial at this batch "
                                        "(and draw its B_crit, as --tuned would).")
@click.option("--factors", default="1,2,4,8,16", show_default=True, help="Batch factors k: branches at k x B.")
@click.option("--window", default="1ep", show_default=True,
              help="Samples each branch trains past its checkpoint: a number, or Nep (epochs of the train split).")
@click.option("--rule", default="auto", show_default=True,
              help="LR of a branch: the parent's x k (linear), x sqrt(k) (sqrt) or as it is (none); auto: "
                   "sqrt for Adam-like optimizers, linear for SGD-like ones.")
@click.option("--tolerance", type=Number(lo=0, lo_open=False), default=0.01, show_default=True,
              help="A batch is within when its loss is at most the smaller batches' best + this.")
@click.option("--eval-subset", type=int, help="Samples of the evaluation split every branch is evaluated on at "
                                              "the window's end (default: the parent's step subset, else 1,024; "
                                              "the whole split where it has no more).")
@click.option("--results", type=click.Path(path_type=Path), help="Where the branches go (default: TRIAL-branches "
                                                                  "beside TRIAL).")
@click.option("--ema", type=Number(lo=0, hi=1),
              help="Judge by the training loss's moving average over the window (decay per parent batch of samples, "
                   "e.g. 0.9) instead of the fixed subset's loss.")
@click.option("--repeats", type=int, default=1, show_default=True,
              help="Run every branch this many times, the data order and augmentation past the branch point re-drawn "
                   "per repeat (the same at every factor): the local critical batch gets a 90% interval from the "
                   "repeats' scatter (3 or more recommended); 1: the batches tried on either side.")
@click.option("--tuned", type=click.Path(path_type=Path), help="A tuned sweep's results on the same data: its "
                                                                "B_crit and interval drawn as a band.")
@click.option("--dry-run", is_flag=True, help="List the branches; run nothing.")
@click.option("--launcher", type=click.Choice(["local", "slurm"]), default="local", show_default=True,
              help="Run the branches here one after another, or as SLURM job arrays (srun per branch).")
@click.option("--system", default="generic", show_default=True, help="With slurm: the cluster profile.")
@click.option("--systems", "systems_file", help="With slurm: your own profiles file.")
@click.option("--wait", is_flag=True, help="With slurm: wait for the arrays, then write the table and figure.")
@click.option("--trial", "one", hidden=True, help="Inside an array task: the branch to run.")
@quiet_option
def branch(trial, at, batch, factors, window, rule, tolerance, eval_subset, results, ema, repeats, tuned, dry_run,
           launcher, system, systems_file, wait, one):
    """The local critical batch of TRIAL over training (Merrill et al. 2025): branches at k x B from its kept
    checkpoints, each training the same samples; the largest k x B that keeps up is the critical batch there."""
    from lbscale.studies.branch import BranchLaunch, BranchOptions, run_study

    if batch is not None:
        from lbscale.studies.pick import best_trial

        trial, tuned = best_trial(trial, batch), tuned or trial
    click.echo(run_study(trial, BranchOptions(at, factors, window, rule, tolerance, eval_subset, results, dry_run,
                                              tuned, ema, repeats),
                         BranchLaunch(launcher, system, systems_file, wait, one)))


@cli.command()
@click.argument("results", type=click.Path(path_type=Path))
@click.option("--batch", type=int, required=True,
              help="The reference batch: the schedule starts there, from RESULTS' best trial at it, trained again "
                   "with checkpoints kept at 1/8, 1/4 and 1/2 of its steps to the target.")
@click.option("--fraction", type=Number(lo=0, hi=1, hi_open=False), default=1.0, show_default=True,
              help="The batch grows to at most this share of the local critical batch's lower end (the largest "
                   "batch shown within the tolerance).")
@click.option("--repeats", type=int, default=3, show_default=True, help="Repeats per branch (the local critical "
                                                                        "batch's interval).")
@click.option("--factors", default="1,2,4,8,16", show_default=True, help="Branch factors k: branches at k x B.")
@click.option("--window", default="1ep", show_default=True, help="Samples each branch trains past its checkpoint.")
@click.option("--rule", default="tuned", show_default=True,
              help="The branches' LR: tuned (each batch's best LR in RESULTS, the LR the schedule gives it), or a "
                   "rule as lbscale branch's (auto, linear, sqrt, none).")
@click.option("--tolerance", type=Number(lo=0, lo_open=False), default=0.01, show_default=True,
              help="A batch is within when its loss is at most the smaller batches' best + this.")
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Seeds per arm of the check the spec runs.")
@click.option("--variant", help="The arm of RESULTS to schedule (needed where it has several).")
@click.option("--out", type=click.Path(path_type=Path),
              help="The check's spec (default RESULTS/schedule-bB/schedule.yaml).")
@click.option("--no-measure", "no_measure", is_flag=True,
              help="Derive from what is measured already; train nothing (seconds).")
@click.option("--force", is_flag=True, help="Measure again, and replace an existing --out.")
@quiet_option
def schedule(results, batch, fraction, repeats, factors, window, rule, tolerance, seeds, variant, out, no_measure,
             force):
    """A batch-size schedule from the critical batch over training: the local critical batch and B_simple at
    checkpoints of a reference run, B_crit at a ladder of targets, in one table and figure; the schedule that
    follows the local critical batch, each batch at RESULTS' tuned LR; and the spec that checks it against the
    best fixed batch and its own last batch."""
    from lbscale.studies.schedule import ScheduleOptions, run_schedule

    if repeats < 1:
        raise LbscaleError(f"--repeats {repeats}: at least 1 (3 or more give the local critical batch an interval)")
    click.echo(run_schedule(results, ScheduleOptions(batch, fraction, repeats, factors, window, rule, tolerance,
                                                     seeds, variant, out, not no_measure, force)))


@cli.command()
@click.argument("results", type=click.Path(path_type=Path))
@click.option("--at", "target", required=True, type=Number(), help="The target to predict B_crit at (where the "
              "real run ends), past the sweep's own.")
@click.option("--epochs", type=click.IntRange(min=1), help="The reference run's budget past its checkpoint "
              "(default: 8x its own epochs; it stops at the target).")
@click.option("--variant", help="The arm, where the sweep has several.")
@quiet_option
def predict(results, target, epochs, variant):
    """B_crit where training ends: trains RESULTS' reference run (its best trial at the smallest batch) on from
    its checkpoint to the target, measures B_simple there and at the sweep's own target, and predicts B_crit at
    the target from the ladder of targets the sweep measured (the report shows it too)."""
    from lbscale.studies.predict import PredictOptions, run_predict

    click.echo(run_predict(results, PredictOptions(target, epochs, variant)))


@cli.command(name="filter")
@click.option("--data", "data_path", required=True, help="Prepared multiclass file whose train split is filtered.")
@click.option("--checkpoint", help="Trial directory whose checkpointed network gives the features.")
@click.option("--model", help="Or a timm model name with --pretrained (timm's weights; needs them locally).")
@click.option("--pretrained", is_flag=True, help="With --model: timm's pretrained weights.")
@click.option("--out", required=True, help="The network-filtered prepared file (HDF5).")
@click.option("--reduce", "how", default="pca+tsne", show_default=True,
              help="pca+tsne (PCA to --pca-dims, t-SNE to 2-D), tsne, or pca (DBSCAN in the PCA space).")
@click.option("--pca-dims", type=int, default=50, show_default=True)
@click.option("--eps", type=float, help="DBSCAN eps (default: per class, the knee of the k-distance curve).")
@click.option("--min-samples", type=int, help="DBSCAN min_samples (default: 2 x the embedding's dimensions).")
@click.option("--random-control", help="Also write a random subset of exactly the same size per class.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--batch", type=int, default=256, show_default=True, help="Images per feature batch.")
@click.option("--device", default="auto", show_default=True, help="auto (a GPU when there is one), cpu, cuda.")
@click.option("--force", is_flag=True, help="Replace existing output files.")
@quiet_option
def filter_command(data_path, checkpoint, model, pretrained, out, how, pca_dims, eps, min_samples, random_control,
                   seed, batch, device, force):
    """Drop the train samples a network's feature space marks as noise (features -> PCA -> t-SNE -> DBSCAN
    per class), with a same-size random control."""
    import sys

    from lbscale.studies.filter import FilterOptions, run_filter

    o = FilterOptions(data=data_path, out=out, checkpoint=checkpoint, model=model, pretrained=pretrained,
                      reduce=how, pca_dims=pca_dims, eps=eps, min_samples=min_samples,
                      random_control=random_control, seed=seed, batch=batch, device=device, force=force)
    _, line = run_filter(o, command="lbscale " + " ".join(sys.argv[1:]))
    click.echo(line)


@cli.group()
def data():
    """Inspect prepared files."""


@data.command()
@click.argument("file", type=click.Path(path_type=Path))
def info(file):
    """Splits, shapes, classes, label histogram and band stats of a prepared FILE."""
    from lbscale.data.inspect import describe

    click.echo(describe(file))


@data.command()
@click.argument("file", type=click.Path(path_type=Path))
def check(file):
    """Validate a prepared FILE: checksums, shapes, dtypes, label ranges, no NaN, disjoint splits."""
    from lbscale.data.inspect import examine

    problems, notes = examine(file)
    for note in notes:
        click.echo(f"{file}: note: {note}")
    for problem in problems[:-1]:  # one line per problem; the last is the command's own error line
        click.echo(f"{ERROR_PREFIX}{file}: {problem}", err=True)
    if problems:
        raise LbscaleError(f"{file}: {problems[-1]}")
    click.echo(f"{file}: OK")


@cli.group()
def bench():
    """Measure the machine: the communication cost behind the scaling model (docs/scaling-model.md)."""


@bench.command()
@click.option("--procs", default="2,4", show_default=True, help="Process counts to measure, e.g. 2,4,8 (each >= 2).")
@click.option("--sizes", default="4K..64M", show_default=True,
              help="Message bytes (float32 tensors): a doubling range LO..HI or a list like 4K,1M,64M.")
@click.option("--repeats", type=int, default=20, show_default=True, help="Timed all-reduces per size (median).")
@click.option("--warmup", type=int, default=5, show_default=True, help="Untimed all-reduces before each size.")
@click.option("--backend", type=click.Choice(["nccl", "gloo"]), help="Default: nccl where there are GPUs, else gloo.")
@click.option("--system", default="local", show_default=True,
              help="A label for the machine (on a cluster: the sweep's profile name, e.g. jureca-dc).")
@click.option("--out", type=click.Path(path_type=Path), help="The JSON file (default allreduce-<system>.json).")
@click.option("--fit-procs", help="Fit on these process counts only and compare the prediction with the others, "
                                  "e.g. 2 (default: fit on all).")
@quiet_option
def allreduce(**options):
    """All-reduce time over message sizes and process counts, and the fitted ring model
    T = 2 (p-1) alpha + 2 (p-1)/p n beta. Starts torchrun here, or srun inside a SLURM allocation."""
    from lbscale.studies.allreduce import AllreduceOptions, run_allreduce_bench

    _, line = run_allreduce_bench(AllreduceOptions(**options))
    click.echo(line)


@cli.command()
@click.option("--system", help="A cluster profile to check: its values, and inside a job its rendezvous address.")
@click.option("--systems", "systems_file", type=click.Path(path_type=Path), help="Your own profiles (YAML).")
@click.option("--data", "data_path", type=click.Path(path_type=Path),
              help="A prepared file: its read rate through the loader against lbscale's target.")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Also write the results to this JSON file (for a support ticket).")
def doctor(**options):
    """Check this node: torch, CUDA, NCCL, GPUs, bf16, torch.compile, CUDA graphs, nvjpeg, an all-reduce, SLURM.
    Exits 1 where a check failed (skipped checks are not failures)."""
    from lbscale.doctor import DoctorOptions, run_doctor

    code = run_doctor(DoctorOptions(**options))
    if code:
        sys.exit(code)


def _terminate(signum, frame):
    # Turn SIGTERM into an exception so that `finally` blocks remove partial outputs.
    raise SystemExit(128 + signum)


# click >= 8.2 raises this for a group called without a command; older versions print help themselves.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv=None) -> int:
    """Entry point: user errors (and OSErrors a user causes) become one stderr line and exit code 2."""
    # before any command imports torch (train, gns, branch, filter, doctor, bench...): OpenMP reads its wait policy
    # once, when torch loads it, and its spinning threads slow a command beside other busy processes 2x and more
    prepare_process()
    signal.signal(signal.SIGTERM, _terminate)
    try:
        cli.main(args=argv, prog_name="lbscale", standalone_mode=False)
    except LbscaleError as e:
        click.echo(f"{ERROR_PREFIX}{e}", err=True)
        return 2
    except _NO_ARGS_IS_HELP as e:  # `lbscale` or `lbscale data` alone: show the help
        click.echo(e.format_message())
        return 0
    except click.UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx else ""
        click.echo(f"{ERROR_PREFIX}{e.format_message()}{hint}", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"{ERROR_PREFIX}{e.format_message()}", err=True)
        return 2
    except click.Abort as e:  # click's form of Ctrl-C: the interrupt's own message where it has one
        cause = e.__cause__
        click.echo(f"lbscale: {cause.args[0] if isinstance(cause, KeyboardInterrupt) and cause.args else 'aborted'}",
                   err=True)
        return 130
    except OSError as e:  # a full disk, a folder the user may not write: one line; any other is a bug
        line = os_error_line(e)
        if line is None:
            raise
        click.echo(f"{ERROR_PREFIX}{line}", err=True)
        return 2
    except SystemExit as e:  # a command's own exit code (e.g. 75: preempted, checkpointed)
        return e.code if isinstance(e.code, int) else 1
    except KeyboardInterrupt as e:
        click.echo(f"lbscale: {e.args[0] if e.args else 'interrupted'}", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
