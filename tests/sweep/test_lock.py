"""One results directory, one sweep: a lock file holding host and pid refuses (or waits for) a second sweep on
this host, takes over a dead one's, reports another host's; array tasks keep their per-trial claim; a finished
trial's summary is never archived as an attempt and its train.log has each line once."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from lbscale.results import read_json
from tests.sweep.test_launch import LBSCALE, _env, _spec, _trials

HOST = socket.gethostname()


@pytest.fixture
def child_env(monkeypatch):
    for k, v in _env().items():
        monkeypatch.setenv(k, v)


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _lock(results, host, pid):
    results.mkdir(parents=True, exist_ok=True)
    held = {"host": host, "pid": pid, "started": "2024-05-01T10:00:00", "command": "lbscale sweep x.yaml"}
    (results / "sweep.lock").write_text(json.dumps(held))
    return held


def test_a_second_sweep_on_this_host_is_refused_in_one_line(tmp_path, run_cli, tiny_h5, live_pid):
    results = tmp_path / "res"
    _lock(results, HOST, live_pid)
    rc, out, err = run_cli("sweep", _spec(tmp_path, tiny_h5, gpus=1), "--results", results, "--quiet")
    assert (rc, out) == (2, "")
    assert err == (f"lbscale: error: {results}: another sweep runs into this results directory (pid {live_pid} on "
                   f"{HOST}, since 2024-05-01T10:00:00: lbscale sweep x.yaml); wait for it with --wait-for-lock, "
                   "or give another --results\n")
    assert sorted(p.name for p in results.iterdir()) == ["sweep.lock"]  # no trial was written or run


def test_a_lock_of_another_host_is_reported(tmp_path, run_cli, tiny_h5):
    results = tmp_path / "res"
    _lock(results, "login07", 4242)
    rc, out, err = run_cli("sweep", _spec(tmp_path, tiny_h5, gpus=1), "--results", results, "--quiet")
    assert (rc, out) == (2, "")
    assert err == (f"lbscale: error: {results / 'sweep.lock'}: a sweep of pid 4242 on login07 holds this results "
                   f"directory (since 2024-05-01T10:00:00: lbscale sweep x.yaml); {HOST} cannot tell whether it "
                   "still runs: remove the file if it does not\n")


def test_a_dead_sweeps_lock_is_taken_over_and_released(tmp_path, run_cli, tiny_h5, child_env):
    results, pid = tmp_path / "res", _dead_pid()
    _lock(results, HOST, pid)
    rc, out, err = run_cli("sweep", _spec(tmp_path, tiny_h5, gpus=1), "--results", results, "--batch", "64",
                           "--seeds", "1", "--quiet")
    assert rc == 0, out + err
    assert out.splitlines()[0] == (f"{results / 'sweep.lock'}: took over the lock of pid {pid} on {HOST}, which no "
                                   "longer runs (started 2024-05-01T10:00:00: lbscale sweep x.yaml)")
    assert out.splitlines()[-1].startswith("sweep done: 1 trials: 1 completed")
    assert not (results / "sweep.lock").exists()


def test_temp_files_a_killed_sweep_left_are_removed_by_age(tmp_path, run_cli, tiny_h5):
    """kill -9 while a sweep wrote its lock or an sbatch script left write_atomic's temp file for good; an sbatch
    script's goes as the rounds' do: once older than any write takes (a young one may be another sweep's write in
    flight); the lock's at once, however young: it is only ever written under the directory's flock, which the
    sweep holds while it looks."""
    results = tmp_path / "res"
    (results / "slurm").mkdir(parents=True)
    old = [results / ".sweep.lock.k2j3h4g5.tmp", results / "slurm" / ".small-g1.sh.a1b2c3d4.tmp",
           results / "slurm" / ".small-g8.sh.zz_9yy8x.tmp",  # of a grid since changed: any script's
           results / ".sweep.lock.inflight.tmp"]  # young, but a lock's
    young = [results / "slurm" / ".small-g1.sh.inflight.tmp"]
    mine = [results / "slurm" / ".notes.txt.abcdefgh.tmp", results / "slurm" / "small-g1-17_0.out"]
    for path in old + young + mine:
        path.write_text("x")
    for path in old[:-1]:
        os.utime(path, (time.time() - 300, time.time() - 300))
    rc, out, err = run_cli("sweep", _spec(tmp_path, tiny_h5, gpus=1), "--results", results, "--launcher", "slurm",
                           "--no-submit", "--quiet")
    assert rc == 0, out + err
    assert not any(path.exists() for path in old)
    assert all(path.exists() for path in young + mine)


def test_an_array_task_runs_its_trial_while_the_directory_is_locked(tmp_path, run_cli, tiny_h5, live_pid,
                                                                    child_env):
    results = tmp_path / "res"
    held = _lock(results, HOST, live_pid)
    rc, out, err = run_cli("sweep", _spec(tmp_path, tiny_h5, gpus=1), "--results", results,
                           "--trial", "b64-g1-lars-linear-s0", "--quiet")
    assert rc == 0, out + err
    assert read_json(results / "b64-g1-lars-linear-s0" / "summary.json")["status"] == "completed"
    assert read_json(results / "sweep.lock") == held  # not touched


def test_a_finished_trials_summary_is_never_archived(tmp_path):
    from lbscale.sweep.launch import run_process
    from lbscale.sweep.plan import SweepTrial

    out = tmp_path / "trial"
    out.mkdir()
    done = {"status": "completed", "error": None, "epochs_completed": 1}
    (out / "summary.json").write_text(json.dumps(done))
    cfg = type("Cfg", (), {"out": str(out)})()
    marker = tmp_path / "ran"
    code = run_process(SweepTrial("t", 1, 1, cfg, None), [sys.executable, "-c", f"open('{marker}', 'w')"])
    assert code == 0 and not marker.exists()  # another process finished it: nothing runs
    assert read_json(out / "summary.json") == done and not (out / "attempts").exists()


def _sweep(spec, results, *extra):
    return subprocess.Popen([LBSCALE, "sweep", str(spec), "--results", str(results), "--quiet", *extra],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _log_lines_once(results):
    for d in _trials(results):
        lines = [line for line in (d / "train.log").read_text().splitlines() if line.strip()]
        assert len(lines) == len(set(lines)), (d, lines)
        assert not (d / "attempts").exists(), d


@pytest.mark.slow
def test_two_sweeps_started_together_run_each_trial_once(tmp_path, tiny_h5):
    results, spec = tmp_path / "res", _spec(tmp_path, tiny_h5, gpus=1)
    a, b = _sweep(spec, results, "--seeds", "1"), _sweep(spec, results, "--seeds", "1")
    (a_out, a_err), (b_out, b_err) = a.communicate(timeout=600), b.communicate(timeout=600)
    codes = sorted([a.returncode, b.returncode])
    assert codes == [0, 2], (a_out, a_err, b_out, b_err)
    refused = a_err if a.returncode == 2 else b_err
    assert refused.startswith(f"lbscale: error: {results}: another sweep runs into this results directory (pid ")
    assert len(refused.splitlines()) == 1
    _log_lines_once(results)
    assert [read_json(d / "summary.json")["status"] for d in _trials(results)] == ["completed"] * 2
    before = {d: (d / "summary.json").stat().st_mtime_ns for d in _trials(results)}
    again = subprocess.run([LBSCALE, "sweep", str(spec), "--results", str(results), "--seeds", "1", "--quiet"],
                           env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "2 of 2 trials already finished; running 0" in again.stdout
    assert {d: (d / "summary.json").stat().st_mtime_ns for d in _trials(results)} == before
    _log_lines_once(results)


@pytest.mark.slow
def test_wait_for_lock_runs_after_the_first_sweep(tmp_path, tiny_h5):
    results, spec = tmp_path / "res", _spec(tmp_path, tiny_h5, gpus=1)
    a = _sweep(spec, results, "--seeds", "1")
    deadline = time.time() + 60
    while not (results / "sweep.lock").exists():
        assert time.time() < deadline and a.poll() is None
        time.sleep(0.05)
    b = _sweep(spec, results, "--seeds", "1", "--wait-for-lock")
    (a_out, a_err), (b_out, b_err) = a.communicate(timeout=600), b.communicate(timeout=600)
    assert (a.returncode, b.returncode) == (0, 0), (a_out, a_err, b_out, b_err)
    assert b_out.splitlines()[0].startswith(f"{results}: waiting for the sweep of pid {a.pid} on {HOST}")
    assert "2 of 2 trials already finished; running 0" in b_out
    _log_lines_once(results)
    assert not (results / "sweep.lock").exists()
    assert os.listdir(results)  # the trials are there


def test_a_sweep_killed_while_it_writes_its_lock_leaves_nothing_a_rerun_does_not_remove(tmp_path, tiny_h5):
    """kill -9 8 s after start left `.sweep.lock.XXXXXXXX.tmp`, and a full rerun (exit 0) left it there too (too
    young for the age rule). A real sweep process is held inside the lock's write (its fsync blocks on the temp
    file) and killed there; the rerun holds the directory's lock while it looks, so any lock temp is a leftover."""
    import signal

    results = tmp_path / "res"
    spec = _spec(tmp_path, tiny_h5, gpus=1)
    hold = ("import os, sys, time\n"
            "real = os.fsync\n"
            "def fsync(fd):\n"
            "    if '.sweep.lock.' in os.readlink(f'/proc/self/fd/{fd}'):\n"
            "        time.sleep(600)\n"
            "    return real(fd)\n"
            "os.fsync = fsync\n"
            "from lbscale.cli import main\n"
            f"sys.exit(main(['sweep', {str(spec)!r}, '--results', {str(results)!r}, '--batch', '64', '--seeds', '1',"
            " '--quiet']))\n")
    proc = subprocess.Popen([sys.executable, "-c", hold], env={**os.environ, **_env()})
    t0 = time.monotonic()
    while not list(results.glob(".sweep.lock.*.tmp")) and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    assert list(results.glob(".sweep.lock.*.tmp")), "the sweep never wrote its lock"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rerun = subprocess.run([LBSCALE, "sweep", spec, "--results", results, "--batch", "64", "--seeds", "1",
                            "--quiet"], capture_output=True, text=True, env={**os.environ, **_env()})
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert not list(results.glob(".*.tmp")), sorted(p.name for p in results.iterdir())
