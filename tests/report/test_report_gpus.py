"""`lbscale report --allreduce`: the scaling section opens with time to target and GPU-hours. Checked against
the trial files read here (a measured configuration is its measured steps x its measured step time), the
recommendation against the table it comes from, and the one-run approximation by hand."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from lbscale.report.tables import batch_label
from tests.fixtures.make_results import make_trial
from tests.report.pictures import assert_drawn

TARGET = 0.8
GRAD = 100_000_000


@pytest.fixture
def allreduce(tmp_path):
    doc = {"system": "testbed", "backend": "gloo", "device": "cpu",
           "points": [{"procs": 2, "bytes": 4096, "seconds": 2.4e-4}, {"procs": 4, "bytes": 4096, "seconds": 6e-4}],
           "fit": {"alpha_seconds": 5e-5, "beta_seconds_per_byte": 2e-10, "bandwidth_GBps": 5.0,
                   "fitted_on_procs": [2, 4], "rms_relative_error": 0.1}}
    path = tmp_path / "allreduce.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def study(tmp_path):
    res = tmp_path / "study"
    for b in (512, 1024, 2048, 4096):
        for g in sorted({1, b // 512}):
            for seed in range(2):
                make_trial(res, b, g, seed, epochs=8, target=TARGET, gradient_bytes=GRAD,
                           comm_share=0.2 if g > 1 else None)
    return res


def _records(trial_dir):
    return [json.loads(line) for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]


def _measured(res, batch, gpus):
    """Steps to target and seconds per step of the (batch, gpus) trials, read from their records here: the first
    epoch record at the target (mean over seeds); the steady epochs' train_seconds per step (after the first)."""
    steps, per_step = [], []
    for d in sorted(res.glob(f"b{batch}-g{gpus}-*")):
        recs = [r for r in _records(d) if "train_seconds" in r]
        steps.append(next(r["step"] for r in recs if r["val_top1"] >= TARGET))
        prev = {r["epoch"]: r["step"] for r in recs}
        per_step.append(sum(r["train_seconds"] / (r["step"] - prev[r["epoch"] - 1]) for r in recs[1:])
                        / (len(recs) - 1))
    return sum(steps) / len(steps), sum(per_step) / len(per_step)


def test_the_scaling_section_opens_with_time_to_target(study, allreduce, tmp_path, run_cli):
    out = tmp_path / "rep"
    rc, stdout, err = run_cli("report", study, "--out", out, "--allreduce", allreduce, "--gpu-budget", 4)
    assert rc == 0, err
    md = (out / "report.md").read_text()
    assert md.index("## Time to target and GPU-hours") < md.index("## Scaling: time per epoch")
    t = pd.read_csv(out / "tables" / "time-to-target.csv")
    row = t[(t["gpus"] == 8)].iloc[0]  # batch 4,096 on 8 GPUs was run: its time is the measurement
    assert (row["global_batch"], row["step_source"]) == (4096, "measured")
    steps, step = _measured(study, 4096, 8)
    # its steps: the model over every trial at that batch, within 2% of the measured mean, whose time lies in the
    # row's interval (the model's and the measured step's)
    assert row["steps"] == pytest.approx(steps, rel=0.02) and row["step_seconds"] == pytest.approx(step, rel=1e-9)
    assert row["seconds"] == pytest.approx(row["steps"] * step, rel=1e-9)
    assert row["seconds_lo"] < steps * step < row["seconds_hi"]
    assert row["gpu_hours"] == pytest.approx(8 * row["steps"] * step / 3600, rel=1e-9)
    # the recommendation: the fastest row within 4 GPUs, named in the verdict and the closing line
    within = t[t["gpus"] <= 4].sort_values("seconds").iloc[0]
    assert (f"fastest within 4 GPUs: batch {batch_label(within['global_batch'])} on {int(within['gpus'])} GPUs"
            in stdout)
    assert "How many GPUs" in md.split("## Verdict")[1].split("##")[0]
    assert_drawn(out / "figures" / "time-to-target.png")
    assert (out / "figures" / "time-to-target.pdf").stat().st_size > 0


def test_gpu_budget_without_an_allreduce_fit_is_one_line(study, tmp_path, run_cli):
    rc, _, err = run_cli("report", study, "--out", tmp_path / "rep", "--gpu-budget", 8)
    assert rc == 2 and "--allreduce" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "rep").exists()


