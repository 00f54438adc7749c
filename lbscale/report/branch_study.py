"""A branch study as the report reads it: `lbscale branch TRIAL` writes one trial directory per branch and its
answer, the table critical-batch.csv (per branch: the checkpoint, the parent's samples and step there, factor,
batch, loss; per checkpoint: the local critical batch and why). The report reads that table, never the branch
command itself: a branch study's own report (`lbscale report FOLDER`) is its local critical batch per checkpoint,
and a sweep's report sets the one at its target beside its other estimates (`report.estimates`).

The interval of a local critical batch is the batches tried on either side: the true value lies between the
largest batch that kept up and the next one tried, which did not; only a lower end where every factor kept up,
only an upper end where only the parent's own batch did (the parent may already train past it)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd

from lbscale.errors import LbscaleError
from lbscale.report.numbers import estimate_cell, number, whole
from lbscale.report.tables import Table

BRANCH_TABLE = "critical-batch.csv"  # lbscale branch's table (its TABLE)
EVERY = "every factor"  # how the table's `why` begins where every factor kept up (`analysis.critical`)


def branch_studies(results: list[str], trials: set = frozenset()) -> list[Path]:
    """The branch studies kept with a sweep's results: folders one level down holding `lbscale branch`'s table
    (`lbscale branch TRIAL` writes TRIAL-branches beside TRIAL, so inside the sweep's results); the sweep's own
    trial directories (`trials`, by name) are not looked into."""
    found = []
    for r in map(Path, results):
        if r.is_dir():
            with os.scandir(r) as entries:  # the file type from the listing: no stat per trial directory
                dirs = [e.name for e in entries if e.is_dir() and e.name not in trials]
            found += sorted(r / d for d in dirs if (r / d / BRANCH_TABLE).is_file())
    return found


def bracket(table: pd.DataFrame, at: pd.Series) -> dict:
    """The local critical batch of checkpoint row `at` with its interval: from the repeats' scatter where lbscale
    branch --repeats wrote one (`critical_kind`), else the batches tried there."""
    tried = sorted(table.loc[table["checkpoint"] == at["checkpoint"], "batch"].unique())
    value = float(at["critical_batch"])
    above = [b for b in tried if b > value]
    repeats = _repeats(at)
    if isinstance(at.get("critical_kind"), str):
        lo, hi, kind = float(at["critical_lo"]), float(at["critical_hi"]), at["critical_kind"]
    elif str(at["why"]).startswith(EVERY):
        lo, hi, kind = value, math.inf, "lower"
    elif value <= tried[0]:
        lo, hi, kind = 0.0, float(above[0]), "upper"
    else:
        lo, hi, kind = value, float(above[0]), "interval"
    return {"value": value, "lo": lo, "hi": hi, "kind": kind, "checkpoint": at["checkpoint"],
            "parent_step": int(at["parent_step"]), "samples": at.get("samples"), "repeats": repeats}


def _repeats(at: pd.Series) -> int:
    """The repeats per batch a checkpoint's answer rests on (1: a table of an lbscale before --repeats)."""
    return int(at["repeats"]) if pd.notna(at.get("repeats")) else 1


def _unresolved(at: pd.Series) -> dict:
    return {"value": None, "lo": None, "hi": None, "kind": "none", "checkpoint": at["checkpoint"],
            "parent_step": int(at["parent_step"]), "samples": at.get("samples"), "repeats": _repeats(at)}


def local_at(table: pd.DataFrame, step: float | None) -> dict | None:
    """The branch study's local critical batch at the checkpoint nearest `step` of the parent (its last one
    where `step` is unknown), with its interval (`bracket`); kind none where the repeats did not resolve it there
    (never another checkpoint's in its place)."""
    per = table.drop_duplicates("checkpoint")
    if per.empty or per["critical_batch"].isna().all():
        return None
    at = per.iloc[(per["parent_step"] - step).abs().argsort().iloc[0]] if step is not None else per.iloc[-1]
    return bracket(table, at) if pd.notna(at["critical_batch"]) else _unresolved(at)


def folders(study, o) -> list[Path]:
    """The branch studies a report was given (each a folder holding `lbscale branch`'s table), or [] for any other
    results; one line where a branch study comes with other results or with an option it has no use for, or where
    its branches ran but `lbscale branch` has not written its table yet."""
    given = [Path(p) for p in study.sources]
    found = [p for p in given if (p / BRANCH_TABLE).is_file()]
    if not found:
        if "sweep" in study.trials and len(study.trials) and (study.trials["sweep"] == "branch").all():
            raise LbscaleError(f"{given[0]}: branches without {BRANCH_TABLE} yet: run the same `lbscale branch` "
                               "again once they end; it writes the table and critical-batch.png there")
        return []
    if len(found) < len(given):
        raise LbscaleError(f"{found[0]}: a branch study (lbscale branch's {BRANCH_TABLE}); report it on its own")
    for option, given_value in (("--target", o.target), ("--compare", o.compare), ("--allreduce", o.allreduce),
                                ("--metric", None if o.metric == "auto" else o.metric)):
        if given_value is not None:
            raise LbscaleError(f"{option}: a branch study is judged by the loss its branches recorded in "
                               f"{BRANCH_TABLE} at each checkpoint, not by a target or a metric")
    return found


def read(found: list[Path]) -> pd.DataFrame:
    """The branch studies' tables, one row per branch; `parent` names the parent trial."""
    frames = []
    for f in found:
        try:
            t = pd.read_csv(f / BRANCH_TABLE)
        except (ValueError, pd.errors.ParserError) as e:
            raise LbscaleError(f"{f / BRANCH_TABLE}: not a readable CSV ({e})") from None
        missing = {"checkpoint", "batch", "parent_step", "critical_batch", "why"} - set(t)
        if missing:
            raise LbscaleError(f"{f / BRANCH_TABLE}: not lbscale branch's table (no {sorted(missing)[0]} column)")
        frames.append(t.assign(parent=t["parent"] if "parent" in t else f.name.removesuffix("-branches")))
    return pd.concat(frames, ignore_index=True)


def per_checkpoint(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (parent, checkpoint), in the table's order: the local critical batch with its interval (`bracket`)
    and why; a checkpoint without one (no branch with a loss) keeps its why and no value."""
    out = []
    for parent, table in rows.groupby("parent", sort=False):
        for _, at in table.drop_duplicates("checkpoint").iterrows():
            got = bracket(table, at) if pd.notna(at["critical_batch"]) else _unresolved(at)
            out.append({"parent": parent, "checkpoint": got["checkpoint"], "samples": got["samples"],
                        "parent_step": got["parent_step"], "critical_batch": got["value"], "lo": got["lo"],
                        "hi": got["hi"], "kind": got["kind"], "repeats": got["repeats"], "why": at["why"]})
    return pd.DataFrame(out)


def _count(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{int(v):,}"


def cell(r) -> str:
    return estimate_cell(r["critical_batch"], r["lo"], r["hi"], r["kind"], whole)


def local_table(local: pd.DataFrame) -> Table:
    """The local critical batch per checkpoint of the parent, with its interval."""
    several = local["parent"].nunique() > 1
    disp = [{**({"Parent": r["parent"]} if several else {}), "Checkpoint": r["checkpoint"],
             "Parent's samples": _count(r["samples"]), "Parent's step": int(r["parent_step"]),
             "Local critical batch": cell(r), "Why": r["why"]} for _, r in local.iterrows()]
    return Table("local-critical-batch", "Local critical batch over the parent's training", pd.DataFrame(disp),
                 local, ["Merrill et al. 2025: from each checkpoint, branches train k times the parent's batch for "
                         "the same samples; the local critical batch is the largest that keeps within the "
                         "tolerance of the smaller batches' best loss",
                         "[lo, hi] with --repeats: the largest batch within the tolerance and the smallest "
                         "larger one past it, each at 95% one-sided over the repeats (paired t intervals of each "
                         "batch's excess loss): together a 90% interval",
                         "[lo, hi] without repeats: the batches tried on either side (a grid of factors, not a "
                         "statistical interval); '> x' where every factor kept up, '< x' where only the parent's "
                         "own batch did"])


def branches_table(rows: pd.DataFrame) -> Table:
    """Every branch: its checkpoint, factor, batch, LR, loss at the window's end, steps and state."""
    several = rows["parent"].nunique() > 1
    ema = "train_loss_ema" in rows and rows["train_loss_ema"].notna().any()
    repeated = "repeat" in rows and (rows["repeat"].fillna(0) > 0).any()
    disp = [{**({"Parent": r["parent"]} if several else {}), "Checkpoint": r["checkpoint"],
             "Factor": _count(r.get("factor")), "Batch": int(r["batch"]),
             **({"Repeat": _count(r["repeat"])} if repeated else {}), "LR": f"{r['lr']:.4g}" if "lr" in r else "-",
             "Loss": number(r.get("loss")), **({"Training loss (EMA)": number(r["train_loss_ema"])} if ema else {}),
             "Steps": _count(r.get("steps")), "State": r.get("status", "-")} for _, r in rows.iterrows()]
    return Table("branches", "Branches: the loss at the end of each window", pd.DataFrame(disp), rows)


def judged_by(rows: pd.DataFrame) -> str:
    """The report's line on what decided the answer: the loss the branches recorded, and the table it is read
    from."""
    ema = "train_loss_ema" in rows and rows["train_loss_ema"].notna().any()
    return ("the training loss's moving average" if ema else "the loss on a fixed subset of the evaluation split") \
        + f" at each branch's window end, as lbscale branch recorded it in {BRANCH_TABLE}"


def verdict(local: pd.DataFrame) -> list[str]:
    """One line per parent: its local critical batch at each checkpoint."""
    return [f"Local critical batch of {parent}: " + ", ".join(f"{r['checkpoint']} {cell(r)}" for _, r in g.iterrows())
            for parent, g in local.groupby("parent", sort=False)]


def figure(local: pd.DataFrame, rows: pd.DataFrame):
    """The local critical batch against the parent's samples at each checkpoint: a point with its interval where
    both ends are bounded, an open triangle at a bound's end (up: at least, down: below)."""
    import matplotlib.pyplot as plt

    tried = sorted(rows["batch"].unique())
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (parent, g) in enumerate(local.dropna(subset=["critical_batch"]).groupby("parent", sort=False)):
        color = f"C{i}"
        ax.plot(g["samples"], g["critical_batch"].where(g["kind"] == "interval"), color=color, lw=1)
        for _, r in g.iterrows():
            lo = r["lo"] if r["lo"] > 0 else tried[0] / 1.5
            hi = r["hi"] if math.isfinite(r["hi"]) else tried[-1] * 1.5
            ax.plot([r["samples"]] * 2, [lo, hi], color=color, lw=3, alpha=0.3)
            # a bound: an open triangle at its end (pointing the open way), never a point inside it
            at, marker = {"lower": (r["lo"], "^"), "upper": (r["hi"], "v")}.get(r["kind"], (r["critical_batch"], "o"))
            ax.plot([r["samples"]], [at], marker, color=color, mfc=color if marker == "o" else "none")
        band = (f"its 90% interval over {int(g['repeats'].max())} repeats" if g["repeats"].max() > 1
                else "the batches tried on either side")
        ax.plot([], [], "o-", color=color, label=f"{parent} (band: {band})")
    ax.set_yscale("log", base=2)
    ax.set_ylim(tried[0] / 1.5, tried[-1] * 1.5)
    ax.set_yticks(tried, [f"{b:,}" for b in tried])
    ax.set_xlabel("training samples seen by the parent at the branch point")
    ax.set_ylabel("local critical batch")
    ax.set_title("Local critical batch over training (open triangles: bounds, up: at least, down: below)",
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
