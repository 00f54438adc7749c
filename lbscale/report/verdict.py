"""The verdict's lines: a rule-based study's headline (the best metric per variant and how far it holds), a tuned
study's lines (the critical batch and alpha per variant, with what decided them)."""

from __future__ import annotations

from lbscale.report.load import Study


def headline(study: Study, metric: str, tolerance: float = 0.01) -> str:
    """Per variant: the best mean metric (highest, or lowest for a loss: the task says), and the largest batch
    that stays within `tolerance` of it."""
    from lbscale.report.tables import batch_label, metric_label

    t = study.trials[study.trials["state"] == "completed"]
    col = f"final_{metric}"
    if col not in t or t[col].dropna().empty:
        return "no completed trial yet"
    parts = []
    arms = t["variant"].fillna("-")  # warm-up arms apart where the study has several, as its tables keep them
    if study.varies("warmup"):
        arms = arms + " warm-up " + t["warmup"].fillna("-").astype(str)
    for variant, g in t.groupby(arms, sort=True):
        g = g.dropna(subset=[col])
        if g.empty:
            parts.append(f"{variant}: no completed trial with {metric}")
            continue
        per = g.groupby("global_batch").agg(mean=(col, "mean"), n=(col, "size"), seeds=("seed", "nunique"))
        means = per["mean"]
        if study.task.higher_is_better(metric):
            best_b, ok = means.idxmax(), means[means >= means.max() - tolerance]
        else:
            best_b, ok = means.idxmin(), means[means <= means.min() + tolerance]
        n, seeds = int(per.at[best_b, "n"]), int(per.at[best_b, "seeds"])
        basis = ("1 seed" if n == 1 else f"mean of {n} seeds" if seeds == n else
                 f"mean of {n} trials of {seeds} seed{'s' if seeds > 1 else ''}")
        value = f"{metric_label(metric).lower()} {means[best_b]:.3f} at {batch_label(best_b)} ({basis})"
        if len(means) == 1:
            parts.append(f"{variant}: {value}; one batch completed, none to compare it with")
        else:
            parts.append(f"{variant}: best {value}, holds within {tolerance:g} up to {batch_label(ok.index.max())} "
                         f"({len(means)} batches completed)")
    return "; ".join(parts)


def joined(*lines) -> str | None:
    """The lines that are given, joined by '; '; None where none is."""
    kept = [x for x in lines if x]
    return "; ".join(kept) if kept else None


def tuned_verdict(a) -> list[str]:
    """A tuned study's verdict (`analysed.Analysis`): per variant its B_crit and alpha, the arms' ratios, trials
    pruned at chance and rungs that could not tell their trials apart, B_crit per target, the recommendation,
    the evaluations' share of the time, the rounds."""
    from lbscale.report import rounds_tables, tuned, tuned_tables
    from lbscale.report.critical_batch import arm_ratios

    o = a.optima
    trials = a.study.trials
    longer = trials[tuned.superseded(trials)]["variant"].fillna("-").value_counts() if "variant" in trials else {}
    searches = {v: {"points": int(g["points"].max()), "seeds": int(g["seeds"].max()),
                    "superseded": int(longer.get(v, 0))}
                for v, g in o.groupby(o["variant"].fillna("-"))} if len(o) else {}
    lines = tuned_tables.verdict(a.fits, a.metric, a.target, searches, a.at_target, a.ladders) \
        + tuned_tables.ratio_lines(arm_ratios(a.models))
    per_target = None
    if a.by_target:
        per_target = tuned_tables.per_target_line({**{t: f for t, (f, _) in a.by_target.items()}, a.target: a.fits},
                                                  a.metric)
    rounds = (rounds_tables.rounds_line(a.rounds, rounds_tables.sweep_running(a.study),
                                        rounds_tables.wall_spent(a.study.sources)) if a.rounds else None)
    halving = [tuned_tables.chance_line(*tuned.pruned_at_chance(trials, a.study.task)),
               *tuned_tables.undecided_lines(tuned.undecided_rungs(trials, a.study.task))]
    more = [per_target, a.advice, tuned_tables.eval_share_line(a.study.epochs), rounds]
    return lines + [x for x in halving + more if x]
