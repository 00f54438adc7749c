"""The report against closed forms: result sets without noise (`make_trial(jitter=False)`), so every number a
figure, the verdict or a comparison shows is known before the report computes it (see make_results' docstring).

Expected values here never come from the report's own grouping: they are the model's formulas, written out."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lbscale.report import ReportOptions, headline, load_results, write_report
from lbscale.report import plots
from lbscale.report.scaling import target_steps
from tests.fixtures.make_results import make_study, make_trial

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in (ROOT / "lbscale" / "published").glob("*.csv"))  # whatever the package ships


def final(batch: int, break_batch: int = 16384) -> float:
    return 0.97 - (0.25 * math.log2(batch / break_batch) if batch > break_batch else 0.0)


def after_epoch(e: int, epochs: int, batch: int, break_batch: int = 16384) -> float:
    return final(batch, break_batch) * (1 - math.exp(-2 * e / epochs)) / (1 - math.exp(-2))


def poly_lr(step: int, peak: float, warmup_steps: int, total: int) -> float:
    """Linear warm-up from 0 to the peak, then poly decay of power 2 to 0 (the fixture's config defaults)."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    return peak * (1 - (step - warmup_steps) / max(1, total - warmup_steps)) ** 2


@pytest.fixture
def sat4(tmp_path):
    """Weak scaling: 8K/16K/32K/65K on 4/8/16/32 GPUs, two seeds; 65K diverges 40 % into epoch 1."""
    return load_results([make_study(tmp_path / "sat4", seeds=2, jitter=False)])


def test_verdict_of_a_lower_is_better_metric(tmp_path, run_cli):
    # break at 8000: 8192 loses 0.25 log2(1.024) = 0.0086 (within 0.01 of the best), 16384 loses 0.259
    res = tmp_path / "loss"
    for b in (4096, 8192, 16384):
        make_trial(res, b, 4, 0, break_batch=8000, jitter=False)
    loss = {b: 1.2 - final(b, 8000) for b in (4096, 8192, 16384)}
    assert loss[4096] < loss[8192] < loss[4096] + 0.01 < loss[16384]
    study = load_results([res])
    assert headline(study, "val_loss") == ("lamb-sqrt: best loss (val) 0.230 at 4K (1 seed), holds within 0.01 up to "
                                           "8K (3 batches completed)")
    assert headline(study, "val_top1") == ("lamb-sqrt: best accuracy (val) 0.970 at 4K (1 seed), holds within 0.01 "
                                           "up to 8K (3 batches completed)")
    rc, stdout, err = run_cli("report", res, "--out", tmp_path / "rep", "--metric", "val_loss", "--format", "md")
    assert rc == 0, err
    assert "best loss (val) 0.230 at 4K (1 seed), holds within 0.01 up to 8K" in stdout


def test_the_verdict_keeps_warmup_arms_apart_and_calls_pooled_trials_trials(tmp_path):
    """Three warm-up arms of one seed each were one 'mean of 3 seeds'; one seed at 1, 2 and 4 GPUs too."""
    arms = tmp_path / "arms"
    for w in (0, 5):
        for b in (4096, 8192):
            make_trial(arms, b, 4, 0, warmup=w, jitter=False)
    line = headline(load_results([arms]), "val_top1")
    assert line.startswith("lamb-sqrt warm-up 0: best accuracy (val) 0.970 at 4K (1 seed), holds") and \
        "; lamb-sqrt warm-up 5: best accuracy (val) 0.970 at 4K (1 seed)" in line
    gpus = tmp_path / "gpus"
    for g in (1, 2, 4):
        make_trial(gpus, 4096, g, 0, jitter=False)
    assert "(mean of 3 trials of 1 seed)" in headline(load_results([gpus]), "val_top1")


def test_the_verdict_of_one_completed_batch_says_so(tmp_path):
    """A sweep stopped after its first trial printed 'best accuracy (test) 0.654 at 32, holds within 0.01 up to
    32', as if batches had been compared: it now says what the number rests on."""
    res = tmp_path / "one"
    make_trial(res, 4096, 4, 0, jitter=False)
    make_trial(res, 4096, 4, 1, jitter=False)
    study = load_results([res])
    assert headline(study, "val_top1") == ("lamb-sqrt: accuracy (val) 0.970 at 4K (mean of 2 seeds); one batch "
                                           "completed, none to compare it with")


@pytest.mark.parametrize("metric", ["val_top1", "val_loss"])
def test_metric_vs_batch_plots_the_final_metric_and_marks_divergence_at_the_worst_end(sat4, metric):
    ax = plots.metric_vs_batch(sat4, metric).axes[0]
    line = ax.get_lines()[0]
    expected = [final(b) if metric == "val_top1" else 1.2 - final(b) for b in (8192, 16384, 32768)]
    assert list(line.get_xdata()) == [8192, 16384, 32768]
    np.testing.assert_allclose(np.asarray(line.get_ydata(), dtype=float), expected)
    marks = [c for c in ax.collections if c.get_label() == "lamb-sqrt: diverged"]
    assert len(marks) == 1
    (x, y), = marks[0].get_offsets()
    assert x == 65536
    # a diverged batch is the worst result: below every accuracy, above every loss
    assert y < min(expected) if metric == "val_top1" else y > max(expected)



@pytest.mark.parametrize("metric, column", [("val_top1", "metric"), ("val_loss", "loss")])
def test_metric_vs_batch_draws_the_papers_figure_of_the_same_metric(sat4, metric, column):
    from lbscale.report import published

    paper, _ = published("sat4-lamb")  # 8K-32K: accuracy 0.99 / 0.98 / 0.96, loss 0.02 / 0.07 / 0.11; 65K diverged
    ax = plots.metric_vs_batch(sat4, metric, paper).axes[0]
    line, = [ln for ln in ax.get_lines() if ln.get_label() == "paper"]
    assert list(line.get_xdata()) == [8192, 16384, 32768]
    np.testing.assert_allclose(line.get_ydata(), {"metric": [0.99, 0.98, 0.96], "loss": [0.02, 0.07, 0.11]}[column])
    (x, y), = [c for c in ax.collections if c.get_label() == "paper: diverged"][0].get_offsets()
    assert x == 65536 and (y < 0.96 if column == "metric" else y > 0.11)

def test_time_vs_gpus_and_speedup_plot_the_steady_time_per_epoch(sat4):
    # an epoch takes 160 / GPUs s after the first (1.3x: start-up); the diverged 65K run's partial epoch
    # extrapolates to 160 / 32 = 5 s
    gpus = [4, 8, 16, 32]
    seconds = [160 / k for k in gpus]
    measured, ideal = plots.time_vs_gpus(sat4).axes[0].get_lines()[:2]
    assert list(measured.get_xdata()) == gpus
    np.testing.assert_allclose(measured.get_ydata(), seconds)
    np.testing.assert_allclose(ideal.get_ydata(), [40 * 4 / k for k in gpus])
    speed_ax, eff_ax = plots.speedup(sat4).axes
    np.testing.assert_allclose(speed_ax.get_lines()[0].get_ydata(), [1, 2, 4, 8])
    np.testing.assert_allclose(eff_ax.get_lines()[0].get_ydata(), [100, 100, 100, 100])


def test_time_split_bars_are_compute_and_data_seconds(sat4):
    # five epochs of 160/GPUs s (the first 1.3x): 95 % compute, 5 % data; 65K: 2 s of which 0.1 s data
    total = {b: 160 / (b // 2048) * 5.3 for b in (8192, 16384, 32768)}
    compute = [0.95 * total[b] for b in (8192, 16384, 32768)] + [1.9]
    data = [0.05 * total[b] for b in (8192, 16384, 32768)] + [0.1]
    ax = plots.time_split(sat4).axes[0]
    computing, waiting, communicating, imbalanced = ax.containers
    np.testing.assert_allclose([bar.get_height() for bar in computing], compute)
    np.testing.assert_allclose([bar.get_height() for bar in waiting], data)
    assert len(communicating) == 0  # results without comm_seconds: no bars
    assert len(imbalanced) == 0  # ... and without imbalance_seconds
    np.testing.assert_allclose([bar.get_y() for bar in waiting], compute)  # stacked on the compute bars
    assert [t.get_text() for t in ax.get_xticklabels(minor=True)] == ["8K", "16K", "32K", "65K"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["lamb-sqrt"]


def test_steps_to_target_plots_the_first_epoch_at_the_target(sat4):
    target, epochs, reached = 0.9, 5, {}
    for b in (8192, 16384, 32768):
        first = next((e for e in range(1, epochs + 1) if after_epoch(e, epochs, b) >= target), None)
        if first is not None:
            reached[b] = first * (65536 // b)  # steps per epoch: 65,536 images / batch
    assert reached == {8192: 40, 16384: 20}  # 32K tops out at 0.72
    steps = target_steps(sat4, "val_top1", target, sat4.task)
    points, perfect = plots.steps_to_target(steps, "val_top1", target).axes[0].get_lines()[:2]
    assert list(points.get_xdata()) == list(reached)
    np.testing.assert_allclose(points.get_ydata(), list(reached.values()))
    np.testing.assert_allclose(perfect.get_ydata(), [40 * 8192 / b for b in reached])


def test_lr_schedule_figure_draws_each_warmup_with_its_own_schedule(tmp_path):
    res = tmp_path / "warm"
    for b in (8192, 16384):
        for w in (0, 2):
            make_trial(res, b, b // 2048, 0, warmup=w, epochs=4, jitter=False)
    lines = {line.get_label(): line for line in plots.lr_schedules(load_results([res])).axes[0].get_lines()}
    assert sorted(lines) == ["lamb-sqrt 16K warm-up 0", "lamb-sqrt 16K warm-up 2", "lamb-sqrt 8K warm-up 0",
                             "lamb-sqrt 8K warm-up 2"]
    for (b, label), w in [((b, f"{b // 1024}K"), w) for b in (8192, 16384) for w in (0, 2)]:
        line = lines[f"lamb-sqrt {label} warm-up {w}"]
        spe = 65536 // b
        total = 4 * spe
        steps = np.rint(np.asarray(line.get_xdata()) * spe).astype(int)
        assert list(steps) == list(range(total))
        peak = 0.01 * math.sqrt(b / 8192)  # sqrt rule from 0.01 at 8192
        np.testing.assert_allclose(line.get_ydata(), [poly_lr(s, peak, w * spe, total) for s in steps])


@pytest.mark.parametrize("name", SHIPPED)
def test_compare_puts_every_row_of_every_shipped_table_beside_ours(tmp_path, name):
    assert {"sat4-lamb", "sat6-lamb", "bigearthnet-lars", "mlperf-resnet50", "imagenet-records"} <= set(SHIPPED)
    res = make_study(tmp_path / "sat4", seeds=1, jitter=False)
    out, _ = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md", "csv"), compare=name,
                                               target=0.9))  # a target: the steps-to-target figure reads it too
    paper = pd.read_csv(ROOT / "lbscale" / "published" / f"{name}.csv", comment="#")
    ours = pd.read_csv(out / "tables" / "accuracy.csv")
    assert sorted(ours["paper_global_batch"].dropna()) == sorted(paper["global_batch"])  # every row, once
    if "metric" in paper:
        by_row = ours.dropna(subset=["paper_global_batch"]).sort_values(["paper_global_batch", "paper_metric"])
        want = paper.sort_values(["global_batch", "metric"])
        np.testing.assert_allclose(by_row["paper_metric"].to_numpy(float), want["metric"].to_numpy(float))
    own = ours.dropna(subset=["global_batch"]).set_index("global_batch")["val_top1_mean"]
    assert own[[8192, 16384, 32768]].tolist() == pytest.approx([final(b) for b in (8192, 16384, 32768)])
    assert math.isnan(own[65536])  # diverged in its first epoch: no final metric
