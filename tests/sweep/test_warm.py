"""Warm-started trials (forked from a server that imported torch once) compute exactly what fresh processes do."""

import json
import os
import subprocess
import sys
from pathlib import Path

from lbscale.results import read_json, read_jsonl

LBSCALE = str(Path(sys.executable).parent / "lbscale")
SPEC = """
name: warm
data: {data}
model: test_resnet
epochs: 2
trial: {{optimizer: lars, base_lr: 0.5, ref_batch: 256, warmup_epochs: 1, device: cpu, eval_every: 5}}
grid:
  batch: [32, 64]
  seeds: 1
"""
CLOCK = ("time", "seconds", "rate", "per_s", "eta", "wall")  # fields that measure the clock, not the training


def _sweep(spec, results, warm):
    env = dict(os.environ, LBSCALE_WARM_START="1" if warm else "0")
    r = subprocess.run([LBSCALE, "sweep", str(spec), "--results", str(results), "--quiet"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return sorted(d for d in results.iterdir() if (d / "trial.yaml").exists())


def _computed(record):
    return {k: v for k, v in record.items() if not any(c in k for c in CLOCK)}


def test_warm_started_trials_are_bit_identical_to_fresh_ones(tiny_h5, tmp_path):
    spec = tmp_path / "warm.yaml"
    spec.write_text(SPEC.format(data=tiny_h5))
    warm, fresh = _sweep(spec, tmp_path / "warm", True), _sweep(spec, tmp_path / "fresh", False)
    assert [d.name for d in warm] == [d.name for d in fresh] and len(warm) == 2
    for w, f in zip(warm, fresh):
        assert json.loads((w / "config.json").read_text())["started"] == "warm"
        assert json.loads((f / "config.json").read_text())["started"] == "fresh"
        for name in ("metrics.jsonl", "steps.jsonl"):
            if (f / name).exists():
                assert [_computed(r) for r in read_jsonl(w / name)] == [_computed(r) for r in read_jsonl(f / name)]
        assert read_json(w / "summary.json")["param_digests"] == read_json(f / "summary.json")["param_digests"]
        log = (w / "train.log").read_text()
        assert log.count("epoch 2/2:") == 1 and "trial completed" in log


def test_a_users_script_without_a_main_guard_gets_fresh_processes(tmp_path):
    # multiprocessing prepares a forked child by importing the parent's __main__ again: a script that starts a
    # sweep at its top level would start it again in every trial
    script = tmp_path / "study.py"
    script.write_text("from lbscale.sweep import warm\nprint(warm.main_is_safe())\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr
    r = subprocess.run([sys.executable, "-c", "from lbscale.sweep import warm; print(warm.main_is_safe())"],
                       capture_output=True, text=True)
    assert r.stdout.strip() == "True", r.stderr  # no main module to import again (the console script: above)


def test_only_the_trial_command_is_started_warm():
    """A one-process trial (`python -m lbscale.cli train ...`) is forked warm; a multi-process one runs torchrun
    (`python -m torch.distributed.run ...`) as a process of its own, never as a forked call of its main."""
    from lbscale.sweep import warm
    from lbscale.sweep.launch import TRAIN_MODULE

    train = [sys.executable, "-m", TRAIN_MODULE, "train", "--config", "t.yaml"]
    assert warm.command(train, TRAIN_MODULE) == (TRAIN_MODULE, ["train", "--config", "t.yaml"])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *train[1:]]
    assert warm.command(torchrun, TRAIN_MODULE) is None
    assert warm.command(["srun", *train], TRAIN_MODULE) is None


def test_ctrl_c_while_the_server_imports_prints_no_traceback(tmp_path):
    """Ctrl-C in the first seconds of a design or a sweep (the warm-start server importing torch and timm) printed
    the sweep's one line and then the server's 49-line KeyboardInterrupt traceback: multiprocessing ignores SIGINT
    in its server only once the preload is imported. Here the whole process group gets SIGINT while the server is
    still importing."""
    import signal
    import time

    script = tmp_path / "start.py"
    script.write_text("from lbscale.sweep import warm\n\nif __name__ == '__main__':\n    warm.ready('lbscale.cli')\n"
                      "    print('ready')\n")
    proc = subprocess.Popen([sys.executable, "-m", "lbscale.cli", "--version"], stdout=subprocess.PIPE)
    proc.communicate()  # warm the page cache a little: the import below is still seconds long
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    server, t0 = None, time.monotonic()
    while server is None and time.monotonic() - t0 < 30:
        for pid in os.listdir("/proc"):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
            if pid.isdigit() and b"forkserver" in cmd and int(ppid) == proc.pid:
                server = int(pid)
        time.sleep(0.05)
    assert server is not None, "no server started"
    time.sleep(0.5)  # inside its imports (several seconds on this machine)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "ready" not in out and proc.returncode != 0  # the Ctrl-C stopped the starter
    assert "Traceback" not in err.replace(_own_traceback(err), ""), err[-2000:]


def _own_traceback(err: str) -> str:
    """The starter script's own KeyboardInterrupt (a bare script has no lbscale CLI to make it one line)."""
    lines = err.splitlines()
    return "\n".join(lines[:next((i + 1 for i, ln in enumerate(lines) if ln.startswith("KeyboardInterrupt")),
                                  0)])
