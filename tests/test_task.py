"""The Task: one home for loss, targets, metrics and the primary metric of multiclass and multilabel data."""

import pytest
import torch

from lbscale.errors import LbscaleError
from lbscale.task import TASKS, get_task
from lbscale.train.metrics import TaskMetrics


def test_metric_names_and_directions():
    mc, ml = TASKS["multiclass"], TASKS["multilabel"]
    assert mc.metric_names(10) == ["val_top1", "val_top5", "val_loss"]
    assert mc.metric_names(4) == ["val_top1", "val_loss"]  # top-5 of 4 classes says nothing
    assert ml.primary_metric == "val_f1_micro" and mc.primary_metric == "val_top1"
    assert mc.reached("val_top1", 0.9, 0.9) and not mc.reached("val_top1", 0.89, 0.9)
    assert mc.reached("val_loss", 0.1, 0.2) and not mc.reached("val_loss", 0.3, 0.2)
    assert ml.best("val_loss", [0.3, 0.1, 0.2]) == 0.1 and ml.best("val_f1_micro", [0.3, 0.5]) == 0.5


def test_target_metric_the_task_does_not_produce_is_refused():
    with pytest.raises(LbscaleError, match="not a metric of a multiclass task"):
        TASKS["multiclass"].check_target_metric("val_f1_micro", 10)
    with pytest.raises(LbscaleError, match="val_top5"):
        TASKS["multiclass"].check_target_metric("val_top5", 4)
    TASKS["multilabel"].check_target_metric("val_f1_macro", 19)
    with pytest.raises(LbscaleError, match="unknown task"):
        get_task("regression")


def test_chance_level_is_guessing_with_a_margin_for_noise():
    mc, ml = TASKS["multiclass"], TASKS["multilabel"]
    # accuracy: at most 1.5 x the guessing rate k / K and at most 0.05 above it, whichever is lower
    assert mc.chance_bound("val_top1", 10) == pytest.approx(0.15)  # both margins agree at 10 classes
    assert mc.chance_bound("val_top1", 6) == pytest.approx(1 / 6 + 0.05)
    assert mc.chance_bound("test_top1", 2) == pytest.approx(0.55)  # 1.5 x 0.5 would call 0.75 chance
    assert mc.chance_bound("val_top1", 100) == pytest.approx(0.015)
    assert mc.chance_bound("val_top5", 10) == pytest.approx(0.55)
    assert mc.chance_bound("val_loss", 10) == pytest.approx(2.302585)  # no better than every class equally likely
    assert mc.at_chance("val_top1", 0.15, 10) and not mc.at_chance("val_top1", 0.16, 10)
    assert mc.at_chance("val_loss", 2.5, 10) and not mc.at_chance("val_loss", 2.2, 10)
    assert not mc.at_chance("val_loss", float("nan"), 10)  # diverged: a bad LR, not an early rung
    assert mc.chance_bound("val_top1", None) is None and not mc.at_chance("val_top1", 0.1, None)
    assert ml.chance_bound("val_f1_micro", 19) is None  # multilabel: chance depends on label frequencies


def test_loss_targets_and_metrics_per_task():
    torch.manual_seed(0)
    logits = torch.randn(8, 3)
    mc = TASKS["multiclass"]
    y = mc.targets(torch.tensor([0, 1, 2, 0, 1, 2, 0, 1], dtype=torch.uint8))
    assert y.dtype == torch.int64
    torch.testing.assert_close(mc.loss(logits, y), torch.nn.functional.cross_entropy(logits, y))
    ml = TASKS["multilabel"]
    t = ml.targets(torch.randint(0, 2, (8, 3), dtype=torch.uint8))
    assert t.dtype == torch.float32
    torch.testing.assert_close(ml.loss(logits, t), torch.nn.functional.binary_cross_entropy_with_logits(logits, t))
    m = TaskMetrics(ml, 3, torch.device("cpu"))
    m.update(logits, t, ml.loss(logits, t))
    assert set(m.compute()) == set(ml.metric_names(3))
    perfect = TaskMetrics(mc, 3, torch.device("cpu"))
    perfect.update(torch.nn.functional.one_hot(y, 3).float() * 5, y, torch.tensor(0.0))
    assert perfect.compute()["val_top1"] == 1.0


def test_train_refuses_a_target_metric_no_task_produces(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "t"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--target-metric", "val_acc", "--target", "0.9")
    assert rc == 2 and "val_acc" in err and "not a metric of any task" in err and len(err.splitlines()) == 1
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--model", "test_resnet",
                         "--target-metric", "val_f1_micro", "--target", "0.9")
    assert rc == 2 and "not a metric of a multiclass task" in err
    assert not out.exists()  # refused before any work
