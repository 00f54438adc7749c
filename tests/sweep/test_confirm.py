"""The confirmation stage (grid.search.confirm): the best points of each batch rerun with more seeds once the
batch's search has finished, chosen by hand from the search's own records, locally and through a SLURM job that
waits for the search; stable ids and reruns; and the seeded arrival order of a local asynchronous search."""

import json
import time

import pytest

from lbscale.errors import LbscaleError
from lbscale.results import read_json, read_jsonl
from lbscale.sweep.launch import arrival_order
from lbscale.sweep.plan import build_plan
from lbscale.sweep.spec import load_sweep_spec
from tests.sweep.test_launch import lbscale

SPEC = """
name: confirm
data: {data}
model: test_resnet
epochs: 1
trial: {{optimizer: sgd, lr_scaling: none, check_every: 1, device: cpu, eval_every: 4, target_metric: val_top1,
        target: 0.35}}
grid:
  batch: [32]
  gpus: [1]
  search:
    base_lr: [0.003, 0.05, 0.4]
    confirm: {{top: 1, seeds: 2}}
"""


def _best_by_hand(results, names):
    """The search trial of the fewest steps to the target, else the best val_top1 of any evaluation."""
    def key(name):
        s = read_json(results / name / "summary.json")
        best = max(r["val_top1"] for r in read_jsonl(results / name / "metrics.jsonl") if "val_top1" in r)
        return (s["steps_to_target"] is None, s["steps_to_target"] or 0, -best, name)
    return min(names, key=key)


def test_the_best_point_reruns_with_more_seeds_after_the_search(tiny_h5, tmp_path):
    spec, results = tmp_path / "c.yaml", tmp_path / "res"
    spec.write_text(SPEC.format(data=tiny_h5))
    out = lbscale("sweep", spec, "--results", results).stdout
    search = [f"b32-g1-sgd-none-p{k}-s0" for k in range(3)]
    best = _best_by_hand(results, search)
    again = [best.replace("-s0", "-s1"), best.replace("-s0", "-s2")]
    assert "confirmation stage: 2 trials" in out
    assert sorted(d.name for d in results.iterdir() if (d / "trial.yaml").exists()) == sorted(search + again)
    for name in again:
        grid = json.loads((results / name / "grid.json").read_text())
        assert grid["confirms"] is True and grid["point"] == int(best.split("-p")[1][0]) and grid["seed"] != 0
        assert read_json(results / name / "summary.json")["status"] == "completed"
        cfg = json.loads((results / name / "config.json").read_text())["config"]
        assert cfg["base_lr"] == json.loads((results / best / "config.json").read_text())["config"]["base_lr"]
    rerun = lbscale("sweep", spec, "--results", results).stdout
    assert "5 of 5 trials already finished; running 0" in rerun and "confirmation stage" not in rerun


