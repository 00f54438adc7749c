"""Cluster profiles as rendered scripts: a golden sbatch script per shipped profile, the JSC systems'
rendezvous, CPUs per task under srun and network settings."""

import socket
from pathlib import Path

import pytest

from lbscale.errors import LbscaleError
from lbscale.results import read_json
from lbscale.slurm import SlurmEnv, rendezvous_address, step_env
from lbscale.sweep.array import srun_argv
from lbscale.sweep.systems import get_system
from tests.sweep.golden import make_golden

GOLDEN = Path(make_golden.__file__).parent
JSC = ("jureca-dc", "juwels-booster", "jusuf")


def test_every_shipped_profile_has_its_golden_script():
    assert sorted(p.stem for p in GOLDEN.glob("*.sh")) == make_golden.shipped()


@pytest.mark.parametrize("name", make_golden.shipped())
def test_rendered_script_equals_its_golden_copy(name):
    # a deliberate change: rerun tests/sweep/golden/make_golden.py and review the diff
    assert make_golden.render(name) == (GOLDEN / f"{name}.sh").read_text()


@pytest.mark.parametrize("name", JSC)
def test_jsc_scripts_follow_jsc_job_scripts(name):
    script = (GOLDEN / f"{name}.sh").read_text().splitlines()
    prof = get_system(name)
    assert prof["rendezvous_suffix"] == "i"
    # srun no longer inherits --cpus-per-task (Slurm >= 22.05): JSC's scripts export it
    assert 'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"' in script
    assert f"#SBATCH --cpus-per-task={prof['cpus_per_task']}" in script
    for line in ("export NCCL_SOCKET_IFNAME=ib0", "export GLOO_SOCKET_IFNAME=ib0"):
        assert line in script
    ib_timeout = next(int(x.split("=")[1]) for x in script if x.startswith("export NCCL_IB_TIMEOUT="))
    assert 1 <= ib_timeout <= 31  # the InfiniBand QP timeout field has 5 bits
    # the profile settings come before the command they are for
    assert script.index('export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"') < next(
        i for i, x in enumerate(script) if x.startswith("exec "))


def _plan(gpus, nodes):
    from types import SimpleNamespace

    return SimpleNamespace(gpus=gpus, nodes=nodes)


def test_srun_gets_the_jobs_or_else_the_profiles_cpus_per_task():
    argv = srun_argv(_plan(8, 2), get_system("juwels-booster"))
    assert argv[:4] == ["srun", "--ntasks=8", "--nodes=2", "--ntasks-per-node=4"]
    # a rank that exits 75 after the preemption checkpoint must not get its peers killed before they exit
    assert "--kill-on-bad-exit=0" in argv and "--wait=60" in argv
    assert "--cpus-per-task=12" in argv and "--cpu-bind=none" in argv
    # the job's SLURM_CPUS_PER_TASK (an edited #SBATCH line) wins: srun refuses more than the job has
    assert "--cpus-per-task=6" in srun_argv(_plan(8, 2), get_system("juwels-booster"), cpus_per_task=6)
    assert not any(a.startswith("--cpus-per-task") for a in srun_argv(_plan(2, 1), get_system("generic")))


def test_rendezvous_address_resolves_the_suffixed_name_once():
    # without a suffix each rank resolves the name (here it could be the first node's own 127.0.1.1)
    assert rendezvous_address("localhost") == "localhost"
    assert rendezvous_address("no-such-node-lbscale") == "no-such-node-lbscale"
    with pytest.raises(LbscaleError, match=r"no-such-node-lbscalei .*rendezvous_suffix 'i'"):
        rendezvous_address("no-such-node-lbscale", "i")
    host = socket.gethostname()
    assert rendezvous_address(host[:-1], host[-1:]) == socket.gethostbyname(host)


def test_step_env_from_the_job_node_list_and_the_profile():
    env = SlurmEnv(job_id="7", nodelist="localhost")
    assert step_env(env, get_system("generic")) == {"LBSCALE_MASTER_ADDR": "localhost"}
    mine = {**get_system("generic"), "environment": {"MASTER_ADDR": "10.0.0.1", "NCCL_IB_TIMEOUT": 22}}
    assert step_env(env, mine) == {"MASTER_ADDR": "10.0.0.1", "NCCL_IB_TIMEOUT": "22",
                                   "LBSCALE_MASTER_ADDR": "10.0.0.1"}  # the profile's own wins
    jsc = {**get_system("juwels-booster"), "rendezvous_suffix": ""}
    assert step_env(env, jsc)["GLOO_SOCKET_IFNAME"] == "ib0"  # also where a hand-written script runs the task


