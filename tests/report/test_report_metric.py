"""`lbscale report --metric` names its own option when the metric is not one the task produces (it named
`--target-metric`, a train option, before)."""

from tests.fixtures.make_results import make_trial


def test_an_unknown_report_metric_names_the_metric_option(tmp_path, run_cli):
    res = tmp_path / "res"
    make_trial(res, 512, 1, 0, epochs=2)
    rc, _, err = run_cli("report", res, "--out", tmp_path / "rep", "--metric", "train_loss")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "--metric: 'train_loss' is not a metric of a multiclass task" in err and "--target-metric" not in err
    assert "val_top1" in err and not (tmp_path / "rep").exists()
