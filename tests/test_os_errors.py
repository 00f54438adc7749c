"""A full disk, a read-only or unwritable folder, a file where a folder should be: one line naming the path and what
to do, exit 2, nothing half-written; a crash's leftover temp files are removed on resume (lbscale's own only).

Permission cases run as an unprivileged user (root ignores permission bits) and full or read-only disks on a small
tmpfs in a private mount namespace; both need root here and skip with the reason elsewhere."""

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lbscale.errors import os_error_line
from lbscale.results import SUMMARY, read_json, remove_leftovers, write_atomic, write_json

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


def _run(cmd: list[str], home: Path | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1"}
    if home is not None:  # the unprivileged user's: matplotlib and torch keep caches there
        env.update(HOME=str(home), MPLCONFIGDIR=str(home / ".mpl"))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, **kw)


def _lbscale(*args) -> list[str]:
    return [sys.executable, "-m", "lbscale.cli", *map(str, args)]


def _one_line(p: subprocess.CompletedProcess, *words: str) -> str:
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lbscale: error: "), p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


# ---- the message ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code, words", [
    (errno.ENOSPC, ["/r/x.json", "no space left", "run the same command again"]),
    (errno.EDQUOT, ["/r/x.json", "quota"]),
    (errno.EACCES, ["/r/x.json", "permission denied", "choose"]),
    (errno.EPERM, ["/r/x.json", "permission denied"]),
    (errno.EROFS, ["/r/x.json", "read-only", "writable"]),
    (errno.ENOTDIR, ["/r/x.json", "a file, not a folder"]),
])
def test_os_error_line_names_the_path_and_what_to_do(code, words):
    line = os_error_line(OSError(code, os.strerror(code), "/r/x.json"))
    assert line is not None and "\n" not in line and all(w in line for w in words), line


def test_os_errors_a_user_cannot_cause_stay_bugs():
    assert os_error_line(OSError(errno.ECONNREFUSED, "Connection refused")) is None
    assert os_error_line(OSError("no errno at all")) is None


# ---- the atomic writer -----------------------------------------------------------------------------------------

def test_full_disk_at_an_atomic_write_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    write_json(path, {"status": "old"})

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")  # as fsync says it: no file name

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as e:
        write_atomic(path, '{"status": "new"}\n')
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    assert read_json(path) == {"status": "old"} and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_leftovers_are_lbscale_temp_files_of_the_names_given(tmp_path):
    for name in [".metrics.jsonl.a1b2c3d4.tmp", ".summary.json.zz_9yy8x.tmp", ".grid.json.abcdefgh.tmp",
                 ".metrics.jsonl.tmp", "metrics.jsonl", ".mine.abcdefgh.tmp", ".metrics.jsonl.a1b2c3d4.tmp.keep"]:
        (tmp_path / name).write_text("x")
    assert remove_leftovers(tmp_path, ["metrics.jsonl", "summary.json"], older_than=60) == []  # in flight, maybe
    removed = remove_leftovers(tmp_path, ["metrics.jsonl", "summary.json"])
    assert sorted(p.name for p in removed) == [".metrics.jsonl.a1b2c3d4.tmp", ".summary.json.zz_9yy8x.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".grid.json.abcdefgh.tmp", ".metrics.jsonl.a1b2c3d4.tmp.keep",
                                                          ".metrics.jsonl.tmp", ".mine.abcdefgh.tmp", "metrics.jsonl"]


# ---- commands, as root ---------------------------------------------------------------------------------------

def test_report_into_a_path_under_a_file_is_one_line(tmp_path, run_cli):
    from tests.fixtures.make_results import make_study

    make_study(tmp_path / "res", batches=(8192, 16384), seeds=1)
    (tmp_path / "file").write_text("a file, not a folder\n")
    rc, out, err = run_cli("report", tmp_path / "res", "--out", tmp_path / "file" / "rep")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert str(tmp_path / "file") in err and "a file, not a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "res"]


def test_prepare_under_a_file_is_one_line(tmp_path, run_cli):
    (tmp_path / "file").write_text("x\n")
    rc, out, err = run_cli("prepare", "synthetic", "--out", tmp_path / "file" / "x.h5", "--count", "200")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "a file, not a folder" in err, err


