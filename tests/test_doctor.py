"""`lbscale doctor`: each check on this CPU machine for real (the gloo all-reduce included), the command's lines
and exit codes, and one run inside a real SLURM allocation where there is one."""

import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lbscale import doctor
from lbscale.doctor import FAILED, OK, SKIPPED
from lbscale.sweep.systems import get_system

ROOT = Path(__file__).resolve().parents[1]
GPU_CHECKS = ("bf16", "compile", "cuda-graph", "nvjpeg")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="these check what a machine without a GPU says")


@pytest.fixture
def outside_slurm(monkeypatch):
    """The process as on a login node: no SLURM job variables (CI may itself run inside a job)."""
    import os

    for var in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)


@pytest.fixture
def quick_allreduce(monkeypatch):
    """The command's tests that are not about the all-reduce skip its seconds of process start-up."""
    monkeypatch.setattr(doctor, "check_allreduce", lambda: doctor.CheckResult("allreduce", OK, "stub"))


@pytest.fixture(scope="module")
def small_h5(tmp_path_factory):
    from lbscale.data.prepare import prepare

    path = tmp_path_factory.mktemp("doctor") / "small.h5"
    prepare("synthetic", None, path, count=400, bands=3, size=16, classes=4, command="test")
    return path


def _lines(out: str) -> dict:
    """The command's check lines by check name (the first word)."""
    return {line.split()[0]: line for line in out.splitlines() if line.strip() and not line.startswith("doctor:")}


def test_versions():
    r = doctor.check_torch()
    assert r.status == OK and torch.__version__ in r.detail
    assert ("NCCL" in r.detail) and (f"CUDA {torch.version.cuda}" in r.detail or "CPU-only" in r.detail)
    libs = doctor.check_libraries()
    assert libs.status == OK and "timm " in libs.detail and "torchmetrics " in libs.detail


@no_gpu
def test_gpu_checks_skip_without_a_gpu(monkeypatch):
    monkeypatch.setattr(doctor, "_driver_gpus", lambda: 0)
    for check in (doctor.check_gpus, doctor.check_bf16, doctor.check_compile, doctor.check_cuda_graph,
                  doctor.check_nvjpeg):
        r = check() if check is not doctor.check_gpus else check({})
        assert r.status == SKIPPED and r.line().startswith("skipped: no GPU"), r


@no_gpu
def test_gpus_fail_where_slurm_or_the_driver_has_gpus_torch_cannot_see(monkeypatch):
    monkeypatch.setattr(doctor, "_driver_gpus", lambda: 0)
    r = doctor.check_gpus({"SLURM_GPUS_ON_NODE": "4"})
    assert r.status == FAILED and "SLURM gave this job 4 GPU(s)" in r.detail and r.advice
    monkeypatch.setattr(doctor, "_driver_gpus", lambda: 2)
    assert "nvidia-smi lists 2" in doctor.check_gpus({}).detail


def test_bf16_and_jpeg_comparisons_hold_on_the_cpu():
    """The GPU checks' comparisons, run on the CPU: the tolerances pass a correct device with room to spare."""
    assert doctor.bf16_matmul_error("cpu") < doctor.BF16_TOLERANCE / 2
    assert doctor.check_bf16("cpu").status == OK
    assert doctor.jpeg_decode_difference("cpu") < doctor.JPEG_TOLERANCE / 2
    assert doctor.check_nvjpeg("cpu").status == OK
    assert doctor.check_cuda_graph("cpu").line() == "skipped: no GPU"  # CUDA graphs exist on GPUs only


@no_gpu
def test_allreduce_on_two_gloo_processes():
    r = doctor.check_allreduce()
    assert r.status == OK, r.line()
    assert r.detail.startswith("gloo, 2 processes on 127.0.0.1") and "sum correct" in r.detail and " ms" in r.detail


def test_a_failed_rank_is_one_line_and_stops_the_others(tmp_path):
    import tempfile

    logs = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=logs[0]),
             subprocess.Popen([sys.executable, "-c", "raise RuntimeError('Connection refused')"], stdout=logs[1],
                              stderr=subprocess.STDOUT)]
    why = doctor._wait_all(procs, logs, timeout=30)
    assert why == "rank 1 exited 1: RuntimeError: Connection refused"
    assert procs[0].poll() is not None  # the waiting rank was stopped, not left behind
    slow = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])]
    assert doctor._wait_all(slow, logs[:1], timeout=0.5) == "no result within 0 s" and slow[0].poll() is not None


def test_slurm_outside_a_job_is_a_skip():
    r = doctor.check_slurm({})
    assert r.status == SKIPPED and r.line().startswith("skipped: not in a SLURM job")


