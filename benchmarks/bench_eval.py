"""Step evaluations' cost in the demo study: seconds spent evaluating the fixed subset inside the epoch over the
epoch's training seconds (which leave them out), with the demo's settings (a 256-image val subset every 1,024
training samples, evaluation batch 512), at the demo's smallest and largest batch. One epoch each, one
process on the CPU, the embedded synthetic set as `make demo` prepares it. Target: at most 0.10."""

import tempfile
from pathlib import Path

from benchmarks.common import report
from lbscale.train.config import load_config
from lbscale.data.prepare import prepare
from lbscale.results import read_jsonl
from lbscale.train.entry import run_trial

DEMO = dict(model="test_resnet", optimizer="sgd", base_lr=0.1, lr_scaling="none", schedule="constant",
            weight_decay=1e-4, epochs=1, device="cpu", eval_every_samples=1024, eval_subset=256, eval_batch=512)


def epoch_record(data: Path, out: Path, batch: int) -> dict:
    cfg = load_config(None, data=str(data), out=str(out), global_batch=batch, **DEMO)
    assert run_trial(cfg) == 0
    return next(r for r in read_jsonl(out / "metrics.jsonl") if r.get("kind") is None)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "demo.h5"
        prepare("synthetic", None, data, count=6000, label_noise=0.05, command="bench")
        for batch in (32, 512):
            r = epoch_record(data, Path(tmp) / f"b{batch}", batch)
            report(f"step evaluations / training time, batch {batch}", r["step_eval_seconds"] / r["train_seconds"],
                   "ratio", "target <= 0.10")


if __name__ == "__main__":
    main()
