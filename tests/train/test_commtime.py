"""The communication a step exposes (`comm_seconds`): the timer's arithmetic on a fake clock; its hook in 2 real
gloo processes (DDP's averaged gradient unchanged, nothing counted under no_sync, a slow rank seen as the other's
wait); the split of the wait into the collective and the imbalance between ranks; real 2-process trials; and a
single process, which has none."""

import gc
import json
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lbscale.train import commtime
from lbscale.train.commtime import CommTimer
from lbscale.train.monitors import split_exposed_wait
from tests.train.helpers import free_port, run_train, summary

COMMON = ["--quiet", "--check-every", "2", "--device", "cpu", "--global-batch", "64", "--optimizer", "sgd",
          "--base-lr", "0.1", "--epochs", "2"]


def test_the_wait_runs_from_the_last_bucket_to_the_end_of_backward(monkeypatch):
    readings = iter([1.0, 1.5, 2.0, 2.75, 10.0, 10.25])
    monkeypatch.setattr(commtime.time, "perf_counter", lambda: next(readings))
    handed = []

    def inner(state, bucket):
        handed.append((state, bucket))
        return f"future {bucket}"

    timer = CommTimer(torch.device("cpu"), inner)
    # a synchronizing backward: three buckets at 1.0, 1.5 and 2.0 s, `.backward()` returns at 2.75 s
    assert [timer.hook("state", b) for b in "abc"] == ["future a", "future b", "future c"]
    timer.backward_done()
    timer.backward_done()  # a micro-batch under no_sync: no bucket, no clock reading, nothing counted
    timer.hook("state", "d")  # the next step: one bucket at 10.0, returns at 10.25
    timer.backward_done()
    assert handed == [("state", b) for b in "abcd"]
    assert timer.take() == pytest.approx(0.75 + 0.25)
    assert timer.take() == 0.0  # taken: the next epoch starts at zero


STEPS, DELAY = 5, 0.1


def _worker(rank, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    timed, plain = torch.nn.Linear(64, 8), torch.nn.Linear(64, 8)
    plain.load_state_dict(timed.state_dict())
    timer = CommTimer(torch.device("cpu"))  # no inner hook: torch's default all-reduce
    net = torch.nn.parallel.DistributedDataParallel(timed)
    net.register_comm_hook(None, timer.hook)
    reference = torch.nn.parallel.DistributedDataParallel(plain)  # DDP's built-in all-reduce
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(rank))  # each rank its own data
    with net.no_sync():
        net(x).square().mean().backward()
    timer.backward_done()
    under_no_sync = timer.take()
    for m in (net, reference):
        m.zero_grad(set_to_none=True)
        m(x).square().mean().backward()
    timer.backward_done()
    same = all(torch.allclose(a.grad, b.grad) for a, b in zip(timed.parameters(), plain.parameters()))
    timer.take()
    for _ in range(STEPS):
        if rank == 1:
            time.sleep(DELAY)  # the slow rank: rank 0's all-reduce waits for it
        net(x).square().mean().backward()
        timer.backward_done()
    out.put((rank, {"under_no_sync": under_no_sync, "same_gradient": same, "waited": timer.take()}))
    del net, reference  # the DDP reducers (with their Python hooks) before the process group, as the trial does
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
def test_the_hook_keeps_ddp_gradients_and_times_the_wait_for_a_slow_rank():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.start_processes(_worker, args=(free_port(), q), nprocs=2, join=True, start_method="spawn")
    ranks = dict(q.get(timeout=10) for _ in range(2))
    for r in ranks.values():
        assert r["same_gradient"] and r["under_no_sync"] == 0.0
    # rank 0 waits about DELAY per step for rank 1 to reach its all-reduce: imbalance, not the collective
    assert ranks[0]["waited"] >= 0.8 * STEPS * DELAY
    split = split_exposed_wait([{"train_seconds": 1.0, "data_seconds": 0.0, "compute_seconds": 0.0,
                                 "comm_seconds": ranks[r]["waited"]} for r in (0, 1)])
    assert split["imbalance_seconds"] == ranks[0]["waited"] - ranks[1]["waited"] >= 0.5 * STEPS * DELAY


def _epochs(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_ddp_trials_split_the_wait_into_the_collective_and_imbalance(tiny_h5, tmp_path):
    # defect: comm_seconds held the wait for slower ranks too; now comm_seconds is the collective (the wait of the
    # rank that arrived last) and imbalance_seconds the rest of the recording rank's wait, in one frame that sums
    out = tmp_path / "ddp"
    r = run_train("--data", tiny_h5, "--out", out, "--model", "test_resnet", *COMMON, nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    assert summary(out)["status"] == "completed"
    rows = _epochs(out)
    assert len(rows) == 2
    for row in rows:
        assert row["comm_seconds"] > 0 and row["compute_seconds"] > 0 and row["imbalance_seconds"] >= 0
        assert row["train_seconds"] == pytest.approx(row["data_seconds"] + row["compute_seconds"]
                                                     + row["comm_seconds"] + row["imbalance_seconds"])


def test_the_wait_split_by_hand():
    # rank 0 computes 10 s and waits 3 s, rank 1 computes 12.5 s and waits 0.5 s: the collective costs 0.5 s (what
    # the last to arrive waits), and rank 0, the fastest, waited 2.5 s more for rank 1; the record is rank 0's frame
    ranks = [{"train_seconds": 14.0, "data_seconds": 1.0, "compute_seconds": 10.0, "comm_seconds": 3.0},
             {"train_seconds": 14.0, "data_seconds": 1.0, "compute_seconds": 12.5, "comm_seconds": 0.5}]
    split = split_exposed_wait(ranks)
    assert split == {"train_seconds": 14.0, "data_seconds": 1.0, "compute_seconds": 10.0, "comm_seconds": 0.5,
                     "imbalance_seconds": 2.5}
    assert split_exposed_wait(ranks[:1]) == {**ranks[0], "imbalance_seconds": 0.0}  # one process: no one to wait for


def test_a_single_process_has_no_communication(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "one"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--model", "test_resnet", *COMMON[:-2],
                         "--epochs", "1")
    assert rc == 0, err
    (row,) = _epochs(out)
    assert row["comm_seconds"] == 0.0
    assert row["train_seconds"] == pytest.approx(row["data_seconds"] + row["compute_seconds"])
