"""docs/reproducing.md's template for a new study stays a spec `sweep --until-resolved` takes: read from the doc,
checked as any spec is, and planned (6 points x 4 batches, pruned from a rung in samples, evaluations spaced
geometrically)."""

import re
from pathlib import Path

from lbscale.sweep.plan import build_plan
from lbscale.sweep.rounds import check_adaptive
from lbscale.sweep.spec import load_sweep_spec

DOC = Path(__file__).resolve().parents[2] / "docs" / "reproducing.md"


def template() -> str:
    section = DOC.read_text().split("### Designing a study that resolves the critical batch", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_the_template_is_a_spec_the_adaptive_sweep_takes(tmp_path):
    path = tmp_path / "my-study.yaml"
    path.write_text(template())
    spec = load_sweep_spec(path)
    check_adaptive(spec)
    plans = build_plan(spec, tmp_path / "results", 1)
    assert sorted({p.plan.global_batch for p in plans}) == [16, 32, 64, 128] and len(plans) == 24
    cfg = plans[0].config
    assert (cfg.eval_spacing, cfg.prune_min_samples, cfg.schedule, cfg.stop_at_target) == (0.1, 4096, "constant",
                                                                                           True)