def test_slurm_inside_a_job(monkeypatch):
    job = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "jrc[0001-0002]", "SLURM_CPUS_PER_TASK": "32",
           "SLURM_GPUS_ON_NODE": "4"}
    monkeypatch.setattr(doctor.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    r = doctor.check_slurm(job)
    assert r.status == OK and r.detail.startswith("job 42 on jrc[0001-0002]: CPUs per task 32, GPUs per node 4")
    monkeypatch.setattr(doctor.shutil, "which", lambda tool: None)
    r = doctor.check_slurm(job)
    assert r.status == FAILED and "no sinfo or srun" in r.detail and "SLURM module" in r.advice


def test_system_outside_a_job_prints_the_profile():
    r = doctor.check_system(get_system("jureca-dc"), {})
    assert r.status == OK and r.detail.startswith("jureca-dc: partition dc-gpu")
    assert "gpus_per_node 4" in r.detail and "rendezvous_suffix i" in r.detail and "not in a SLURM job" in r.detail


def test_system_inside_a_job_on_the_first_node_takes_a_connection():
    host = socket.gethostname()
    r = doctor.check_system(get_system("generic"), {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": host})
    assert r.status == OK and "listened, connected in" in r.detail, r.line()


def test_system_inside_a_job_where_the_rendezvous_does_not_resolve(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("mine:\n  extends: generic\n  rendezvous_suffix: .doctor-test.invalid\n")
    host = socket.gethostname()
    r = doctor.check_system(get_system("mine", mine), {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": host})
    assert r.status == FAILED and "does not resolve" in r.detail and "rendezvous_suffix" in r.advice


def test_data_read_rate(small_h5):
    r = doctor.check_data(small_h5, seconds=0.5)
    assert r.status in (OK, FAILED)  # the rate depends on this machine's load; what it says does not
    assert f"{small_h5} (train, 3x16x16): " in r.detail and " img/s, " in r.detail and " MB/s over " in r.detail
    assert "target 50,000 img/s per process (the loader's target for SAT-4-sized images" in r.detail


def test_data_target_for_larger_images():
    assert doctor.data_target(28 * 28 * 4)[0] == 50_000
    rate, source = doctor.data_target(120 * 120 * 12 * 2)
    assert rate == doctor.GPU_DEMAND and "no loader target is stated" in source


def test_bad_data_file_is_one_failed_line(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5 at all")
    r = doctor.check_data(junk)
    assert r.status == FAILED and r.detail.startswith(f"{junk}: ") and "lbscale prepare" in r.advice
    assert "\n" not in r.line()


@no_gpu
def test_command_on_a_cpu_machine(run_cli, outside_slurm, quick_allreduce, tmp_path, monkeypatch):
    """The command's lines: every GPU check says why it skipped, exit 0 (the all-reduce runs for real above and
    in the SLURM test)."""
    monkeypatch.setattr(doctor, "_driver_gpus", lambda: 0)
    rc, out, err = run_cli("doctor", "--json", tmp_path / "doctor.json")
    lines = _lines(out)
    assert rc == 0, out + err
    for name in GPU_CHECKS:
        assert lines[name].split(None, 1)[1] == "skipped: no GPU"
    assert "skipped: not in a SLURM job" in lines["slurm"]
    horovod = importlib.util.find_spec("horovod") is not None  # the optional engine: ok where make horovod ran
    found = lines["horovod"].split(None, 1)[1]
    assert found.startswith("ok: 0.28.1; controllers: gloo" if horovod else "skipped: not installed")
    assert out.splitlines()[-1] == (f"doctor: 10 checks, {4 if horovod else 3} ok, {6 if horovod else 7} skipped "
                                    f"(5 no GPU, {'' if horovod else '1 not installed, '}1 not in a SLURM job), "
                                    "0 failed")
    saved = json.loads((tmp_path / "doctor.json").read_text())
    assert saved["summary"] == out.splitlines()[-1] and [c["name"] for c in saved["checks"]][:3] == \
        ["torch", "libraries", "gpus"]


def test_missing_data_file_is_refused_before_any_check_runs(run_cli, outside_slurm, quick_allreduce, tmp_path):
    """Bad input, not a finding: one line and exit 2 before the other checks (they took their seconds first)."""
    missing = tmp_path / "nope.h5"
    rc, out, err = run_cli("doctor", "--data", missing)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"--data {missing}: no such file" in err


def test_data_and_system_lines(run_cli, outside_slurm, quick_allreduce, small_h5):
    rc, out, _ = run_cli("doctor", "--data", small_h5, "--system", "juwels-booster")
    lines = _lines(out)
    assert "juwels-booster: partition booster" in lines["system"] and "img/s" in lines["data"]
    assert out.splitlines()[-1].startswith("doctor: 12 checks, ")


def test_bad_options_are_one_line_and_exit_2(run_cli, tmp_path):
    rc, out, err = run_cli("doctor", "--system", "no-such-cluster")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("lbscale: error: unknown system 'no-such-cluster'; known: ")
    rc, out, err = run_cli("doctor", "--systems", tmp_path / "mine.yaml")
    assert rc == 2 and out == "" and "give --system NAME too" in err
    rc, out, err = run_cli("doctor", "--system", "generic", "--systems", tmp_path / "missing.yaml")
    assert rc == 2 and out == "" and "no such file" in err
    rc, out, err = run_cli("doctor", "--json", tmp_path / "no" / "dir.json")
    assert rc == 2 and out == "" and "no such directory" in err


def test_a_check_that_breaks_is_a_failed_line(run_cli, outside_slurm, quick_allreduce, monkeypatch):
    def broken():
        raise RuntimeError("CUDA error: unspecified launch failure\nCUDA kernel errors might be reported later")

    monkeypatch.setattr(doctor, "check_torch", broken)
    rc, out, err = run_cli("doctor")
    assert rc == 1 and "Traceback" not in out + err
    assert _lines(out)["torch"].split(None, 1)[1].startswith(
        "failed: RuntimeError: CUDA error: unspecified launch failure -> ")


def test_inside_a_real_slurm_job(slurm):
    """`lbscale doctor` as an srun step: the SLURM line names the job."""
    done = subprocess.run(["srun", "-p", "debug", "-N1", "-n1", sys.executable, "-m", "lbscale.cli", "doctor"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = _lines(done.stdout)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert lines["slurm"].split(None, 1)[1].startswith("ok: job "), done.stdout
    assert "srun on PATH" in lines["slurm"] and "Traceback" not in done.stdout + done.stderr


def test_horovod_check_skips_where_it_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod", None)  # import horovod raises ImportError
    monkeypatch.setitem(sys.modules, "horovod.torch", None)
    r = doctor.check_horovod()
    assert r.status == SKIPPED and r.detail.startswith("not installed (optional") and "make horovod" in r.advice
