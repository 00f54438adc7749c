"""A trial beside a busy process (issue 43: a test_resnet epoch went from 0.1 s to 17 s on a shared 2-core machine).

The background load: another torch process training test_resnet (batch 64) in a loop with torch's defaults (one
thread per core, OpenMP's active wait), on the same cores, as another user's job or a trial of an older lbscale
would. The measured trial: `lbscale train` in a fresh process, test_resnet at batch 32, one epoch of the embedded
synthetic set (1,000 images, 700 train: 21 steps); its throughput is the summary's images per second (the
steady pace, its first steps left out). Quiet and loaded alternate, three pairs, the median ratio.
`python benchmarks/bench_threads.py --all` (one pair each) also measures the other choices against the same load
(threads forced by OMP_NUM_THREADS, the wait policy by OMP_WAIT_POLICY)."""

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks.common import report
from lbscale.data.prepare import prepare
from lbscale.results import read_json

REPO = str(Path(__file__).resolve().parents[1])
PAIRS = 3
TRIAL = dict(model="test_resnet", optimizer="sgd", base_lr=0.05, lr_scaling="none", schedule="constant",
             global_batch=32, epochs=1, device="cpu")
LOAD = """
import sys
import torch
import torch.nn.functional as F
from lbscale.train.models import build_model
model = build_model("test_resnet", 4, 6)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 4, 32, 32), torch.randint(0, 6, (64,))
first = True
while True:
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
    if first:
        print("busy", flush=True)
        first = False
"""
OMP = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "LBSCALE_WARM_START")
# the choices measured with --all: extra environment of the trial (lbscale's default: none)
CHOICES = {"lbscale default": {}, "1 thread": {"OMP_NUM_THREADS": "1"},
           "OMP_WAIT_POLICY=active (2 threads)": {"OMP_WAIT_POLICY": "active"},
           "OMP_WAIT_POLICY=passive": {"OMP_WAIT_POLICY": "passive"},
           "1 thread, passive": {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive"}}


def _env(extra: dict) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in OMP}
    return {**base, "PYTHONPATH": REPO, **extra}


def images_per_second(data: Path, out: Path, extra: dict) -> float:
    """One `lbscale train` of the trial in a fresh process with `extra` in its environment: its steady img/s."""
    config = out.with_suffix(".yaml")
    config.write_text(yaml.safe_dump({**TRIAL, "data": str(data), "out": str(out)}))
    subprocess.run([sys.executable, "-m", "lbscale.cli", "train", "--config", str(config), "--quiet"],
                   env=_env(extra), check=True, capture_output=True)
    return read_json(out / "summary.json")["images_per_second"]


class Load:
    """The background load, started and stopped by this process (its own child only)."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", LOAD], env=_env({}), stdout=subprocess.PIPE, text=True)
        self.proc.stdout.readline()  # its first step is done: it is busy
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def ratio(data: Path, tmp: Path, name: str, extra: dict, pairs: int = PAIRS) -> float:
    """Quiet / loaded img/s of one choice: PAIRS pairs, alternating which runs first; prints the medians."""
    quiet, loaded = [], []
    for k in range(pairs):
        for busy in ((False, True) if k % 2 == 0 else (True, False)):
            out = tmp / f"{len(quiet) + len(loaded)}-{name.replace(' ', '_').replace('/', '_')}"
            if busy:
                with Load():
                    loaded.append(images_per_second(data, out, extra))
            else:
                quiet.append(images_per_second(data, out, extra))
    ratios = sorted(q / b for q, b in zip(quiet, loaded))
    report(f"{name}: quiet img/s (median of {pairs})", statistics.median(quiet), "img/s")
    report(f"{name}: beside the load img/s", statistics.median(loaded), "img/s")
    r = statistics.median(ratios)
    report(f"{name}: quiet / loaded (median of {pairs} pairs)", r, "x",
           f"pairs {', '.join(f'{x:.2f}' for x in ratios)}; target <= 2")
    return r


def main(choices=("lbscale default",), pairs: int = PAIRS) -> None:
    print(f"{os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} usable", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "demo.h5"
        prepare("synthetic", None, data, count=1000, label_noise=0.05, command="bench")
        for name in choices:
            ratio(data, Path(tmp), name, CHOICES[name], pairs)


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    main(*((tuple(CHOICES), 1) if "--all" in sys.argv else ()))
