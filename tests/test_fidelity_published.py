"""The published tables against the numbers their sources give (issue 19, items 1-4): every row checked."""

import math
import re
from pathlib import Path

import pytest

from lbscale.report import published

ROOT = Path(__file__).resolve().parents[1]


def _header(name: str) -> str:
    """The comment lines of a published table, wherever the package keeps it."""
    for d in (ROOT / "lbscale" / "published", ROOT / "results" / "published"):
        if (d / f"{name}.csv").is_file():
            return "".join(line for line in (d / f"{name}.csv").read_text().splitlines(True) if line.startswith("#"))
    raise AssertionError(f"no published table {name}")


def _seconds(text: str) -> tuple[float, float]:
    """'29 h' -> (104400, 1800): the time as written and half a unit of its last digit (the rounding)."""
    value, unit = re.fullmatch(r"([\d.]+) (h|min|s)", text).groups()
    scale = {"h": 3600, "min": 60, "s": 1}[unit]
    decimals = len(value.partition(".")[2])
    return float(value) * scale, 0.5 * 10 ** -decimals * scale


# The slides' first table: (work, batch as written, global batch, processors, processor, time, top-1).
RECORDS = [
    ("He", "256", 256, 8, "P100 x 8", "29 h", 0.753),
    ("Goyal", "8,192", 8192, 256, "P100 x 256", "1 h", 0.763),
    ("Smith", "8,192 -> 16,384", 16384, None, "full TPU pod", "30 min", 0.761),
    ("Akiba", "32,768", 32768, 1024, "P100 x 1024", "15 min", 0.749),
    ("Jia", "65,536", 65536, 2048, "P40 x 2048", "6.6 min", 0.758),
    ("Ying", "65,536", 65536, 1024, "TPU v3 x 1024", "1.8 min", 0.752),
    ("Mikami", "55,296", 55296, 3456, "V100 x 3456", "2.0 min", 0.7529),
    ("Yamazaki", "81,920", 81920, 2048, "V100 x 2048", "1.2 min", 0.7508),
]
# The second table: (work, global batch, processors, steps, seconds per step, time, top-1).
STEPS = [
    ("You", 32768, 2048, 3519, 0.341, "20 min", 0.754),
    ("You", 32768, 2048, 2503, 0.335, "14 min", 0.749),
    ("Ying", 32768, 1024, 3519, 0.037, "2.2 min", 0.763),
    ("Goyal", 8192, 256, 14076, 0.255, "1 h", 0.763),
    ("Akiba", 32768, 1024, 3519, 0.255, "15 min", 0.749),
    ("Jia", 65536, 2048, 1800, 0.220, "6.6 min", 0.758),
    ("Mikami", 55296, 3456, 2086, 0.057, "2.0 min", 0.7529),
    ("Yamazaki", 81920, 2048, 1440, 0.050, "1.2 min", 0.7508),
]


def _same(a, b) -> bool:
    if b is None:
        return a is None or (isinstance(a, float) and math.isnan(a))
    return a == pytest.approx(b)


def test_records_first_table_row_by_row():
    table, source = published("imagenet-records")
    assert "Jitsev" in source and "first table" in source
    assert len(table) == len(RECORDS)
    for (work, as_given, batch, procs, proc, time, top1), (_, row) in zip(RECORDS, table.iterrows()):
        assert row.work.startswith(work) and row.batch_as_given == as_given, row.work
        assert (row.global_batch, row.hardware.replace(",", ""), row.time_as_given) == (batch, proc, time), work
        assert _same(row.gpus, procs) and row.metric == pytest.approx(top1), work
        assert row.total_seconds == pytest.approx(_seconds(time)[0]), work
    assert "steps" not in table  # the first table gives none: they are the second table's


def test_records_second_table_steps_times_step_time_is_the_time():
    table, source = published("imagenet-records-steps")
    assert "Jitsev" in source and "second table" in source
    assert len(table) == len(STEPS)
    for (work, batch, procs, steps, per_step, time, top1), (_, row) in zip(STEPS, table.iterrows()):
        assert row.work.startswith(work), row.work
        assert (row.global_batch, row.gpus, row.steps, row.time_as_given) == (batch, procs, steps, time), work
        assert row.step_seconds == pytest.approx(per_step) and row.metric == pytest.approx(top1), work
        seconds, rounding = _seconds(time)
        assert row.total_seconds == pytest.approx(seconds), work
        assert abs(row.steps * row.step_seconds - row.total_seconds) <= rounding, work
    you = table[table.work.str.startswith("You")]
    assert set(you.hardware.str.replace(",", "")) == {"KNL x 2048"}
    # Goyal's 14,076 steps: 90 epochs of ImageNet-1k's 1,281,167 train images at 8,192, rounded up
    assert table.steps[table.work.str.startswith("Goyal")].item() == math.ceil(90 * 1281167 / 8192)