def test_resume_removes_the_trials_own_leftover_temp_files(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "t"
    out.mkdir()
    mine = [".metrics.jsonl.k3j4h5g6.tmp", ".summary.json.abcdefgh.tmp", ".config.json.q1w2e3r4.tmp"]
    others = [".grid.json.abcdefgh.tmp", ".notes.txt.abcdefgh.tmp", "notes.txt"]
    for name in mine + others:
        (out / name).write_text("{")
    (out / ".checkpoint.tmp").mkdir()
    (out / ".checkpoint.tmp" / "rank-0.pt").write_bytes(b"cut")
    for part in (".16st.tmp", ".16st.old", "16st"):  # a kept checkpoint's part and old version; the label stays
        (out / "kept" / part).mkdir(parents=True)
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--model", "test_resnet", "--global-batch", "32",
                         "--epochs", "1", "--optimizer", "sgd", "--base-lr", "0.05", "--device", "cpu", "--resume")
    assert rc == 0, err
    names = {p.name for p in out.iterdir()}
    assert not names & set(mine) and ".checkpoint.tmp" not in names
    assert sorted(p.name for p in (out / "kept").iterdir()) == ["16st"]
    assert set(others) <= names and read_json(out / SUMMARY)["status"] == "completed"


# ---- commands as an unprivileged user ---------------------------------------------------------------------------

def _as_nobody() -> list[str]:
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("permission cases need root (to become an unprivileged user) and setpriv")
    cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = _run(cmd + [sys.executable, "-c", "import lbscale.cli"], cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"an unprivileged user cannot run this work tree's python: {probe.stderr.strip()[-200:]}")
    return cmd


@pytest.fixture
def shared_dir():
    """A folder every user can read (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="lbscale-oserr-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_unwritable_folders_are_one_line_as_a_user(shared_dir, tiny_h5):
    from tests.fixtures.make_results import make_study

    nobody = _as_nobody()
    res = shared_dir / "res"
    make_study(res, batches=(8192, 16384), seeds=1)
    locked = shared_dir / "locked"  # root's, 0755: others read, cannot write
    locked.mkdir()
    data = shared_dir / "tiny.h5"
    shutil.copy(tiny_h5, data)
    home = shared_dir / "home"
    home.mkdir()
    for p in [shared_dir, *shared_dir.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    os.chown(home, NOBODY, NOBODY)
    line = _one_line(_run(nobody + _lbscale("report", res, "--out", locked / "rep"), cwd=shared_dir, home=home),
                     str(locked), "permission denied")
    assert "--out" in line or "choose" in line
    _one_line(_run(nobody + _lbscale("prepare", "synthetic", "--out", locked / "x.h5", "--count", "200"),
                   cwd=shared_dir, home=home), str(locked), "permission denied")
    spec = shared_dir / "s.yaml"
    spec.write_text(f"name: s\ndata: {data}\nmodel: test_resnet\nepochs: 1\n"
                    "trial: {optimizer: sgd, base_lr: 0.1, device: cpu}\ngrid: {batch: [32], gpus: [1]}\n")
    spec.chmod(0o644)
    _one_line(_run(nobody + _lbscale("sweep", spec, "--results", locked / "res", "--quiet"), cwd=shared_dir, home=home),
              str(locked), "permission denied")
    assert list(locked.iterdir()) == []


# ---- a full or read-only disk (a tmpfs in a private mount namespace) ------------------------------------------

def _in_namespace(script: str, cwd: Path) -> subprocess.CompletedProcess:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a small tmpfs needs root and unshare (a private mount namespace)")
    probe = _run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"])
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a mount namespace here: {probe.stderr.strip()[-200:]}")
    return _run(["unshare", "-m", "bash", "-c", "set -u\n" + script], cwd=cwd)


def _sections(p: subprocess.CompletedProcess) -> dict[str, str]:
    """The script's output, split at its '== NAME' lines."""
    out, name = {}, None
    for line in p.stdout.splitlines(keepends=True):
        if line.startswith("== "):
            name = line[3:].strip()
            out[name] = ""
        elif name:
            out[name] += line
    return out