def test_a_suffixed_name_on_loopback_is_refused_across_nodes():
    two = SlurmEnv(job_id="7", nodelist="localhos,other")
    with pytest.raises(LbscaleError, match="loopback address 127.0.0.1"):
        step_env(two, {**get_system("generic"), "rendezvous_suffix": "t"})  # localhos + t = localhost
    one = SlurmEnv(job_id="7", nodelist="localhos")
    assert step_env(one, {**get_system("generic"), "rendezvous_suffix": "t"}) == {"LBSCALE_MASTER_ADDR": "127.0.0.1"}


def test_detect_env_takes_the_resolved_address_never_an_inherited_one():
    from lbscale.train.distributed import detect_env

    step = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "nodex1",
            "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}
    assert detect_env(step).master_addr == "nodex1"
    # sbatch copies the submitting shell's environment: a MASTER_ADDR / MASTER_PORT there is not ours
    assert detect_env({**step, "MASTER_ADDR": "localhost", "MASTER_PORT": "1"}).master_addr == "nodex1"
    assert detect_env({**step, "MASTER_ADDR": "localhost", "MASTER_PORT": "1"}).master_port == 20007
    got = detect_env({**step, "LBSCALE_MASTER_ADDR": "10.1.2.3", "LBSCALE_MASTER_PORT": "30001"})
    assert (got.master_addr, got.master_port) == ("10.1.2.3", 30001)


def test_a_users_profile_adds_to_the_jsc_environment(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("mine:\n  extends: juwels-booster\n  account: proj\n  environment: {NCCL_DEBUG: INFO}\n")
    env = get_system("mine", f)["environment"]
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_SOCKET_IFNAME"] == "ib0" and env["NCCL_IB_RETRY_CNT"] == 10


def test_an_unresolvable_rendezvous_fails_the_trial_with_the_reason(tiny_h5, tmp_path):
    import os
    import subprocess
    import sys

    spec, systems, results = tmp_path / "s.yaml", tmp_path / "systems.yaml", tmp_path / "res"
    spec.write_text(f"name: s\ndata: {tiny_h5}\nmodel: test_resnet\nepochs: 1\ntrial: {{device: cpu}}\n"
                    "grid: {batch: [32], gpus: [2], seeds: 1}\n")
    systems.write_text("mine:\n  extends: generic\n  gpus_per_node: 1\n  rendezvous_suffix: i\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(SLURM_JOB_ID="99", SLURM_JOB_NODELIST="nosuchnodex1,nosuchnodex2")
    r = subprocess.run([sys.executable, "-m", "lbscale.cli", "sweep", spec, "--results", results, "--system", "mine",
                        "--systems", systems, "--launcher", "slurm", "--trial", "b32-g2-sgd-linear-s0"],
                       capture_output=True, text=True, env=env, timeout=300)
    trial = next(d for d in results.iterdir() if (d / "trial.yaml").exists())
    summary = read_json(trial / "summary.json")
    assert r.returncode == 1 and summary["status"] == "failed", (r.stdout, r.stderr)
    assert "nosuchnodex1i" in summary["error"] and "nosuchnodex1i" in (trial / "train.log").read_text()


@pytest.mark.parametrize("value", ["i;x", "a b", 3, "$(x)"])
def test_a_bad_rendezvous_suffix_is_refused(tmp_path, value):
    import yaml

    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"mine": {"extends": "generic", "rendezvous_suffix": value}}))
    with pytest.raises(LbscaleError, match="rendezvous_suffix"):
        get_system("mine", f)


def test_a_process_group_that_does_not_form_is_one_line_naming_the_rendezvous(monkeypatch):
    # rank 1 of 2 with nobody listening at the address: torch's store times out; the error names where it
    # looked and what to check, instead of a traceback after 30 minutes
    import torch

    from lbscale.train import distributed as d

    with socket.socket() as s:  # a free port nobody will listen on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("LBSCALE_RENDEZVOUS_TIMEOUT", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    env = d.DistEnv(rank=1, world_size=2, master_addr="127.0.0.1", master_port=port, launcher="torchrun")
    with pytest.raises(LbscaleError, match=rf"rank 1 of 2: the process group did not form at 127.0.0.1:{port} "
                                           r"\(gloo: .*rendezvous_suffix"):
        d.init(env, "gloo", torch.device("cpu"))