def test_one_run_approximation_from_the_noise_scale_near_the_target(tmp_path, allreduce, run_cli):
    res = tmp_path / "one"
    d = make_trial(res, 1024, 1, 0, epochs=8, target=TARGET, gradient_bytes=GRAD)
    recs = _records(d)
    hit = next(r for r in recs if "train_seconds" in r and r["val_top1"] >= TARGET)
    # a step evaluation with the smoothed noise scale just before the target, one after it (not used)
    extra = [{"kind": "step", "step": hit["step"] - 1, "epoch": hit["epoch"] - 0.01, "val_top1": TARGET - 0.01,
              "elapsed_seconds": 1.0, "gns_b_simple": 2048.0},
             {"kind": "step", "step": hit["step"] + 1, "epoch": hit["epoch"] + 0.01, "val_top1": TARGET + 0.01,
              "elapsed_seconds": 2.0, "gns_b_simple": 99999.0}]
    with (d / "metrics.jsonl").open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in extra)
    out = tmp_path / "rep"
    rc, stdout, err = run_cli("report", d, "--out", out, "--allreduce", allreduce)
    assert rc == 0, err
    t = pd.read_csv(out / "tables" / "time-to-target.csv")
    one = t[t["basis"] == f"one run ({d.name})"]
    assert len(one) and set(t.loc[t["basis"] == "study", "global_batch"]) == {1024}  # the study: its one batch
    s_min = hit["step"] / (1 + 2048 / 1024)  # S_min = S_run / (1 + B_simple / B_run)
    for r in one.itertuples():
        assert r.steps == pytest.approx(s_min * (1 + 2048 / r.global_batch))
    md = (out / "report.md").read_text()
    assert "one run, approximately" in md and "assumes SGD-like dynamics" in md
    assert not math.isnan(one["seconds"].min())


def test_steps_rest_on_the_model_over_the_trials_and_each_warmup_arm():
    from lbscale.report.gpus import reached_per_batch, study_bases

    noise = {64: 1.05, 128: 0.93, 256: 1.04, 512: 0.97, 1024: 1.02}
    rows = [{"variant": "sgd", "warmup": w, "global_batch": b, "steps": 1000 * (1 + 256 / b) * f * (1 + w) * g,
             "last_step": None} for w in (0, 5) for b, f in noise.items() for g in (0.98, 1.02)]
    rows += [{"variant": "sgd", "warmup": w, "global_batch": 2048, "steps": math.nan, "last_step": 1500.0}
             for w in (0, 5)]
    per_trial = pd.DataFrame(rows).assign(step_before=lambda d: d["steps"] * 0.99)
    bases = study_bases(reached_per_batch(per_trial), per_trial)
    assert [b.variant for b in bases] == ["sgd, warm-up 0", "sgd, warm-up 5"]  # never averaged together
    for basis in bases:
        s = basis.steps.set_index("global_batch")
        assert "the steps model over every trial" in basis.note
        for b in noise:  # a reached batch: the model's value with its interval, never zero-width
            assert s.loc[b, "steps_lo"] < s.loc[b, "steps"] < s.loc[b, "steps_hi"]
            assert s.loc[b, "steps_source"] == "model"
        assert s.index.max() == 1024  # 2,048 was run and missed: nothing predicted at or past it
    # the seeds' spread where a batch is measured without a model: the t-interval of its mean log steps
    one = reached_per_batch(per_trial).set_index(["variant", "global_batch"]).loc[("sgd, warm-up 0", 64)]
    y = np.log(1000 * (1 + 256 / 64) * 1.05 * np.array([0.98, 1.02]))
    half = 6.3137515 * y.std(ddof=1) / math.sqrt(2)  # t(1) at 95%
    assert one["steps_lo"] == pytest.approx(math.exp(y.mean() - half), rel=1e-6)


def test_a_diverged_published_run_is_not_a_time_to_accuracy():
    from lbscale.report.gpus import published_rows

    compare = pd.DataFrame({"global_batch": [512, 8192, 16384], "gpus": [8, 128, 256],
                            "total_seconds": [49400, 3400, 2000], "diverged": [0, 0, 1]})
    grid = pd.DataFrame({"basis": ["study"], "global_batch": [512.0], "gpus": [8], "seconds": [1234.0]})
    t = published_rows(compare, grid)
    assert list(t.tidy["global_batch"]) == [512, 8192]
    assert t.tidy["predicted_seconds"].iloc[0] == 1234.0 and math.isnan(t.tidy["predicted_seconds"].iloc[1])


def test_a_tuned_study_gets_the_section_and_one_recommendation(tmp_path, allreduce, run_cli):
    from tests.report.make_tuned import make_tuned_trial

    res = tmp_path / "tuned"
    for b in (32, 64, 128, 256):
        for p, f in enumerate((0.5, 1.0, 2.0)):
            make_tuned_trial(res, b, 0.02 * b ** 0.5 * f, p, 0, epochs=6)
    out = tmp_path / "rep"
    rc, stdout, err = run_cli("report", res, "--out", out, "--allreduce", allreduce, "--deadline", 1000)
    assert rc == 0, err
    assert stdout.count("How many GPUs") == 1 and "cheapest within 1000 h: batch" in stdout
    # the table's rows past the measured batches are extrapolated (B_crit bounded: two doublings); the line ranks
    # the measured range only, where a step takes 0.01 s at every batch: the largest batch run, the fewest steps
    t = pd.read_csv(out / "tables" / "time-to-target.csv")
    assert t["steps_source"].str.contains("extrapolated").any()
    assert "cheapest within 1000 h: batch 256 on 1 GPU," in stdout
