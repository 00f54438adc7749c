"""Results a group can read: files and folders lbscale writes take the process umask's mode as `open` and `mkdir`
give it (atomic writes went through mkstemp, 0600, and the report's folder through mkdtemp, 0700, so a colleague
on the cluster could read neither). Modes read back under umask 022 and 077."""

import os
import stat

import pytest

from lbscale.results import umask, write_json


@pytest.fixture
def mask():
    def set_to(value):
        os.umask(value)

    old = os.umask(0o022)
    yield set_to
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_umask_reads_what_the_process_has(mask):
    mask(0o027)
    assert umask() == 0o027
    mask(0o022)
    assert umask() == 0o022


@pytest.mark.parametrize("value, file_mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_an_atomic_write_takes_the_umask(mask, tmp_path, value, file_mode):
    mask(value)
    write_json(tmp_path / "summary.json", {"a": 1})
    assert _mode(tmp_path / "summary.json") == file_mode
    plain = tmp_path / "plain"
    plain.write_text("x")  # what open gives, the reference
    assert _mode(plain) == file_mode


def test_a_report_folder_and_its_files_are_readable_by_the_group(mask, tmp_path, run_cli):
    from tests.report.make_tuned import make_tuned_study

    mask(0o022)
    results = make_tuned_study(tmp_path / "tuned", pending=False)
    out = tmp_path / "rep"
    rc, _, err = run_cli("report", results, "--out", out, "--format", "md,csv")
    assert rc == 0, err
    assert _mode(out) == 0o755
    for p in out.rglob("*"):
        assert _mode(p) == (0o755 if p.is_dir() else 0o644), p
    trial = next(results.iterdir())
    assert _mode(trial / "summary.json") == 0o644  # written by the fixture through write_json
