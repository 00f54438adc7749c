"""Sweeps on a real single-node SLURM (job arrays, 2-task srun per trial) and locally; kill and rerun."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lbscale.results import read_json, read_jsonl

ROOT = Path(__file__).resolve().parents[2]
LBSCALE = str(Path(sys.executable).parent / "lbscale")

SPEC = """
name: small
data: {data}
model: test_resnet
epochs: {epochs}
trial: {{optimizer: lars, base_lr: 0.5, ref_batch: 256, warmup_epochs: 1, check_every: 1, timing_warmup_steps: 1,
        device: cpu}}
grid:
  batch: [32, 64]
  gpus: [{gpus}]
  seeds: 2
"""


def _spec(tmp_path, data, epochs=1, gpus=2):
    path = tmp_path / "small.yaml"
    path.write_text(SPEC.format(data=data, epochs=epochs, gpus=gpus))
    return path


def _env():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return {k: v for k, v in env.items() if not k.startswith("SLURM_")}


def lbscale(*args, timeout=600, check=True):
    r = subprocess.run([LBSCALE, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=_env())
    if check:
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


def _trials(results):
    return sorted(d for d in Path(results).iterdir() if (d / "trial.yaml").exists())


def _assert_all_completed_once(results, epochs):
    for d in _trials(results):
        summary = read_json(d / "summary.json")
        assert summary and summary["status"] == "completed", (d, summary)
        assert [r["epoch"] for r in read_jsonl(d / "metrics.jsonl")] == list(range(1, epochs + 1)), d


@pytest.mark.slow
def test_slurm_job_array_with_two_task_srun(slurm, tiny_h5, tmp_path):
    results = tmp_path / "res"
    out = lbscale("sweep", _spec(tmp_path, tiny_h5), "--launcher", "slurm", "--results", results, "--wait",
                  "--max-concurrent", "2", "--quiet")
    assert "submitted job array" in out.stdout
    assert len(_trials(results)) == 4
    _assert_all_completed_once(results, 1)
    for d in _trials(results):
        s = read_json(d / "summary.json")
        assert s["world_size"] == 2 and s["param_digests"][0] == s["param_digests"][1]
        cfg = read_json(d / "config.json")
        assert cfg["launcher"] == "slurm" and cfg["backend"] == "gloo"
    status = lbscale("status", results).stdout
    assert "4 trials: 4 completed" in status
    assert all(f"{read_json(d / 'submitted.json')['job']}" in status for d in _trials(results))
    again = lbscale("sweep", _spec(tmp_path, tiny_h5), "--launcher", "slurm", "--results", results)
    assert "submitting 0" in again.stdout  # idempotent: nothing resubmitted


def _running(pid: int) -> bool:
    """The process lives and is no zombie (an orphan whose parent died may wait unreaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _squeue_running(job):
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip() == "RUNNING"


@pytest.mark.slow
def test_slurm_scancel_then_rerun_finishes_the_rest(slurm, tiny_h5, tmp_path):
    results = tmp_path / "res"
    spec = _spec(tmp_path, tiny_h5, epochs=6)
    lbscale("sweep", spec, "--launcher", "slurm", "--results", results, "--max-concurrent", "1", "--quiet")
    first = sorted(_trials(results))[0]
    job = read_json(first / "submitted.json")["job"]
    deadline = time.time() + 300
    while not (_squeue_running(job) and (first / "metrics.jsonl").exists()) and time.time() < deadline:
        time.sleep(0.5)
    subprocess.run(["scancel", job], check=True)
    array = job.split("_")[0]
    while subprocess.run(["squeue", "-h", "-j", array], capture_output=True, text=True).stdout.strip():
        time.sleep(1)
    assert read_json(first / "summary.json") is None  # the cancelled trial did not finish...
    others = [d for d in _trials(results) if d != first]
    assert all(read_json(d / "summary.json")["status"] == "completed" for d in others)  # ...the rest did
    before = {d: (d / "summary.json").stat().st_mtime for d in others}
    status = lbscale("status", results).stdout
    assert "interrupted" in status
    rerun = lbscale("sweep", spec, "--launcher", "slurm", "--results", results, "--wait", "--quiet")
    assert "submitting 1" in rerun.stdout
    _assert_all_completed_once(results, 6)
    assert {d: (d / "summary.json").stat().st_mtime for d in others} == before  # nothing done twice


@pytest.mark.slow
def test_sbatch_generic_script_runs_an_array_task(slurm, tiny_h5, tmp_path):
    spec = _spec(tmp_path, tiny_h5)
    results = tmp_path / "res"
    args = f"--results {results} --batch 64 --seeds 1"
    r = subprocess.run(["sbatch", "--parsable", "--array=0", "--ntasks-per-node=2", "--gres=gpu:2",
                        f"--output={tmp_path}/generic-%A_%a.out",
                        f"--export=ALL,SPEC={spec},LBSCALE={LBSCALE},LBSCALE_ARGS={args}",
                        str(ROOT / "slurm" / "generic.sh")], capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    deadline = time.time() + 300
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
        assert time.time() < deadline
        time.sleep(1)
    log = "".join(p.read_text() for p in tmp_path.glob("generic-*.out"))
    assert [d.name for d in _trials(results)] == ["b64-g2-lars-linear-s0"], log[-3000:]
    s = read_json(results / "b64-g2-lars-linear-s0" / "summary.json")
    assert s and s["status"] == "completed" and s["world_size"] == 2, log[-3000:]


@pytest.mark.slow
def test_local_sweep_kill_9_then_rerun(tiny_h5, tmp_path):
    results = tmp_path / "res"
    spec = _spec(tmp_path, tiny_h5, epochs=4, gpus=1)
    p = subprocess.Popen([LBSCALE, "sweep", str(spec), "--results", str(results), "--quiet"], env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    victim = None
    while victim is None and time.time() < deadline:  # one trial finished and the next one training
        time.sleep(0.2)
        done = [d for d in _trials(results) if (d / "summary.json").exists()] if results.exists() else []
        busy = [d for d in _trials(results) if (d / "run.json").exists() and (d / "metrics.jsonl").exists()
                and not (d / "summary.json").exists()] if results.exists() else []
        if done and busy:
            victim = busy[0]
    assert victim is not None, "the sweep did not get going"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    # the victim gets SIGTERM when the sweep dies (it checkpoints and stops at its next step); on a loaded machine
    # it may be past its last step by then and end on its own: what is finished is counted once it has stopped
    pid = (read_json(victim / "run.json") or {}).get("pid")
    deadline = time.time() + 120
    while pid and _running(pid) and time.time() < deadline:
        time.sleep(0.2)
    finished = {d: (d / "summary.json").stat().st_mtime for d in _trials(results) if (d / "summary.json").exists()}
    rerun = lbscale("sweep", spec, "--results", results, "--quiet")
    assert f"{len(finished)} of 4 trials already finished" in rerun.stdout, rerun.stdout
    _assert_all_completed_once(results, 4)
    assert {d: (d / "summary.json").stat().st_mtime for d in finished} == finished
    assert json.loads((victim / "config.json").read_text())["plan"]["global_batch"] in (32, 64)


@pytest.mark.slow
def test_slurm_requeue_on_usr1_resumes_from_checkpoint(slurm, tiny_h5, tmp_path):
    results = tmp_path / "res"
    spec = _spec(tmp_path, tiny_h5, epochs=12)
    lbscale("sweep", spec, "--launcher", "slurm", "--requeue", "--batch", "32", "--seeds", "1", "--results", results)
    trial = _trials(results)[0]
    job = read_json(trial / "submitted.json")["job"]
    deadline = time.time() + 300
    while len(read_jsonl(trial / "metrics.jsonl")) < 2 and time.time() < deadline:
        time.sleep(0.3)
    # SLURM's warning before the time limit: SIGUSR1 to the job's steps (what --signal=USR1@300 sends)
    subprocess.run(["scancel", "--signal=USR1", job], check=True)
    while not (trial / "summary.json").exists() and time.time() < deadline:
        time.sleep(1)  # the requeued task waits cred_expire (10 s on the test cluster) before it starts again
    info = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    assert "Restarts=1" in info, info
    _assert_all_completed_once(results, 12)
    assert "--requeue" in (results / "slurm" / "small-g2.sh").read_text()


def test_array_task_skips_failed_trial_unless_retry_failed(tiny_h5, tmp_path):
    results = tmp_path / "res"
    spec = _spec(tmp_path, tiny_h5, gpus=1)
    trial = "b32-g1-lars-linear-s0"
    args = ["sweep", spec, "--results", results, "--trial", trial, "--quiet"]
    lbscale("sweep", spec, "--results", results, "--dry-run")
    (results / trial).mkdir(parents=True)
    (results / trial / "summary.json").write_text('{"status": "failed", "error": "boom"}')
    out = lbscale(*args).stdout
    assert "nothing to do (failed" in out
    assert read_json(results / trial / "summary.json")["status"] == "failed"
    lbscale(*args, "--retry-failed")
    assert read_json(results / trial / "summary.json")["status"] == "completed"


@pytest.mark.parametrize("reason, expected", [("preempted", 75), ("epoch", 143)])
def test_killed_step_after_preemption_checkpoint_counts_as_preempted(tmp_path, reason, expected):
    # With several ranks, srun --kill-on-bad-exit / torchrun kill the others once the first exits 75: the step
    # ends by a signal (143) although all ranks wrote the preemption checkpoint.
    from lbscale.sweep.launch import run_process
    from lbscale.sweep.plan import SweepTrial

    out = tmp_path / "trial"
    (out / "checkpoint").mkdir(parents=True)
    cfg = type("Cfg", (), {"out": str(out)})()
    plan = SweepTrial("t", 2, 1, cfg, None)
    script = ("import json, sys, time; "
              f"json.dump({{'reason': '{reason}', 'written': time.time()}}, open('{out}/checkpoint/info.json', 'w')); "
              "sys.exit(143)")
    assert run_process(plan, [sys.executable, "-c", script]) == expected
    assert (out / "run.json").exists() == (expected == 75)  # kept only for a run to resume


def _failed_trial(tmp_path, data, gpus=1):
    results = tmp_path / "res"
    spec = _spec(tmp_path, data, gpus=gpus)
    lbscale("sweep", spec, "--results", results, "--dry-run", "--batch", "32", "--seeds", "1")
    trial = results / f"b32-g{gpus}-lars-linear-s0"
    trial.mkdir(parents=True)
    (trial / "summary.json").write_text('{"status": "failed", "error": "boom"}')
    return spec, results, trial


def test_failed_submission_keeps_the_failed_record_then_a_retry_archives_it(tiny_h5, tmp_path):
    spec, results, trial = _failed_trial(tmp_path, tiny_h5)
    env = dict(_env(), PATH=str(tmp_path / "no-slurm-here"))
    r = subprocess.run([LBSCALE, "sweep", str(spec), "--results", str(results), "--launcher", "slurm", "--batch", "32",
                        "--seeds", "1", "--retry-failed"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "no sbatch on this machine" in r.stderr and len(r.stderr.splitlines()) == 1
    assert read_json(trial / "summary.json") == {"status": "failed", "error": "boom"}  # not lost
    lbscale("sweep", spec, "--results", results, "--batch", "32", "--seeds", "1", "--retry-failed", "--quiet")
    assert read_json(trial / "summary.json")["status"] == "completed"
    assert read_json(trial / "attempts" / "summary-1.json") == {"status": "failed", "error": "boom"}


@pytest.mark.slow
def test_slurm_refused_submission_keeps_the_failed_record(slurm, tiny_h5, tmp_path):
    spec, results, trial = _failed_trial(tmp_path, tiny_h5, gpus=2)
    r = lbscale("sweep", spec, "--results", results, "--launcher", "slurm", "--batch", "32", "--seeds", "1",
                "--retry-failed", "--partition", "no-such-partition", check=False)
    assert r.returncode == 2 and r.stderr.startswith("lbscale: error: sbatch ") and len(r.stderr.splitlines()) == 1
    assert read_json(trial / "summary.json") == {"status": "failed", "error": "boom"}


@pytest.mark.slow
def test_slurm_requeue_limit_marks_the_trial_failed(slurm, tiny_h5, tmp_path):
    results = tmp_path / "res"
    spec = _spec(tmp_path, tiny_h5, epochs=12)
    lbscale("sweep", spec, "--launcher", "slurm", "--requeue", "--max-requeues", "0", "--batch", "32", "--seeds", "1",
            "--results", results)
    trial = _trials(results)[0]
    job = read_json(trial / "submitted.json")["job"]
    assert "--max-requeues 0" in (results / "slurm" / "small-g2.sh").read_text()
    deadline = time.time() + 300
    while len(read_jsonl(trial / "metrics.jsonl")) < 1 and time.time() < deadline:
        time.sleep(0.3)
    subprocess.run(["scancel", "--signal=USR1", job], check=True)
    while not (trial / "summary.json").exists() and time.time() < deadline:
        time.sleep(0.5)
    s = read_json(trial / "summary.json")
    assert s["status"] == "failed" and "requeue limit 0 reached" in s["error"], s
    assert (trial / "checkpoint" / "model.pt").exists()  # --retry-failed resumes it
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
        assert time.time() < deadline
        time.sleep(1)
    info = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    assert "Restarts=0" in info, info
