"""A branch trial (--branch-from a kept checkpoint, --branch-samples its window): factor 1 is the parent's own
continuation, bit for bit; a larger batch continues the same micro-batches in larger steps."""

import json
from types import SimpleNamespace

from lbscale.results import read_jsonl
from lbscale.train.branching import Branch, branch_progress
from lbscale.train.checkpoint import Progress, TrialState
from lbscale.train.grouping import StepGrouping
from lbscale.train.plan import Plan
from tests.train.helpers import summary

BASE = ["--model", "test_resnet", "--quiet", "--device", "cpu", "--optimizer", "sgd", "--momentum", "0.9",
        "--base-lr", "0.05", "--epochs", "2", "--schedule", "cosine", "--warmup-epochs", "0.5"]
# tiny set: 560 train images, 17 steps of 32 per epoch (the last 16 images dropped), 34 in all


def test_branch_progress_by_hand():
    parent = Progress(epoch=1, batch=6, step=23, target_hits={"0.9": {}}, elapsed=5.0)
    # at 4 micro-batches a step and 5 steps an epoch: epoch 1's step 6 // 4 = 1, so step 5 + 1
    assert branch_progress(parent, 5, 4) == Progress(epoch=1, batch=6, step=6)
    assert branch_progress(parent, 17, 1).step == 23  # factor 1: the parent's own step


def test_branch_and_grouping_state_through_a_checkpoint_and_from_an_earlier_lbscales(tmp_path):
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "model.pt").write_bytes(b"")
    (kept / "info.json").write_text(json.dumps({"local_batch": 32, "global_batch": 32}))
    plan = Plan(1, 64, 32, 2, 560, 9, 18, 0.1, 0.0, 0, 17, 544)
    cfg = SimpleNamespace(branch_from=str(kept), branch_samples=320, branch_ema=0.9, batch_schedule=None)

    def fresh():
        return {"branch": Branch.of(cfg, plan), "grouping": StepGrouping.of(cfg, plan)}

    objects = fresh()
    assert objects["branch"].begin(Progress(epoch=1, batch=17, step=34)) == Progress(epoch=1, batch=17, step=17)
    assert (objects["branch"].start, objects["branch"].ema) == ([2, 0], [0.0, 0.0, 32])  # at an epoch's end
    objects["branch"].observe(3.0, 2, 64)
    objects["grouping"].changes = [{"step": 0, "samples_seen": 0, "global_batch": 64}]
    model = {"model": {}, "optimizer": {}, "scaler": {}, "records": [], "world_size": 1}
    saved = {**model, **{k: v.state_dict() for k, v in objects.items()}}
    # an earlier lbscale kept both in its progress: model.pt's own fields
    earlier = {**model, "epoch": 2, "branch_start": [2, 0], "branch_ema": objects["branch"].ema,
               "batch_changes": objects["grouping"].changes}
    for d in (saved, earlier):
        loaded = fresh()
        state = TrialState.from_dict(d)
        for name, obj in loaded.items():
            obj.load_state_dict(state.monitors[name])
        assert (loaded["branch"].start, loaded["branch"].ema) == ([2, 0], objects["branch"].ema)
        assert loaded["branch"].smoothed() == {"train_loss_ema": 1.5}
        assert loaded["grouping"].changes == objects["grouping"].changes


def test_factor_one_is_the_parents_continuation_and_factor_two_takes_half_the_steps(tiny_h5, tmp_path, run_cli):
    parent = tmp_path / "parent"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", parent, "--global-batch", 32, *BASE,
                         "--keep-checkpoints", "25%")
    assert rc == 0, err
    kept = parent / "kept" / "25pct"
    info = json.loads((kept / "info.json").read_text())
    assert (info["step"], info["global_batch"], info["local_batch"], info["samples_seen"]) == (8, 32, 32, 256)
    window = (34 - 8) * 32  # to the parent's end
    one = tmp_path / "x1"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", one, "--global-batch", 32, *BASE,
                         "--branch-from", kept, "--branch-samples", window, "--eval-subset", 40)
    assert rc == 0, err
    s1 = summary(one)
    assert s1["status"] == "completed" and s1["stopped"] == "window"
    assert s1["param_digests"] == summary(parent)["param_digests"]  # bit for bit
    last = [r for r in read_jsonl(one / "metrics.jsonl") if r.get("kind") == "step"][-1]  # then epoch 2's record
    assert last["kind"] == "step" and last["step"] == 34 and last["subset"] == 40 and "val_loss" in last

    two = tmp_path / "x2"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", two, "--global-batch", 64, "--local-batch", 32, *BASE,
                         "--branch-from", kept, "--branch-samples", 320, "--eval-subset", 40)
    assert rc == 0, err
    s2 = summary(two)
    assert s2["status"] == "completed" and s2["stopped"] == "window"
    # from micro-batch 8 of epoch 1 (step 8 x 32 / 64 = 4); at batch 64 an epoch is 16 micro-batches (last_batch
    # drop keeps whole steps), so 10 micro-batches are 4 steps to the epoch's end and 1 into epoch 2: 4 + 4 + 1
    assert [r["step"] for r in read_jsonl(two / "metrics.jsonl") if r.get("kind") == "step"] == [9]
    assert s2["param_digests"] != s1["param_digests"]


def test_a_branch_needs_its_parents_local_batch(tiny_h5, tmp_path, run_cli):
    parent = tmp_path / "parent"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", parent, "--global-batch", 32, *BASE,
                         "--keep-checkpoints", "25%")
    assert rc == 0, err
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "b", "--global-batch", 64, *BASE,
                         "--branch-from", parent / "kept" / "25pct", "--branch-samples", 64)
    assert rc == 2 and "continues its parent's micro-batches of 32 per process" in err
    assert len(err.strip().splitlines()) == 1


def test_a_branch_starting_inside_a_step_of_its_batch_takes_whole_steps(tiny_h5, tmp_path, run_cli):
    # kept after step 9 (micro-batch 9): a branch at 2 x 32 starts there, and its first step is micro-batches 9
    # and 10, not micro-batch 9 alone (with last_batch keep both epochs hold the same 18 micro-batches)
    keep = ["--last-batch", "keep"]
    parent = tmp_path / "parent"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", parent, "--global-batch", 32, *BASE, *keep,
                         "--keep-checkpoints", "9st")
    assert rc == 0, err
    two = tmp_path / "x2"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", two, "--global-batch", 64, "--local-batch", 32, *BASE,
                         *keep, "--branch-from", parent / "kept" / "9st", "--branch-samples", 256, "--eval-subset", 40)
    assert rc == 0, err
    # it starts at step 9 // 2 = 4 and takes 8 micro-batches in 4 whole steps (micro-batch 9 alone would make 5)
    assert [r["step"] for r in read_jsonl(two / "metrics.jsonl") if r.get("kind") == "step"] == [8]


def test_branch_from_something_else_is_one_line(tiny_h5, tmp_path, run_cli):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "b", "--global-batch", 32, *BASE,
                         "--branch-from", tmp_path, "--branch-samples", 64)
    assert rc == 2 and "not a kept checkpoint" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b" / "summary.json").exists()
