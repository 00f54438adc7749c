"""A trial over two real SLURM nodes: two slurmd in their own network namespaces (tests/slurm/start-slurm.sh),
gloo across them, the rendezvous from SLURM's node list through a JSC-style host-name suffix, and a preempted,
requeued two-node trial that resumes exactly (the same final weights as an uninterrupted run)."""

import os
import subprocess
import sys
import time

import pytest

from lbscale.results import read_json, read_jsonl
from tests.sweep.test_launch import _env, _trials, lbscale

SPEC = """
name: twonode
data: {data}
model: test_resnet
epochs: 12
trial: {{optimizer: lars, base_lr: 0.5, ref_batch: 256, warmup_epochs: 1, check_every: 1, timing_warmup_steps: 1,
        device: cpu}}
grid:
  batch: [32]
  gpus: [2]
  seeds: 1
"""

# like JSC's profiles: the node name + "i" is the address the other node reaches; Gloo on that interface
SYSTEMS = """
twonode:
  extends: generic
  partition: twonode
  gpus_per_node: 1
  gres: null
  cpus_per_task: 1
  rendezvous_suffix: i
  environment: {GLOO_SOCKET_IFNAME: ib0}
"""


@pytest.fixture(scope="module")
def two_nodes(slurm):
    out = subprocess.run(["sinfo", "-h", "-p", "twonode", "-N", "-o", "%N %T"], capture_output=True, text=True)
    up = [line.split()[0] for line in out.stdout.splitlines() if line.split()[1].startswith(("idle", "mix", "alloc"))]
    if sorted(up) != ["lbsn1", "lbsn2"]:
        why = ("no two-node partition: tests/slurm/start-slurm.sh adds nodes lbsn1, lbsn2 where network namespaces "
               f"can be made (sinfo: {out.stdout.strip() or out.stderr.strip() or 'nothing'})")
        if os.environ.get("LBSCALE_REQUIRE_SLURM") == "1":
            pytest.fail(why + "; LBSCALE_REQUIRE_SLURM=1 forbids skipping")
        pytest.skip(why)
    return up


def _on(node, code):
    r = subprocess.run(["srun", "-p", "twonode", "-w", node, "-N1", "-n1", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=120, env=_env())
    return r.returncode, r.stdout.strip(), r.stderr.strip()


def test_the_suffixed_name_is_the_one_the_other_node_reaches(two_nodes):
    code = ("import socket; from lbscale.slurm import rendezvous_address as r; "
            "print(socket.gethostbyname(r('lbsn1')), r('lbsn1', 'i'))")
    rc, out, err = _on("lbsn2", code)
    assert rc == 0, err
    plain, suffixed = out.split()
    assert (plain, suffixed) == ("10.77.1.11", "10.77.0.11")  # the namespaces' /etc/hosts
    # from lbsn2 the plain name's address cannot be reached; the suffixed one can
    probe = ("import socket\nfor a in {addrs}:\n    s = socket.socket(); s.settimeout(3)\n"
             "    print(a, s.connect_ex((a, 6818)))")
    rc, out, err = _on("lbsn2", probe.format(addrs=(plain, suffixed)))
    assert rc == 0, err
    codes = dict(line.split() for line in out.splitlines())
    assert codes[suffixed] == "0" and codes[plain] != "0", out  # slurmd of lbsn1 listens on 6818


def _preempted_once(tiny_h5, tmp_path, *args):
    """The two-node trial swept with --requeue (and `args`), sent SIGUSR1 after its first record, requeued and run
    to its end: (trial folder, summary, config, epoch records)."""
    spec, systems, results = tmp_path / "twonode.yaml", tmp_path / "systems.yaml", tmp_path / "res"
    spec.write_text(SPEC.format(data=tiny_h5))
    systems.write_text(SYSTEMS)
    lbscale("sweep", spec, "--launcher", "slurm", "--system", "twonode", "--systems", systems, "--requeue",
            "--results", results, *args)
    trial = _trials(results)[0]
    script = (results / "slurm" / "twonode-g2.sh").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    job = read_json(trial / "submitted.json")["job"]
    deadline = time.time() + 400
    while len(read_jsonl(trial / "metrics.jsonl")) < 1 and time.time() < deadline:
        time.sleep(0.3)
    subprocess.run(["scancel", "--signal=USR1", job], check=True)  # SLURM's warning before the time limit
    while not (trial / "summary.json").exists() and time.time() < deadline:
        time.sleep(1)
    info = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    assert "Restarts=1" in info, info
    summary, cfg = read_json(trial / "summary.json"), read_json(trial / "config.json")
    assert summary["status"] == "completed", (summary, (trial / "train.log").read_text()[-3000:])
    records = [r for r in read_jsonl(trial / "metrics.jsonl") if r.get("kind", "epoch") == "epoch"]
    return trial, summary, cfg, records


def _same_as_ddp_uninterrupted(trial, summary, records, tmp_path):
    """The same trial, uninterrupted, on this host under DDP (torchrun): the same final weights and losses."""
    ref = tmp_path / "ref"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "-m", "lbscale.cli", "train", "--config", str(trial / "trial.yaml"), "--out", str(ref),
                        "--engine", "ddp", "--quiet"], capture_output=True, text=True, timeout=600, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert read_json(ref / "summary.json")["param_digests"] == summary["param_digests"]
    ref_losses = [r["train_loss"] for r in read_jsonl(ref / "metrics.jsonl") if r.get("kind", "epoch") == "epoch"]
    assert ref_losses == [r["train_loss"] for r in records]


