"""The tuned report benchmark's fast writer writes the trial directories make_tuned_trial writes, file for file."""

import pytest

from benchmarks.bench_report_tuned import write_tuned_trial
from tests.report.make_tuned import make_tuned_trial


@pytest.mark.parametrize("batch, factor, kw", [
    (256, 1.0, {}),  # step evaluations and epoch records interleaved, stopped at the target
    (1024, 4.0, {"every": 50, "epochs": 3}),  # runs out of epochs before the target
    (32, 0.3, {"every": 7, "train_samples": 2 ** 12, "epochs": 40}),  # evaluations at epoch ends too
])
def test_the_fast_writer_writes_make_tuned_trials_directory(tmp_path, batch, factor, kw):
    lr = 0.02 * batch ** 0.5 * factor
    slow = make_tuned_trial(tmp_path / "slow" / "r", batch, lr, 3, 1, **kw)
    fast = write_tuned_trial(tmp_path / "fast" / "r", batch, lr, 3, 1, **kw)
    assert sorted(p.name for p in fast.iterdir()) == sorted(p.name for p in slow.iterdir())
    for f in slow.iterdir():
        slow_text = f.read_text().replace(str(tmp_path / "slow"), str(tmp_path / "fast"))
        assert (fast / f.name).read_text() == slow_text, f.name
