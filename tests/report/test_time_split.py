"""The report's time split: data wait, compute and communication per trial (the table) and per batch (the
figure), against the closed forms of make_results (an epoch of 160 / GPUs s, the first 1.3x: 5.3 x 160 / GPUs
over 5 epochs; 5 % waiting for data, `comm_share` communicating, the rest computing). Results written before
communication was timed apart have no `comm_seconds`: no communication bar, "-" in the table."""

import numpy as np
import pandas as pd
import pytest

from lbscale.report import ReportOptions, load_results, write_report
from lbscale.report import plots
from lbscale.report.tables import time_split_table
from tests.fixtures.make_results import make_trial


def total(gpus: int) -> float:
    return 5.3 * 160 / gpus


@pytest.fixture
def mixed(tmp_path):
    """8K on 4 GPUs (2 seeds, 20 % communication, 5 % waiting for slower ranks), 16K on 8 (10 %, no imbalance
    recorded: an lbscale before it), and 32K on 16 from an older lbscale still."""
    res = tmp_path / "mixed"
    for seed in (0, 1):
        make_trial(res, 8192, 4, seed, jitter=False, comm_share=0.2, imbalance_share=0.05)
    make_trial(res, 16384, 8, 0, jitter=False, comm_share=0.1)
    make_trial(res, 32768, 16, 0, jitter=False)
    return load_results([res])


def test_the_trials_carry_their_communication_seconds(mixed):
    t = mixed.trials.set_index("trial")
    assert t.loc["b8192-g4-lamb-sqrt-s0", "comm_seconds"] == pytest.approx(0.2 * total(4))
    assert t.loc["b8192-g4-lamb-sqrt-s0", "compute_seconds"] == pytest.approx(0.70 * total(4))
    assert t.loc["b8192-g4-lamb-sqrt-s0", "imbalance_seconds"] == pytest.approx(0.05 * total(4))
    assert pd.isna(t.loc["b16384-g8-lamb-sqrt-s0", "imbalance_seconds"])
    assert t.loc["b16384-g8-lamb-sqrt-s0", "comm_seconds"] == pytest.approx(0.1 * total(8))
    assert pd.isna(t.loc["b32768-g16-lamb-sqrt-s0", "comm_seconds"])  # not recorded, not zero
    assert mixed.epochs["comm_seconds"].notna().sum() == 3 * 5


def test_time_split_stacks_compute_data_communication_and_imbalance(mixed):
    ax = plots.time_split(mixed).axes[0]
    computing, waiting, communicating, imbalanced = ax.containers
    compute = [0.70 * total(4), 0.85 * total(8), 0.95 * total(16)]
    data = [0.05 * total(4), 0.05 * total(8), 0.05 * total(16)]
    comm = [0.2 * total(4), 0.1 * total(8), 0.0]  # the older trial's bar: none
    imbalance = [0.05 * total(4), 0.0, 0.0]
    np.testing.assert_allclose([b.get_height() for b in computing], compute)
    np.testing.assert_allclose([b.get_height() for b in waiting], data)
    np.testing.assert_allclose([b.get_height() for b in communicating], comm)
    np.testing.assert_allclose([b.get_y() for b in communicating], np.add(compute, data))
    np.testing.assert_allclose([b.get_height() for b in imbalanced], imbalance)
    np.testing.assert_allclose([b.get_y() for b in imbalanced], np.add(np.add(compute, data), comm))
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["compute", "waiting for data", "communication (exposed all-reduce)", "waiting for slower ranks"]


def test_time_split_of_results_without_communication_says_so(tmp_path):
    res = tmp_path / "old"
    make_trial(res, 8192, 4, 0, jitter=False)
    ax = plots.time_split(load_results([res])).axes[0]
    assert [len(c) for c in ax.containers] == [1, 1, 0, 0]  # no bars for what no trial timed
    assert ax.get_legend_handles_labels()[1][2:] == ["communication (exposed all-reduce) (not recorded)",
                                                     "waiting for slower ranks (not recorded)"]


def test_time_split_table_has_one_row_per_trial(mixed):
    table = time_split_table(mixed)
    assert table.name == "time-split"
    shown = table.display.set_index("Trial")
    assert list(shown.columns) == ["Batch size", "N. GPUs", "Data [s]", "Compute [s]", "Communication [s]",
                                   "Imbalance [s]", "Communication share"]
    assert len(shown) == 4
    row = shown.loc["b8192-g4-lamb-sqrt-s1"]
    assert (row["Data [s]"], row["Compute [s]"], row["Communication [s]"], row["Imbalance [s]"]) == (
        "10.6", "148", "42.4", "10.6")
    assert row["Communication share"] == "20.0%"
    old = shown.loc["b32768-g16-lamb-sqrt-s0"]
    assert (old["Communication [s]"], old["Imbalance [s]"], old["Communication share"]) == ("-", "-", "-")
    assert shown.loc["b16384-g8-lamb-sqrt-s0", "Imbalance [s]"] == "-"
    tidy = table.tidy.set_index("trial")
    assert tidy.loc["b16384-g8-lamb-sqrt-s0", "comm_seconds"] == pytest.approx(0.1 * total(8))
    assert tidy.loc["b16384-g8-lamb-sqrt-s0", "train_seconds"] == pytest.approx(total(8))
    assert pd.isna(tidy.loc["b32768-g16-lamb-sqrt-s0", "comm_seconds"])


