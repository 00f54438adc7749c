"""docs/results.md documents the result store: every field the writers write is named there. The files come
from real runs: a trial with a target and a test split, a diverged one, `lbscale gns`, a 2-process trial with
`--gns-every`, and a sweep whose two trials complete and fail before writing anything."""

import json
import re
from pathlib import Path

import pytest

from tests.train.helpers import run_train

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["--model", "test_resnet", "--quiet", "--device", "cpu", "--global-batch", "32"]
# two trials: one completes, one fails before writing anything (a model the trial refuses: the data checks before
# launch catch a missing file, so that no longer reaches a trial)
SPEC = """
name: broken
data: {data}
epochs: 1
trial: {{optimizer: sgd, base_lr: 0.1, check_every: 1, timing_warmup_steps: 1, device: cpu}}
grid:
  batch: [32]
  gpus: [1]
  variants: {{full: {{model: test_resnet}}, gone: {{model: no_such_model_lbscale}}}}
"""


def _documented() -> set[str]:
    return set(re.findall(r"`([a-z0-9_]+)`", (ROOT / "docs" / "results.md").read_text()))


def _keys(obj, prefix_ok=("val_", "test_")) -> set[str]:
    """Field names of a JSON object; metric names (val_top1, ...) count as their family, checked apart."""
    return {k for k in obj if not k.startswith(prefix_ok)}


@pytest.mark.slow
def test_every_field_the_writers_write_is_documented(tiny_h5, tmp_path, run_cli, child_env):
    from lbscale.task import TASKS

    fields: dict[str, set[str]] = {}
    out = tmp_path / "t"
    assert run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "2", "--target-metric", "val_top1",
                   "--target", "0.3", *COMMON)[0] == 0
    assert run_cli("gns", out, "--k", "2", "--groups", "2")[0] == 0
    config = json.loads((out / "config.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    fields["config.json"] = _keys(config) | _keys(config["config"]) | _keys(config["plan"])
    fields["versions"] = set(config["versions"])
    fields["summary.json"] = _keys(summary)
    fields["metrics.jsonl"] = set().union(*(_keys(r) for r in records))
    fields["gns.json"] = _keys(json.loads((out / "gns.json").read_text()))
    info = json.loads((out / "checkpoint" / "info.json").read_text())
    fields["checkpoint/info.json"] = set(info)

    div = tmp_path / "div"
    assert run_cli("train", "--data", tiny_h5, "--out", div, "--optimizer", "sgd", "--base-lr", "1e6",
                   "--epochs", "2", *COMMON)[0] == 0
    fields["partial record"] = _keys(json.loads((div / "metrics.jsonl").read_text().splitlines()[-1]))

    ddp = tmp_path / "ddp"
    r = run_train("--data", tiny_h5, "--out", ddp, "--epochs", "1", "--gns-every", "2", "--compile", *COMMON,
                  nproc=2)
    assert r.returncode == 0, r.stderr[-2000:]
    fields["gns-every record"] = _keys(json.loads((ddp / "metrics.jsonl").read_text().splitlines()[0]))
    fields["summary gns"] = set(json.loads((ddp / "summary.json").read_text())["gns"])

    prune = ["--prune", "asha", "--prune-min-steps", "4", "--prune-eta", "2", "--prune-group", "g", "--eval-every",
             "5", "--eval-subset", "40", "--target-metric", "val_loss", "--target", "1e9", "--stop-at-target"]
    assert run_cli("train", "--data", tiny_h5, "--out", tmp_path / "tuned" / "a", "--epochs", "1", *prune,
                   *COMMON)[0] == 0
    assert run_cli("train", "--data", tiny_h5, "--out", tmp_path / "tuned" / "b", "--epochs", "1", *prune[:-5],
                   "--optimizer", "sgd", "--base-lr", "1e6", "--on-divergence", "continue", *COMMON)[0] == 0
    step = [json.loads(line) for line in (tmp_path / "tuned" / "a" / "metrics.jsonl").read_text().splitlines()]
    fields["step record"] = _keys(step[0])
    pruned = json.loads((tmp_path / "tuned" / "b" / "summary.json").read_text())
    assert pruned["status"] == "pruned"
    fields["pruned summary"] = _keys(pruned) | set(pruned["pruned_at"])
    rungs = json.loads((tmp_path / "tuned" / "b" / "rungs.json").read_text())
    fields["rungs.json"] = set(rungs) | set().union(*rungs["rungs"])

    spec = tmp_path / "broken.yaml"
    spec.write_text(SPEC.format(data=tiny_h5))
    run_cli("sweep", spec, "--results", tmp_path / "res", "--quiet")
    trials = sorted((tmp_path / "res").glob("b32-*"))
    fields["grid.json"] = set().union(*(json.loads((t / "grid.json").read_text()) for t in trials))
    failed = [json.loads((t / "summary.json").read_text()) for t in trials if "gone" in t.name]
    fields["failed summary"] = set(failed[0])
    files = {p.name for t in trials for p in t.iterdir()}
    fields["trial directory"] = files - {"__pycache__"}

    documented = _documented() | {f.split("/")[-1] for f in re.findall(r"`([a-z0-9_./-]+)`",
                                                                      (ROOT / "docs/results.md").read_text())}
    missing = {where: sorted(k for k in keys if k not in documented) for where, keys in fields.items()}
    assert not any(missing.values()), {k: v for k, v in missing.items() if v}
    # the metric names after the split prefix, for both tasks
    names = {m.split("_", 1)[1] for t in TASKS.values() for m in t.metric_names(split="val")}
    assert names <= documented, names - documented


@pytest.fixture
def child_env(monkeypatch):
    import os

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
