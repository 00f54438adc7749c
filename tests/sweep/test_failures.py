"""A trial that fails before writing anything is `failed` with its error line (sweep outcome, status, report),
and a corrupt result file is named, never silently taken for a missing one."""

import json
import os
import sys
from pathlib import Path

import pytest

from lbscale.errors import LbscaleError
from lbscale.results import read_json, read_jsonl
from lbscale.sweep.command import status_table

ROOT = Path(__file__).resolve().parents[2]

SPEC = """
name: broken
model: test_resnet
epochs: 1
trial: {{optimizer: sgd, base_lr: 0.1, check_every: 1, timing_warmup_steps: 1, device: cpu}}
grid:
  batch: [32]
  gpus: [1]
  datasets: {{full: {data}, gone: {missing}}}
"""


@pytest.fixture
def child_env(monkeypatch):
    """Trial processes import the lbscale of this work tree."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def test_read_json_missing_is_none_corrupt_is_named(tmp_path):
    assert read_json(tmp_path / "absent.json") is None
    (tmp_path / "ok.json").write_text('{"status": "completed"}')
    assert read_json(tmp_path / "ok.json") == {"status": "completed"}
    (tmp_path / "cut.json").write_text('{"status": "compl')
    with pytest.raises(LbscaleError, match=r"cut\.json: not valid JSON"):
        read_json(tmp_path / "cut.json")
    (tmp_path / "m.jsonl").write_text('{"epoch": 1}\n{"epoch": 2, "val_loss": NaN}\n{"epo\n')
    with pytest.raises(LbscaleError, match=r"m\.jsonl:3: not valid JSON"):
        read_jsonl(tmp_path / "m.jsonl")
    (tmp_path / "m.jsonl").write_text('{"epoch": 1}\n\n{"epoch": 2}\n')
    assert [r["epoch"] for r in read_jsonl(tmp_path / "m.jsonl")] == [1, 2]


BAD_MODEL = """
name: broken
data: {data}
model: test_resnet
epochs: 1
trial: {{optimizer: sgd, base_lr: 0.1, check_every: 1, timing_warmup_steps: 1, device: cpu}}
grid:
  batch: [32]
  gpus: [1]
  variants: {{full: {{}}, gone: {{model: no_such_net}}}}
