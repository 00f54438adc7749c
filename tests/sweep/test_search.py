"""grid.search: the sampled points against scipy.stats.qmc used directly, stable ids, the dry-run listing, the
prune group per cell, plain lists as a grid, and bad search specs as one line."""

import math

import numpy as np
import pytest
from scipy.stats import qmc

from lbscale.errors import LbscaleError
from lbscale.sweep.plan import build_plan, plan_table
from lbscale.sweep.spec import load_sweep_spec

SPEC = """
name: tuned
data: none.h5
model: test_resnet
epochs: 2
trial: {optimizer: sgd, lr_scaling: none, prune: asha, prune_min_steps: 4}
grid:
  batch: [32, 64]
  gpus: [1]
  variants:
    sgd: {optimizer: sgd}
    nesterov: {optimizer: nesterov}
  search:
    trials: 4
    sampler: SAMPLER
    seed: 7
    base_lr: {loguniform: [1.0e-3, 10]}
    momentum: {one_minus_loguniform: [1.0e-3, 0.3]}
    warmup_epochs: {choice: [0, 2, 5]}
    weight_decay: [1.0e-4, 5.0e-4]
"""


def _plans(tmp_path, sampler="sobol", text=SPEC):
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("SAMPLER", sampler))
    return build_plan(load_sweep_spec(path), tmp_path / "results", 4)


def _reference(sampler, n=4, d=3, seed=7):
    if sampler == "random":
        return np.random.default_rng(seed).random((n, d))
    engine = {"sobol": qmc.Sobol, "halton": qmc.Halton}[sampler]
    try:
        return engine(d, scramble=True, rng=seed).random(n)
    except TypeError:
        return engine(d, scramble=True, seed=seed).random(n)


@pytest.mark.parametrize("sampler", ["sobol", "halton", "random"])
def test_points_are_the_samplers_draws_mapped_by_hand(tmp_path, sampler):
    plans = _plans(tmp_path, sampler)
    assert len(plans) == 2 * 2 * 4 * 2  # batches x variants x draws x weight decays (1 seed)
    u = _reference(sampler)
    cell = [p for p in plans if p.trial_id.startswith("b32-g1-sgd-")]
    for k in range(4):
        lr = 10 ** (math.log10(1e-3) + u[k, 0] * (math.log10(10) - math.log10(1e-3)))
        momentum = 1 - 10 ** (math.log10(1e-3) + u[k, 1] * (math.log10(0.3) - math.log10(1e-3)))
        warmup = [0, 2, 5][int(u[k, 2] * 3)]
        for j, wd in enumerate([1e-4, 5e-4]):
            p = cell[2 * k + j]
            assert p.trial_id == f"b32-g1-sgd-p{2 * k + j}-s0" and p.point == 2 * k + j
            assert p.config.base_lr == pytest.approx(lr, rel=1e-3) and p.config.momentum == pytest.approx(momentum,
                                                                                                        rel=1e-3)
            assert float(p.config.warmup_epochs) == warmup and p.config.weight_decay == wd
            assert p.search == {"base_lr": p.config.base_lr, "momentum": p.config.momentum,
                                "warmup_epochs": warmup, "weight_decay": wd}
            assert 1e-3 <= p.config.base_lr <= 10 and 0.7 <= p.config.momentum <= 0.999


def test_the_same_spec_gives_the_same_trials_and_every_cell_the_same_points(tmp_path):
    first, again = _plans(tmp_path), _plans(tmp_path)
    assert [(p.trial_id, p.search) for p in first] == [(p.trial_id, p.search) for p in again]
    by_cell = {}
    for p in first:
        by_cell.setdefault(p.trial_id.rsplit("-", 2)[0], []).append(p.search)
    assert len(by_cell) == 4 and all(v == by_cell["b32-g1-sgd"] for v in by_cell.values())
    groups = {p.config.prune_group for p in first}
    assert groups == {"b32-g1-sgd", "b32-g1-nesterov", "b64-g1-sgd", "b64-g1-nesterov"}
    assert first[0].axes()["search"] == first[0].search and first[0].axes()["point"] == 0


def test_the_dry_run_lists_the_points(tmp_path):
    table = plan_table(_plans(tmp_path))
    row = next(line for line in table.splitlines() if line.startswith("b64-g1-nesterov-p3-s0"))
    assert "base_lr=" in row and "momentum=" in row and "weight_decay=0.0005" in row


def test_a_plain_list_alone_is_a_grid(tmp_path):
    text = SPEC.split("  search:")[0] + "  search:\n    base_lr: [0.01, 0.1, 1]\n"
    plans = _plans(tmp_path, text=text)
    assert [p.config.base_lr for p in plans if p.trial_id.startswith("b32-g1-sgd")] == [0.01, 0.1, 1.0]


