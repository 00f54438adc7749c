"""The `lbscale` command line: each command parses its options and calls one function."""

from __future__ import annotations

import signal
import shlex
import sys
from pathlib import Path

import click

from lbscale.errors import LbscaleError
from lbscale.progress import set_quiet


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
    """Batch-size scaling studies: prepare datasets, train trials, sweep grids, report."""


@cli.command()
@click.argument("dataset", type=click.Choice(["sat4", "sat6", "bigearthnet", "cifar10", "eurosat", "synthetic"]))
@click.option("--src", type=click.Path(path_type=Path), help="Raw dataset file or folder (not for synthetic).")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Prepared HDF5 file or TFRecord dir.")
@click.option("--format", "fmt", type=click.Choice(["hdf5", "tfrecord"]), default="hdf5", show_default=True)
@click.option("--val-fraction", type=float, default=0.1, show_default=True,
              help="Share of train carved out as a stratified, seeded val split where the source has none.")
@click.option("--test-fraction", type=float, default=0.2, show_default=True,
              help="Share carved out as test where the source has no test split (EuroSAT, synthetic).")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Reader processes beside the writing process (BigEarthNet, EuroSAT); 0 reads in-process.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--force", is_flag=True, help="Replace an existing output.")
@click.option("--count", type=int, default=6000, show_default=True, help="synthetic: samples in all splits.")
@click.option("--bands", type=int, default=4, show_default=True, help="synthetic: spectral bands.")
@click.option("--size", type=int, default=32, show_default=True, help="synthetic: image side in pixels.")
@click.option("--classes", type=int, default=6, show_default=True, help="synthetic: classes.")
@click.option("--task", type=click.Choice(["multiclass", "multilabel"]), default="multiclass", show_default=True,
              help="synthetic: one class per image or a mosaic of 1-3.")
@click.option("--label-noise", type=float, default=0.0, show_default=True,
              help="synthetic: fraction of train labels flipped (recorded in /train/noisy).")
@quiet_option
def prepare(dataset, src, out, fmt, val_fraction, test_fraction, workers, seed, force, count, bands, size, classes,
            task, label_noise):
    """Convert DATASET from --src into a prepared HDF5 file (or TFRecord shards) at --out."""
    from lbscale.data.prepare import prepare as run_prepare

    if workers < 0:
        raise LbscaleError("--workers must be >= 0")
    synthetic = dict(count=count, bands=bands, size=size, classes=classes, task=task, label_noise=label_noise)
    counts = run_prepare(dataset, src, out, fmt, val_fraction, test_fraction, seed, workers, force,
                         command=shlex.join(["lbscale", *sys.argv[1:]]),
                         **(synthetic if dataset == "synthetic" else {}))
    click.echo(f"wrote {out}: " + ", ".join(f"{s} {n}" for s, n in counts.items()))


def _trial_options(fn):
    """One CLI option per TrialConfig field (None = not given, so YAML values stand)."""
    from lbscale.config import FIELDS

    for name in reversed(list(FIELDS)):
        f = FIELDS[name]
        flag = name.replace("_", "-")
        if f.type == "bool":
            fn = click.option(f"--{flag}/--no-{flag}", name, default=None, help=f.metadata["help"])(fn)
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
    from lbscale.config import load_config
    from lbscale.train.trial import run_trial

    code = run_trial(load_config(config_path, **options))
    if code:
        sys.exit(code)


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
    """Validate a prepared FILE: shapes, dtypes, label ranges, no NaN, disjoint splits."""
    from lbscale.data.inspect import check as run_check

    problems = run_check(file)
    if problems:
        raise LbscaleError(f"{file}: " + "; ".join(problems))
    click.echo(f"{file}: OK")


def _terminate(signum, frame):
    # Turn SIGTERM into an exception so that `finally` blocks remove partial outputs.
    raise SystemExit(128 + signum)


# click >= 8.2 raises this for a group called without a command; older versions print help themselves.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv=None) -> int:
    """Entry point: user errors become one stderr line and exit code 2."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        cli.main(args=argv, prog_name="lbscale", standalone_mode=False)
    except LbscaleError as e:
        click.echo(f"lbscale: error: {e}", err=True)
        return 2
    except _NO_ARGS_IS_HELP as e:  # `lbscale` or `lbscale data` alone: show the help
        click.echo(e.format_message())
        return 0
    except click.UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx else ""
        click.echo(f"lbscale: error: {e.format_message()}{hint}", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"lbscale: error: {e.format_message()}", err=True)
        return 2
    except click.Abort:
        click.echo("lbscale: aborted", err=True)
        return 130
    except SystemExit as e:  # a command's own exit code (e.g. 75: preempted, checkpointed)
        return e.code if isinstance(e.code, int) else 1
    except KeyboardInterrupt:
        click.echo("lbscale: interrupted", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