@pytest.mark.slow
def test_two_node_trial_requeued_resumes_exactly(two_nodes, tiny_h5, tmp_path):
    trial, summary, cfg, records = _preempted_once(tiny_h5, tmp_path)
    assert cfg["hosts"] == ["lbsn1", "lbsn2"] and cfg["launcher"] == "slurm" and cfg["backend"] == "gloo"
    assert [r["epoch"] for r in records] == list(range(1, 13))
    assert all(r["comm_seconds"] > 0 for r in records)
    log = (trial / "train.log").read_text()
    assert log.count("Exited with exit code 75") == 2, log[-2000:]  # both ranks checkpointed, then the requeue
    _same_as_ddp_uninterrupted(trial, summary, records, tmp_path)


@pytest.mark.slow
def test_bench_allreduce_spans_the_two_nodes_with_a_jsc_profile(two_nodes, tmp_path):
    # inside a two-node allocation the bench starts srun steps; --system jusuf gives them the profile's
    # rendezvous (lbsn1 + "i") and Gloo on ib0; without them the ranks never meet (SLURM ends the job at 5 min)
    from lbscale.slurm import wait_for_jobs

    out = tmp_path / "allreduce-jusuf.json"
    cmd = (f"{sys.executable} -m lbscale.cli bench allreduce --procs 2 --sizes 4K..1M --repeats 3 --system jusuf "
           f"--out {out}")
    job = subprocess.run(["sbatch", "--parsable", "-p", "twonode", "-N2", "--ntasks-per-node=1", "--time=5",
                          f"--output={tmp_path / 'job.out'}", "--wrap", cmd], capture_output=True, text=True,
                         env=_env(), check=True).stdout.strip().split(";")[0]
    wait_for_jobs([job])
    doc = read_json(out)
    assert doc, (tmp_path / "job.out").read_text()[-2000:]
    assert doc["hosts"] == ["lbsn1", "lbsn2"] and doc["launcher"] == "srun" and doc["backend"] == "gloo"
    assert {pt["nodes"] for pt in doc["points"]} == {2} and len(doc["points"]) == 9
    from tests.studies.test_allreduce import reference_fit

    alpha, beta = reference_fit(doc["points"])  # the fit is the least-squares one of the points measured across
    assert doc["fit"]["alpha_seconds"] == pytest.approx(alpha, rel=1e-6, abs=1e-15)
    assert doc["fit"]["beta_seconds_per_byte"] == pytest.approx(beta, rel=1e-6, abs=1e-20)


@pytest.mark.slow
def test_two_node_horovod_trial_requeued_trains_as_ddp_does(two_nodes, horovod, tiny_h5, tmp_path):
    """`--engine horovod` over the two SLURM nodes: srun starts the ranks, the array task's rendezvous server on
    the first node lets them find each other (through the profile's suffixed address, Gloo on ib0); preempted and
    requeued, it resumes and ends with the weights and losses of the same trial run uninterrupted under DDP here
    (2 ranks: the averaged gradients are the same bit for bit under either engine)."""
    trial, summary, cfg, records = _preempted_once(tiny_h5, tmp_path, "--engine", "horovod")
    assert cfg["hosts"] == ["lbsn1", "lbsn2"] and cfg["launcher"] == "slurm" and cfg["backend"] == "horovod-gloo"
    assert [r["epoch"] for r in records] == list(range(1, 13)) and all(r["comm_seconds"] > 0 for r in records)
    _same_as_ddp_uninterrupted(trial, summary, records, tmp_path)
