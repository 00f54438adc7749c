"""`lbscale train`: learning, DDP, accumulation, resume, preemption, divergence, result files."""

import json
import signal
import subprocess
import time

import pytest
import torch

from tests.train.helpers import env, run_train, summary, train_cmd

COMMON = ["--model", "test_resnet", "--quiet", "--check-every", "2", "--device", "cpu"]  # gloo, on any machine


def test_single_process_learns_and_writes_results(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "t"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--global-batch", "32", "--optimizer", "lamb",
                         "--base-lr", "0.004", "--lr-scaling", "none", "--epochs", "4", "--warmup-epochs", "auto",
                         "--warmup-ref-batch", "64", "--warmup-ref-epochs", "2", "--target-metric", "val_top1",
                         "--target", "0.5", *COMMON)
    assert rc == 0, err
    s = summary(out)
    assert s["status"] == "completed" and s["epochs_completed"] == 4 and s["steps"] == 4 * 17
    assert s["final"]["val_top1"] > 0.6  # 4 classes: chance is 0.25
    assert s["steps_to_target"] is not None and s["seconds_to_target"] > 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4]
    for key in ("train_seconds", "eval_seconds", "images_per_second", "data_seconds", "compute_seconds", "val_loss"):
        assert rows[0][key] > 0
    _copy_is_the_records(out)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["plan"]["warmup_epochs"] == 1.0 and cfg["plan"]["warmup_steps"] == 17  # auto: 2 x 32/64
    assert cfg["plan"]["local_batch"] == 32 and cfg["versions"]["torch"] == torch.__version__
    assert cfg["trainable_parameters"] > 0 and cfg["gradient_bytes"] == 4 * cfg["trainable_parameters"]  # fp32


def _copy_is_the_records(out):
    """The trial wrote metrics.columns.json, and a report reads it as metrics.jsonl's records."""
    from lbscale.train.columns import COLUMNS, digest, parse_records, read_columns

    data = (out / "metrics.jsonl").read_bytes()
    copy = read_columns(str(out / COLUMNS), data)
    assert copy is not None
    # a packed column (an array) as the list of its values: 1 and 1.0 still write apart
    assert json.dumps(copy, sort_keys=True, default=lambda a: a.tolist()) \
        == json.dumps(digest(parse_records(data, "m")), sort_keys=True)
    return copy


def test_gradient_size_counts_what_ddp_all_reduces():
    from lbscale.train.models import gradient_size

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2).to(torch.bfloat16))
    model[0].bias.requires_grad_(False)  # frozen: no gradient, nothing to all-reduce
    # trainable: 3 x 4 fp32 weights (4 bytes each), 4 x 2 + 2 bf16 (2 bytes each)
    assert gradient_size(model) == {"trainable_parameters": 12 + 10, "gradient_bytes": 12 * 4 + 10 * 2}


@pytest.mark.slow
def test_two_process_gloo_ddp_identical_parameters(tiny_h5, tmp_path):
    out = tmp_path / "ddp"
    r = run_train("--data", tiny_h5, "--out", out, "--global-batch", "64", "--optimizer", "lars", "--base-lr", "1.0",
                  "--epochs", "2", "--warmup-epochs", "1", *COMMON, nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    s = summary(out)
    assert s["status"] == "completed" and s["world_size"] == 2
    assert len(s["param_digests"]) == 2 and s["param_digests"][0] == s["param_digests"][1]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["backend"] == "gloo" and cfg["launcher"] == "torchrun" and cfg["plan"]["local_batch"] == 32


def _params(out):
    return torch.load(out / "checkpoint" / "model.pt", weights_only=False)["model"]


def test_accumulation_matches_large_batch_without_batchnorm(synthetic_h5, tmp_path, run_cli):
    base = ["--data", synthetic_h5, "--model", "test_convnext", "--global-batch", "64", "--optimizer", "sgd",
            "--base-lr", "0.05", "--epochs", "1", "--no-augment", "--quiet", "--channels-last"]
    assert run_cli("train", *base, "--out", tmp_path / "acc", "--local-batch", "16")[0] == 0
    assert run_cli("train", *base, "--out", tmp_path / "big", "--accum-steps", "1")[0] == 0
    assert json.loads((tmp_path / "acc" / "config.json").read_text())["plan"]["accum_steps"] == 4
    a, b = _params(tmp_path / "acc"), _params(tmp_path / "big")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)
    assert any(not torch.equal(a[k], torch.zeros_like(a[k])) for k in a)