def test_full_and_read_only_disks_are_one_line(tmp_path):
    from tests.fixtures.make_results import make_study

    make_study(tmp_path / "res", batches=(8192, 16384), seeds=1)
    lb = " ".join(_lbscale())
    disk = tmp_path / "disk"
    disk.mkdir()
    p = _in_namespace(f"""
mount -t tmpfs -o size=48k tmpfs {disk}
echo "== prepare"; {lb} prepare synthetic --out {disk}/x.h5 --count 3000 2>&1; echo "rc=$?"; ls -A {disk}
echo "== report"; {lb} report {tmp_path}/res --out {disk}/rep 2>&1; echo "rc=$?"; ls -A {disk}
mount -o remount,ro {disk}
echo "== ro"; {lb} report {tmp_path}/res --out {disk}/rep 2>&1; echo "rc=$?"; ls -A {disk}
""", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    s = _sections(p)
    for name, words in [("prepare", [f"{disk}/", "no space left"]), ("report", [f"{disk}", "no space left"]),
                        ("ro", [f"{disk}", "read-only"])]:
        lines = s[name].strip().splitlines()
        assert lines[-1] == "rc=2" and len(lines) == 2, (name, s[name])  # one line, and nothing left on the disk
        assert lines[0].startswith("lbscale: error: ") and all(w in lines[0] for w in words), (name, lines[0])


SWEEP = """name: full
data: {data}
model: test_resnet
epochs: 2
trial: {{optimizer: sgd, base_lr: 0.1, check_every: 1, timing_warmup_steps: 1, device: cpu}}
grid: {{batch: [16, 32, 64], gpus: [1]}}
"""


def test_a_sweep_on_a_full_disk_stops_in_one_line_and_a_rerun_completes_it(tiny_h5, tmp_path):
    spec = tmp_path / "full.yaml"
    spec.write_text(SWEEP.format(data=tiny_h5))
    disk = tmp_path / "disk"
    disk.mkdir()
    res = disk / "res"
    # the console script, as a user runs it (under `python -m lbscale.cli` each trial forked for a warm start has
    # runpy warn on stderr that lbscale.cli was imported already)
    lb = str(Path(sys.executable).parent / "lbscale")
    # the first trial fits; the disk fills during the second, which stops the sweep; that trial as a SLURM array
    # task runs it (and fails in one line); the disk grows, and the SLURM job that would plan the next stage submits
    # nothing; then the same command runs again
    p = _in_namespace(f"""
mount -t tmpfs -o size=8m tmpfs {disk}
echo "== first"; {lb} sweep {spec} --results {res} --quiet 2>{tmp_path}/first.err | tee {tmp_path}/first.out
echo "rc=${{PIPESTATUS[0]}}"
echo "== err"; cat {tmp_path}/first.err
echo "== started"; ls {res}/*/train.log | wc -l
echo "== stat1"; grep -l '"status": "completed"' {res}/*/summary.json | xargs -r stat -c '%n %Y.%y'
failed=$(grep ': failed: ' {tmp_path}/first.out | cut -d' ' -f2 | tr -d :)
echo "== task"; {lb} sweep {spec} --results {res} --trial "$failed" --quiet 2>&1 >/dev/null; echo "rc=$?"
mount -o remount,size=64m {disk}
echo "== follow-up"; {lb} sweep {spec} --results {res} --launcher slurm --no-submit --follow-up 2>&1 >/dev/null
echo "rc=$?"; ls -A {res}/slurm 2>/dev/null | wc -l
touch {res}/.rounds.json.k2j3h4g5.tmp {res}/b16-g1-sgd-linear-s0/.grid.json.abcdefgh.tmp {res}/.mine.abcdefgh.tmp
touch -d '-5 min' {res}/.rounds.json.k2j3h4g5.tmp {res}/b16-g1-sgd-linear-s0/.grid.json.abcdefgh.tmp
touch {res}/b32-g1-sgd-linear-s0/.peers.json.inflight.tmp  # as young as a write in flight: kept
echo "== second"; {lb} sweep {spec} --results {res} --quiet 2>&1; echo "rc=$?"
echo "== states"; grep -ho '"status": "[a-z]*"' {res}/*/summary.json
echo "== stat2"; stat -c '%n %Y.%y' {res}/*/summary.json
echo "== left"; find {disk} -name '.*.tmp' -o -name '.checkpoint.tmp' -o -name '.*.old'
""", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    s = _sections(p)
    first, err = s["first"].strip().splitlines(), s["err"].strip().splitlines()
    # stopped at the first trial the full disk failed: its line, then the one line on stderr and exit 2; no
    # trial after it started
    assert first[-1] == "rc=2" and "Traceback" not in s["first"] + s["err"], s["first"] + s["err"]
    failed = [line for line in first if ": failed: " in line]
    assert len(failed) == 1 and "no space left" in failed[0] and first[-2] == failed[0], s["first"]
    assert len(err) == 1 and err[0].startswith("lbscale: error: ") and "no space left" in err[0], s["err"]
    assert err[0].removeprefix("lbscale: error: ") in failed[0]
    assert int(s["started"]) == sum(line.startswith("[") for line in first), (s["started"], s["first"])
    # the array task: its one line, exit 2; the follow-up job: the one line, exit 2, and no script written
    for name, lines in (("task", s["task"].strip().splitlines()), ("follow-up", s["follow-up"].strip().splitlines())):
        assert lines[0].startswith("lbscale: error: ") and "no space left" in lines[0], (name, lines)
        assert lines[1:] == ["rc=2"] + (["0"] if name == "follow-up" else []), (name, lines)
    assert s["second"].strip().splitlines()[-1] == "rc=0", s["second"]
    assert s["states"].split("\n")[:-1] == ['"status": "completed"'] * 3, s["states"]
    before = dict(line.split(" ", 1) for line in s["stat1"].splitlines())
    after = dict(line.split(" ", 1) for line in s["stat2"].splitlines())
    assert before and all(after[k] == v for k, v in before.items())  # finished trials untouched
    assert sorted(s["left"].split()) == [f"{res}/.mine.abcdefgh.tmp",  # a killed sweep's temp files gone, only those
                                         f"{res}/b32-g1-sgd-linear-s0/.peers.json.inflight.tmp"]


def test_prepare_removes_what_a_killed_prepare_of_the_same_output_left(tmp_path, run_cli):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(dead.stdout)  # a process that has ended: its partial write is a leftover
    for name in [f".x.h5.partial-{gone}", f".x.h5.old-{gone}", ".x.h5.partial-1", f".y.h5.partial-{gone}",
                 ".x.h5.partial-abc"]:
        (tmp_path / name).write_text("cut")  # pid 1 lives: its write is in progress
    rc, _, err = run_cli("prepare", "synthetic", "--out", tmp_path / "x.h5", "--count", "200")
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".x.h5.partial-abc", ".x.h5.partial-1", f".y.h5.partial-{gone}", "x.h5"])


