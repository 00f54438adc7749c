"""lbscale's multi-tensor LARS and LAMB against per-tensor references written from the papers and against
timm's Lars / Lamb under matching options: several steps in float64, zero-norm tensors, mixed groups, resume."""

import copy

import pytest
import torch
from timm.optim import Lamb as TimmLamb
from timm.optim import Lars as TimmLars

from lbscale.train import adaptive
from lbscale.train.adaptive import Lamb, Lars

STEPS = 5


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(6, 4), (6,), (3, 3, 2, 2), (5,)]
    ps = [torch.nn.Parameter(torch.randn(s, generator=g, dtype=torch.float64)) for s in shapes]
    with torch.no_grad():
        ps[1].zero_()  # a zero-norm weight: the trust ratio is 1
    return ps


def _grads(ps, step):
    g = torch.Generator().manual_seed(100 + step)
    out = [torch.randn(p.shape, generator=g, dtype=torch.float64) for p in ps]
    out[3].zero_()  # a zero gradient: the trust ratio is 1
    return out


def _groups(ps, wd):
    return [{"params": [ps[0], ps[2]], "weight_decay": wd, "trust_ratio": True},
            {"params": [ps[1], ps[3]], "weight_decay": 0.0, "trust_ratio": False}]


def _run(make, ps, steps=STEPS):
    opt = make(ps)
    for s in range(steps):
        for p, g in zip(ps, _grads(ps, s)):
            p.grad = g
        opt.step()
    return opt


def _lars_reference(ps, lr, m, wd, eta, eps, nesterov, adapt):
    """You, Gitman & Ginsburg 2017, Alg. 1, one tensor at a time."""
    bufs = [None] * len(ps)
    for s in range(STEPS):
        for i, (p, g) in enumerate(zip(ps, _grads(ps, s))):
            with torch.no_grad():
                w_decay = wd if adapt[i] else 0.0
                d = g + w_decay * p
                if adapt[i]:
                    wn, gn = p.norm(), g.norm()
                    d = d * (eta * wn / (gn + w_decay * wn + eps) if wn > 0 and gn > 0 else 1.0)
                bufs[i] = d.clone() if bufs[i] is None else m * bufs[i] + d
                p -= lr * (d + m * bufs[i] if nesterov else bufs[i])


def _lamb_reference(ps, lr, b1, b2, eps, wd, adapt, max_norm=None):
    """You et al. 2019, Alg. 2, one tensor at a time."""
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
    for s in range(STEPS):
        grads = _grads(ps, s)
        if max_norm is not None:
            total = torch.sqrt(sum((g * g).sum() for g in grads))
            grads = [g / max(float(total) / max_norm, 1.0) for g in grads]
        t = s + 1
        for i, (p, g) in enumerate(zip(ps, grads)):
            with torch.no_grad():
                ms[i] = b1 * ms[i] + (1 - b1) * g
                vs[i] = b2 * vs[i] + (1 - b2) * g * g
                u = (ms[i] / (1 - b1 ** t)) / ((vs[i] / (1 - b2 ** t)).sqrt() + eps) + (wd if adapt[i] else 0) * p
                wn, un = p.norm(), u.norm()
                ratio = wn / un if adapt[i] and wn > 0 and un > 0 else 1.0
                p -= lr * ratio * u


ADAPT = [True, False, True, False]  # ps[0], ps[2] in the adapted group


@pytest.fixture(params=[1 << 16, 10], ids=["one-block", "cpu-blocks"])
def block(request, monkeypatch):
    """The CPU's cache blocks: the update must not depend on how the tensors are cut (10: one or two each)."""
    monkeypatch.setattr(adaptive, "BLOCK", request.param)
    return request.param


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("wd", [0.0, 1e-2])
def test_lars_matches_reference_and_timm(nesterov, wd, block):
    kw = dict(lr=0.3, momentum=0.9, trust_coeff=0.01, eps=1e-8, nesterov=nesterov)
    ours = _params()
    _run(lambda ps: Lars(_groups(ps, wd), **kw), ours)
    ref = _params()
    _lars_reference(ref, 0.3, 0.9, wd, 0.01, 1e-8, nesterov, ADAPT)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-12)
    timm = _params()
    groups = [{**g, "always_adapt": g.pop("trust_ratio")} for g in _groups(timm, wd)]
    _run(lambda ps: TimmLars(groups, **kw), timm)
    for a, b in zip(ours, timm):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("max_norm", [None, 1.0])
