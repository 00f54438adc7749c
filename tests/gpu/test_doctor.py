"""`lbscale doctor` on a GPU machine: the GPU lines (gpus, bf16, compile, cuda-graph, nvjpeg, allreduce) run
and pass, and --json records them."""

import json

import pytest

pytestmark = pytest.mark.gpu

GPU_CHECKS = ("gpus", "bf16", "compile", "cuda-graph", "nvjpeg", "allreduce")


def test_doctor_gpu_lines_pass(cuda, tmp_path, lbscale, figure):
    from tests.gpu.conftest import need

    need("torchvision", "PIL")
    rc, out, err = lbscale("doctor", "--json", tmp_path / "doctor.json")
    checks = {c["name"]: c for c in json.loads((tmp_path / "doctor.json").read_text())["checks"]}
    failed = {n: c["detail"] for n, c in checks.items() if n in GPU_CHECKS and c["status"] != "ok"}
    assert not failed, out
    assert out.strip().splitlines()[-1].startswith("doctor: ")
    for name in ("gpus", "bf16", "compile", "nvjpeg"):
        figure(f"doctor {name}", checks[name]["detail"])
    assert rc == 0 or any(c["status"] == "failed" for n, c in checks.items() if n not in GPU_CHECKS), out
