"""Training on the GPU: a bf16 trial that learns; a torch.compile trial under CUDA graphs (compile mode auto
is reduce-overhead on a GPU) that is preempted, resumes from its checkpoint and ends where an uninterrupted
run does."""

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

COMMON = ["--model", "test_resnet", "--quiet", "--check-every", "2", "--device", "cuda"]


def _summary(out):
    return json.loads((out / "summary.json").read_text())


def test_bf16_trial_learns(cuda, tiny, tmp_path, lbscale, figure):
    out = tmp_path / "bf16"
    rc, _, err = lbscale("train", "--data", tiny, "--out", out, "--global-batch", "32", "--optimizer", "lamb",
                         "--base-lr", "0.004", "--lr-scaling", "none", "--epochs", "4", "--warmup-epochs", "1",
                         "--precision", "bf16", "--target-metric", "val_top1", "--target", "0.5", *COMMON)
    assert rc == 0, err
    s = _summary(out)
    assert s["status"] == "completed" and s["steps"] == 4 * 17
    assert s["final"]["val_top1"] > 0.6, s["final"]  # 4 classes: chance is 0.25
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["config"]["precision"] == "bf16" and cfg["device"].startswith("cuda")
    figure("bf16 tiny trial val_top1 after 4 epochs", round(s["final"]["val_top1"], 3))


def _relative_distance(a: Path, b: Path) -> float:
    """||a - b|| / ||a|| over every floating-point tensor of two trials' final weights (buffers included)."""
    import torch

    x = torch.load(a / "checkpoint" / "model.pt", weights_only=False)["model"]
    y = torch.load(b / "checkpoint" / "model.pt", weights_only=False)["model"]
    keys = [k for k in x if x[k].is_floating_point()]
    diff = sum(float((x[k].double() - y[k].double()).pow(2).sum()) for k in keys)
    return (diff / sum(float(x[k].double().pow(2).sum()) for k in keys)) ** 0.5


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "eager"])
def test_a_resumed_trial_ends_like_an_uninterrupted_one(compiled, cuda, tiny, tmp_path, lbscale, figure):
    """Compiled (torch.compile with CUDA graphs: mode auto on a GPU) and eagerly. cuDNN's backward kernels are
    not deterministic, so two uninterrupted runs may already differ; a right resume differs from an
    uninterrupted run by no more than that (a wrong one, e.g. a lost optimizer or loader state, by far more)."""
    base = ["--data", tiny, "--global-batch", "32", "--optimizer", "nesterov", "--base-lr", "0.2", "--epochs", "2",
            "--warmup-epochs", "0.5", *(["--compile", "--compile-mode", "auto"] if compiled else []), *COMMON]
    for name in ("whole", "again"):
        rc, _, err = lbscale("train", *base, "--out", tmp_path / name)
        assert rc == 0, err
    rc, _, err = lbscale("train", *base, "--out", tmp_path / "cut", "--preempt-after-steps", "7")
    assert rc == 75, err
    info = json.loads((tmp_path / "cut" / "checkpoint" / "info.json").read_text())
    assert (info["reason"], info["step"]) == ("preempted", 7)
    rc, _, err = lbscale("train", *base, "--out", tmp_path / "cut", "--resume")
    assert rc == 0, err
    whole, cut = _summary(tmp_path / "whole"), _summary(tmp_path / "cut")
    assert whole["status"] == cut["status"] == "completed" and whole["steps"] == cut["steps"] == 2 * 17
    assert json.loads((tmp_path / "cut" / "config.json").read_text())["config"]["compile"] is compiled
    repeat = _relative_distance(tmp_path / "whole", tmp_path / "again")
    resumed = _relative_distance(tmp_path / "whole", tmp_path / "cut")
    how = "compiled + CUDA graphs" if compiled else "eager"
    figure(f"{how}, final weights: relative distance of two uninterrupted runs", f"{repeat:.2e}")
    figure(f"{how}, final weights: relative distance resumed vs uninterrupted", f"{resumed:.2e}")
    if compiled:
        rows = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
        assert rows[0]["compile_seconds"] > 0
        figure("compiled + CUDA graphs: first epoch's compile seconds", round(rows[0]["compile_seconds"], 1))
    assert resumed <= max(5 * repeat, 1e-6), (resumed, repeat)


def test_gns_at_target_leaves_a_gpu_trial_as_it_is(cuda, tiny, tmp_path, lbscale, figure):
    """--gns-at-target on the GPU (measured inside epoch 1, at step 5's evaluation; dropout on): the final weights
    differ from a run without it by no more than two runs without it differ (cuDNN's backward is not
    deterministic), and gns.json holds the measurement."""
    base = ["--data", tiny, "--global-batch", "32", "--optimizer", "sgd", "--base-lr", "0.05", "--epochs", "2",
            "--eval-every", "5", "--target-metric", "val_loss", "--target", "1e9", "--drop-rate", "0.3", *COMMON]
    for name, extra in (("with", ["--gns-at-target"]), ("plain", []), ("again", [])):
        rc, _, err = lbscale("train", *base, "--out", tmp_path / name, *extra)
        assert rc == 0, err
    g = json.loads((tmp_path / "with" / "gns.json").read_text())
    assert (g["source"], g["step"], g["count"]) == ("target", 5, 16) and g["b_simple"] is not None
    repeat = _relative_distance(tmp_path / "plain", tmp_path / "again")
    measured = _relative_distance(tmp_path / "plain", tmp_path / "with")
    figure("--gns-at-target, final weights: relative distance to a run without it", f"{measured:.2e}")
    figure("--gns-at-target: B_simple at step 5 (tiny)", round(g["b_simple"], 1))
    assert measured <= max(5 * repeat, 1e-6), (measured, repeat)


def test_a_compiled_trial_stopped_at_its_target_measures_and_evaluates_there(cuda, tiny, tmp_path, lbscale):
    """Under CUDA graphs (compile mode auto) the noise scale is measured eagerly on a copy of the network between
    graph replays, and the stopped trial evaluates the test split."""
    out = tmp_path / "stop"
    rc, _, err = lbscale("train", "--data", tiny, "--out", out, "--global-batch", "32", "--optimizer", "sgd",
                         "--base-lr", "0.05", "--epochs", "2", "--eval-every", "5", "--target-metric", "val_loss",
                         "--target", "1e9", "--stop-at-target", "--gns-at-target", "--compile", "--compile-mode",
                         "auto", "--precision", "bf16", *COMMON)
    assert rc == 0, err
    s, g = _summary(out), json.loads((out / "gns.json").read_text())
    assert (s["stopped"], s["steps"], g["source"], g["step"]) == ("target", 5, "target", 5)
    assert g["b_simple"] is not None and s["test"]["test_top1"] is not None
