"""The rounds of `sweep --until-resolved` as the report shows them: the table of what each round added and why,
and the verdict's line on how the rounds ended (stopped, still running, or interrupted)."""

from __future__ import annotations

import pandas as pd

from lbscale.analysis.intervals import LEVEL
from lbscale.report.load import Study
from lbscale.report.tables import Table


def study_rounds(study: Study) -> list[dict]:
    """The rounds of `sweep --until-resolved` recorded in the study's results directories (none without)."""
    from lbscale.sweep.rounds import read_rounds

    return [r for p in study.sources for r in read_rounds(p)]


def wall_spent(sources) -> tuple[float, float] | None:
    """(seconds spent, the wall budget) of a sweep run with a wall-clock budget and rounds: its running periods
    and its SLURM array tasks' (`sweep.budget.spent_seconds`), and the budget its last round recorded
    (`rounds.json`); None without either."""
    from lbscale.sweep.budget import recorded_periods, spent_seconds
    from lbscale.sweep.rounds import read_rounds

    for p in sources:
        rounds = read_rounds(p)
        budget = ((rounds or [{}])[-1].get("settings") or {}).get("wall")
        if budget and recorded_periods(p):
            return float(spent_seconds(p)), float(budget)
    return None


def _round_answer(answer: dict) -> str:
    from lbscale.analysis.rounds import answer_text

    return "; ".join(answer_text(a) if len(answer) == 1 else f"{arm}: {answer_text(a)}" for arm, a in answer.items())


def rounds_table(rounds: list[dict]) -> Table:
    """Each round of `sweep --until-resolved`: B_crit as fitted after it, what it added and why, or why it stopped."""
    from lbscale.analysis.rounds import describe

    rows = []
    for r in rounds:
        rows.append({"Round": r["round"], f"B_crit ({LEVEL:.0%} interval) before it": _round_answer(r["answer"]),
                     "Decision": r["stop"] or "; ".join(describe(r.get("added", []))),
                     "Trials added": sum(len(a["trials"]) for a in r.get("added", []))})
    notes = [f"{n} (round {r['round']})" for r in rounds for n in r.get("notes", [])]
    return Table("rounds", "Rounds (--until-resolved): what each round added, and why", pd.DataFrame(rows),
                 pd.DataFrame(rows), notes)


def sweep_running(study: Study) -> bool:
    """Whether a process or job still works on the study: a live sweep holds a results directory's lock, or a
    trial runs or waits in a SLURM queue."""
    from pathlib import Path

    from lbscale.sweep.lock import live_sweep

    return bool(study.trials["state"].isin(("running", "submitted")).any()) or any(
        live_sweep(Path(p)) for p in study.sources)


def rounds_line(rounds: list[dict], running: bool, wall: tuple[float, float] | None = None) -> str | None:
    """The verdict's line on the rounds: how many, and how they ended; where the last round's trials are not all
    in, whether a process or job (`running`, `sweep_running`) still works on them, the wall budget (`wall`:
    seconds spent, the budget; `wall_spent`) stopped the sweep, or it was stopped by hand."""
    if not rounds:
        return None
    last = rounds[-1]
    added = sum(len(a["trials"]) for r in rounds for a in r.get("added", []))
    if last["stop"] or running:
        end = last["stop"] or "still running (the last round's trials are not all in)"
    elif wall and wall[0] >= wall[1]:
        end = (f"wall budget spent ({wall[0] / 60:.1f} of {wall[1] / 60:.1f} min): the last round's trials are not "
               "all in; a rerun with a larger --wall goes on")
    else:
        end = ("interrupted (the last round's trials are not all in, and no sweep runs them: run the same command "
               "again to go on)")
    return f"Rounds (--until-resolved): {len(rounds)}, {added} trials added; {end}."
