"""One LARS and one LAMB step against the published update formulas, on tiny tensors."""

import math

import pytest
import torch

from lbscale.train.optim import OPTIMIZERS, OptimizerOptions, build_optimizer


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.bn = torch.nn.BatchNorm1d(2)

    def forward(self, x):
        return self.bn(self.fc(x))


def _tiny_with_grads(seed=0):
    torch.manual_seed(seed)
    m = Tiny()
    m.train()
    x = torch.randn(8, 3)
    (m(x) ** 2).sum().backward()
    return m


def test_param_groups_exclude_bn_and_bias_from_decay():
    opt = build_optimizer("sgd", Tiny(), 0.1, OptimizerOptions(weight_decay=0.01))
    decay = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    m = opt.param_groups[0]["params"] + opt.param_groups[1]["params"]
    assert len(m) == 4 and len(decay) == 1  # only fc.weight decays


def test_lars_step_matches_you_2017():
    # You, Gitman, Ginsburg 2017: local_lr = eta * ||w|| / (||g|| + beta * ||w||);
    # v = m * v + lr * local_lr * (g + beta * w); w = w - v   (first step: v = 0)
    m = _tiny_with_grads()
    lr, eta, beta = 0.5, 0.001, 0.01
    w, g = m.fc.weight.detach().clone(), m.fc.weight.grad.clone()
    bias, bias_g = m.fc.bias.detach().clone(), m.fc.bias.grad.clone()
    opt = build_optimizer("lars", m, lr, OptimizerOptions(momentum=0.9, weight_decay=beta, trust_coeff=eta))
    opt.step()
    local = eta * w.norm() / (g.norm() + beta * w.norm())
    torch.testing.assert_close(m.fc.weight.detach(), w - lr * local * (g + beta * w))
    # bias: no decay and no trust ratio, plain momentum SGD
    torch.testing.assert_close(m.fc.bias.detach(), bias - lr * bias_g)


def test_lamb_step_matches_you_2019():
    # You et al. 2019, Algorithm 2 (LAMB), first step t = 1 with bias correction:
    # m = (1-b1) g; v = (1-b2) g^2; r = m_hat / (sqrt(v_hat) + eps); u = r + lambda * x
    # x = x - lr * ||x|| / ||u|| * u
    m = _tiny_with_grads(1)
    lr, b1, b2, eps, lam = 0.01, 0.9, 0.999, 1e-6, 0.01
    x, g = m.fc.weight.detach().clone(), m.fc.weight.grad.clone()
    opt = build_optimizer("lamb", m, lr, OptimizerOptions(betas=(b1, b2), eps=eps, weight_decay=lam))
    opt.step()
    m_hat = (1 - b1) * g / (1 - b1)
    v_hat = (1 - b2) * g * g / (1 - b2)
    u = m_hat / (v_hat.sqrt() + eps) + lam * x
    torch.testing.assert_close(m.fc.weight.detach(), x - lr * x.norm() / u.norm() * u)


def test_registry_builds_every_optimizer():
    for name in OPTIMIZERS:
        opt = build_optimizer(name, _tiny_with_grads(), 0.1, OptimizerOptions())
        opt.step()
        assert all(math.isfinite(p.sum().item()) for g in opt.param_groups for p in g["params"])
    with pytest.raises(ValueError):
        build_optimizer("adagrad", Tiny(), 0.1, OptimizerOptions())


def test_lars_without_weight_decay_still_adapts_every_weight():
    # timm adapts only groups with weight decay; lbscale's groups choose the trust ratio explicitly.
    m = _tiny_with_grads(2)
    lr, eta = 0.5, 0.001
    w, g = m.fc.weight.detach().clone(), m.fc.weight.grad.clone()
    bias, bias_g = m.fc.bias.detach().clone(), m.fc.bias.grad.clone()
    opt = build_optimizer("lars", m, lr, OptimizerOptions(momentum=0.9, weight_decay=0.0, trust_coeff=eta))
    assert [g["trust_ratio"] for g in opt.param_groups] == [False, True]
    opt.step()
    local = eta * w.norm() / g.norm()
    torch.testing.assert_close(m.fc.weight.detach(), w - lr * local * g)
    torch.testing.assert_close(m.fc.bias.detach(), bias - lr * bias_g)


def test_lamb_without_weight_decay_still_adapts_every_weight():
    m = _tiny_with_grads(3)
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-6
    x, g = m.fc.weight.detach().clone(), m.fc.weight.grad.clone()
    build_optimizer("lamb", m, lr, OptimizerOptions(betas=(b1, b2), eps=eps, weight_decay=0.0)).step()
    u = g / (g.abs() + eps)
    torch.testing.assert_close(m.fc.weight.detach(), x - lr * x.norm() / u.norm() * u)


