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


def test_a_study_whose_trials_all_failed_says_so_not_that_none_started(tmp_path, run_cli):
    """`lbscale gns RESULTS --best` (and report, branch --batch) on a tuned sweep whose every trial failed before it
    wrote its config.json said "no trial has started yet" (issue 54, item 15)."""
    import json

    from tests.report.make_tuned import make_tuned_trial

    res = tmp_path / "res"
    for point, lr in enumerate((0.01, 0.1)):
        d = make_tuned_trial(res, 32, lr, point, state="pending")
        (d / "summary.json").write_text(json.dumps({"status": "failed",
                                                    "error": "OSError: [Errno 28] No space left on device"}))
    said = ("every trial failed before it trained (2 trials; the first: OSError: [Errno 28] No space left on "
            "device): nothing to report")
    for args in (["gns", res, "--best"], ["report", res, "--out", tmp_path / "rep"],
                 ["branch", res, "--batch", 32, "--dry-run"]):
        rc, _, err = run_cli(*args)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and said in err, (args, err)
    make_tuned_trial(res, 64, 0.01, 0, state="pending")  # one not started: the others' failures still said
    rc, _, err = run_cli("report", res, "--out", tmp_path / "rep")
    assert rc == 2 and "no trial has trained yet: 2 of 3 failed before they trained (the first: OSError" in err, err
