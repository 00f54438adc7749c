"""docs/reproducing.md's example of a designed study (what `lbscale design` wrote for scikit-learn's digits) stays
a spec `sweep --until-resolved` takes: read from the doc, checked as any spec is, and planned, with its wall budget
less the pilot's seconds as the sweep's, and every choice carrying its reason."""

import re
from pathlib import Path

from lbscale.sweep.plan import build_plan
from lbscale.sweep.rounds import check_adaptive
from lbscale.sweep.spec import load_sweep_spec

DOC = Path(__file__).resolve().parents[2] / "docs" / "reproducing.md"


def example() -> str:
    section = DOC.read_text().split("### The designer: `lbscale design`", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_the_designed_example_is_a_spec_the_adaptive_sweep_takes(tmp_path):
    text = example()
    path = tmp_path / "my-study.yaml"
    path.write_text(text)
    spec = load_sweep_spec(path)
    check_adaptive(spec)
    plans = build_plan(spec, tmp_path / "results", 1)
    batches = sorted({p.plan.global_batch for p in plans})
    assert len(batches) >= 4 and all(b2 == 2 * b1 for b1, b2 in zip(batches, batches[1:]))
    assert len(plans) == 6 * len(batches)
    cfg = plans[0].config
    assert cfg.schedule == "constant" and cfg.stop_at_target and cfg.eval_spacing
    assert spec.sweep_wall == spec.wall - spec.design["pilot_seconds"] > 0
    for key in ("target", "lr_scaling", "eval_spacing", "eval_subset", "prune", "batch", "base_lr", "epochs"):
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{key}:"))
        assert "  # " in line, line
