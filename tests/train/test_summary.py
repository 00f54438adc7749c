"""summary.json from hand-made epoch records: one definition of time per epoch, shared with the report."""

import pytest

from lbscale.task import get_task
from lbscale.train.summary import summarize


def _rec(epoch, seconds, top1):
    return {"epoch": epoch, "step": 10 * epoch, "train_loss": 1.0 / epoch, "val_top1": top1,
            "train_seconds": seconds, "images_per_second": 1000.0 / seconds, "eval_seconds": 0.5}


def test_time_per_epoch_leaves_out_the_first_epoch_where_there_are_more():
    s = summarize([_rec(1, 10.0, 0.3), _rec(2, 2.0, 0.5), _rec(3, 4.0, 0.6)], get_task("multiclass"), "completed")
    assert s["mean_epoch_seconds"] == pytest.approx(3.0)  # (2 + 4) / 2: the first carries start-up costs
    assert s["images_per_second"] == pytest.approx((500 + 250) / 2)
    assert s["total_train_seconds"] == pytest.approx(16.0)
    one = summarize([_rec(1, 10.0, 0.3)], get_task("multiclass"), "completed")
    assert one["mean_epoch_seconds"] == pytest.approx(10.0)


def test_outcome_line_shows_the_same_time_per_epoch(tmp_path):
    import json

    from lbscale.train.summary import outcome_line

    s = summarize([_rec(1, 10.0, 0.3), _rec(2, 2.0, 0.5), _rec(3, 4.0, 0.6)], get_task("multiclass"), "completed")
    (tmp_path / "summary.json").write_text(json.dumps(s))
    (tmp_path / "config.json").write_text(json.dumps({"primary_metric": "val_top1"}))
    assert "3.0 s per epoch" in outcome_line(tmp_path)
