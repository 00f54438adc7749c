"""The sweep's warning where a batch's budget in steps is below what perfect scaling from a batch that reached the
target requires (it cannot reach the target: steps never fall faster than 1 / B), by hand."""

from lbscale.sweep.budget import short_budgets


def test_a_budget_below_the_perfect_scaling_line_is_named_with_the_epochs_it_needs():
    reached = {("sgd", 64): 400}  # batch 64 took 400 steps: batch 1024 needs at least 400 * 64 / 1024 = 25
    budgets = {("sgd", 128): (300, 100), ("sgd", 512): (60, 20), ("sgd", 1024): (15, 5), ("lamb", 1024): (15, 5)}
    lines = short_budgets(reached, budgets)
    assert lines == ["sgd: batch 1024 trains 15 steps, below the 25 that perfect scaling from batch 64 (400 steps "
                     "to the target) requires: it cannot reach the target; give it at least 5 epochs x 25 / 15 "
                     "= 9 epochs"]


def test_the_tightest_line_counts_and_smaller_batches_are_not_judged():
    reached = {("a", 32): 1000, ("a", 64): 400, ("a", 256): 200}
    budgets = {("a", 32): (10, 1), ("a", 128): (150, 3), ("a", 512): (90, 3)}
    # 128: from 32: 250, from 64: 200 -> 250 > 150; 512: from 256: 100 > 90, from 32: 62.5
    lines = short_budgets(reached, budgets)
    assert [ln.split(" trains")[0] for ln in lines] == ["a: batch 128", "a: batch 512"]
    assert "below the 250 that perfect scaling from batch 32" in lines[0]
    assert "below the 100 that perfect scaling from batch 256" in lines[1]


def test_the_sweep_reads_the_reached_steps_from_its_summaries(tmp_path):
    """budget_warnings on a planned grid: batch 16 reached the target in 300 steps; batch 256's 2 epochs of a
    560-sample split are 4 steps, below 300 x 16 / 256 = 19."""
    import json

    from lbscale.sweep.plan import build_plan
    from lbscale.sweep.spec import load_sweep_spec
    from lbscale.sweep.budget import budget_warnings
    from lbscale.train.plan import resolve_plan

    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ndata: d.h5\nmodel: test_resnet\nepochs: 2\ntrial: {optimizer: sgd, base_lr: 0.1}\n"
                    "grid: {batch: [16, 256], gpus: [1]}\n")
    plans = build_plan(load_sweep_spec(spec), tmp_path / "r", 1)
    for p in plans:
        p.plan = resolve_plan(p.config, 1, 560)
        p.out.mkdir(parents=True)
    (plans[0].out / "summary.json").write_text(json.dumps({"status": "completed", "steps_to_target": 300}))
    assert [p.plan.total_steps for p in plans] == [70, 4]
    lines = budget_warnings(plans)
    assert len(lines) == 1 and lines[0].startswith("sgd-linear: batch 256 trains 4 steps, below the 19 that")
