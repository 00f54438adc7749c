"""A trial's threads on a shared node (threads.py): its share of the CPUs it may use, SLURM's CPUs per task inside
an srun step, a user's OMP_NUM_THREADS left alone, and OpenMP's passive wait policy where the user set none."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lbscale.train.threads import omp_env, trial_threads

ROOT = Path(__file__).resolve().parents[2]


def test_a_trial_takes_its_share_of_the_cpus_it_may_use():
    assert trial_threads({}, usable_cpus=2) == 2  # a local sweep: one trial at a time
    assert trial_threads({}, usable_cpus=16, local_processes=4) == 4  # 4 ranks of one trial on a node
    assert trial_threads({}, usable_cpus=2, local_processes=4) == 1  # never below one
    assert trial_threads({}, usable_cpus=32, most=16) == 16  # 16 cores with 2 hyper-threads each: torch's 16
    assert trial_threads({"SLURM_CPUS_PER_TASK": "8"}, usable_cpus=64, local_processes=4, cpus_per_task=8) == 8


def test_a_set_omp_num_threads_is_the_users_choice():
    assert trial_threads({"OMP_NUM_THREADS": "3"}, usable_cpus=16) is None  # torch reads it itself
    assert trial_threads({"OMP_NUM_THREADS": "1"}, usable_cpus=64, local_processes=2, cpus_per_task=8) is None
    assert trial_threads({"OMP_NUM_THREADS": ""}, usable_cpus=4) == 4  # empty: not set


def test_the_wait_policy_is_passive_unless_the_user_chose_one():
    assert omp_env({}) == {"OMP_WAIT_POLICY": "passive"}
    assert omp_env({"OMP_WAIT_POLICY": "active"}) == {}
    assert omp_env({"OMP_NUM_THREADS": "1"}) == {"OMP_WAIT_POLICY": "passive"}


# The command's own process, as the console script runs it (cli.main), with a probe that says what the wait policy
# is when torch is first imported (OpenMP reads it then, once) and ends the process there.
PROBE = """
import os, sys

class TorchProbe:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            print("OMP_WAIT_POLICY at torch's import:", os.environ.get("OMP_WAIT_POLICY"), flush=True)
            os._exit(0)

sys.meta_path.insert(0, TorchProbe())
from lbscale.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _policy_at_torch_import(tmp_path, args, **env) -> str:
    base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-c", PROBE, *args], env={**base, **env}, cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    return r.stdout + r.stderr


@pytest.mark.parametrize("args", [
    ["train"],
    ["doctor"],
    ["gns", "no-such-trial"],
    ["branch", "no-such-trial", "--factors", "1,2"],
    ["filter", "--data", "no-such.h5", "--out", "f.h5"],
], ids=lambda args: args[0])
def test_every_command_that_imports_torch_sets_the_policy_first(tmp_path, args):
    """Only `train` and the warm-start server set it: `lbscale gns` on a demo trial beside two busy processes took
    33.0 s against 18.7 s with it. One entry point (cli.main) sets it for every command."""
    assert _policy_at_torch_import(tmp_path, args).endswith("OMP_WAIT_POLICY at torch's import: passive\n")


def test_a_users_own_wait_policy_is_kept(tmp_path):
    out = _policy_at_torch_import(tmp_path, ["doctor"], OMP_WAIT_POLICY="active")
    assert out.endswith("OMP_WAIT_POLICY at torch's import: active\n")


def test_trials_forked_from_the_warm_start_server_get_the_policy(tmp_path):
    """The server loads OpenMP when it imports torch: the policy must be in its environment from its start, which
    a forked trial's /proc/self/environ (the server's, from its exec) shows."""
    if not os.path.exists("/proc/self/environ"):
        return
    (tmp_path / "envprobe.py").write_text(
        "def main(args):\n    print(open('/proc/self/environ').read().replace('\\0', ' '))\n    return 0\n")
    code = ("import sys; from lbscale.sweep import warm; "
            f"t = warm.WarmTrial('envprobe', [], {str(tmp_path / 'log')!r}, {{}}); sys.exit(t.wait())")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, check=True, timeout=300)
    assert "OMP_WAIT_POLICY=passive" in (tmp_path / "log").read_text().split()
