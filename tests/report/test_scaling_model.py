"""`lbscale report --allreduce FILE`: each scaling series' time per epoch predicted from its measured point at the
fewest GPUs and a fitted ring all-reduce, at the GPU counts it ran and at counts it did not.

The results are closed forms (make_results, `jitter=False`): an epoch trains 160 / GPUs s (the first 1.3x),
5 % of it waiting for the gradient all-reduce; 65,536 training images; 100 MiB of gradients (4 of DDP's 25 MiB
buckets). The all-reduce file is written by hand: alpha 100 us, beta 1e-8 s/B (0.1 GB/s). Every expected value
is the model's formula written out here, never the report's own arithmetic."""

import json

import numpy as np
import pandas as pd
import pytest

from lbscale.report import load_results, plots
from lbscale.report.scaling_model import default_gpus, predict_scaling
from tests.fixtures.make_results import make_trial

N = 65536  # training images
G = 100 * 2 ** 20  # gradient bytes: 4 buckets of 25 MiB
ALPHA, BETA = 1e-4, 1e-8
COMM = 0.05  # of each epoch's training time, the exposed all-reduce wait
EPOCHS = 5


def ring(p: int) -> float:
    """The ring all-reduce of the gradients over p GPUs, 4 buckets: 4 * 2 (p-1) alpha + 2 (p-1)/p G beta."""
    return 0.0 if p == 1 else 4 * 2 * (p - 1) * ALPHA + 2 * (p - 1) / p * G * BETA


def base(k0: int, batch: int) -> tuple[float, float]:
    """Seconds per step and exposed comm per step measured at k0 GPUs: the time per epoch (160 / k0, the full
    epochs after the first) over the N / batch steps of a full pass; comm per step: the share COMM of those
    same epochs' time (not of the first, which is 1.3x and would weigh in if comm were averaged over all)."""
    steps = N / batch
    return 160 / k0 / steps, COMM * 160 / k0 / steps


def weak(k: int) -> float:
    """Local batch 2048, measured at K0 = 4: compute per step fixed, N / (2048 K) steps."""
    step, comm = base(4, 8192)
    f = comm / ring(4)
    return N / (2048 * k) * (step - comm + f * ring(k))


def strong(k: int) -> float:
    """Global batch 8192, measured at K0 = 2: N / 8192 steps; compute per step shrinks as 2 / K."""
    step, comm = base(2, 8192)
    f = comm / ring(2)
    return N / 8192 * ((step - comm) * 2 / k + f * ring(k))


def weak_loss(k: int) -> float:
    step, comm = base(4, 8192)
    exposed = comm / ring(4) * ring(k)
    return exposed / (step - comm + exposed)


@pytest.fixture
def results(tmp_path):
    """Strong scaling: 8K on 2, 4, 8 GPUs; weak scaling: local batch 2048 on 4, 8, 16 GPUs (8K, 16K, 32K)."""
    res = tmp_path / "model"
    for batch, gpus in ((8192, 2), (8192, 4), (8192, 8), (16384, 8), (32768, 16)):
        make_trial(res, batch, gpus, 0, jitter=False, comm_share=COMM, gradient_bytes=G)
    return res


def _allreduce(path, **fit):
    doc = {"system": "testbed", "backend": "nccl", "device": "cuda",
           "points": [{"procs": 2, "bytes": 4096, "seconds": 2.4e-4}, {"procs": 4, "bytes": 4096, "seconds": 6e-4}],
           "fit": {"alpha_seconds": ALPHA, "beta_seconds_per_byte": BETA, "bandwidth_GBps": 1 / BETA / 1e9,
                   "fitted_on_procs": [2, 4], "rms_relative_error": 0.12, **fit}}
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def allreduce(tmp_path):
    return _allreduce(tmp_path / "allreduce-testbed.json")


def _rows(frame, regime):
    return frame[frame["regime"] == regime].set_index("gpus")


def test_the_exposed_fraction_is_calibrated_not_clipped():
    # the fixture must exercise the calibration f = comm / ring(K0) < 1, not the clip at 1
    assert base(4, 8192)[1] < ring(4) and base(2, 8192)[1] < ring(2)


