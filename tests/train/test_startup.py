"""A trial's start-up: summary.json's `startup_seconds` runs from the start of the process the user launched (the
trial's own, or torchrun's) to the first optimizer step's start, so a delay before lbscale is even imported
counts, and it is not part of the training time that follows it."""

import subprocess
import sys

from tests.train.helpers import env, free_port, summary

DELAY = 1.5  # seconds the launched process sleeps before it imports lbscale: start-up the trial must count
TRAIN = ["--global-batch", "32", "--epochs", "1", "--model", "test_resnet", "--device", "cpu", "--quiet",
         "--check-every", "2"]


def _delayed(entry: str, argv: list) -> list[str]:
    """A process that sleeps DELAY seconds, then runs `entry`'s main with `argv`, as its console script would."""
    code = f"import sys, time; time.sleep({DELAY}); sys.argv = {argv!r}; from {entry} import main; main()"
    return [sys.executable, "-c", code]


def test_the_start_up_counts_from_the_process_start_to_the_first_step(tiny_h5, tmp_path):
    out = tmp_path / "one"
    cmd = _delayed("lbscale.cli", ["lbscale", "train", "--data", str(tiny_h5), "--out", str(out), *TRAIN])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env())
    assert r.returncode == 0, r.stderr[-3000:]
    s = summary(out)
    assert DELAY < s["startup_seconds"] < DELAY + 60
    # the trial's own clock starts after the imports: its wall time leaves the delay out, and the start-up is
    # no part of the training time
    assert s["startup_seconds"] + s["total_train_seconds"] < DELAY + s["wall_seconds"] + 60
    # the import, recorded apart: the delay came before lbscale and torch were imported, so it is in it
    assert DELAY < s["import_seconds"] < s["startup_seconds"]


def test_under_torchrun_the_start_up_counts_from_the_launcher_start(tiny_h5, tmp_path):
    out = tmp_path / "two"
    argv = ["torchrun", "--nproc_per_node=2", f"--master_port={free_port()}", "-m", "lbscale.cli", "train",
            "--data", str(tiny_h5), "--out", str(out), *TRAIN]
    r = subprocess.run(_delayed("torch.distributed.run", argv), capture_output=True, text=True, timeout=300,
                       env=env())
    assert r.returncode == 0, r.stderr[-3000:]
    s = summary(out)
    assert s["world_size"] == 2 and DELAY < s["startup_seconds"] < DELAY + 60
    # the ranks' own import does not hold the launcher's delay: the agent's start-up is what torchrun adds
    assert 0 < s["import_seconds"] < s["startup_seconds"] - DELAY
