"""`lbscale schedule`: bad input is one line and exit 2 before anything trains (the derivation's arithmetic is
tests/analysis/test_schedule.py's; the whole path runs in `make schedule-demo` / `make schedule-real`)."""

import pytest


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    from tests.report.make_tuned import make_tuned_study

    return make_tuned_study(tmp_path_factory.mktemp("schedule") / "tuned", pending=False)


@pytest.mark.parametrize("args, message", [
    (["--batch", "300"], "--batch 300: no trial of .* at that batch reached the target \\(reached at 256, 512"),
    (["--batch", "256", "--fraction", "0"], "--fraction: 0 is not a finite number > 0"),
    (["--batch", "256", "--fraction", "1.5"], "--fraction: 1.5 is not a finite number > 0 and <= 1"),
    (["--batch", "256", "--repeats", "0"], "--repeats 0: at least 1"),
    (["--batch", "256", "--no-measure"], "schedule-b256: the reference run is not there yet .*without --no-measure"),
    (["--batch", "256", "--variant", "lamb"], "--variant lamb: .* has sgd-none"),
])
def test_bad_input_is_one_line_and_trains_nothing(tuned, run_cli, args, message):
    import re

    rc, out, err = run_cli("schedule", tuned, *args)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert not (tuned / "schedule-b256" / "reference").exists()


def test_a_results_folder_that_is_not_a_tuned_study(tmp_path, run_cli):
    from tests.fixtures.make_results import make_study

    plain = make_study(tmp_path / "plain", batches=(8192, 16384), seeds=1)
    rc, _, err = run_cli("schedule", plain, "--batch", "8192")
    assert rc == 2 and "not a tuned study" in err and len(err.strip().splitlines()) == 1
