"""lbscale's own LARS and LAMB: multi-tensor (`torch._foreach_*`), one pass per parameter group, no per-tensor
Python loop and no host synchronisation inside `step`.

Each group says whether its tensors get a trust ratio (`trust_ratio`), independent of its `weight_decay`.
LARS: You, Gitman & Ginsburg 2017, Algorithm 1. LAMB: You et al. 2019, Algorithm 2. Both match timm's `Lars`
and `Lamb` under the same options (tests/train/test_adaptive.py). State is kept in float32 for float16 /
bfloat16 parameters.
"""

from __future__ import annotations

import torch

LOW_PRECISION = (torch.float16, torch.bfloat16)


def _per_tensor(ratio: torch.Tensor) -> list:
    """One factor per tensor: 0-d device tensors on a GPU (no host sync inside `step`); Python floats on the
    CPU, where reading them costs nothing and the scalar-list kernels are faster than broadcasting."""
    return ratio.tolist() if ratio.device.type == "cpu" else list(ratio.unbind())


def _trust(numerator: list, denominator: list, coeff: float, fallback: float = 1.0) -> list:
    """coeff * ||a|| / ||b|| per tensor, `fallback` where either norm is zero."""
    a = torch.stack(torch._foreach_norm(numerator))
    b = torch.stack(torch._foreach_norm(denominator))
    return _per_tensor(torch.where((a > 0) & (b > 0), coeff * a / b, torch.full_like(a, fallback)))


def _master(params: list) -> list:
    """The parameters in the precision the update is computed in (float32 for float16 / bfloat16)."""
    return [p.float() if p.dtype in LOW_PRECISION else p for p in params]


def _evaluate(closure):
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _groups_with_grads(param_groups):
    """Per group with gradients: (group, params, params in update precision, grads in update precision)."""
    for group in param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if params:
            grads = [p.grad.float() if p.grad.dtype in LOW_PRECISION else p.grad for p in params]
            yield group, params, _master(params), grads


BLOCK = 1 << 16  # elements per block on the CPU (64K: 92 ms vs 167 ms unblocked, ResNet-50 LAMB)


def _blocks(tensors: list):
    """Slices of `tensors` that one multi-tensor pass takes: all of them on a GPU (one launch per op); on the
    CPU, runs of consecutive tensors of about BLOCK elements, so that the dozen passes of an update find a
    block still in cache (the whole list streamed through memory once per op measured slower than timm's
    per-tensor loop)."""
    if not tensors or tensors[0].device.type != "cpu":
        yield slice(None)
        return
    start, size = 0, 0
    for i, t in enumerate(tensors):
        size += t.numel()
        if size >= BLOCK:
            yield slice(start, i + 1)
            start, size = i + 1, 0
    if start < len(tensors):
        yield slice(start, len(tensors))


def _write_back(params: list, master: list) -> None:
    for p, m in zip(params, master):
        if m is not p:
            p.copy_(m)


class Lars(torch.optim.Optimizer):
    """LARS: d = g + wd w; for adapted tensors d *= eta ||w|| / (||g|| + wd ||w||) (1 where a norm is 0);
    v = m v + d (v = d on the first step); w -= lr (d + m v if nesterov else v)."""

    def __init__(self, params, lr: float = 1.0, momentum: float = 0.9, weight_decay: float = 0.0,
                 trust_coeff: float = 0.001, eps: float = 1e-8, nesterov: bool = False, trust_ratio: bool = True):
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coeff=trust_coeff, eps=eps,
                        nesterov=nesterov, trust_ratio=trust_ratio)
        super().__init__(params, defaults)

    @staticmethod
    def _update(group: dict, master: list, grads: list, bufs: list | None, fresh: list | None) -> None:
        wd, eta, eps, m = group["weight_decay"], group["trust_coeff"], group["eps"], group["momentum"]
        ratio = None
        if group["trust_ratio"]:
            w_norm = torch.stack(torch._foreach_norm(master))
            g_norm = torch.stack(torch._foreach_norm(grads))
            ratio = _per_tensor(torch.where((w_norm > 0) & (g_norm > 0), eta * w_norm / (g_norm + wd * w_norm + eps),
                                            torch.ones_like(w_norm)))
        if bufs is not None and not any(fresh) and master[0].device.type == "cpu" and (
                ratio is None or min(ratio) > 1e-30):
            Lars._update_in_place(group, master, grads, bufs, ratio)
            return
        if wd != 0:
            d = torch._foreach_add(grads, master, alpha=wd)  # not in place: p.grad stays as it was
        else:
            d = [g.clone() for g in grads] if group["trust_ratio"] else list(grads)
        if ratio is not None:
            torch._foreach_mul_(d, ratio)
        if bufs is not None:
            new = [i for i, f in enumerate(fresh) if f]
            old = [i for i, f in enumerate(fresh) if not f]
            if new:
                torch._foreach_copy_([bufs[i] for i in new], [d[i] for i in new])
            if old:
                torch._foreach_mul_([bufs[i] for i in old], m)
                torch._foreach_add_([bufs[i] for i in old], [d[i] for i in old])
            d = torch._foreach_add(d, bufs, alpha=m) if group["nesterov"] else bufs
        torch._foreach_add_(master, d, alpha=-group["lr"])

    @staticmethod
    def _update_in_place(group: dict, master: list, grads: list, bufs: list, ratio: list | None) -> None:
        """The same update on the CPU without a temporary d = g + wd w: the new buffer m v + r d is built in
        the old one as r (s v + g + wd w) with s = m / r (ratios r are Python floats here, none tiny).
        Nesterov, w - lr (d + m v_new) = w + lr m v_old - lr (1 + m) v_new, first adds lr m v_old to w, so
        w's decay term reads w + lr m v_old and s becomes m / r - wd lr m to take that back. Measured
        1.08-1.13x timm's step where the temporary gave 0.89-0.95x (ResNet-50, benchmarks/bench_step.py)."""
        wd, m, lr = group["weight_decay"], group["momentum"], group["lr"]
        ahead = lr * m if group["nesterov"] else 0.0
        if ahead:
            torch._foreach_add_(master, bufs, alpha=ahead)
        ratio = ratio if ratio is not None else [1.0] * len(bufs)
        torch._foreach_mul_(bufs, [m / r - wd * ahead for r in ratio])
        torch._foreach_add_(bufs, grads)
        if wd != 0:
            torch._foreach_add_(bufs, master, alpha=wd)
        torch._foreach_mul_(bufs, ratio)
        torch._foreach_add_(master, bufs, alpha=-lr * (1 + m) if ahead else -lr)

    @torch.no_grad()
    def step(self, closure=None):
        loss = _evaluate(closure)
        for group, params, master, grads in _groups_with_grads(self.param_groups):
            bufs = fresh = None
            if group["momentum"] != 0:
                fresh = ["momentum_buffer" not in self.state[p] for p in params]  # v = d on the first step
                for p, g, new in zip(params, grads, fresh):
                    if new:
                        self.state[p]["momentum_buffer"] = torch.empty_like(g, memory_format=torch.preserve_format)
                bufs = [self.state[p]["momentum_buffer"] for p in params]
            for block in _blocks(master):
                self._update(group, master[block], grads[block], bufs and bufs[block], fresh and fresh[block])
            _write_back(params, master)
        return loss


