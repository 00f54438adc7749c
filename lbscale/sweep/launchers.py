"""The launchers behind one interface (`launch(plans, run)`), by name: the CLI's choices come from here."""

from lbscale.sweep.launch import LocalLauncher
from lbscale.sweep.submit import SlurmLauncher

LAUNCHERS = {"local": LocalLauncher, "slurm": SlurmLauncher}
