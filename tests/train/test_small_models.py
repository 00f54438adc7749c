"""lbscale's models for small images beside timm's (train.models.MODELS): the CIFAR ResNets of He et al. 2016 and
the Simple CNN of Shallue et al. 2019, built, trained, measured and filtered as any timm model."""

import json
import re
from pathlib import Path

import pytest
import timm
import torch

from lbscale.train.config import FIELDS
from lbscale.errors import LbscaleError
from lbscale.train.models import MODELS, build_model, check_model

NAMES = sorted(MODELS)


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_the_registry_holds_the_small_image_models_under_names_timm_does_not_use(run_cli):
    assert NAMES == ["cifar_resnet20", "cifar_resnet8", "simple_cnn"]
    assert not any(timm.is_model(name) for name in NAMES)
    assert all(name in FIELDS["model"].metadata["help"] for name in NAMES)  # the option's help names them
    rc, out, _ = run_cli("train", "--help")  # and the command's help says what each is
    assert rc == 0 and all(f"  {name:<15} {info.help}" in out for name, info in MODELS.items())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bands", [1, 3, 4])
@pytest.mark.parametrize("side", [8, 16, 28, 32])
def test_every_small_input_gives_one_logit_per_class(name, bands, side):
    model = build_model(name, bands, 10, channels_last=False).eval()
    with torch.no_grad():
        assert model(torch.randn(2, bands, side, side)).shape == (2, 10)


def test_parameter_counts_are_the_papers():
    # He et al. 2016, Table 6: ResNet-20 0.27M on CIFAR-10. Option A (identity shortcuts, zero-padded), no bias
    # before a BN: stem 3*16*9 + BN 32; stage 1: 6 convs of 16*16*9 + 6 BN of 32; stage 2: 16*32*9 + 5*32*32*9 +
    # 6 BN of 64; stage 3: 32*64*9 + 5*64*64*9 + 6 BN of 128; classifier 64*10 + 10
    resnet20 = _count(build_model("cifar_resnet20", 3, 10))
    assert resnet20 == 464 + 14_016 + 51_072 + 203_520 + 650 == 269_722
    assert resnet20 == pytest.approx(0.27e6, rel=0.01)
    # ResNet-8 (n = 1) with projection shortcuts (option B: 1x1 conv + BN where the shape changes): the 0.078M
    # quoted for the ResNet-8 of Shallue et al. 2019's CIFAR-10 workload (75,290 with option A, 78,042 with B)
    resnet8 = _count(build_model("cifar_resnet8", 3, 10))
    assert resnet8 == 464 + 4_672 + (4_608 + 9_216 + 128 + 512 + 64) + (18_432 + 36_864 + 256 + 2_048 + 128) + 650
    assert resnet8 == 78_042 and resnet8 == pytest.approx(0.078e6, rel=0.01)
    # Simple CNN on 28 px Fashion-MNIST: conv 5x5 1->32 and 32->64 with biases, 7x7x64 -> 1024, 1024 -> 10
    simple = _count(build_model("simple_cnn", 1, 10))
    assert simple == (25 * 32 + 32) + (25 * 32 * 64 + 64) + (49 * 64 * 1024 + 1024) + (1024 * 10 + 10) == 3_274_634
    assert _count(build_model("simple_cnn", 1, 10, channels_last=False)) == simple  # one model at every size


@pytest.mark.parametrize("name, batch_norms", [("cifar_resnet20", 19), ("cifar_resnet8", 9), ("simple_cnn", 0)])
def test_batch_norm_follows_every_convolution_of_the_resnets_and_none_in_the_simple_cnn(name, batch_norms):
    model = build_model(name, 3, 10)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) == batch_norms and (not norms or len(convs) == len(norms))
    assert all((m.bias is None) == bool(norms) for m in convs)  # a bias before a BN is a wasted parameter


@pytest.mark.parametrize("name", NAMES)
def test_drop_rate_is_dropout_before_the_classifier(name):
    x = torch.randn(8, 3, 16, 16)
    plain = build_model(name, 3, 5).train()
    assert torch.equal(plain(x), plain(x))  # batch statistics alone are deterministic
    dropped = build_model(name, 3, 5, drop_rate=0.5).train()
    assert not torch.equal(dropped(x), dropped(x))
    dropped.eval()
    assert torch.equal(dropped(x), dropped(x))


