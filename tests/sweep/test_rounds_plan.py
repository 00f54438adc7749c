"""A round's actions as trials (sweep.rounds.realise, trials_of), without training: a new batch is the spec's grid
there, an LR past an edge is a new point with base_lr scaled, more seeds are the point's next seeds, a longer budget
the point with twice the epochs; the ids stable and the trials unpruned."""

from lbscale.analysis.rounds import Action
from lbscale.sweep.plan import build_plan
from lbscale.sweep.rounds import realise, trials_of
from lbscale.sweep.spec import load_sweep_spec
from lbscale.train.plan import resolve_plan

SPEC = """name: s
data: d.h5
model: test_resnet
epochs: 2
trial: {optimizer: sgd, lr_scaling: none, target_metric: val_top1, target: 0.5, prune: asha, prune_min_samples: 64}
grid:
  batch: [16, 32]
  gpus: [1]
  search: {base_lr: [0.01, 0.1]}
"""


def test_actions_become_trials(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SPEC)
    spec = load_sweep_spec(path)
    results = tmp_path / "r"
    plans = build_plan(spec, results, 1)
    for p in plans:
        p.plan = resolve_plan(p.config, 1, 560)
    actions = [Action("batch", 64, "open above"), Action("lr", 32, "edge", key="b32-g1-sgd-none-p1", lr=0.3),
               Action("seeds", 16, "wide", key="b16-g1-sgd-none-p0", seeds=2),
               Action("budget", 32, "short", key="b32-g1-sgd-none-p0-s0")]
    added = realise(spec, plans, actions, results, 1, {})
    assert [t["id"] for a in added for t in a["trials"]] == [
        "b64-g1-sgd-none-p0-s0", "b64-g1-sgd-none-p1-s0", "b32-g1-sgd-none-p2-s0", "b16-g1-sgd-none-p0-s1",
        "b16-g1-sgd-none-p0-s2", "b32-g1-sgd-none-p0-e4-s0"]
    new = trials_of(spec, plans, added, results, 1, {}, 1)
    by = {p.trial_id: p for p in new}
    lr = by["b32-g1-sgd-none-p2-s0"]
    assert lr.config.base_lr == 0.3 and lr.plan.peak_lr == 0.3 and lr.point == 2 and lr.search == {"base_lr": 0.3}
    assert lr.config.prune == "none" and lr.config.prune_min_samples is None and not lr.confirms
    seed = by["b16-g1-sgd-none-p0-s2"]
    assert (seed.config.seed, seed.config.base_lr, seed.config.prune, seed.confirms) == (2, 0.01, "none", True)
    batch = by["b64-g1-sgd-none-p1-s0"]
    assert batch.config.prune == "asha" and batch.peers == ("b64-g1-sgd-none-p0-s0",)  # the grid's own halving
    longer = by["b32-g1-sgd-none-p0-e4-s0"]  # 2 epochs doubled; 560 / 32 = 17 steps an epoch
    assert (longer.config.epochs, longer.plan.total_steps, longer.config.base_lr, longer.point) == (4, 68, 0.01, 0)
    assert longer.config.prune == "none" and not longer.confirms
    assert all(p.round == 1 and str(p.out).startswith(str(results)) for p in new)
    assert all(p.axes()["round"] == 1 for p in new)


def test_a_longer_budget_extends_the_trial_it_names(tmp_path):
    """A budget action names a trial: its seed runs with twice that trial's epochs, and a longer run that missed
    too runs with twice its own (e4 -> e8), never the short one again under a seed it does not have."""
    path = tmp_path / "s.yaml"
    path.write_text(SPEC.replace("grid:", "grid:\n  seeds: 2"))
    spec = load_sweep_spec(path)
    results = tmp_path / "r"
    plans = build_plan(spec, results, 1)
    for p in plans:
        p.plan = resolve_plan(p.config, 1, 560)
    added = realise(spec, plans, [Action("budget", 32, "short", key="b32-g1-sgd-none-p0-s1")], results, 1, {})
    assert added[0]["trials"] == [{"id": "b32-g1-sgd-none-p0-e4-s1", "from": "b32-g1-sgd-none-p0-s1", "epochs": 4}]
    (longer,) = trials_of(spec, plans, added, results, 1, {}, 1)
    assert (longer.config.seed, longer.config.epochs, longer.point) == (1, 4, 0)
    again = realise(spec, plans + [longer], [Action("budget", 32, "short", key="b32-g1-sgd-none-p0-e4-s1")],
                    results, 1, {})
    assert again[0]["trials"] == [{"id": "b32-g1-sgd-none-p0-e8-s1", "from": "b32-g1-sgd-none-p0-e4-s1",
                                   "epochs": 8}]
