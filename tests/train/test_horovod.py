"""The Horovod engine against DDP: the same trial on 2 CPU processes (horovodrun --gloo, torchrun with gloo)."""

import json
import subprocess
import sys

import pytest
import torch

from lbscale.train.horovod import slot_env, slot_plan
from tests.train.helpers import env, run_train, summary

COMMON = ["--model", "test_resnet", "--quiet", "--check-every", "2", "--device", "cpu", "--global-batch", "64",
          "--epochs", "2", "--eval-every", "1", "--no-augment"]
OPTIMIZERS = {"sgd": ["--base-lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.0005"],
              "lars": ["--base-lr", "1.0", "--warmup-epochs", "1"],
              "lamb": ["--base-lr", "0.005", "--warmup-epochs", "1"]}


def horovodrun(*args, nproc: int = 2, timeout: int = 300) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "horovod.runner.launch", "--gloo", "-np", str(nproc), "-H", f"localhost:{nproc}",
            sys.executable, "-m", "lbscale.cli", "train", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env())


def losses(out) -> tuple[list[float], list[float]]:
    """(the val loss evaluated after every optimizer step, each epoch's train loss)."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return ([r["val_loss"] for r in rows if r.get("kind") == "step"],
            [r["train_loss"] for r in rows if r.get("kind", "epoch") == "epoch"])


def weights(out) -> dict:
    return torch.load(out / "checkpoint" / "model.pt", weights_only=False)["model"]


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_horovod_trains_as_ddp_does(horovod, tiny_h5, tmp_path, optimizer):
    """The loss after every step (on the val split) and each epoch's, and the final weights (buffers included),
    bit for bit under both engines. Exact equality is the right tolerance here: with 2 ranks the averaged gradient
    is the same under any all-reduce (a + b is exact in either order, and halving is exact), and both engines
    start from rank 0's parameters and broadcast its buffers before a step's first forward. At more ranks a
    reduction may group its sums otherwise, and a float32 tolerance would be needed."""
    base = ["--data", tiny_h5, *COMMON, "--optimizer", optimizer, *OPTIMIZERS[optimizer]]
    ddp = run_train(*base, "--out", tmp_path / "ddp", nproc=2)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    hvd = horovodrun(*base, "--out", tmp_path / "hvd", "--engine", "horovod")
    assert hvd.returncode == 0, (hvd.stdout + hvd.stderr)[-3000:]
    a, b = summary(tmp_path / "ddp"), summary(tmp_path / "hvd")
    assert a["status"] == b["status"] == "completed" and a["world_size"] == b["world_size"] == 2
    assert b["param_digests"][0] == b["param_digests"][1]  # the ranks agree under Horovod too
    cfg = json.loads((tmp_path / "hvd" / "config.json").read_text())
    assert (cfg["config"]["engine"], cfg["launcher"], cfg["backend"]) == ("horovod", "horovodrun", "horovod-gloo")
    assert cfg["versions"]["horovod"] == sys.modules["horovod"].__version__ == "0.28.1"
    (sa, ea), (sb, eb) = losses(tmp_path / "ddp"), losses(tmp_path / "hvd")
    assert len(sa) == len(sb) == a["steps"] > 10 and len(ea) == len(eb) == 2
    assert sb + eb == sa + ea
    wa, wb = weights(tmp_path / "ddp"), weights(tmp_path / "hvd")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wb[k], wa[k]) for k in wa)
    assert sa[-1] < sa[0]  # it trained


def test_slot_plan_as_srun_places_tasks():
    """5 ranks, 2 a node, on 3 nodes: block placement; the third node holds one, so local rank 1 crosses 2
    nodes."""
    plan = slot_plan(5, 2, ["n1", "n2", "n3"])
    assert [(s["hostname"], s["local_rank"], s["local_size"], s["cross_rank"], s["cross_size"]) for s in plan] == [
        ("n1", 0, 2, 0, 3), ("n1", 1, 2, 0, 2), ("n2", 0, 2, 1, 3), ("n2", 1, 2, 1, 2), ("n3", 0, 1, 2, 3)]
    e = slot_env(3, 5, 2, ["n1", "n2", "n3"])
    assert (e["HOROVOD_RANK"], e["HOROVOD_SIZE"], e["HOROVOD_HOSTNAME"], e["HOROVOD_LOCAL_RANK"]) == \
        ("3", "5", "n2", "1")


def test_engine_horovod_does_not_measure_the_noise_scale(tiny_h5, tmp_path, run_cli):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", "--engine", "horovod",
                         "--gns-every", "2", "--device", "cpu")
    assert rc == 2 and "give --engine ddp" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_node_without_horovod_is_one_line_before_anything_starts(tiny_h5, tmp_path):
    """`import horovod` fails (a folder named horovod ahead on the path that is no package of it): one line, exit 2,
    no output folder, for train and for sweep."""
    blocker = tmp_path / "block" / "horovod"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no horovod on this node')\n")
    e = env()
    e["PYTHONPATH"] = f"{tmp_path / 'block'}:{e['PYTHONPATH']}"
    r = subprocess.run([sys.executable, "-m", "lbscale.cli", "train", "--data", str(tiny_h5), "--out",
                        str(tmp_path / "x"), "--engine", "horovod", "--device", "cpu"],
                       capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 2 and "Horovod is not importable" in r.stderr and "make horovod" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\ndata: {tiny_h5}\nmodel: test_resnet\nepochs: 1\ngrid: {{batch: [32], gpus: [2]}}\n")
    r = subprocess.run([sys.executable, "-m", "lbscale.cli", "sweep", str(spec), "--engine", "horovod", "--results",
                        str(tmp_path / "r")], capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 2 and "Horovod is not importable" in r.stderr and not (tmp_path / "r").exists()


def test_a_local_horovod_trial_stopped_by_the_wall_resumes_to_ddps_weights(horovod, tiny_h5, tmp_path):
    """A local sweep's wall budget stops a 2-rank Horovod trial (SIGTERM through horovodrun: it checkpoints); the
    rerun resumes it, and it ends with the weights of the same trial run uninterrupted under DDP."""
    spec, results = tmp_path / "pre.yaml", tmp_path / "res"
    spec.write_text(f"name: pre\ndata: {tiny_h5}\nmodel: test_resnet\nepochs: 60\n"
                    "trial: {optimizer: sgd, base_lr: 0.1, device: cpu, check_every: 1, engine: horovod}\n"
                    "grid: {batch: [32], gpus: [2]}\n")
    sweep = [sys.executable, "-m", "lbscale.cli", "sweep", str(spec), "--results", str(results)]
    first = subprocess.run([*sweep, "--wall", "15s"], capture_output=True, text=True, env=env(), timeout=600)
    assert first.returncode == 0 and ": interrupted" in first.stdout, first.stdout + first.stderr
    second = subprocess.run(sweep, capture_output=True, text=True, env=env(), timeout=900)
    assert second.returncode == 0 and ": completed" in second.stdout, second.stdout + second.stderr
    trial = next(results.glob("b32-*"))
    ref = run_train("--config", trial / "trial.yaml", "--out", tmp_path / "ref", "--engine", "ddp", "--quiet",
                    nproc=2, timeout=900)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert summary(trial)["param_digests"] == summary(tmp_path / "ref")["param_digests"]
    epochs = [json.loads(line)["epoch"] for line in (trial / "metrics.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, 61))  # each epoch once: resumed, not restarted