@pytest.mark.parametrize("search, message", [
    ("trials: 4\n    base_lr: {normal: [0, 1]}", "expected a list of values or one of"),
    ("base_lr: {loguniform: [0, 1]}", "needs lo < hi and lo > 0"),
    ("momentum: {one_minus_loguniform: [0.1, 2]}", "needs hi < 1"),
    ("sampler: lhs\n    base_lr: {uniform: [0, 1]}", "sampler 'lhs' is not one of"),
    ("trials: 0\n    base_lr: {uniform: [0, 1]}", "trials must be an integer >= 1"),
    ("global_batch: [32, 64]", "not a trial option that can be searched"),
    ("learning_rate: [1, 2]", "not a trial option that can be searched"),
    ("trials: 3\n    base_lr: [1, 2]", "needs a distribution"),
])
def test_bad_search_specs_are_one_line(tmp_path, search, message):
    text = SPEC.split("  search:")[0] + "  search:\n    " + search + "\n"
    with pytest.raises(LbscaleError, match=message.replace("(", r"\(")):
        _plans(tmp_path, text=text)


def test_a_variant_searches_its_own_space(tmp_path):
    text = SPEC.replace("    nesterov: {optimizer: nesterov}",
                        "    nesterov: {optimizer: nesterov, search: {trials: 2, sampler: random, seed: 1,\n"
                        "               base_lr: {loguniform: [0.1, 10]}}}")
    plans = _plans(tmp_path, text=text)
    own = [p for p in plans if p.trial_id.startswith("b32-g1-nesterov")]
    u = np.random.default_rng(1).random((2, 1))
    assert [p.trial_id for p in own] == ["b32-g1-nesterov-p0-s0", "b32-g1-nesterov-p1-s0"]
    assert [p.config.base_lr for p in own] == pytest.approx(list(10 ** (-1 + 2 * u[:, 0])), rel=1e-3)
    assert len([p for p in plans if p.trial_id.startswith("b32-g1-sgd")]) == 8  # the grid's search stands


@pytest.mark.parametrize("extra, message", [
    ("  warmup: [0, 5]\n", "grid.search sets warmup_epochs, which the grid"),
])
def test_a_searched_option_an_axis_also_sets_is_refused(tmp_path, extra, message):
    text = SPEC.replace("  search:", extra + "  search:")
    with pytest.raises(LbscaleError, match=message):
        _plans(tmp_path, text=text)
    path = tmp_path / "e.yaml"
    path.write_text(SPEC.replace("SAMPLER", "sobol").replace("weight_decay: [1.0e-4, 5.0e-4]", "epochs: [1, 2]"))
    with pytest.raises(LbscaleError, match="grid.search sets epochs"):
        build_plan(load_sweep_spec(path), tmp_path / "r", 4, epochs=3)


def test_one_minus_loguniform_rounds_the_draw_never_the_momentum():
    # defect: 1 - x was rounded to 4 significant digits, so x < ~5e-5 gave momentum 1.0 (no learning at all)
    from lbscale.sweep.search import _transform

    lo, hi = 1e-5, 0.1
    for u in np.linspace(0.0, 0.999, 2000):
        x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))  # the log-uniform draw, by hand
        m = _transform("one_minus_loguniform", [lo, hi], float(u))
        assert m < 1.0
        assert m == 1.0 - float(f"{x:.4g}")  # the draw rounded to 4 significant digits, then 1 - x


def test_a_searched_option_a_variant_also_sets_is_refused(tmp_path):
    # defect: both "variants" trained the searched LRs, their own base_lr silently overridden
    text = SPEC.replace("    sgd: {optimizer: sgd}\n    nesterov: {optimizer: nesterov}",
                        "    sgd-lr01: {optimizer: sgd, base_lr: 0.1}\n    sgd-lr1: {optimizer: sgd, base_lr: 1.0}")
    with pytest.raises(LbscaleError, match=r"grid.search sets base_lr, which variant sgd-lr01 sets too"):
        _plans(tmp_path, text=text)
    # a variant's own search space clashes with the variant's own setting the same way
    own = SPEC.replace("    nesterov: {optimizer: nesterov}",
                       "    nesterov: {optimizer: nesterov, momentum: 0.95, search: {base_lr: [0.1, 1.0],\n"
                       "               momentum: [0.9, 0.99]}}")
    with pytest.raises(LbscaleError, match=r"variant nesterov's search sets momentum, which variant nesterov sets"):
        _plans(tmp_path, text=own)