"""


def test_trial_failing_before_any_output_is_failed_with_its_reason(tiny_h5, tmp_path, run_cli, child_env):
    # the sweep checks the data before launch; a model name is the trial's own check (timm is not imported by
    # the sweep), so that trial fails before writing anything
    from lbscale.report import load_results

    spec = tmp_path / "broken.yaml"
    spec.write_text(BAD_MODEL.format(data=tiny_h5))
    results = tmp_path / "res"
    rc, out, err = run_cli("sweep", spec, "--results", results, "--quiet")
    assert rc == 1, out + err  # one trial failed
    gone, full = results / "b32-g1-gone-s0", results / "b32-g1-full-s0"
    reason = ("--model: 'no_such_net' is not a timm model (e.g. resnet18, resnet50) nor one of lbscale's for small "
              "images (cifar_resnet8, cifar_resnet20, simple_cnn)")
    assert f"{gone.name}: failed: {reason}" in out
    assert "2 trials: 1 completed, 1 failed" in out
    summary = read_json(gone / "summary.json")
    assert (summary["status"], summary["error"], summary["exit_code"]) == ("failed", reason, 2)
    assert read_json(full / "summary.json")["status"] == "completed"

    table = status_table(results)
    row = next(line for line in table.splitlines() if line.startswith(gone.name))
    assert row.split()[1] == "failed"
    assert f"{gone.name}: {reason}" in table and table.splitlines()[-1] == "2 trials: 1 completed, 1 failed"

    trials = load_results([results]).trials.set_index("trial")
    assert trials.loc[gone.name, "state"] == "failed" and trials.loc[gone.name, "error"] == reason
    assert trials.loc[full.name, "state"] == "completed"

    # a rerun leaves the failed trial alone (its reason stays); --retry-failed runs it again
    rc, out, _ = run_cli("sweep", spec, "--results", results, "--quiet")
    assert rc == 0 and "running 0" in out and read_json(gone / "summary.json")["error"] == reason


def test_failure_reason_is_the_last_line_of_this_attempt(tmp_path):
    from lbscale.sweep.launch import failure_reason

    log = tmp_path / "train.log"
    log.write_text("earlier attempt\nlbscale: error: old reason\n")
    start = log.stat().st_size
    with open(log, "a") as f:
        f.write("Traceback (most recent call last):\n  File 'x'\nKeyError: 'val'\n\n")
    assert failure_reason(log, start, 1) == "KeyError: 'val'"
    with open(log, "a") as f:
        f.write("lbscale: error: /data/x.h5: no such file\n")
    assert failure_reason(log, start, 2) == "/data/x.h5: no such file"
    assert failure_reason(log, log.stat().st_size, 3) == "exit 3 without a message"


def test_trial_stopped_by_a_signal_stays_resumable(tmp_path):
    # SIGTERM / SIGKILL from outside (scancel, the OOM killer) is an interruption, not a verdict on the trial
    from lbscale.sweep.launch import run_process
    from lbscale.sweep.plan import SweepTrial
    from lbscale.sweep.state import trial_state

    out = tmp_path / "trial"
    out.mkdir()
    cfg = type("Cfg", (), {"out": str(out)})()
    plan = SweepTrial("t", 1, 1, cfg, None)
    code = run_process(plan, [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert code < 0 and not (out / "summary.json").exists() and trial_state(out)["state"] == "pending"
    code = run_process(plan, [sys.executable, "-c", "print('lbscale: error: bad'); raise SystemExit(2)"])
    assert code == 2 and read_json(out / "summary.json")["error"] == "bad"


def test_rerun_over_a_corrupt_summary_names_the_file(tiny_h5, tmp_path):
    import subprocess

    spec = tmp_path / "broken.yaml"
    spec.write_text(SPEC.format(data=tiny_h5, missing=tiny_h5))
    results = tmp_path / "res"
    lbscale = str(Path(sys.executable).parent / "lbscale")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([lbscale, "sweep", str(spec), "--results", str(results), "--dry-run"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    trial = results / "b32-g1-full-sgd-linear-s0"
    trial.mkdir(parents=True)
    whole = json.dumps({"status": "completed", "error": None, "epochs_completed": 1})
    (trial / "summary.json").write_text(whole[: len(whole) // 2])  # cut short
    r = subprocess.run([lbscale, "sweep", str(spec), "--results", str(results), "--quiet"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert r.stderr.startswith(f"lbscale: error: {trial / 'summary.json'}: not valid JSON")
    for d in (trial, results / "b32-g1-gone-sgd-linear-s0"):  # nothing was run
        assert not (d / "metrics.jsonl").exists() and not (d / "train.log").exists()


def test_failure_reason_of_a_multi_process_trial_is_the_trials_own_line(tmp_path):
    # torchrun and srun print their own lines after the rank's error: the reason is the rank's line
    from lbscale.sweep.launch import failure_reason

    log = tmp_path / "train.log"
    log.write_text("lbscale: error: /data/x.h5: no split 'val'\n"
                   "E1123 torch.distributed.elastic.multiprocessing.api: failed (exitcode: 2)\n"
                   "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
                   "============================================================\n"
                   "srun: error: node1: task 0: Exited with exit code 2\n")
    assert failure_reason(log, 0, 1) == "/data/x.h5: no split 'val'"


def test_status_of_one_trial_directory_shows_that_trial(tmp_path, run_cli):
    """`lbscale status RESULTS/TRIAL` said the trial directory held no trials."""
    from tests.fixtures.make_results import make_trial

    trial = make_trial(tmp_path / "res", 512, 1, 0)
    make_trial(tmp_path / "res", 1024, 1, 0)
    rc, out, err = run_cli("status", trial)
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert lines[1].split()[:2] == [trial.name, "completed"] and lines[-1] == "1 trials: 1 completed"


def test_ctrl_c_during_a_sweep_names_the_trial_and_how_to_resume(tmp_path, tiny_h5):
    """Ctrl-C in a local sweep ended with 'lbscale: aborted' alone: which trial stopped, and that the same command
    resumes, went unsaid. A terminal's Ctrl-C reaches the whole foreground group: SIGINT to the sweep's group."""
    import signal
    import subprocess
    import time

    spec = tmp_path / "x.yaml"
    spec.write_text(f"name: c\ndata: {tiny_h5}\nmodel: test_resnet\nepochs: 500\n"
                    "trial: {optimizer: sgd, base_lr: 0.1, device: cpu}\ngrid: {batch: [32], gpus: [1], seeds: 2}\n")
    res = tmp_path / "res"
    # SIGINT as a terminal leaves it: a test run in the background (CI) inherits it ignored, and Python then
    # never turns it into KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, "-m", "lbscale.cli", "sweep", str(spec), "--results", str(res)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while not list(res.glob("*/metrics.jsonl")) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)  # the first trial has trained an epoch: it runs
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("lbscale: ") and "b32-g1-sgd-linear-s0" in last and "resume" in last, err


def test_a_trial_on_a_corrupted_chunk_fails_with_the_one_line(tiny_h5, tmp_path, run_cli, child_env):
    """The in-memory path reads through HDF5, whose checksum failure was a traceback's last line in the sweep's
    outcome and in the trial's summary; it is the line naming the file, the dataset and the rows."""
    import shutil

    import h5py

    data = tmp_path / "bad.h5"
    shutil.copy(tiny_h5, data)
    with h5py.File(data, "r") as h:  # the preflight reads the labels, not the images: the trial finds it
        offset = h["train/images"].id.get_chunk_info(0).byte_offset + 1000
    with open(data, "r+b") as f:
        f.seek(offset)
        f.write(b"\x5a\xa5")
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: c\ndata: {data}\nmodel: test_resnet\nepochs: 1\n"
                    "trial: {optimizer: sgd, base_lr: 0.1, device: cpu, in_memory: true}\n"
                    "grid: {batch: [32], gpus: [1]}\n")
    rc, out, err = run_cli("sweep", spec, "--results", tmp_path / "res", "--quiet")
    line = (f"{data}: /train/images rows 0-559: checksum mismatch (corrupted chunk); `lbscale data check {data}` "
            "lists every one: prepare the file again or restore it")
    assert rc == 1 and f"failed: {line} (exit 2" in out, out + err
    (trial,) = (tmp_path / "res").glob("*/summary.json")
    assert read_json(trial)["error"] == line
