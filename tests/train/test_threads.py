"""A trial's threads on a shared node (threads.py): its share of the CPUs it may use, SLURM's CPUs per task inside
an srun step, a user's OMP_NUM_THREADS left alone, and OpenMP's passive wait policy where the user set none."""

import os
import subprocess
import sys

from lbscale.train.threads import omp_env, trial_threads


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


def test_lbscale_train_sets_the_policy_before_torch_is_imported():
    """The train command's first lines run before anything imports torch, so OpenMP sees the policy."""
    code = ("import sys; import lbscale.cli; from lbscale.train.threads import prepare_process; "
            "print('torch' in sys.modules); prepare_process(); import os; print(os.environ['OMP_WAIT_POLICY'])")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "passive"]


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