@pytest.mark.parametrize("name, features", [("cifar_resnet20", 64), ("cifar_resnet8", 64), ("simple_cnn", 1024)])
def test_timm_interface_channels_last_and_headless(name, features):
    torch.manual_seed(0)
    model = build_model(name, 4, 6, channels_last=False).eval()
    last = build_model(name, 4, 6, channels_last=True).eval()
    last.load_state_dict(model.state_dict())
    x = torch.randn(3, 4, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(last(x.contiguous(memory_format=torch.channels_last)), model(x))
        pre = model.forward_head(model.forward_features(x), pre_logits=True)  # what lbscale filter embeds
        assert pre.shape == (3, features) and model.num_features == features
        headless = build_model(name, 4, 0, channels_last=False).eval()  # timm's num_classes=0: the features
        headless.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("fc.")})
        torch.testing.assert_close(headless(x), pre)


def test_unknown_models_are_refused_naming_ours(tiny_h5, tmp_path, run_cli):
    with pytest.raises(LbscaleError, match="cifar_resnet8, cifar_resnet20, simple_cnn"):
        check_model("resnet_9000")
    check_model("resnet18")
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", "--model", "resnet_9000", "--quiet")
    assert rc == 2 and err.count("\n") == 1 and all(name in err for name in NAMES), err


TRAIN = ["--global-batch", "32", "--optimizer", "sgd", "--base-lr", "0.05", "--lr-scaling", "none", "--epochs", "3",
         "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module", params=NAMES)
def trial(request, tiny_h5, tmp_path_factory):
    """A short `lbscale train` of each model on tiny_h5 (16 px, 3 bands, 4 classes)."""
    from lbscale.cli import main

    out = tmp_path_factory.mktemp(request.param) / "trial"
    assert main(["train", "--data", str(tiny_h5), "--out", str(out), "--model", request.param, *TRAIN]) == 0
    return request.param, out


def test_a_short_training_learns_above_chance(trial):
    name, out = trial
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["final"]["val_top1"] > 0.75, summary["final"]  # 4 classes: chance is 0.25 (0.91-0.99 seen)
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["model"] == name and config["trainable_parameters"] == _count(build_model(name, 3, 4))


def test_gns_on_the_trial_checkpoint(trial, run_cli):
    _, out = trial
    rc, stdout, err = run_cli("gns", out, "--micro-batch", "8", "--k", "4", "--groups", "4", "--quiet")
    assert rc == 0, err
    assert "gradient noise scale B_simple" in stdout
    assert json.loads((out / "gns.json").read_text())["count"] == 4


def test_filter_embeds_with_the_trial_checkpoint(trial, tiny_h5, tmp_path, run_cli):
    name, out = trial
    rc, stdout, err = run_cli("filter", "--data", tiny_h5, "--checkpoint", out, "--out", tmp_path / "f.h5",
                              "--reduce", "pca", "--pca-dims", "2", "--quiet")  # the network is the point, not t-SNE
    assert rc == 0, err
    record = json.loads((tmp_path / "f-filter" / "filter.json").read_text())
    assert record["feature_model"]["model"] == name and record["features_dim"] == build_model(name, 3, 4).num_features


def test_filter_says_our_models_have_no_pretrained_weights(tiny_h5, tmp_path, run_cli):
    rc, _, err = run_cli("filter", "--data", tiny_h5, "--model", "simple_cnn", "--pretrained", "--out",
                         tmp_path / "f.h5", "--quiet")
    assert (rc, err) == (2, "lbscale: error: --pretrained: simple_cnn is lbscale's own model, with no pretrained "
                            "weights; train a trial and give --checkpoint\n")


def _named_models() -> set[str]:
    """Every model an experiment spec or a docs page's YAML names (`model: NAME`)."""
    root = Path(__file__).resolve().parents[2]
    texts = [p.read_text() for p in sorted((root / "experiments").glob("*.yaml"))]
    texts += [p.read_text() for p in sorted((root / "docs").glob("*.md"))]
    names = set()
    for text in texts:
        names |= set(re.findall(r"^\s*model:\s*([A-Za-z0-9_]+)", text, flags=re.M))
        names |= set(re.findall(r"model:\s*\{?\s*values:\s*\[([^\]]+)\]", text))
    return {n.strip() for group in names for n in group.split(",")}


def test_every_model_the_specs_and_docs_name_is_in_the_model_lists():
    # A timm model of the ResNet family is covered by "resnet18/34/50/101/152"; any other name a spec or the
    # template trains must be listed where a user looks: `lbscale train --help` (so docs/cli.md) and docs/train.md.
    root = Path(__file__).resolve().parents[2]
    cli_doc = (root / "docs" / "cli.md").read_text()
    help_block = cli_doc.split("Models for small images", 1)[1].split("```", 1)[0]
    train_doc = (root / "docs" / "train.md").read_text()
    for name in sorted(_named_models()):
        if re.fullmatch(r"resnet(18|34|50|101|152)", name):
            continue
        assert re.search(rf"^\s+{name}\s", help_block, flags=re.M), f"{name} is not in train --help's model list"
        assert f"`{name}`" in train_doc, f"{name} is not in docs/train.md's model list"
