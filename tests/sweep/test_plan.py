"""Sweep planning: ranges, ids, resources, the dry-run table, bad specs, quoting of rendered scripts."""

import subprocess
from pathlib import Path

import pytest

from lbscale.errors import LbscaleError
from lbscale.sweep.spec import load_sweep_spec
from lbscale.sweep.submit import render_array_script
from lbscale.sweep.options import SweepOptions, SweepRun
from lbscale.sweep.plan import build_plan, parse_batches, parse_seeds
from lbscale.sweep.systems import get_system

ROOT = Path(__file__).resolve().parents[2]


def test_ranges_and_lists():
    assert parse_batches("8k..65k") == [8192, 16384, 32768, 65536]
    assert parse_batches("512..32k") == [512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert parse_batches([512, 8000]) == [512, 8000]
    assert parse_batches("512,8K") == [512, 8192]
    assert parse_seeds(3) == [0, 1, 2] and parse_seeds("0,5") == [0, 5] and parse_seeds([7]) == [7]


def _spec(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return load_sweep_spec(path)


SPEC = """
name: t
data: none.h5
model: resnet50
epochs: 3
trial: {optimizer: lamb, base_lr: 0.01, ref_batch: 8192, lr_scaling: sqrt, warmup_epochs: auto}
grid:
  batch: 8k..65k
  local_batch: 2048
  seeds: 2
"""


def test_sat_lamb_plan_ids_gpus_nodes(tmp_path):
    plans = build_plan(_spec(tmp_path, SPEC), tmp_path / "r", gpus_per_node=4)
    assert [p.trial_id for p in plans[:2]] == ["b8192-g4-lamb-sqrt-s0", "b8192-g4-lamb-sqrt-s1"]
    by_id = {p.trial_id: p for p in plans}
    p = by_id["b65536-g32-lamb-sqrt-s1"]
    assert (p.gpus, p.nodes, p.plan.local_batch, p.plan.accum_steps) == (32, 8, 2048, 1)
    assert p.plan.peak_lr == pytest.approx(0.01 * 8 ** 0.5)
    assert p.plan.warmup_epochs == 40  # auto: 5 epochs at 8k, x 8
    assert p.config.out == str(tmp_path / "r" / "b65536-g32-lamb-sqrt-s1")
    # ids do not depend on the order or subset asked for
    again = build_plan(_spec(tmp_path, SPEC), tmp_path / "r", 4, batch="65536", seeds=[1])
    assert [q.trial_id for q in again] == ["b65536-g32-lamb-sqrt-s1"]


def test_gpus_list_with_accumulation_and_overrides(tmp_path):
    plans = build_plan(_spec(tmp_path, SPEC), tmp_path, 4, batch="16k", gpus="4,8", seeds=1, epochs=1)
    assert [(p.trial_id, p.plan.accum_steps, p.config.epochs) for p in plans] == [
        ("b16384-g4-lamb-sqrt-s0", 2, 1), ("b16384-g8-lamb-sqrt-s0", 1, 1)]


def test_variants_and_warmup_in_ids(tmp_path):
    spec = _spec(tmp_path, SPEC.replace("  seeds: 2", """  seeds: 1
  warmup: [0, 5, auto]
  variants:
    lars-lin: {optimizer: lars, lr_scaling: linear, base_lr: 0.1, ref_batch: 256}
    lamb-sqrt: {}"""))
    ids = [p.trial_id for p in build_plan(spec, tmp_path, 4, batch="8k")]
    assert ids == ["b8192-g4-lars-lin-w0-s0", "b8192-g4-lars-lin-w5-s0", "b8192-g4-lars-lin-wauto-s0",
                   "b8192-g4-lamb-sqrt-w0-s0", "b8192-g4-lamb-sqrt-w5-s0", "b8192-g4-lamb-sqrt-wauto-s0"]
    lars = build_plan(spec, tmp_path, 4, batch="8k")[0]
    assert lars.plan.peak_lr == pytest.approx(3.2)  # 0.1 x 8192 / 256


POINTS = """
name: ben
data: none.h5
model: resnet50
epochs: 90
trial: {optimizer: lars, base_lr: 0.1, ref_batch: 256, lr_scaling: linear, warmup_epochs: 5}
grid:
  points:
    - {batch: 512, gpus: 8}
    - {batch: 8k, gpus: 128}
    - {batch: 16k, gpus: 128}
    - {batch: 32k, gpus: 128}
  seeds: 1
"""


def test_paired_points_derive_the_local_batch(tmp_path):
    plans = build_plan(_spec(tmp_path, POINTS), tmp_path, 4)
    rows = [(p.plan.global_batch, p.gpus, p.nodes, p.plan.local_batch, p.plan.accum_steps) for p in plans]
    assert rows == [(512, 8, 2, 64, 1), (8192, 128, 32, 64, 1), (16384, 128, 32, 128, 1), (32768, 128, 32, 256, 1)]
    assert [p.plan.peak_lr for p in plans] == pytest.approx([0.2, 3.2, 6.4, 12.8])
    # --batch / --gpus select rows of the points; they do not make a product
    assert [p.trial_id for p in build_plan(_spec(tmp_path, POINTS), tmp_path, 4, batch="16k,32k")] == [
        "b16384-g128-lars-linear-s0", "b32768-g128-lars-linear-s0"]
    assert len(build_plan(_spec(tmp_path, POINTS), tmp_path, 4, gpus="128")) == 3
    with pytest.raises(LbscaleError, match="no grid point matches --batch 4k"):
        build_plan(_spec(tmp_path, POINTS), tmp_path, 4, batch="4k")


@pytest.mark.parametrize("change, needle", [
    (("epochs: 3", "epochs: 3\nlearning_rate: 1"), "unknown key 'learning_rate'"),
    # paired grid points: a bad row is named
    (("{batch: 8k, gpus: 128}", "{batch: 8000, gpus: 128}"), "grid.points[1] (batch 8000, gpus 128): batch 8000 "
                                                             "is not divisible by 128 GPUs"),
    (("{batch: 8k, gpus: 128}", "{batch: 8k, gpu: 128}"), "grid.points[1]: unknown key 'gpu'"),
    (("  seeds: 1", "  seeds: 1\n  batch: 8k..32k"), "grid.batch (with gpus or local_batch) or grid.points"),
    (("{batch: 8k, gpus: 128}", "{batch: 512, gpus: 8}"), "repeat a (batch, gpus) row"),
    (("    - {batch: 512, gpus: 8}", "    - 512"), "grid.points[0] must be a mapping"),
    (("seeds: 2", "seeds: 2\n  gpu: [4]"), "unknown grid key 'gpu'"),
    (("optimizer: lamb", "optimiser: lamb"), "unknown trial option 'optimiser'"),
    (("local_batch: 2048", "local_batch: 3000"), "not a multiple of local batch 3000"),
    (("batch: 8k..65k", "batch: 8k...65k"), "malformed"),
    (("batch: 8k..65k", "batch: 6k..65k"), "malformed range"),
    (("local_batch: 2048", "gpus: [6]"), "not divisible by 6 GPUs"),
])
def test_bad_specs_fail_before_anything(tmp_path, run_cli, change, needle):
    path = tmp_path / "s.yaml"
    base = POINTS if change[0] in POINTS else SPEC
    path.write_text(base.replace(*change))
    rc, _, err = run_cli("sweep", path, "--launcher", "slurm", "--no-submit", "--results", tmp_path / "r")
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


def test_gpus_spanning_nodes_must_fill_them(tmp_path, run_cli):
    path = tmp_path / "s.yaml"
    path.write_text(SPEC.replace("local_batch: 2048", "gpus: [6]").replace("8k..65k", "[6144]"))
    rc, _, err = run_cli("sweep", path, "--launcher", "slurm", "--no-submit", "--results", tmp_path / "r")
    assert rc == 2 and "not a multiple of 4 GPUs per node" in err
    rc, _, err = run_cli("sweep", path, "--launcher", "slurm", "--system", "nowhere", "--results", tmp_path / "r")
    assert rc == 2 and "unknown system 'nowhere'" in err


def test_user_systems_file_extends_profiles(tmp_path):
    f = tmp_path / "systems.yaml"
    f.write_text("mine:\n  extends: jureca-dc\n  account: proj42\n  gpus_per_node: 2\n")
    prof = get_system("mine", f)
    assert (prof["partition"], prof["account"], prof["gpus_per_node"]) == ("dc-gpu", "proj42", 2)
    assert get_system("deep-esb")["gpus_per_node"] == 1 and get_system("jureca-k80")["gpus_per_node"] == 4


HOSTILE = "$(touch {marker}); `touch {marker}`; ' ; touch {marker} #"


def test_hostile_values_are_quoted_never_run(tmp_path):
    marker = tmp_path / "PWNED"
    evil = HOSTILE.format(marker=marker)
    import yaml

    f = tmp_path / "systems.yaml"
    f.write_text(yaml.safe_dump({"evil": {"extends": "generic", "modules": [evil], "environment": {"X": evil},
                                          "srun_args": [evil]}}))
    prof = get_system("evil", f)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC)
    plans = build_plan(load_sweep_spec(spec_path), tmp_path / "r", 4, batch="8k", seeds=1)
    run = SweepRun(spec_path=str(spec_path), results=tmp_path / "r", system=prof,
                   options=SweepOptions(epochs=evil, systems_file=str(f)))
    script = render_array_script(run, plans, "t")
    body = [line for line in script.splitlines() if not line.startswith("#")]
    assert str(marker) in script  # the hostile text is there, quoted
    # run everything but the final exec, with `module` stubbed: nothing may touch the marker
    runnable = "\n".join(["module() { :; }", *[line for line in body if not line.startswith("exec ")]])
    subprocess.run(["bash", "-c", runnable], check=True)
    exec_line = next(line for line in body if line.startswith("exec "))
    subprocess.run(["bash", "-c", "SLURM_ARRAY_TASK_ID=0; " + exec_line.replace("exec ", "printf '%s\\n' ", 1)],
                   check=True, capture_output=True)
    assert not marker.exists()


def test_slurm_scripts_name_a_relative_systems_file_absolutely(tmp_path, run_cli, monkeypatch, tiny_h5):
    # array tasks may start in another directory; the --systems path the user typed is relative
    monkeypatch.chdir(tmp_path)
    Path("mine.yaml").write_text("mine:\n  extends: generic\n  gpus_per_node: 4\n")
    Path("spec.yaml").write_text(SPEC.replace("none.h5", str(tiny_h5)).replace("local_batch: 2048", "local_batch: 16"))
    rc, out, err = run_cli("sweep", "spec.yaml", "--launcher", "slurm", "--no-submit", "--system", "mine",
                           "--systems", "mine.yaml", "--batch", "64", "--seeds", "1", "--results", "r")
    assert rc == 0, err
    script = (tmp_path / "r" / "slurm" / "spec-g4.sh").read_text()
    assert f"--systems {tmp_path / 'mine.yaml'} " in script and "--system mine " in script


@pytest.mark.parametrize("key, value", [("account", "x;rm -rf /"), ("partition", "a b"), ("time", "1\n#SBATCH -x")])
def test_unsafe_sbatch_values_refused(tmp_path, key, value):
    import yaml


    f = tmp_path / "systems.yaml"
    f.write_text(yaml.safe_dump({"bad": {"extends": "generic", key: value}}))
    with pytest.raises(LbscaleError, match=f"unsafe {key}"):
        get_system("bad", f)


def test_shipped_specs_plan(run_cli, tmp_path, monkeypatch):
    # where the data is not prepared yet, each spec names its data field and the file in one line
    monkeypatch.chdir(tmp_path)
    specs = [s for s in sorted((ROOT / "experiments").glob("*.yaml")) if s.name != "demo-trial.yaml"]
    for spec in specs:
        loaded = load_sweep_spec(spec)
        field, path = next(iter((f"grid.datasets.{k}", v) for k, v in loaded.datasets.items()), ("data", None))
        path = path or loaded.trial["data"]
        rc, out, err = run_cli("sweep", spec, "--dry-run", "--launcher", "slurm")
        assert (rc, out) == (2, ""), (spec, out)
        assert err == (f"lbscale: error: {spec}: {field}: {path}: no such prepared file (write it with lbscale "
                       f"prepare DATASET --out {path})\n")
    # the demo's data as `make demo` prepares it: the demos plan
    from lbscale.data.prepare import prepare

    Path("data").mkdir()
    prepare("synthetic", None, Path("data/demo.h5"), count=6000, label_noise=0.05, command="test")
    for name in ("demo-sweep", "demo-tuned"):
        rc, out, err = run_cli("sweep", ROOT / "experiments" / f"{name}.yaml", "--dry-run", "--launcher", "slurm")
        assert rc == 0, err
        assert out.splitlines()[-1].endswith("trials planned; data checked (data/demo.h5: 4,200 train samples); "
                                             "nothing run (--dry-run)")


def _shipped(name):
    spec = load_sweep_spec(ROOT / "experiments" / f"{name}.yaml")
    return spec, build_plan(spec, Path("results"), get_system(spec.system)["gpus_per_node"])


def _rows(plans):
    return sorted({(p.plan.global_batch, p.gpus, p.plan.local_batch, p.plan.accum_steps) for p in plans})


def test_bigearthnet_spec_is_table_1():
    spec, plans = _shipped("bigearthnet-lars")
    assert _rows(plans) == [(512, 8, 64, 1), (8192, 128, 64, 1), (16384, 128, 128, 1), (32768, 128, 256, 1)]
    assert [p.plan.peak_lr for p in plans] == pytest.approx([0.2, 3.2, 6.4, 12.8])
    for p in plans:
        c = p.config
        assert (p.plan.warmup_epochs, c.optimizer, c.lars_nesterov, c.label_set) == (5, "lars", True, "labels_43")
        assert (c.weight_decay_on, c.drop_rate > 0, c.eval_split, c.on_divergence) == ("conv", True, "test",
                                                                                      "continue")
        assert (list(c.milestones), list(c.milestone_factors)) == ([30, 60, 80], [0.1, 0.01, 0.001])
    assert spec.system == "jureca-k80"


@pytest.mark.parametrize("name", ["sat4-lamb", "sat6-lamb"])
def test_sat_specs_are_the_papers_rows(name):
    spec, plans = _shipped(name)
    assert _rows(plans) == [(8192, 4, 2048, 1), (16384, 8, 2048, 1), (32768, 16, 2048, 1), (65536, 32, 2048, 1)]
    assert len(plans) == 4 * 3 and {p.config.seed for p in plans} == {0, 1, 2}
    assert {(p.config.epochs, p.config.eval_split, p.config.optimizer, p.config.lr_scaling) for p in plans} == {
        (100, "test", "lamb", "sqrt")}
    assert spec.system == "deep-esb" and {p.nodes for p in plans} == {4, 8, 16, 32}  # one V100 per node


def test_warmup_and_cifar_specs():
    _, plans = _shipped("imagenet-warmup")
    assert _rows(plans) == [(7680, 60, 128, 1), (30720, 240, 128, 1)]  # Summit: 6 GPUs per node
    cells = {(p.plan.global_batch, p.variant, p.plan.warmup_epochs): p.plan.peak_lr for p in plans}
    assert len(cells) == 16 and {w for _, _, w in cells} == {0, 5, 10, 20}
    assert cells[(7680, "linear", 5)] == pytest.approx(3.0) and cells[(7680, "unscaled", 5)] == 0.0125
    _, plans = _shipped("cifar10-batch")
    assert {p.config.model for p in plans} == {f"resnet{d}" for d in (18, 34, 50, 101, 152)}
    assert {p.gpus for p in plans} == {1, 8} and min(p.plan.global_batch for p in plans) == 16
    assert max(p.plan.global_batch for p in plans) == 20480 and {p.config.seed for p in plans} == {0, 1, 2, 3}
    assert {(p.config.optimizer, p.config.epochs, p.config.augmentation) for p in plans} == {("sgd", 50, "crop-flip")}


def test_demo_is_a_small_study():
    _, plans = _shipped("demo-sweep")
    assert sorted({p.plan.global_batch for p in plans}) == [32, 64, 128, 256, 512, 1024, 2048]
    assert {p.variant for p in plans} == {"lamb-sqrt", "sgd-linear"} and {p.config.seed for p in plans} == {0, 1}


def test_imagenet_specs_carry_the_papers_columns():
    _, plans = _shipped("imagenet-goyal")
    rows = {p.plan.global_batch: p for p in plans}
    assert sorted(rows) == [256 * 2**k for k in range(9)] and all(p.plan.local_batch == 32 for p in plans)
    goyal = rows[8192]
    assert goyal.gpus == 256 and goyal.plan.peak_lr == pytest.approx(3.2) and goyal.plan.warmup_epochs == 5
    assert goyal.config.warmup_start_lr == 0.1 and tuple(goyal.config.milestones) == (30, 60, 80)
    assert (goyal.config.epochs, goyal.config.schedule, goyal.config.eval_split) == (90, "multistep", "test")
    assert rows[256].plan.peak_lr == pytest.approx(0.1)
    _, plans = _shipped("imagenet-lars")
    (lars,) = plans
    assert (lars.plan.global_batch, lars.gpus, lars.plan.local_batch) == (32768, 256, 128)
    assert lars.config.optimizer == "lars" and lars.config.schedule == "poly" and lars.config.poly_power == 2.0
    assert lars.plan.peak_lr == pytest.approx(28.8) and lars.plan.warmup_epochs == 5
    _, plans = _shipped("imagenet-warmup")
    assert {p.config.augmentation for p in plans} == {"rrc-flip"}


def test_imagenet_records_table_is_a_published_table():
    from lbscale.report import published

    table, source = published("imagenet-records")
    assert "Jitsev" in source and len(table) == 8
    goyal = table[table.work.str.startswith("Goyal")].iloc[0]
    assert (goyal.global_batch, goyal.gpus, goyal.metric, goyal.total_seconds) == (8192, 256, 0.763, 3600)
    yamazaki = table[table.work.str.startswith("Yamazaki")].iloc[0]
    assert (yamazaki.global_batch, yamazaki.metric, yamazaki.total_seconds) == (81920, 0.7508, 72)


def test_trial_yaml_of_an_older_version_is_the_same_trial():
    import yaml

    from lbscale.train.config import TrialConfig, to_dict
    from lbscale.sweep.launch import same_trial

    now = {k: v for k, v in to_dict(TrialConfig(data="d.h5", out="o", base_lr=0.004)).items() if v is not None}
    older = {k: v for k, v in now.items() if k not in ("drop_rate", "on_divergence")}  # options it did not have
    older["augmentation"] = "flip-rot90"  # its default; today's default `auto` means that for pixel data
    assert same_trial(yaml.safe_dump(older), now)
    assert not same_trial(yaml.safe_dump({**older, "base_lr": 0.008}), now)  # a real change
    assert not same_trial(yaml.safe_dump({**older, "augmentation": "crop-flip"}), now)
    assert not same_trial(yaml.safe_dump({**older, "drop_rate": 0.5}), now)  # not today's default
    assert not same_trial("not: [valid", now) and not same_trial("- a list", now)


def test_batch_schedule_arms_beside_the_batch_grid(tmp_path):
    # Merrill et al.'s Table 1 shape in one sweep: the small-batch control, the large-batch control and the arm
    # whose batch grows from the small one (at its first batch, on each GPU count of the grid)
    spec = _spec(tmp_path, SPEC.replace("  batch: 8k..65k", "  batch: [8k, 16k]").replace("  seeds: 2", """  seeds: 1
  batch_schedule: {grow: "8192@0,16384@2ep"}"""))  # inside the spec's 3 epochs
    plans = build_plan(spec, tmp_path, 4)
    assert [p.trial_id for p in plans] == ["b8192-g4-lamb-sqrt-s0", "b16384-g8-lamb-sqrt-s0",
                                           "b8192-g4-lamb-sqrt-grow-s0"]
    arm = plans[-1]
    assert arm.config.batch_schedule == "8192@0,16384@2ep" and arm.variant == "lamb-sqrt-grow"
    assert arm.plan.local_batch == 2048 and (arm.gpus, arm.plan.accum_steps) == (4, 1)
    assert plans[0].config.batch_schedule is None


def test_a_bad_batch_schedule_arm_names_its_field(tmp_path):
    bad = SPEC.replace("  seeds: 2", "  seeds: 1\n  batch_schedule: {grow: \"8192@5,16384@30ep\"}")
    with pytest.raises(LbscaleError, match="grid.batch_schedule.grow: --batch-schedule: the first batch starts at 0"):
        build_plan(_spec(tmp_path, bad), tmp_path, 4)


def test_imagenet_smith_is_the_records_row_as_a_schedule_beside_its_controls():
    _, plans = _shipped("imagenet-smith")
    arms = {p.trial_id: p for p in plans}
    assert sorted(arms) == ["b16384-g512-sgd-linear-s0", "b8192-g256-sgd-linear-grow-s0", "b8192-g256-sgd-linear-s0"]
    grow = arms["b8192-g256-sgd-linear-grow-s0"]
    assert grow.config.batch_schedule == "8192@0,16384@30ep" and grow.config.batch_rule == "none"
    assert tuple(grow.config.milestones) == (60, 80) and grow.plan.peak_lr == pytest.approx(3.2)
    assert tuple(arms["b8192-g256-sgd-linear-s0"].config.milestones) == (30, 60, 80)
    assert arms["b16384-g512-sgd-linear-s0"].plan.peak_lr == pytest.approx(6.4)


def test_demo_batch_warmup_holds_both_controls_and_the_arm():
    _, plans = _shipped("demo-batch-warmup")
    assert sorted((p.plan.global_batch, p.variant) for p in plans if p.config.seed == 0) == [
        (32, "sgd-linear"), (32, "sgd-linear-warmup"), (128, "sgd-linear")]
    assert {p.config.seed for p in plans} == {0, 1, 2}


def test_fashion_mnist_batch_warmup_holds_both_controls_and_the_arm():
    _, plans = _shipped("fashion-mnist-batch-warmup")
    assert sorted((p.plan.global_batch, p.variant) for p in plans if p.config.seed == 0) == [
        (32, "sgd-linear"), (32, "sgd-linear-warmup"), (128, "sgd-linear")]
    arm = next(p for p in plans if p.variant == "sgd-linear-warmup")
    assert arm.config.batch_schedule == "32@0,64@1ep,128@2ep" and arm.config.model == "resnet18"


def test_each_batch_can_have_its_own_epochs_and_a_bad_mapping_is_one_line(tmp_path):
    text = SPEC.replace("epochs: 3", "epochs: {8192: 2, 16384: 3, 32768: 5, 65536: 8}")
    plans = build_plan(_spec(tmp_path, text), tmp_path / "r", 4)
    assert {p.plan.global_batch: p.config.epochs for p in plans} == {8192: 2, 16384: 3, 32768: 5, 65536: 8}
    assert {p.config.epochs for p in build_plan(_spec(tmp_path, text), tmp_path / "r", 4, epochs=4)} == {4}
    # a batch the mapping lacks (the rounds add one past the grid): the next larger batch's count, past the
    # largest its count x batch / largest (samples grow at most in proportion to the batch)
    short = build_plan(_spec(tmp_path, SPEC.replace("epochs: 3", "epochs: {8192: 2, 32768: 5}")), tmp_path / "r", 4)
    assert {p.plan.global_batch: p.config.epochs for p in short} == {8192: 2, 16384: 5, 32768: 5, 65536: 10}
    for bad in ("{8192: 0}", "{8192: 2.5}", "{big: 2}", "{}"):
        with pytest.raises(LbscaleError, match="epochs must be a count"):
            _spec(tmp_path, SPEC.replace("epochs: 3", f"epochs: {bad}"))


def test_each_batch_can_have_its_own_first_evaluation_and_a_bad_mapping_is_one_line(tmp_path):
    # `lbscale design` writes eval_first as a quarter of each batch's predicted steps to the target: a small batch,
    # with many steps, would otherwise evaluate from the largest batch's first step on
    spaced = "eval_spacing: 0.2, eval_first: {8192: 40, 16384: 24, 32768: 12, 65536: 8}, "
    text = SPEC.replace("trial: {", "trial: {" + spaced)
    plans = build_plan(_spec(tmp_path, text), tmp_path / "r", 4)
    assert {p.plan.global_batch: p.config.eval_first for p in plans} == {8192: 40, 16384: 24, 32768: 12, 65536: 8}
    # a batch the mapping lacks (the rounds add one past the grid): the next larger batch's step (fewer steps to a
    # target, so no later a share of the smaller batch's); past the largest, the largest's x largest / batch (no
    # later than its share even under perfect scaling)
    short = SPEC.replace("trial: {", "trial: {eval_spacing: 0.2, eval_first: {16384: 24, 32768: 12}, ")
    plans = build_plan(_spec(tmp_path, short), tmp_path / "r", 4)
    assert {p.plan.global_batch: p.config.eval_first for p in plans} == {8192: 24, 16384: 24, 32768: 12, 65536: 6}
    # a variant's own first evaluation stands
    own = text.replace("  batch: 8k..65k", "  batch: 8k..65k\n  variants: {own: {eval_first: 3}}")
    assert {p.config.eval_first for p in build_plan(_spec(tmp_path, own), tmp_path / "r", 4)} == {3}
    for bad in ("{8192: 0}", "{8192: 2.5}", "{big: 2}", "{}"):
        with pytest.raises(LbscaleError, match="eval_first must be a step"):
            _spec(tmp_path, SPEC.replace("trial: {", f"trial: {{eval_spacing: 0.2, eval_first: {bad}, "))
