"""A noisy quadratic model (Zhang et al. 2019, "Which Algorithmic Choices Matter at Which Batch Sizes? Insights
From a Noisy Quadratic Model"): the loss 1/2 sum_i h_i theta_i^2, per-sample gradients h_i theta_i + noise of
variance c_i, plain SGD. From one branch point theta_0, a branch at batch B and LR alpha(B) trains `window`
samples (window / B steps); the expected loss after them has a closed form per coordinate (a = 1 - alpha h):

    E theta_t^2 = a^(2t) theta_0^2 + alpha^2 c / B * (1 - a^(2t)) / (1 - a^2)

so the batch where the expected excess over the best smaller batch crosses a tolerance (the local critical batch
as Merrill et al. 2025 define it, on a continuous batch axis) is known exactly. `branches` draws the losses of
repeated branches the way `lbscale branch --repeats` measures them: repeat r sees the same per-sample noise at
every factor (the same data order, grouped into larger steps), different repeats independent noise. The truth
here is computed from the closed form, never from the estimator it scores."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

RULES = {"linear": lambda k: k, "sqrt": math.sqrt}


@dataclass
class NoisyQuadratic:
    h: np.ndarray  # curvatures
    c: np.ndarray  # per-sample gradient noise variances
    theta0: np.ndarray  # the branch point
    lr: float  # at the base batch
    base: int
    window: int  # samples each branch trains
    rule: str = "linear"
    name: str = field(default="")

    def alpha(self, batch: float) -> float:
        return self.lr * RULES[self.rule](batch / self.base)

    def expected_loss(self, batch: float) -> float:
        """The closed form after window / batch steps (a real number of steps between grid batches)."""
        a = 1 - self.alpha(batch) * self.h
        t = self.window / batch
        a2t = np.exp(2 * t * np.log(np.abs(a))) if np.all(a != 0) else np.abs(a) ** (2 * t)
        geometric = np.where(np.isclose(a * a, 1.0), t, (1 - a2t) / np.where(np.isclose(a * a, 1.0), 1, 1 - a * a))
        m = a2t * self.theta0 ** 2 + self.alpha(batch) ** 2 * self.c / batch * geometric
        return float(0.5 * np.sum(self.h * m))

    def truth(self, tolerance: float, top: float, points: int = 4000) -> float:
        """The smallest batch in (base, top] whose expected loss exceeds the best smaller one's by more than
        `tolerance` (inf where none does), on a fine log grid."""
        grid = np.exp(np.linspace(math.log(self.base), math.log(top), points))
        losses = np.array([self.expected_loss(b) for b in grid])
        best = np.minimum.accumulate(losses)
        past = np.flatnonzero(losses[1:] > best[:-1] + tolerance)
        return float(grid[past[0] + 1]) if len(past) else math.inf

    def branches(self, factors: list[int], repeats: int, rng: np.random.Generator) -> dict[int, dict[int, float]]:
        """{batch: {repeat: loss after the window}} of simulated SGD; inf where a branch diverged."""
        steps = self.window // self.base
        # per repeat, the noise mean of each base batch: a factor-k step averages k consecutive ones
        z = rng.standard_normal((repeats, steps, len(self.h))) * np.sqrt(self.c / self.base)
        out = {}
        for k in factors:
            mean = z[:, : steps // k * k].reshape(repeats, steps // k, k, -1).mean(axis=2)
            theta = np.tile(self.theta0, (repeats, 1))
            alpha = self.alpha(k * self.base)
            with np.errstate(over="ignore", invalid="ignore"):
                for j in range(steps // k):
                    theta = theta - alpha * (self.h * theta + mean[:, j])
                loss = 0.5 * np.sum(self.h * theta ** 2, axis=1)
            out[k * self.base] = {r: (float(v) if np.isfinite(v) else math.inf) for r, v in enumerate(loss)}
        return out


def model(d: int = 32, spread: float = 1e3, noise: float = 1.0, start: float = 1.0, lr: float = 0.02,
          base: int = 16, window: int = 8192, rule: str = "linear", name: str = "") -> NoisyQuadratic:
    """Curvatures log-spaced over `spread` up to 1, noise c = noise x h (C proportional to H, as Zhang et al.),
    theta_0 with 1/2 h theta_0^2 = start / d per coordinate."""
    h = np.exp(np.linspace(0, -math.log(spread), d))
    return NoisyQuadratic(h=h, c=noise * h, theta0=np.sqrt(2 * start / d / h), lr=lr, base=base, window=window,
                          rule=rule, name=name)