def test_report_time_table_shows_steps_and_time_per_step(tmp_path):
    from lbscale.report import load_results
    from lbscale.report.tables import time_table
    from tests.fixtures.make_results import make_trial

    make_trial(tmp_path / "r", 8192, 256, 0, variant="sgd-linear", train_samples=1281167)
    study = load_results([tmp_path / "r"])
    trial = study.trials.iloc[0]
    table = time_table(study, published("imagenet-records-steps")[0])
    ours = table.display[table.display["Batch size"] == "8K"].iloc[0]
    assert ours["Paper steps"] == "14,076" and ours["Paper time per step [s]"] == "0.255"
    assert ours["Paper total time [s]"] == "3,600"
    assert ours["Steps"] == f"{int(trial.steps):,}"
    assert ours["Time per step [s]"] == f"{trial.total_train_seconds / trial.steps:.3f}"
    tidy = table.tidy[table.tidy["global_batch"] == 8192].iloc[0]
    assert tidy["step_seconds_mean"] == pytest.approx(trial.total_train_seconds / trial.steps)
    # a table without steps keeps the time table as it was
    plain = time_table(study, published("imagenet-records")[0])
    assert "Paper steps" not in plain.display and "Steps" not in plain.display


# mlcommons/logging, mlperf_logging/rcp_checker/training_4.0.0/rcps_resnet.json: batch -> (LARS base LR, warm-up
# epochs, momentum, weight decay, epochs to converge of every run)
RCP = {
    1632: (7.4, 2, 0.9, 5.0e-5, [34, 34, 34, 35, 35, 37, 35, 35, 33, 35, 35, 37, 37, 35, 35, 34, 35]),
    3264: (10.5, 2, 0.9, 5.0e-5, [36, 35, 34, 34, 36, 35, 35, 35, 35, 37, 35, 35, 35, 36, 35]),
    4096: (10, 5, 0.9, 2e-4, [39, 42, 40, 41, 39, 40, 41, 39, 40, 39]),
    8192: (17, 5, 0.9, 2e-4, [42, 44, 43, 41, 41, 41, 42, 42, 43, 41]),
    13056: (12.8, 9, 0.9, 2.5e-5, [46, 46, 44, 46, 45, 46, 45, 45, 45, 46]),
    32768: (21.2, 16, 0.94, 2.5e-5, [56, 56, 55, 56, 56, 56, 56, 56, 57, 56]),
    49152: (19.405, 24, 0.951807, 1e-4, [68, 68, 68, 68, 69, 68, 68, 67, 69, 67]),
    58880: (23.246, 29, 0.951807, 1e-4, [80, 81, 80, 78, 80, 80, 81, 79, 80, 80]),
    65536: (24.699, 31, 0.951807, 1e-4, [83, 85, 84, 86, 85, 85, 83, 84, 85, 85]),
    67840: (24.699, 31, 0.951807, 1e-4, [86, 87, 86, 87, 86, 85, 86, 86, 86, 85, 86, 86, 86, 86, 86, 85, 86, 86,
                                          87, 85, 85, 86, 85, 87, 86, 85, 85, 86]),
}


def test_mlperf_table_is_the_reference_convergence_points():
    table, source = published("mlperf-resnet50")
    assert "rcp_checker/training_4.0.0/rcps_resnet.json" in source and "issue" not in source
    assert list(table.global_batch) == [1632, 3264, 4096, 8192, 13056, 32768, 49152, 58880, 65536, 67840]
    for _, row in table.iterrows():
        base_lr, warmup, momentum, wd, runs = RCP[row.global_batch]
        assert [int(v) for v in str(row.epochs_per_run).split()] == runs, row.global_batch
        assert (row.runs, row.epochs_min, row.epochs_max) == (len(runs), min(runs), max(runs))
        assert row.epochs_to_target == pytest.approx(sum(runs) / len(runs), abs=0.005)
        assert (row.optimizer, row.base_lr, row.warmup_epochs) == ("lars", base_lr, warmup), row.global_batch
        assert (row.momentum, row.weight_decay) == (pytest.approx(momentum), pytest.approx(wd)), row.global_batch
        assert row.train_samples == 1281167


def test_bigearthnet_table_cites_the_igarss_2020_paper():
    _, source = published("bigearthnet-lars")
    assert "Scaling up a multispectral ResNet-50 to 128 GPUs" in source and "IGARSS 2020" in source
    assert "Sedona, Cavallaro, Jitsev, Strube, Riedel, Book" in source
    assert "Remote Sensing 11" not in source and "3056" not in source


def test_cifar10_filter_figure_6_points():
    table, source = published("cifar10-filter-wd")
    assert "Gahlot" in source and "Figure 6" in source
    b256 = table[table.global_batch == 256].set_index("dataset")
    assert b256.metric.to_dict() == pytest.approx({"nf": 0.832, "full": 0.826, "rf": 0.809})
    assert b256.weight_decay.to_dict() == pytest.approx({"nf": 0.005, "full": 0.012, "rf": 0.0135})
    for batch, pair in ((64, [0.818, 0.792]), (128, [0.827, 0.805])):
        assert sorted(table[table.global_batch == batch].metric, reverse=True) == pytest.approx(pair)
    assert table.gpus.isna().all()  # the figure does not say on how many GPUs: matches any in --compare


def test_cifar10_filter_figure_7_points():
    table, source = published("cifar10-filter")
    assert "Gahlot" in source and "Figure 7" in source
    assert set(table.gpus) == {8} and set(table.global_batch) == {6272}
    assert table.set_index("dataset").metric.to_dict() == pytest.approx({"nf": 0.775, "full": 0.752})


@pytest.mark.parametrize("name", ["imagenet-records-steps", "cifar10-filter", "cifar10-filter-wd"])
def test_new_tables_work_with_compare(tmp_path, name):
    from lbscale.report import ReportOptions, write_report
    from tests.fixtures.make_results import make_study

    res = make_study(tmp_path / "s", seeds=1)
    out, _ = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md",), compare=name))
    assert published(name)[1] in (out / "report.md").read_text()