def test_the_report_writes_the_time_split_table(mixed, tmp_path):
    res = tmp_path / "mixed"
    out, _ = write_report([res], ReportOptions(out=tmp_path / "rep", formats=("md", "csv")))
    csv = pd.read_csv(out / "tables" / "time-split.csv").set_index("trial")
    assert csv.loc["b8192-g4-lamb-sqrt-s0", "comm_seconds"] == pytest.approx(0.2 * total(4))
    assert "Communication [s]" in (out / "report.md").read_text()


def test_the_tallest_stack_keeps_its_margin_under_the_frame(tmp_path):
    """One process records no communication or imbalance (0 s, as a single-process trial writes them): their
    stacked bars have height 0 on top of the others, and a bar's bottom is where matplotlib stops the axis's
    margin (a sticky edge), so the tallest stack touched the frame's top (the demo's 512, seen in report.html).
    The axis ends above the tallest stack by the margin (5 % of the data's span), as for a lone bar."""
    res = tmp_path / "one"
    for b in (8192, 16384):
        make_trial(res, b, 1, 0, jitter=False, comm_share=0.0, imbalance_share=0.0)
    study = load_results([res])
    ax = plots.time_split(study).axes[0]
    tallest = total(1)  # every trial: 5.3 x 160 s on one GPU
    assert study.trials["comm_seconds"].eq(0).all()
    assert ax.get_ylim()[1] == pytest.approx(tallest * 1.05)


def test_the_legend_stands_beside_the_bars_not_on_them(tmp_path):
    """The legend (four entries, the longest "communication (exposed all-reduce) (not recorded)") lies right of
    the axes and inside the canvas: inside the axes it covered the demo's first bar (seen in report.html)."""
    res = tmp_path / "old"
    for b in (8192, 16384, 32768):
        make_trial(res, b, 4, 0, jitter=False)
    study = load_results([res])
    fig = plots.time_split(study)
    fig.canvas.draw()
    ax, renderer = fig.axes[0], fig.canvas.get_renderer()
    legend, frame = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 > frame.x1 and legend.x1 < fig.bbox.width and legend.y1 <= frame.y1 + 1
    # 40 bars: the axes 17 inches wide, where a gap of 2 % of their width pushed the legend off the canvas
    wide = tmp_path / "wide"
    for variant in ("lamb-sqrt", "lars-linear", "sgd-linear", "adamw-sqrt"):
        for i in range(10):
            make_trial(wide, 512 * 2 ** i, 1, 0, variant=variant, jitter=False)
    many = plots.time_split(load_results([wide]))
    many.canvas.draw()
    assert len(many.axes[0].get_xticklabels(minor=True)) == 40
    assert many.axes[0].get_legend().get_window_extent(many.canvas.get_renderer()).x1 < many.bbox.width
    # the tuned report's longer title over a few bars stays inside the canvas (it lost its "C" off the left edge)
    fig = plots.time_split(study, study.trials, "each batch's best trial")
    fig.canvas.draw()
    title = fig.axes[0].title.get_window_extent(fig.canvas.get_renderer())
    assert title.x0 > 0 and title.x1 < fig.bbox.width


def _overlaps(labels, renderer) -> list:
    boxes = sorted((t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()),
                   key=lambda b: b.x0)
    return [(a, b) for a, b in zip(boxes, boxes[1:]) if a.x1 > b.x0]


@pytest.mark.parametrize("variants", [("lamb-sqrt", "lars-linear", "sgd-linear", "adamw-sqrt"),
                                      ("MWMW-WMWM", "WMWM-MWMW", "MMMM-WWWW")])
@pytest.mark.parametrize("batches", [(8192,), (8192, 16384, 32768)])
def test_names_under_the_bars_never_overlap(tmp_path, batches, variants):
    """Each bar's batch under it and its group's name (variant and warm-up) once under the group: a group of one
    bar has a name several bars wide ("adamw-sqrt warm-up 10"), and its slot widens to hold it. The usual four
    variants, or three of wide letters (a width per character let "MWMW-WMWM" overlap, found by a review), x two
    warm-ups; the batches' labels and the groups' names each in one row, none over its neighbour, all on the
    canvas."""
    res = tmp_path / "groups"
    for variant in variants:
        for w in (None, 10):
            for b in batches:
                make_trial(res, b, 4, 0, variant=variant, warmup=w, epochs=2, jitter=False)
    fig = plots.time_split(load_results([res]))
    fig.canvas.draw()
    ax, renderer = fig.axes[0], fig.canvas.get_renderer()
    names = ax.get_xticklabels()
    first = sorted(variants)[0]
    assert [t.get_text() for t in names][:2] == [f"{first} warm-up -", f"{first} warm-up 10"]
    assert len(ax.get_xticklabels(minor=True)) == 2 * len(variants) * len(batches)
    assert not _overlaps(names, renderer)
    assert not _overlaps(ax.get_xticklabels(minor=True), renderer)
    assert all(0 <= t.get_window_extent(renderer).x0 and t.get_window_extent(renderer).x1 <= fig.bbox.width
               for t in names)
    tops = [t.get_window_extent(renderer).y1 for t in names]  # the names below the batches, in one row
    assert max(tops) - min(tops) < 0.5
    assert max(tops) < min(t.get_window_extent(renderer).y0 for t in ax.get_xticklabels(minor=True))
