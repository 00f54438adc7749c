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
