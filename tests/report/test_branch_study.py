"""`lbscale report` on a branch study's folder (`lbscale branch`'s results): its answer, the local critical batch
per checkpoint with the interval the batches tried give (table, figure, outcome line), read from the table the
branch study wrote; not a grid of variants x1 / x2 / x4. Options that do not apply, a folder mixed with other
results, and branches without their table yet are one line each."""

import pandas as pd

from tests.report.make_branch import make_branch_study
from tests.report.pictures import assert_drawn


def test_the_report_of_a_branch_study_is_its_local_critical_batch(tmp_path, run_cli):
    folder = make_branch_study(tmp_path / "parent-branches")
    rc, out, err = run_cli("report", folder, "--out", tmp_path / "rep")
    assert rc == 0, err
    last = out.strip().splitlines()[-1]
    assert "none to compare it with" not in out
    assert "local critical batch of parent: 25pct 64 [64, 128], 50pct > 128" in last, last
    assert last.startswith("report of 6 trials (6 finished): ")
    local = pd.read_csv(tmp_path / "rep" / "tables" / "local-critical-batch.csv")
    assert list(local["checkpoint"]) == ["25pct", "50pct"]
    assert list(local["critical_batch"]) == [64, 128] and list(local["kind"]) == ["interval", "lower"]
    assert list(local["lo"]) == [64, 128] and local["hi"].iloc[0] == 128 and local["hi"].iloc[1] == float("inf")
    branches = pd.read_csv(tmp_path / "rep" / "tables" / "branches.csv")
    assert sorted(zip(branches["checkpoint"], branches["batch"])) == [
        ("25pct", 32), ("25pct", 64), ("25pct", 128), ("50pct", 32), ("50pct", 64), ("50pct", 128)]
    md = (tmp_path / "rep" / "report.md").read_text()
    verdict = md.split("## Verdict")[1].split("\n- ")[0]
    assert "Local critical batch of parent: 25pct 64 [64, 128], 50pct > 128" in verdict
    assert "![local-critical-batch](figures/local-critical-batch.png)" in md
    assert "critical-batch.csv" in md  # the table it was read from is named
    assert_drawn(tmp_path / "rep" / "figures" / "local-critical-batch.png")


def test_what_does_not_apply_to_a_branch_study_is_one_line(tmp_path, run_cli):
    from tests.fixtures.make_results import make_trial

    folder = make_branch_study(tmp_path / "parent-branches")
    for option in (("--target", "0.9"), ("--compare", "sat4-lamb"), ("--metric", "val_top1")):
        rc, _, err = run_cli("report", folder, "--out", tmp_path / "rep", *option)
        assert rc == 2 and option[0] in err and "branch study" in err, (option, err)
        assert len(err.strip().splitlines()) == 1
    other = tmp_path / "sweep"
    make_trial(other, 512, 1, 0, variant="sgd-linear", epochs=2)
    rc, _, err = run_cli("report", folder, other, "--out", tmp_path / "rep")
    assert rc == 2 and "branch study" in err and "on its own" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "rep").exists()


def test_branches_without_their_table_name_lbscale_branch(tmp_path, run_cli):
    folder = make_branch_study(tmp_path / "parent-branches", table=False)  # branches ran, the table not written yet
    rc, _, err = run_cli("report", folder, "--out", tmp_path / "rep")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "lbscale branch" in err and "critical-batch.csv" in err, err
