"""The hand-designed Fashion-MNIST study in small (`make schedule-real`'s; `make demo-real` designs its own with
`lbscale design`): experiments/fashion-mnist-tuned.yaml on the real Fashion-MNIST files (Debian's
package), its train set cut to 300 images, one epoch, two batches: prepare, the sweep (search, pruning and
confirmation as the spec has them) and the report's verdict, each through the command line."""

import json

import h5py
import yaml

from tests.real_data import debian_fashion_mnist

SPEC = "experiments/fashion-mnist-tuned.yaml"


def test_the_fashion_mnist_study_in_small(tmp_path, run_cli):
    src = debian_fashion_mnist()
    data = tmp_path / "fm.h5"
    rc, out, err = run_cli("prepare", "idx", "--src", src, "--out", data, "--max-train", 300, "--quiet")
    assert rc == 0, err
    with h5py.File(data) as f:
        assert len(f["train/labels"]) == 300 and json.loads(f.attrs["class_names"])[0] == "T-shirt/top"
    spec = yaml.safe_load(open(SPEC))
    spec["data"] = str(data)
    spec["trial"]["eval_subset"] = 200  # val holds 6,000 images: the subset as the spec uses it, smaller
    small = tmp_path / "small.yaml"
    small.write_text(yaml.safe_dump(spec))
    res = tmp_path / "res"
    rc, out, err = run_cli("sweep", small, "--batch", "32,64", "--epochs", 1, "--results", res, "--quiet")
    assert rc == 0, err
    ran = sorted(p.name for p in res.iterdir() if (p / "summary.json").exists())
    points = spec["grid"]["search"]["trials"]
    confirm = spec["grid"]["search"]["confirm"]
    assert len(ran) == 2 * (points + confirm["top"] * confirm["seeds"]), ran
    assert {json.loads((res / t / "config.json").read_text())["config"]["model"] for t in ran} == {spec["model"]}
    rc, out, err = run_cli("report", res, "--out", tmp_path / "rep")
    assert rc == 0, err
    md = (tmp_path / "rep" / "report.md").read_text()
    verdict = md.split("## Verdict")[1].split("\n- Results")[0]
    target = spec["trial"]["target"]
    assert "rests on" in verdict and f"of 2 batches reached val_top1 {target:g}" in verdict, verdict
    # one epoch of 300 images: the steps model's intervals, or no model where fewer than 2 batches reached it
    assert "90% profile-likelihood intervals" in verdict or "no model fit" in verdict, verdict
    assert out.startswith(f"report of {len(ran)} trials") and str(tmp_path / "rep") in out