@pytest.mark.parametrize("wd", [0.0, 1e-2])
def test_lamb_matches_reference_and_timm(wd, max_norm, block):
    kw = dict(lr=0.05, betas=(0.9, 0.999), eps=1e-6, max_grad_norm=max_norm)
    ours = _params(1)
    _run(lambda ps: Lamb(_groups(ps, wd), **kw), ours)
    ref = _params(1)
    _lamb_reference(ref, 0.05, 0.9, 0.999, 1e-6, wd, ADAPT, max_norm)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-12)
    timm = _params(1)
    groups = [{**g, "always_adapt": g.pop("trust_ratio")} for g in _groups(timm, wd)]
    _run(lambda ps: TimmLamb(groups, **kw), timm)
    for a, b in zip(ours, timm):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("cls, kw", [(Lars, dict(lr=0.3, nesterov=True)), (Lamb, dict(lr=0.05))])
def test_resumed_equals_uninterrupted(cls, kw, block):
    whole = _params(2)
    _run(lambda ps: cls(_groups(ps, 1e-2), **kw), whole)
    cut = _params(2)
    opt = _run(lambda ps: cls(_groups(ps, 1e-2), **kw), cut, steps=2)
    state = copy.deepcopy(opt.state_dict())
    resumed = cls(_groups(cut, 1e-2), **kw)
    resumed.load_state_dict(state)
    for s in range(2, STEPS):
        for p, g in zip(cut, _grads(cut, s)):
            p.grad = g
        resumed.step()
    for a, b in zip(whole, cut):
        assert torch.equal(a, b)


def test_low_precision_parameters_keep_float32_state():
    p = torch.nn.Parameter(torch.randn(8, 8).bfloat16())
    p.grad = torch.randn(8, 8).bfloat16()
    opt = Lamb([{"params": [p], "weight_decay": 0.01, "trust_ratio": True}], lr=0.01)
    before = p.detach().clone()
    opt.step()
    assert opt.state[p]["exp_avg"].dtype == torch.float32 and p.dtype == torch.bfloat16
    assert not torch.equal(before, p.detach())


def _all_adapted(ps, wd):
    """Every tensor in the trust-ratio group, so the zero-norm weight ps[1] and the zero gradient ps[3] take the
    ratio's fallback (the groups above keep both out of it)."""
    return [{"params": list(ps), "weight_decay": wd, "trust_ratio": True}]


@pytest.mark.parametrize("wd", [0.0, 1e-2])
def test_zero_norm_tensors_with_a_trust_ratio_match_reference_and_timm(wd, block):
    """LAMB's fallback ratio 1 multiplies the bias-corrected update: on the first step the zero-norm weight moves
    by lr * m_hat / (sqrt(v_hat) + eps), about lr * sign(g), not lr * 3.16 sign(g)."""
    adapt = [True] * 4
    for cls, kw, reference, ref_args, seed in (
            (Lamb, dict(lr=0.05, betas=(0.9, 0.999), eps=1e-6, max_grad_norm=None), _lamb_reference,
             (0.05, 0.9, 0.999, 1e-6, wd, adapt), 1),
            (Lars, dict(lr=0.3, momentum=0.9, trust_coeff=0.01, eps=1e-8, nesterov=False), _lars_reference,
             (0.3, 0.9, wd, 0.01, 1e-8, False, adapt), 0)):
        ours = _params(seed)
        _run(lambda ps, cls=cls, kw=kw: cls(_all_adapted(ps, wd), **kw), ours, steps=1)
        first = _params(seed)
        g0 = _grads(first, 0)[1]
        if cls is Lamb:  # one step by hand: m_hat / (sqrt(v_hat) + eps) = g / (|g| + eps)
            torch.testing.assert_close(ours[1], -0.05 * g0 / (g0.abs() + 1e-6), rtol=1e-9, atol=1e-12)
        ours = _params(seed)
        _run(lambda ps, cls=cls, kw=kw: cls(_all_adapted(ps, wd), **kw), ours)
        ref = _params(seed)
        reference(ref, *ref_args)
        timm = _params(seed)
        timm_cls = TimmLamb if cls is Lamb else TimmLars
        def make_timm(ps, timm_cls=timm_cls, kw=kw):
            return timm_cls([{**g, "always_adapt": g.pop("trust_ratio")} for g in _all_adapted(ps, wd)], **kw)

        _run(make_timm, timm)
        for a, b, c in zip(ours, ref, timm):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-12)
            torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-12)
