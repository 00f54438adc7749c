"""The designed spec's text (`lbscale design`): every choice of analysis/design.py's `Design` with its measured
reason as a comment; the same design gives the same bytes."""

from __future__ import annotations

import math
from pathlib import Path

from lbscale.analysis import design as d
from lbscale.analysis import pilot as p
from lbscale.analysis.evaluations import NEAR_SE
from lbscale.analysis.lr_search import SEARCH_TRIALS
from lbscale.analysis.pricing import CONFIRM_TOP, EVAL_SHARE


def guess_words(plan: d.Plan, rec: p.PilotRecord) -> str:
    kind, b = plan.guess
    if kind == "none":
        return (f"the pilot ran no batch past {rec.mid} (it spent its limit): B_crit not guessed; the batches "
                f"centre on batch {rec.mid}")
    at = (f"samples to the target: {plan.s_mid:,.0f} at batch {rec.mid}, {plan.s_top:,.0f} at batch "
          f"{rec.largest}" + ("" if plan.reached_top else " (not reached in the pilot: 1.5x its samples)"))
    return {"value": f"B_crit ~ {b:,.0f} from the pilot's {at}",
            "above": f"B_crit > {b:,.0f} (no more samples at the larger batch) from the pilot's {at}",
            "below": f"B_crit < {b:,.0f} (no fewer steps at the larger batch) from the pilot's {at}"}[kind]


def bowl_text(bowl: dict) -> str:
    """The bowl as a YAML flow mapping (null where the LR did not reach the target)."""
    return "{" + ", ".join(f"{r:g}: {'null' if c is None else f'{c:g}'}" for r, c in bowl.items()) + "}"


def flow(mapping: dict, value=str) -> str:
    return "{" + ", ".join(f"{k}: {value(v)}" for k, v in mapping.items()) + "}"


def spec_text(o, facts: p.DataFacts, folder: Path, pilot: p.Pilot, chosen: d.Design, wall: float) -> str:
    """The spec, every choice with its measured reason; the same inputs give the same text."""
    from lbscale.train.optim import OPTIMIZERS

    plan, rec = chosen.plan, pilot.record
    ev, rung, batches = plan.eval, plan.rung, plan.batches
    chance, plateau = chosen.chance, chosen.level
    frac = (plan.target - chance) / (plateau - chance) if plateau > chance else math.nan
    top = batches[-1]
    trials = sum(len(s) for s in pilot.stages.values())
    lines = [
        f"# Designed by `lbscale design` from a pilot of {trials} trials ({folder}) on {o.data}, {o.model}.",
        "# Each value's comment gives the measurement it rests on; `lbscale design` with the same inputs writes",
        "# this file again byte for byte (--fresh measures again). Run: lbscale sweep THIS --until-resolved",
        f"name: {o.out.stem}",
        f"data: {o.data}",
        f"model: {o.model}",
        f"epochs: {flow(plan.epochs)}  # each batch's: {d.EPOCHS_X}x its predicted "
        f"samples to the target (design.samples_to_target) over the {facts.train:,}-image train split, at least 2; "
        "a point that misses the target is run again with twice its epochs",
        f"wall: {o.wall}  # the budget; the sweep spends what the pilot left ({chosen.left:.0f} s"
        + (" past the reference run's share" if chosen.long_run else "") + ")",
        "trial:",
        f"  optimizer: {o.optimizer}",
        *(["  momentum: 0.9"] if OPTIMIZERS[o.optimizer].has_momentum else []),
        f"  lr_scaling: {chosen.rule.value}  # {chosen.rule.why}",
        f"  ref_batch: {rec.mid}",
        "  schedule: constant  # as the pilot trained: the steps to a target measure the batch, not a decay",
        "  augment: false",
        "  last_batch: keep",
        f"  target_metric: {facts.metric}",
        f"  target: [{', '.join(f'{t:g}' for t in plan.ladder)}]  # the last is the study's: {chosen.how}: "
        f"{frac:.2f} of the way from chance ({chance:.3f}) to the pilot's plateau ({plateau:.3f}); the others a "
        f"ladder below it over the last {d.LADDER_SPAN:.0%} of the way, each checked on the whole split (B_crit "
        "against the target: the report's ladder)",
        "  stop_at_target: true",
        f"  eval_spacing: {ev.spacing:g}  # a crossing bracketed within {ev.spacing:.0%} of its steps",
        f"  eval_first: {flow(ev.first)}  # each batch's: a quarter of its predicted steps to the target (batch "
        f"{top}: {plan.samples[top] / top:,.0f})",
        f"  eval_batch: {p.EVAL_BATCH}  # evaluation keeps no activations: a large batch is cheap",
        f"  eval_subset: {ev.subset}  # step evaluations predicted at {ev.share:.1%} of the optimum's training "
        f"at batch {ev.share_at}, where they weigh most (at most {EVAL_SHARE:.0%}; "
        f"{rec.timing.eval_seconds:.3g} s for {rec.timing.eval_samples:,} images); a value near the "
        "target is checked on the whole split"
        + ("" if ev.share <= EVAL_SHARE else
           f"; none tried fits {EVAL_SHARE:.0%}: the crossing's own check of the whole split costs "
           f"{ev.floor[0]:.1%} of the optimum's training at batch {ev.floor[1]}"),
    ]
    if rung.value:
        lines += [f"  prune: asha  # {rung.why}", f"  prune_min_samples: {rung.value}", "  prune_eta: 3"]
    else:
        lines += [f"  prune: none  # {rung.why}"]
    return "\n".join(lines + grid_lines(folder, pilot, chosen, wall)) + "\n"


