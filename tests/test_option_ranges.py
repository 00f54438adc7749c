"""Numbers on the command line are checked once, at parsing: NaN and infinity pass Click's float and range types
(NaN fails every comparison), so `report --deadline nan` ran and `status --watch nan` reached time.sleep. Each is
one line and exit 2."""

import pytest


@pytest.mark.parametrize("args, message", [
    (["status", "{r}", "--watch", "nan"], "--watch: nan is not a finite number > 0"),
    (["status", "{r}", "--watch", "inf"], "--watch: inf is not a finite number > 0"),
    (["status", "{r}", "--watch", "0"], "--watch: 0 is not a finite number > 0"),
    (["report", "{r}", "--deadline", "nan", "--allreduce", "a.json"], "--deadline: nan is not a finite number > 0"),
    (["report", "{r}", "--deadline", "-1", "--allreduce", "a.json"], "--deadline: -1 is not a finite number > 0"),
    (["branch", "{r}", "--tolerance", "-0.5"], "--tolerance: -0.5 is not a finite number >= 0"),
    (["branch", "{r}", "--tolerance", "nan"], "--tolerance: nan is not a finite number >= 0"),
    (["branch", "{r}", "--ema", "1.5"], "--ema: 1.5 is not a finite number > 0 and < 1"),
    (["sweep", "{r}/s.yaml", "--until-resolved", "--ratio", "inf"], "--ratio: inf is not a finite number > 1"),
])
def test_numbers_out_of_range_are_one_line(tmp_path, run_cli, args, message):
    rc, _, err = run_cli(*[a.format(r=tmp_path) for a in args])
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("target", [",,", " , ", "x"])
def test_a_target_with_no_number_is_refused(target):
    """(A value that is not finite is refused naming the metric: tests/report/test_report.py.)"""
    from lbscale.errors import LbscaleError
    from lbscale.report import parse_targets

    with pytest.raises(LbscaleError, match="expected a number or several, like 0.9,0.95"):
        parse_targets(target)
    assert parse_targets(None) == [] and parse_targets("0.95, 0.9,") == [0.9, 0.95]