def test_resume_after_preemption_equals_uninterrupted(tiny_h5, tmp_path, run_cli):
    base = ["--data", tiny_h5, "--global-batch", "32", "--optimizer", "nesterov", "--base-lr", "0.2",
            "--epochs", "2", "--warmup-epochs", "0.5", *COMMON]
    assert run_cli("train", *base, "--out", tmp_path / "whole")[0] == 0
    rc, _, _ = run_cli("train", *base, "--out", tmp_path / "cut", "--preempt-after-steps", "7")
    assert rc == 75 and not (tmp_path / "cut" / "summary.json").exists()
    assert torch.load(tmp_path / "cut" / "checkpoint" / "model.pt", weights_only=False)["step"] == 7
    info = json.loads((tmp_path / "cut" / "checkpoint" / "info.json").read_text())
    assert (info["reason"], info["step"]) == ("preempted", 7)
    assert run_cli("train", *base, "--out", tmp_path / "cut", "--resume")[0] == 0
    whole, cut = summary(tmp_path / "whole"), summary(tmp_path / "cut")
    assert whole["param_digests"] == cut["param_digests"]
    for k in ("val_top1", "val_loss", "train_loss"):
        assert whole["final"][k] == cut["final"][k]
    a, b = _params(tmp_path / "whole"), _params(tmp_path / "cut")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_for_requeue(tiny_h5, tmp_path):
    out = tmp_path / "sig"
    args = ["--data", tiny_h5, "--out", out, "--global-batch", "16", "--epochs", "50", "--model", "test_resnet",
            "--check-every", "1", "--quiet"]
    p = subprocess.Popen(train_cmd(*args), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 75, err[-2000:]
    assert (out / "checkpoint" / "model.pt").exists() and not (out / "summary.json").exists()
    r = run_train(*args[:-5], "--epochs", "2", "--model", "test_resnet", "--resume", "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    assert summary(out)["status"] == "completed"


def _diverge(data, out, run_cli):
    rc, _, err = run_cli("train", "--data", data, "--out", out, "--global-batch", "32", "--optimizer", "sgd",
                         "--base-lr", "1e6", "--epochs", "3", *COMMON)
    assert rc == 0, err
    return summary(out)


def test_absurd_lr_diverges_as_a_result(tiny_h5, tmp_path, run_cli):
    s = _diverge(tiny_h5, tmp_path / "div", run_cli)
    assert s["status"] == "diverged" and s["diverged_at"]["step"] >= 1 and s["epochs_completed"] < 3


def test_divergence_in_the_first_epoch_still_has_a_time_per_epoch(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "div1"
    s = _diverge(tiny_h5, out, run_cli)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert s["status"] == "diverged" and s["epochs_completed"] == 0 and len(rows) == 1
    part = rows[0]
    assert part["partial"] and 0 < part["epoch_fraction"] < 1 and part["step"] == s["diverged_at"]["step"]
    assert part["train_seconds"] > 0 and part["images_per_second"] > 0
    # a full pass of the 560 train samples at the pace of the samples trained
    assert part["epoch_seconds_estimate"] == pytest.approx(part["train_seconds"] * 560 / part["samples"])
    assert part["samples"] == 32 * round(part["epoch_fraction"] * 17)
    assert s["mean_epoch_seconds"] == part["epoch_seconds_estimate"] and s["epoch_seconds_estimated"]
    assert s["partial_epoch"] == part and s["final"] is None
    copy = _copy_is_the_records(out)
    assert copy["timing"]["epoch_seconds"] == part["epoch_seconds_estimate"] and copy["evaluation_count"] == 0


@pytest.mark.parametrize("args, needle", [
    (["--global-batch", "100", "--local-batch", "30"], "not a multiple of local batch"),
    (["--global-batch", "4096"], "larger than the train split"),
    (["--optimizer", "adagrad"], "--optimizer"),
    (["--model", "resnet_9000"], "not a timm model"),
    (["--warmup-epochs", "soon"], "--warmup-epochs"),
    (["--target", "0.9"], "--target and --target-metric"),
    (["--milestones", "3,6", "--milestone-factors", "0.1"], "one factor per milestone"),
    (["--global-batch", "0"], "--global-batch must be >= 1"),
    (["--label-set", "labels_43"], "no label set"),
])
def test_bad_options_one_line_exit_2(tiny_h5, tmp_path, run_cli, args, needle):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", *args, "--quiet")
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x" / "summary.json").exists()


def test_missing_data_and_finished_out(tiny_h5, tmp_path, run_cli):
    rc, _, err = run_cli("train", "--data", tmp_path / "none.h5", "--out", tmp_path / "x")
    assert rc == 2 and "no such file" in err
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "summary.json").write_text('{"status": "completed"}')
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "done")
    assert rc == 2 and "finished trial" in err


def test_yaml_config_and_cli_override(tiny_h5, tmp_path, run_cli):
    cfg = tmp_path / "trial.yaml"
    cfg.write_text(f"data: {tiny_h5}\nmodel: test_resnet\nglobal-batch: 64\noptimizer: lamb\nbase_lr: 0.01\n"
                   "lr_scaling: sqrt\nref_batch: 16\nepochs: 1\n")
    out = tmp_path / "y"
    rc, _, err = run_cli("train", "--config", cfg, "--out", out, "--epochs", "2", "--quiet")
    assert rc == 0, err
    c = json.loads((out / "config.json").read_text())
    assert c["config"]["epochs"] == 2 and c["config"]["optimizer"] == "lamb"
    assert c["plan"]["peak_lr"] == pytest.approx(0.02)  # sqrt(64 / 16) x 0.01
    cfg.write_text("data: x\nbatch_size: 5\n")
    rc, _, err = run_cli("train", "--config", cfg, "--out", out)
    assert rc == 2 and "unknown key 'batch_size'" in err


@pytest.mark.slow
def test_gradient_noise_scale_during_ddp_training_leaves_training_unchanged(tiny_h5, tmp_path):
    base = ["--data", tiny_h5, "--global-batch", "64", "--optimizer", "sgd", "--base-lr", "0.1", "--epochs", "2",
            "--accum-steps", "2", *COMMON]
    r = run_train(*base, "--out", tmp_path / "gns", "--gns-every", "2", nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    r = run_train(*base, "--out", tmp_path / "plain", nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    s, plain = summary(tmp_path / "gns"), summary(tmp_path / "plain")
    assert s["param_digests"] == plain["param_digests"]  # the hook is DDP's all-reduce otherwise
    g = s["gns"]
    assert g["source"] == "training" and g["count"] == s["steps"] // 2
    assert (g["b_small"], g["b_big"]) == (32, 64)  # local batch 16 x 2 accumulation steps; the global batch
    assert g["b_simple"] is not None and g["trace"] > 0
    rows = [json.loads(line) for line in (tmp_path / "gns" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["gns_measurements"] > 0 for r in rows)
    assert all(r["comm_seconds"] > 0 for r in rows)  # the comm timer hands its buckets to the noise-scale hook


def test_gns_every_needs_several_processes(tiny_h5, tmp_path, run_cli):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", "--gns-every", "5", *COMMON)
    assert rc == 2 and "2 or more processes" in err and not (tmp_path / "x").exists()


def test_progress_in_a_log_is_one_plain_line_per_epoch(tiny_h5, tmp_path):
    r = run_train("--data", tiny_h5, "--out", tmp_path / "log", "--model", "test_resnet", "--global-batch", "32",
                  "--epochs", "2", "--device", "cpu")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "\r" not in r.stderr and r.stderr.count("epoch 1/2: train_loss") == 1 and "epoch 2/2:" in r.stderr
    assert "val_top1" in r.stderr and "img/s" in r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("trial completed: test_top1")  # outcome: test figure


def test_compile_mode_auto_is_cuda_graphs_on_a_gpu_only():
    from lbscale.train.plan import compile_mode

    assert compile_mode("auto", "cpu") == "default"
    assert compile_mode("auto", "cuda") == "reduce-overhead"
    assert compile_mode("max-autotune", "cpu") == "max-autotune"


@pytest.mark.slow
def test_compiled_trial_reports_compile_time_once(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "c"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--global-batch", "32", "--epochs", "2",
                         "--compile", *COMMON)
    assert rc == 0, err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["compile_seconds"] > 0 and "compile_seconds" not in rows[1]
    assert summary(out)["status"] == "completed"