class Lamb(torch.optim.Optimizer):
    """LAMB: m, v as Adam with bias correction; u = m_hat / (sqrt(v_hat) + eps) + wd w; for adapted tensors
    w -= lr ||w|| / ||u|| u (ratio 1 where a norm is 0), else w -= lr u. `max_grad_norm`: optional global
    gradient clipping before the moments (NVIDIA's variant; off as published)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0,
                 max_grad_norm: float | None = None, trust_ratio: bool = True):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, trust_ratio=trust_ratio)
        self.max_grad_norm = max_grad_norm
        super().__init__(params, defaults)

    def state_dict(self):
        return {**super().state_dict(), "max_grad_norm": self.max_grad_norm}

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        self.max_grad_norm = state_dict.pop("max_grad_norm", self.max_grad_norm)
        super().load_state_dict(state_dict)

    def _clip_scale(self):
        """1 / max(global grad norm / max_grad_norm, 1) as a tensor (no host sync), or None."""
        if self.max_grad_norm is None:
            return None
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return None
        norm = torch.linalg.vector_norm(torch.stack([n.float() for n in torch._foreach_norm(grads)]))
        return 1.0 / torch.clamp(norm / self.max_grad_norm, min=1.0)

    @staticmethod
    def _update(group: dict, master: list, grads: list, exp_avg: list, exp_avg_sq: list) -> None:
        b1, b2 = group["betas"]
        t = group["step"]
        torch._foreach_lerp_(exp_avg, grads, 1 - b1)  # m = b1 m + (1 - b1) g, one pass
        torch._foreach_mul_(exp_avg_sq, b2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - b2)
        # m_hat / (sqrt(v_hat) + eps) = c * m / (sqrt(v) + eps sqrt(bc2)), c = sqrt(bc2) / bc1: the bias
        # corrections become scalars. With u = m / (sqrt(v) + eps sqrt(bc2)) + (wd / c) w the true update is
        # c u, and the trust ratio ||w|| / ||c u|| times c u is ||w|| / ||u|| times u: c cancels there. Where a
        # norm is zero the ratio is 1 and the step is c u itself, so the fallback factor is c, not 1.
        bc2_sqrt = (1 - b2 ** t) ** 0.5
        c = bc2_sqrt / (1 - b1 ** t)
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_add_(denom, group["eps"] * bc2_sqrt)
        update = torch._foreach_div(exp_avg, denom)
        if group["weight_decay"] != 0:
            torch._foreach_add_(update, master, alpha=group["weight_decay"] / c)
        if group["trust_ratio"]:
            torch._foreach_mul_(update, _trust(master, update, 1.0, fallback=c))
            torch._foreach_add_(master, update, alpha=-group["lr"])
        else:
            torch._foreach_add_(master, update, alpha=-group["lr"] * c)

    @torch.no_grad()
    def step(self, closure=None):
        loss = _evaluate(closure)
        scale = self._clip_scale()
        for group, params, master, grads in _groups_with_grads(self.param_groups):
            if scale is not None:
                grads = torch._foreach_mul(grads, scale.to(grads[0].device))
            group["step"] = group.get("step", 0) + 1
            for p, m in zip(params, master):
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(m, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(m, memory_format=torch.preserve_format)
            exp_avg = [self.state[p]["exp_avg"] for p in params]
            exp_avg_sq = [self.state[p]["exp_avg_sq"] for p in params]
            for block in _blocks(master):
                self._update(group, master[block], grads[block], exp_avg[block], exp_avg_sq[block])
            _write_back(params, master)
        return loss
