"""The noise scale measured by the DDP hook during training, in 2 real gloo processes, against the closed form of
a linear regression, and under loss scaling (fp16's grad scaler): the scale is taken out and a step whose
gradient overflowed (the scaler skips it) is not measured."""

import gc
import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.train.helpers import free_port

DIM, SIGMA, LOCAL, STEPS = 8, 0.5, 16, 1500


def _closed_form(d2: float) -> float:
    # y = w* x + noise, x ~ N(0, I_D), loss 0.5 (w x - y)^2 at w = w* + d: G = d, tr(Sigma) = (D + 1)|d|^2 + D s^2
    return DIM + 1 + DIM * SIGMA ** 2 / d2


def _worker(rank, port, scale, overflow_step, out):
    from lbscale.train.noise_measure import DDPNoiseScale

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    w_star = torch.randn(DIM, dtype=torch.float64)
    model = torch.nn.Linear(DIM, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_((w_star + 0.25)[None])
    net = torch.nn.parallel.DistributedDataParallel(model)
    gns = DDPNoiseScale(2, LOCAL, 2 * LOCAL, torch.device("cpu"))
    net.register_comm_hook(None, gns.hook)
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(STEPS):
        x = torch.randn(LOCAL, DIM, dtype=torch.float64, generator=data)
        y = x @ w_star + SIGMA * torch.randn(LOCAL, dtype=torch.float64, generator=data)
        loss = 0.5 * ((net(x)[:, 0] - y) ** 2).mean()
        if step == overflow_step and rank == 1:
            loss = loss * math.inf  # one rank's gradient overflows, as fp16 does
        gns.active = True
        (loss * scale).backward()
        gns.collect(scale)
        model.zero_grad(set_to_none=True)
    if rank == 0:
        out.put({**gns.total.as_dict(), "skipped": gns.skipped})
    del net  # the DDP reducer (with its Python hook) before the process group, as the trial does
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def _run(scale=1.0, overflow_step=-1) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.start_processes(_worker, args=(free_port(), scale, overflow_step, q), nprocs=2, join=True,
                       start_method="spawn")
    return q.get(timeout=10)


@pytest.mark.slow
def test_ddp_hook_estimate_matches_the_closed_form_and_ignores_loss_scaling():
    plain = _run()
    assert plain["count"] == STEPS and plain["skipped"] == 0
    assert plain["b_simple"] == pytest.approx(_closed_form(DIM * 0.25 ** 2), rel=0.15)
    assert plain["g2"] == pytest.approx(DIM * 0.25 ** 2, rel=0.15)  # |G|^2 = |d|^2
    scaled = _run(scale=2.0 ** 12, overflow_step=7)
    assert scaled["skipped"] == 1 and scaled["count"] == STEPS - 1
    # the same data less one step: the same estimate (not the scaled one's 2^24 weighting, not None)
    assert scaled["b_simple"] == pytest.approx(plain["b_simple"], rel=0.02)


@pytest.mark.slow
def test_step_evaluations_record_the_smoothed_noise_scale(tiny_h5, tmp_path):
    import json

    from tests.train.helpers import run_train

    out = tmp_path / "gns"
    r = run_train("--data", tiny_h5, "--out", out, "--model", "test_resnet", "--device", "cpu", "--quiet",
                  "--global-batch", "32", "--epochs", "1", "--gns-every", "1", "--eval-every", "4", nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if row.get("kind") == "step"]
    assert [row["step"] for row in steps] == [4, 8, 12, 16]
    assert all(math.isfinite(row["gns_b_simple"]) for row in steps)
    assert len({row["gns_b_simple"] for row in steps}) == 4  # it moves with training: one value per step
