"""Rank, world and master address from torchrun's or SLURM's environment."""

from lbscale.slurm import expand_nodelist, port_for_job
import pytest

from lbscale.errors import LbscaleError
from lbscale.train.distributed import check_local_ranks, detect_env


def test_torchrun_env():
    e = detect_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "1234"})
    assert (e.rank, e.world_size, e.local_rank, e.master_addr, e.master_port, e.launcher) == (3, 8, 1, "n1", 1234,
                                                                                             "torchrun")


def test_srun_step_env():
    e = detect_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1",
                    "SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "jrc[0101-0102,0110]"})
    assert (e.rank, e.world_size, e.local_rank, e.launcher) == (5, 8, 1, "slurm")
    assert e.master_addr == "jrc0101" and e.master_port == port_for_job(4242)


def test_batch_script_without_step_is_single_process():
    e = detect_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "1"})
    assert e.world_size == 1 and e.launcher == "single"


def test_nodelist_forms():
    assert expand_nodelist("a[01-03],b7") == ["a01", "a02", "a03", "b7"]
    assert expand_nodelist("localhost") == ["localhost"]


def test_local_world_size_from_torchrun_and_srun():
    e = detect_env({"RANK": "1", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"})
    assert e.local_world_size == 4
    e = detect_env({"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "7",
                    "SLURM_STEP_NODELIST": "n[1-3]", "SLURM_STEP_TASKS_PER_NODE": "3(x2),2"})
    assert e.local_world_size == 3


def test_more_local_ranks_than_gpus_is_one_clear_error():
    check_local_ranks(4, 4)
    with pytest.raises(LbscaleError, match=r"2 processes on this node but 1 visible GPU\(s\).*--device cpu"):
        check_local_ranks(2, 1)