def test_a_killed_prepares_leftover_is_found_whatever_the_output_is_called(tmp_path, run_cli):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / f".x[1].h5.partial-{int(dead.stdout)}").write_text("cut")  # [1] is a glob pattern's class
    rc, _, err = run_cli("prepare", "synthetic", "--out", tmp_path / "x[1].h5", "--count", "200")
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x[1].h5"]


ROUNDS_SPEC = """name: full
data: {data}
model: test_resnet
epochs: 2
trial: {{optimizer: sgd, lr_scaling: none, check_every: 1, device: cpu, target_metric: val_top1, target: 0.99}}
grid:
  batch: [16, 32]
  gpus: [1]
  search: {{base_lr: [0.02, 0.1]}}
"""


def test_no_round_is_decided_while_trials_that_failed_for_the_environment_wait_for_a_retry(tiny_h5, tmp_path):
    """On a disk too small for a checkpoint every trial fails with cause environment, which the next sweep retries:
    no round of --until-resolved is decided on them (nor a stop recorded that a rerun would replay); the rerun on a
    disk with room runs them and decides on what they measured."""
    spec = tmp_path / "full.yaml"
    spec.write_text(ROUNDS_SPEC.format(data=tiny_h5))
    disk = tmp_path / "disk"
    disk.mkdir()
    res = disk / "res"
    lb = " ".join(_lbscale())
    p = _in_namespace(f"""
mount -t tmpfs -o size=1m tmpfs {disk}
echo "== first"; {lb} sweep {spec} --results {res} --until-resolved --budget 4 --quiet 2>&1; echo "rc=$?"
echo "== causes"; grep -ho '"cause": "[a-z]*"' {res}/*/summary.json
echo "== rounds"; ls {res}/rounds.json 2>&1
mount -o remount,size=64m {disk}
echo "== second"; {lb} sweep {spec} --results {res} --until-resolved --budget 4 --quiet 2>&1; echo "rc=$?"
echo "== states"; grep -ho '"status": "[a-z]*"' {res}/*/summary.json
echo "== decided"; cat {res}/rounds.json
""", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    s = _sections(p)
    assert s["first"].strip().splitlines()[-1] in ("rc=1", "rc=2") and "Traceback" not in s["first"], s["first"]
    assert s["causes"].split() and set(s["causes"].split("\n")[:-1]) == {'"cause": "environment"'}, s["causes"]
    assert "No such file" in s["rounds"], (s["rounds"], s["first"])  # no round decided on failed trials
    assert s["second"].strip().splitlines()[-1] == "rc=0", s["second"]
    assert s["states"].split("\n")[:-1] == ['"status": "completed"'] * 4, s["states"]
    rounds = json.loads(s["decided"])["rounds"]  # the disk is gone with its namespace: read in there
    assert len(rounds) == 1 and rounds[0]["stop"].startswith("budget spent"), rounds