def test_a_subset_evaluation_never_ranks_a_point(tiny_h5, tmp_path):
    """Two points at the same steps to the target: the better whole split ranks first, whatever an evaluation of
    a subset said (the report ranks so: `tuned.whole_split`); a point's subset values alone rank it last."""
    from lbscale.sweep.confirm import _rank

    spec = tmp_path / "c.yaml"
    spec.write_text(SPEC.format(data=tiny_h5))
    a, b, c = build_plan(load_sweep_spec(spec), tmp_path / "r", 4)
    for p, subset, whole in ((a, 0.99, 0.40), (b, 0.50, 0.45), (c, 0.95, None)):
        p.out.mkdir(parents=True)
        (p.out / "summary.json").write_text(json.dumps({"status": "completed", "steps_to_target": 8}))
        records = [{"kind": "step", "step": 4, "epoch": 0.5, "val_top1": subset, "subset": 16}]
        if whole is not None:
            records += [{"kind": "step", "step": 8, "epoch": 1.0, "val_top1": whole, "subset": None},
                        {"epoch": 1, "step": 8, "val_top1": whole}]
        (p.out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [p.trial_id for p in sorted([a, b, c], key=_rank)] == [b.trial_id, a.trial_id, c.trial_id]


@pytest.mark.parametrize("confirm, message", [
    ("{top: 0, seeds: 2}", "integers >= 1"), ("{top: 2}", "{top: K, seeds: S}: seeds is missing"),
    ("3", "{top: K, seeds: S}"), ("{top: 1, seeds: 1, sedes: 2}", "unknown key sedes (it takes top and seeds)")])
def test_bad_confirm_is_one_line(tmp_path, confirm, message):
    spec = tmp_path / "c.yaml"
    spec.write_text(SPEC.format(data="x.h5").replace("{{top: 1, seeds: 2}}", confirm).replace(
        "confirm: {top: 1, seeds: 2}", f"confirm: {confirm}"))
    with pytest.raises(LbscaleError, match="grid.search.confirm") as e:
        build_plan(load_sweep_spec(spec), tmp_path / "r", 4)
    assert message in str(e.value)


def test_a_confirmation_trial_is_not_pruned_whatever_unit_the_rungs_had(tmp_path):
    from lbscale.sweep.confirm import _again

    spec = tmp_path / "c.yaml"
    for option, value in (("prune_min_steps", 4), ("prune_min_samples", 512)):
        spec.write_text(SPEC.format(data="x.h5").replace(
            "target: 0.35}", f"target: 0.35, prune: asha, {option}: {value}}}"))
        search = build_plan(load_sweep_spec(spec), tmp_path / "r", 4)[0]  # the spec's option reaches the trial
        assert search.config.prune_group == "b32-g1-sgd-none" and getattr(search.config, option) == value
        cfg = _again(search, 1).config
        assert (cfg.prune, cfg.prune_group, cfg.prune_min_steps, cfg.prune_min_samples) == ("none", None, None, None)


def test_a_local_asynchronous_search_meets_its_points_in_a_seeded_order_per_batch(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(data="x.h5").replace("batch: [32]", "batch: [32, 64, 128, 256]").replace(
        "base_lr: [0.003, 0.05, 0.4]", "base_lr: [0.001, 0.003, 0.01, 0.03, 0.1, 0.3]").replace(
        "confirm: {top: 1, seeds: 2}", "").replace("target: 0.35}", "target: 0.35, prune: asha, prune_min_steps: 4}"))
    plans = build_plan(load_sweep_spec(spec), tmp_path / "r", 4)
    order = arrival_order(plans)
    assert sorted(p.trial_id for p in order) == sorted(p.trial_id for p in plans)
    firsts = {}
    for p in order:  # the first point each batch meets
        firsts.setdefault(p.plan.global_batch, p.point)
    assert len(set(firsts.values())) > 1  # not the same point first at every batch
    assert [p.trial_id for p in arrival_order(plans)] == [p.trial_id for p in order]  # seeded: the same each time
    sync = build_plan(load_sweep_spec(spec), tmp_path / "r", 4)
    for p in sync:
        p.config.prune = "sha"
    assert [p.trial_id for p in arrival_order(sync)] == [p.trial_id for p in sync]  # synchronous: as planned


@pytest.mark.slow
def test_the_confirmation_stage_as_a_job_after_the_search(slurm, tiny_h5, tmp_path):
    spec, results = tmp_path / "c.yaml", tmp_path / "res"
    spec.write_text(SPEC.format(data=tiny_h5))
    out = lbscale("sweep", spec, "--results", results, "--launcher", "slurm").stdout
    assert "submitted job array" in out and "it plans and submits the confirmation stage" in out
    search = [f"b32-g1-sgd-none-p{k}-s0" for k in range(3)]
    deadline = time.time() + 600
    while time.time() < deadline and len([d for d in results.glob("b32-*") if (d / "summary.json").exists()]) < 5:
        time.sleep(2)
    best = _best_by_hand(results, search)
    for name in (best.replace("-s0", "-s1"), best.replace("-s0", "-s2")):
        assert read_json(results / name / "summary.json")["status"] == "completed", name
    assert (results / "slurm" / "c-confirm.sh").read_text().count("--dependency=afterany:") == 1


def test_a_spec_may_give_several_targets_as_targets(tmp_path):
    spec = tmp_path / "t.yaml"
    spec.write_text(SPEC.format(data="x.h5").replace("target: 0.35}", "targets: [0.3, 0.35]}"))
    plans = build_plan(load_sweep_spec(spec), tmp_path / "r", 4)
    assert plans[0].config.target == (0.3, 0.35) and plans[0].config.targets == (0.3, 0.35)