def test_predictions_at_measured_and_unrun_counts_follow_the_formula(results, allreduce):
    study = load_results([results])
    frame, notes = predict_scaling(study.trials, json.loads(allreduce.read_text()), gpus=[128, 1024])
    w, s = _rows(frame, "weak"), _rows(frame, "strong")
    assert list(w.index) == [4, 8, 16, 128, 1024] and list(s.index) == [2, 4, 8, 128, 1024]
    assert list(w["source"]) == ["measured"] * 3 + ["predicted"] * 2
    np.testing.assert_allclose(w["predicted_epoch_seconds"], [weak(k) for k in (4, 8, 16, 128, 1024)], rtol=1e-9)
    np.testing.assert_allclose(s["predicted_epoch_seconds"], [strong(k) for k in (2, 4, 8, 128, 1024)], rtol=1e-9)
    # beside the measurement: 160 / K s per epoch, the ratio predicted / measured (1 at the base)
    np.testing.assert_allclose(w["measured_epoch_seconds"][:3], [40, 20, 10])
    np.testing.assert_allclose(w["ratio"][:3], [weak(4) / 40, weak(8) / 20, weak(16) / 10], rtol=1e-9)
    assert w.loc[4, "ratio"] == pytest.approx(1.0) and s.loc[2, "ratio"] == pytest.approx(1.0)
    assert w["measured_epoch_seconds"][3:].isna().all() and w["ratio"][3:].isna().all()
    # the efficiency lost to communication, and the model's efficiency against the base
    np.testing.assert_allclose(w["comm_efficiency_loss"], [weak_loss(k) for k in (4, 8, 16, 128, 1024)])
    assert w.loc[1024, "efficiency"] == pytest.approx(weak(4) * 4 / (weak(1024) * 1024))
    assert s.loc[1024, "efficiency"] == pytest.approx(strong(2) * 2 / (strong(1024) * 1024))
    # the batches the prediction assumes: weak grows the global batch, strong shrinks the local one
    assert w.loc[1024, "global_batch"] == 2048 * 1024 and w.loc[1024, "local_batch"] == 2048
    assert s.loc[1024, "global_batch"] == 8192 and s.loc[1024, "local_batch"] == 8
    assert w.loc[128, "buckets"] == 4 and w.loc[128, "exposed_fraction"] == pytest.approx(base(4, 8192)[1] / ring(4))
    assert any("base 4 GPUs" in n for n in notes)


def test_default_counts_double_from_twice_the_largest_to_1024():
    assert default_gpus(16) == [32, 64, 256, 1024]
    assert default_gpus(8) == [16, 64, 256, 1024]
    assert default_gpus(4) == [8, 16, 64, 256, 1024]
    assert default_gpus(32) == [64, 128, 256, 512, 1024]
    assert default_gpus(1024) == [2048]


def test_strong_scaling_stops_where_a_gpu_would_get_less_than_one_image(results, allreduce):
    study = load_results([results])
    frame, notes = predict_scaling(study.trials, json.loads(allreduce.read_text()), gpus=[4096, 16384])
    s = _rows(frame, "strong")
    assert list(s.index) == [2, 4, 8, 4096]
    assert any("16384 GPUs" in n and "below one image" in n for n in notes)


def test_report_with_allreduce_tables_the_prediction(results, allreduce, tmp_path, run_cli):
    out = tmp_path / "rep"
    rc, stdout, err = run_cli("report", results, "--out", out, "--format", "md,csv", "--allreduce", allreduce,
                              "--predict-gpus", "128,1024")
    assert rc == 0, err
    csv = pd.read_csv(out / "tables" / "scaling-model.csv")
    w = _rows(csv, "weak")
    np.testing.assert_allclose(w["predicted_epoch_seconds"], [weak(k) for k in (4, 8, 16, 128, 1024)], rtol=1e-9)
    assert list(w["source"]) == ["measured"] * 3 + ["predicted"] * 2
    md = (out / "report.md").read_text()
    scaling, model = md.index("## Scaling: time per epoch"), md.index("## Scaling model")
    assert scaling < model < md.index("## Trials without a result")  # right after the scaling table
    table = md[model:md.index("## Trials without a result")]
    assert "| weak scaling | predicted | 1024 | 2097K | 2048 | - |" in table
    assert f"{weak(1024):.3f} | - |" in table
    assert "alpha 100 us, bandwidth 0.1 GB/s" in table and "testbed" in table and "nccl" in table
    assert "fitted on 2, 4 processes" in table and "docs/scaling-model.md" in table
    line = stdout.strip().splitlines()[-1]
    assert (f"predicted at 1024 GPUs (lamb-sqrt, weak scaling): {weak(1024):.3f} s per epoch, "
            f"{100 * weak_loss(1024):.0f}% lost to communication") in line
    assert len(stdout.strip().splitlines()) == 1


