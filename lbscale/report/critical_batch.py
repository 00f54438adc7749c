"""Views of the critical-batch fit (`steps_model.fit`) for other commands: a tuned study's B_crit per variant as
its report's verdict has it."""

from __future__ import annotations

import pandas as pd

from lbscale.errors import LbscaleError
from lbscale.report.options import tuned_study


def tuned_critical_batch(path) -> pd.DataFrame:
    """A tuned study's critical batch per variant, as its report's verdict has it (variant, b_crit, b_crit_lo,
    b_crit_hi, b_crit_kind, target): for a branch study's figure. One line where it is not one."""
    from lbscale.report import tuned, tuned_tables

    study, m, target, maximize = tuned_study(path, "no B_crit to draw")
    if target is None:
        raise LbscaleError(f"{path}: its trials have no target: no B_crit")
    outcomes = tuned.trial_outcomes(study.trials, study.steps, m, target, maximize)
    fits = tuned.fits_of(outcomes, target, maximize, level=tuned_tables.LEVEL)
    return fits[["variant", "b_crit", "b_crit_lo", "b_crit_hi", "b_crit_kind"]].assign(target=target)
