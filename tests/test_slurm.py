"""SlurmEnv: the job's environment read in one place."""

from lbscale.slurm import SlurmEnv


def test_outside_a_job():
    e = SlurmEnv.current({})
    assert not e.in_job and not e.in_multitask_step and e.job_name is None and e.restart_count == 0


def test_array_task_inside_a_step():
    e = SlurmEnv.current({"SLURM_JOB_ID": "1017", "SLURM_ARRAY_JOB_ID": "1000", "SLURM_ARRAY_TASK_ID": "17",
                          "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "2",
                          "SLURM_JOB_NODELIST": "jwb[0001-0002]", "SLURM_STEP_NODELIST": "jwb0002",
                          "SLURM_CPUS_PER_TASK": "12", "SLURM_RESTART_COUNT": "2"})
    assert e.in_job and e.in_multitask_step and e.job_name == "1000_17" and e.array_task_id == 17
    assert (e.procid, e.localid, e.cpus_per_task, e.restart_count) == (2, 2, 12, 2)
    assert e.nodelist == "jwb0002"  # the step's nodes, not the job's


def test_batch_script_is_no_step():
    e = SlurmEnv.current({"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_NTASKS": "8"})
    assert e.in_job and not e.in_multitask_step and e.job_name == "5"