def test_figures_show_the_prediction_hollow_and_dashed(results, allreduce):
    study = load_results([results])
    frame, _ = predict_scaling(study.trials, json.loads(allreduce.read_text()), gpus=[128, 1024])
    ax = plots.time_vs_gpus(study, predicted=frame).axes[0]
    model = [ln for ln in ax.get_lines() if ln.get_label().endswith("model")]
    assert len(model) == 2  # one per series
    weak_line = next(ln for ln in model if "weak" in ln.get_label())
    assert weak_line.get_linestyle() == "--" and weak_line.get_markerfacecolor() == "none"
    assert list(weak_line.get_xdata()) == [4, 8, 16, 128, 1024]
    np.testing.assert_allclose(weak_line.get_ydata(), [weak(k) for k in (4, 8, 16, 128, 1024)], rtol=1e-9)
    measured = next(ln for ln in ax.get_lines() if ln.get_label() == "lamb-sqrt, weak (local 2048)")
    assert weak_line.get_color() == measured.get_color() and measured.get_linestyle() == "-"
    speed_ax, eff_ax = plots.speedup(study, predicted=frame).axes
    speed = next(ln for ln in speed_ax.get_lines() if ln.get_label() == "lamb-sqrt (strong scaling): model")
    np.testing.assert_allclose(speed.get_ydata(), [strong(2) / strong(k) for k in (2, 4, 8, 128, 1024)])
    eff = next(ln for ln in eff_ax.get_lines() if "weak" in ln.get_label() and ln.get_label().endswith("model"))
    assert eff.get_linestyle() == "--" and eff.get_markerfacecolor() == "none"
    np.testing.assert_allclose(eff.get_ydata(), [100 * weak(4) * 4 / (weak(k) * k) for k in (4, 8, 16, 128, 1024)])


def test_report_without_allreduce_has_no_prediction(results, tmp_path, run_cli):
    out = tmp_path / "rep"
    rc, stdout, err = run_cli("report", results, "--out", out, "--format", "md,csv")
    assert rc == 0, err
    assert not (out / "tables" / "scaling-model.csv").exists()
    assert "source" not in pd.read_csv(out / "tables" / "scaling.csv")
    md = (out / "report.md").read_text()
    assert "Scaling model" not in md and "predicted" not in md.lower()
    assert "predicted" not in stdout
    ax = plots.time_vs_gpus(load_results([results])).axes[0]
    assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]


@pytest.mark.parametrize("setup, needle", [
    (lambda p: p.write_text("{not json"), "not valid JSON"),
    (lambda p: p.write_text(json.dumps({"points": []})), "'fit'"),
    (lambda p: p.write_text(json.dumps({"points": [], "fit": {"alpha_seconds": -1, "beta_seconds_per_byte": 0}})),
     "alpha_seconds"),
    (lambda p: None, "no such file"),
    (lambda p: p.mkdir(), "not a file"),
])
def test_a_malformed_allreduce_file_is_one_line_and_writes_nothing(results, tmp_path, run_cli, setup, needle):
    bad = tmp_path / "allreduce.json"
    setup(bad)
    before = set(tmp_path.iterdir())
    rc, stdout, err = run_cli("report", results, "--out", tmp_path / "reports" / "rep", "--allreduce", bad)
    assert rc == 2 and needle in err and str(bad) in err and len(err.strip().splitlines()) == 1, err
    assert set(tmp_path.iterdir()) == before  # not even the report's parent directory


@pytest.mark.parametrize("args, needle", [
    (["--predict-gpus", "128"], "--predict-gpus needs --allreduce"),
    (["--allreduce", "A", "--predict-gpus", "0,64"], "--predict-gpus"),
    (["--allreduce", "A", "--predict-gpus", "many"], "--predict-gpus"),
])
def test_bad_predict_gpus_is_one_line(results, allreduce, tmp_path, run_cli, args, needle):
    args = [str(allreduce) if a == "A" else a for a in args]
    rc, _, err = run_cli("report", results, "--out", tmp_path / "rep", *args)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "rep").exists()


def test_results_without_gradient_bytes_or_comm_are_named_and_skipped(tmp_path, allreduce, run_cli):
    old = tmp_path / "old"  # an lbscale before config.json recorded the gradients
    for batch, gpus in ((8192, 4), (16384, 8)):
        make_trial(old, batch, gpus, 0, jitter=False, comm_share=COMM)
    untimed = tmp_path / "untimed"  # gradients recorded, but communication counted in compute
    for batch, gpus in ((8192, 4), (16384, 8)):
        make_trial(untimed, batch, gpus, 0, jitter=False, gradient_bytes=G)
    doc = json.loads(allreduce.read_text())
    frame, notes = predict_scaling(load_results([old]).trials, doc)
    assert frame.empty and any("gradient_bytes" in n for n in notes)
    frame, notes = predict_scaling(load_results([untimed]).trials, doc)
    assert frame.empty and any("comm_seconds" in n for n in notes)
    rc, stdout, err = run_cli("report", old, "--out", tmp_path / "rep", "--format", "md,csv",
                              "--allreduce", allreduce)
    assert rc == 0, err
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Scaling model" in md and "gradient_bytes" in md
    assert "no prediction" in stdout.strip().splitlines()[-1]


def test_a_study_of_one_gpu_count_predicts_nothing_without_failing(tmp_path, allreduce, run_cli):
    res = tmp_path / "one"
    make_trial(res, 8192, 4, 0, jitter=False, comm_share=COMM, gradient_bytes=G)
    rc, stdout, err = run_cli("report", res, "--out", tmp_path / "rep", "--format", "md", "--allreduce", allreduce)
    assert rc == 0, err
    assert "no prediction" in stdout