def grid_lines(folder: Path, pilot: p.Pilot, chosen: d.Design, wall: float) -> list[str]:
    """The spec's grid (batches, the LR search) and its design block (what the pilot measured and used)."""
    plan, rec, lr_range = chosen.plan, pilot.record, chosen.plan.lr_range
    batches, ev = plan.batches, plan.eval
    return [
        "grid:",
        f"  batch: {batches[0]}..{batches[-1]}  # {guess_words(plan, rec)}: from a quarter of it up"
        + ("" if len(batches) >= 5 else f"; the budget pays for {len(batches)} batches"),
        "  gpus: [1]",
        "  search:",
        f"    trials: {plan.points}" + ("" if plan.points == SEARCH_TRIALS else
                                       f"  # {SEARCH_TRIALS} cut to {plan.points}: the budget pays for no more"),
        "    sampler: halton",
        f"    base_lr: {{loguniform: [{lr_range.value[0]:g}, {lr_range.value[1]:g}]}}  # {lr_range.why}",
        f"    confirm: {{top: {plan.confirm}, seeds: 1}}" + ("" if plan.confirm == CONFIRM_TOP else
                                                            "  # the best point alone: the budget pays for no more"),
        "design:  # what the pilot measured and used",
        f"  pilot: {folder}",
        f"  pilot_seconds: {rec.seconds:g}",
        f"  wall_seconds: {wall:g}",
        f"  grid_seconds_predicted: {plan.seconds:.0f}  # the grid and its confirmation, stopped at the target"
        + ("" if plan.fits else f"; over its share ({d.GRID_SHARE:.0%} of what the pilot left)"),
        f"  seconds_per_sample: {flow(dict(sorted(pilot.costs.per_sample.items())), lambda c: f'{c:.3g}')}",
        f"  startup_seconds: {rec.timing.startup:.3g}",
        f"  near_from: {ev.near:.3g}  # a {ev.subset:,}-image subset's value comes within {NEAR_SE:g} standard "
        "errors of the target (the whole split checks it) from this share of the steps to it on (the pilot's curve)",
        f"  bowl_lr: {plan.bowl_lr:.4g}  # the pilot's LR fastest to the target at batch {rec.mid}: the "
        "bowl's centre",
        f"  bowl: {bowl_text(plan.bowl)}  # LR / bowl_lr -> samples to the target / the fastest's, measured by "
        "the pilot (null: not reached there): what --estimate prices each search point by",
        f"  samples_to_target: {flow(plan.samples, lambda e: f'{e:.0f}')}  # predicted "
        "from the pilot (McCandlish et al.'s E(B) through its two batches): what --estimate prices",
        f"  host: {rec.host}  # where the pilot ran: its times hold there",
        *long_run_lines(chosen, plan),
    ]


def long_run_lines(chosen: d.Design, plan: d.Plan) -> list[str]:
    """The design block's lines on where B_crit is predicted and what is set aside for it."""
    run = chosen.long_run
    if run is None:
        return []
    stretch = (f"the pilot's best curve took {run.stretch:.1f}x the samples to it" if run.stretch else
               "the pilot's curve did not reach it: priced at the most the law is checked to")
    return [f"  for_target: {run.target:g}  # B_crit predicted there ({run.how}): lbscale predict RESULTS --at "
            f"{run.target:g} trains the best trial at the smallest batch on from {plan.target:g} (the reference run) "
            "and measures B_simple at both ends; the law over the ladder's B_crit and B_simple there each predict "
            f"it ({stretch})",
            f"  reserved_seconds: {run.seconds:.0f}  # the reference run's price at batch {run.batch} "
            f"(about {run.samples:,.0f} samples and two noise-scale measurements), set aside from the sweep's "
            "budget"]