def test_registry_metadata():
    assert OPTIMIZERS["lars"].trust_ratio and OPTIMIZERS["lamb"].trust_ratio and not OPTIMIZERS["sgd"].trust_ratio
    assert OPTIMIZERS["lamb"].has_betas and OPTIMIZERS["lars"].has_momentum
    assert all(o.help for o in OPTIMIZERS.values())


# What each optimizer is built with, by hand: (option values given, constructor arguments expected in its groups)
GIVEN = OptimizerOptions(momentum=0.8, betas=(0.85, 0.99), eps=1e-5, trust_coeff=0.02, nesterov=True,
                         max_grad_norm=2.0)
EXPECTED = {
    "sgd": {"momentum": 0.8, "nesterov": False},
    "nesterov": {"momentum": 0.8, "nesterov": True},
    "lars": {"momentum": 0.8, "trust_coeff": 0.02, "nesterov": True, "eps": 1e-8},  # LARS's eps: the registry's
    "lamb": {"betas": (0.85, 0.99), "eps": 1e-5},
    "adamw": {"betas": (0.85, 0.99), "eps": 1e-5},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_one_builder_passes_exactly_what_the_registry_says(name):
    opt = build_optimizer(name, _tiny_with_grads(), 0.1, GIVEN)
    for key, value in EXPECTED[name].items():
        assert all(g[key] == value for g in opt.param_groups), (name, key)
    assert type(opt).__name__ == OPTIMIZERS[name].cls.rsplit(".", 1)[1]
    if name == "lamb":
        assert opt.max_grad_norm == 2.0


@pytest.mark.parametrize("optimizer, args, needle", [
    ("sgd", ["--betas", "0.8,0.9"], "--betas"),
    ("sgd", ["--eps", "1e-3"], "--eps"),
    ("lamb", ["--momentum", "0.5"], "--momentum"),
    ("adamw", ["--trust-coeff", "0.01"], "--trust-coeff"),
    ("lars", ["--eps", "1e-3"], "--eps"),
    ("nesterov", ["--lars-nesterov"], "--lars-nesterov"),
    ("sgd", ["--max-grad-norm", "1"], "--max-grad-norm"),
    ("lamb", ["--momentum", "0.9"], "--momentum"),  # given at its default value: still not read, still refused
    ("lars", ["--eps", "1e-6"], "--eps"),
])
def test_an_option_the_optimizer_does_not_read_is_refused(tiny_h5, tmp_path, run_cli, optimizer, args, needle):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", "--optimizer", optimizer, *args)
    assert rc == 2 and needle in err and optimizer in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def test_options_the_optimizer_reads_are_accepted():
    from lbscale.train.config import TrialConfig, validate

    for optimizer, kw in (("lamb", dict(betas=(0.8, 0.9), eps=1e-4, max_grad_norm=1.0)),
                          ("lars", dict(momentum=0.8, trust_coeff=0.01, lars_nesterov=True)),
                          ("sgd", dict(momentum=0.5)), ("adamw", dict(betas=[0.8, 0.9]))):
        validate(TrialConfig(data="x.h5", out="o", optimizer=optimizer, **kw))
    # the defaults are never an objection, whatever the optimizer
    validate(TrialConfig(data="x.h5", out="o", optimizer="sgd", betas=[0.9, 0.999], eps=1e-6))



def test_weight_decay_on_convolutions_only():
    # BigEarthNet LARS study: L2 on the convolutional layers; the classifier keeps its trust ratio, undecayed.
    import timm

    model = timm.create_model("test_resnet", num_classes=3, in_chans=4)
    opt = build_optimizer("lars", model, 0.1, OptimizerOptions(weight_decay=1e-4, decay_on="conv"))
    by_id = {id(p): g for g in opt.param_groups for p in g["params"]}
    convs = [p for p in model.parameters() if p.ndim == 4]
    assert convs and all(by_id[id(p)]["weight_decay"] == 1e-4 and by_id[id(p)]["trust_ratio"] for p in convs)
    fc = model.get_classifier().weight
    assert by_id[id(fc)]["weight_decay"] == 0.0 and by_id[id(fc)]["trust_ratio"]
    everything = build_optimizer("lars", model, 0.1, OptimizerOptions(weight_decay=1e-4))
    assert len(everything.param_groups) == 2  # decay on all weights: the groups as before
    with pytest.raises(ValueError):
        build_optimizer("sgd", model, 0.1, OptimizerOptions(decay_on="linear"))


def test_drop_rate_reaches_the_classifier(tiny_h5, tmp_path, run_cli):
    from lbscale.train.models import build_model

    model = build_model("resnet18", 3, 4, drop_rate=0.3)
    assert model.drop_rate == 0.3
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "d", "--drop-rate", "1.5")
    assert rc == 2 and "--drop-rate must be in [0, 1)" in err
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "d", "--weight-decay-on", "bn")
    assert rc == 2 and "conv" in err
