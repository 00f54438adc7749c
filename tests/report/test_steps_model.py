"""The steps model (`report.steps_model`): one model over every trial, censored trials included, and its
profile-likelihood intervals. Against values computed another way: data drawn from a known truth (noise-free and
noisy), the closed forms of what a doubling saves and of the steps-samples trade-off, the t quantile, the cases it
must refuse (one batch, a flat curve, perfect scaling all the way), and coverage over studies drawn by the
benchmark's own simulator (benchmarks/bench_verdict_coverage.py, no code of the fit), scored strictly."""

import math

import numpy as np
import pytest
from scipy import stats

from benchmarks.bench_verdict_coverage import REGIMES, run_regime
from lbscale.report.steps_model import Observations, doubling_saving, fit, steps_at, steps_for_samples, threshold

BATCHES = np.array([32, 64, 128, 256, 512.0])


def exact(batches, factors, b_crit=128.0, s_min=200.0, alpha=0.5, k=0.5):
    """A noise-free search: per batch LRs lr*(B) e^f for f in `factors`, each needing exactly
    S(B) (1 + k f^2) steps (the model's own bowl)."""
    b, lr, steps = [], [], []
    for x in batches:
        for f in factors:
            b.append(x)
            lr.append(0.01 * x ** alpha * math.exp(f))
            steps.append(s_min * (1 + b_crit / x) * (1 + k * f * f))
    steps = np.array(steps)
    return Observations.of(b, lr, steps, steps)


def test_noise_free_trials_give_back_the_truth():
    model = fit(exact(BATCHES, [-1.0, -0.4, 0.0, 0.5, 1.2]))
    assert model.bowl and model.params["alpha"] == pytest.approx(0.5, abs=1e-3)
    assert model.estimates["b_crit"].value == pytest.approx(128, rel=1e-3)
    assert model.estimates["s_min"].value == pytest.approx(200, rel=1e-3)
    assert model.estimates["e_min"].value == pytest.approx(200 * 128, rel=1e-3)
    assert math.exp(model.params["log_k"]) == pytest.approx(0.5, rel=1e-2)
    np.testing.assert_allclose(model.steps(BATCHES), 200 * (1 + 128 / BATCHES), rtol=1e-3)


def test_the_deviance_threshold_is_the_t_interval_in_likelihood_form():
    # n log(1 + t^2 / (n - p)) with t the 95% quantile of t(n - p): the likelihood ratio whose interval is the
    # exact t-interval of a Gaussian linear model
    for n, p in ((30, 7), (12, 4), (5, 4)):
        t = stats.t.ppf(0.95, n - p)
        assert threshold(n, p, 0.9) == pytest.approx(n * math.log(1 + t * t / (n - p)))
    assert threshold(4, 4, 0.9) is None  # no residual degree of freedom: no interval
    # and it tends to chi^2(1)'s 90% quantile with many observations
    assert threshold(100000, 7, 0.9) == pytest.approx(stats.chi2.ppf(0.9, 1), rel=1e-3)


def test_the_profile_interval_of_s_min_is_the_t_interval_where_the_model_is_linear():
    # steps flat in the batch (B_crit far below the batches) and one LR per batch: log S = log S_min + e, a mean
    # of log steps; its profile interval with the threshold above is the t-interval of that mean
    rng = np.random.default_rng(5)
    batches = np.repeat([32.0, 64, 128, 256], 3)
    steps = 100 * np.exp(0.1 * rng.standard_normal(len(batches)))
    model = fit(Observations.of(batches, None, steps, steps), noise_slope=False)
    e = model.estimates["s_min"]
    assert not model.bowl and model.estimates["b_crit"].kind == "upper"
    y = np.log(steps)
    # B_crit's own share (log(1 + B_crit / B) > 0) shifts S_min down; a free mean is its upper bound
    half = stats.t.ppf(0.95, len(y) - 1) * y.std(ddof=1) / math.sqrt(len(y))
    assert e.hi == pytest.approx(math.exp(y.mean() + half), rel=0.03)


def test_what_a_doubling_saves_and_the_steps_samples_trade_off_by_hand():
    # 1 - S(2B) / S(B) = B_crit / (2 (B + B_crit)): 45% at B_crit / 9, 10% at 4 B_crit, 25% at B_crit
    assert doubling_saving(128 / 9, 128) == pytest.approx(0.45)
    assert doubling_saving(4 * 128, 128) == pytest.approx(0.10)
    assert doubling_saving(128, 128) == pytest.approx(0.25)
    s = lambda b: 200 * (1 + 128 / b)  # noqa: E731
    for b in (16, 128, 1024):
        assert 1 - s(2 * b) / s(b) == pytest.approx(doubling_saving(b, 128))
        # a run at batch B trains on E = B S(B) samples: (S / S_min - 1)(E / E_min - 1) = 1
        assert steps_for_samples(b * s(b), 200, 200 * 128) == pytest.approx(s(b))
    assert steps_for_samples(200 * 128, 200, 200 * 128) == math.inf


def test_one_batch_is_no_fit_and_a_flat_curve_and_perfect_scaling_are_bounds():
    assert fit(exact([128.0], [-1, 0, 1])) is None
    rng = np.random.default_rng(1)
    b = np.repeat(BATCHES, 2)
    flat = 300 * np.exp(0.05 * rng.standard_normal(len(b)))  # no batch gains: past B_crit everywhere
    e = fit(Observations.of(b, None, flat, flat)).estimates["b_crit"]
    assert e.kind == "upper" and 0 < e.hi < 64 and e.lo == 0
    halves = 64000 / b * np.exp(0.05 * rng.standard_normal(len(b)))  # halving all the way: perfect scaling
    e = fit(Observations.of(b, None, halves, halves)).estimates["b_crit"]
    assert e.kind == "lower" and e.hi == math.inf and e.lo > 512  # bounded from below past the largest batch


def test_trials_that_missed_the_target_count_as_censored():
    # batch 512's trials stopped at 110 steps without reaching the target (they need 125): dropped, the curve
    # would rest on 32..256 alone; censored, the model must put S(512) above 110
    truth = 100 * (1 + 128 / BATCHES)
    b = np.repeat(BATCHES, 3)
    need = np.repeat(truth, 3) * np.tile([0.97, 1.0, 1.03], 5)
    low, high = need.copy(), need.copy()
    low[b == 512], high[b == 512] = 110.0, np.inf
    model = fit(Observations.of(b, None, low, high))
    assert model.censored == 3 and float(model.steps(512)) > 110
    assert model.estimates["b_crit"].lo < 128 < model.estimates["b_crit"].hi


def test_a_crossing_between_two_evaluations_is_interval_censored():
    # every trial evaluated only at half its needed steps and at them: (S / 2, S]; the truth still inside
    b = np.repeat(BATCHES, 3)
    need = np.repeat(100 * (1 + 128 / BATCHES), 3) * np.tile([0.95, 1.0, 1.05], 5)
    model = fit(Observations.of(b, None, need / 2, need))
    e = model.estimates["b_crit"]
    assert e.kind in ("interval", "lower", "upper", "none") and e.lo < 128 < e.hi
    tight = fit(Observations.of(b, None, need, need)).estimates["b_crit"]
    assert (e.hi / max(e.lo, 1e-9)) > (tight.hi / tight.lo)  # less known, a wider interval


def test_the_issues_defect_1_case_is_never_still_in_perfect_scaling():
    # three LR points per batch at 64..512 (truth B_crit 384), the best taking 735, 400, 250, 158 steps, its
    # neighbours 1.3x and 1.25x as many; one seed: 256 -> 512 saves 37%, not 50%
    batches, lr, steps = [], [], []
    for x, best in zip((64, 128, 256, 512), (735, 400, 250, 158)):
        star = 0.01 * x ** 0.5
        for f, m in ((0.5, 1.3), (1.0, 1.0), (2.0, 1.25)):
            batches.append(x)
            lr.append(star * f)
            steps.append(best * m)
    steps = np.array(steps)
    e = fit(Observations.of(batches, lr, steps, steps)).estimates["b_crit"]
    assert e.kind in ("none", "interval"), e  # never "B_crit > 512": the steps still fall at 512
    # these hand-made optima are not the curve of 384: least squares through them gives 539 with the t-interval
    # [416, 721] on their own scatter (2 dof). The curve's lack of fit is rejected (the seeds' noise is nil), and
    # its interval takes that scatter: it holds 539. (It held 384 until issue 53 only because the old scale phi =
    # deviance / dof overstated the scatter 6.5-fold at a deviance of 6.5 per trial.)
    assert e.kind == "none" or (e.lo < 416 and 721 < e.hi < math.inf), e


@pytest.mark.parametrize("regime", [7, 8], ids=["4 batches, growing sigma, factor-2 grid", "V-shaped bowl"])
def test_the_90_percent_intervals_cover_in_hard_regimes(regime):
    # 150 studies (a standard error of ~2.5 points at 90%): >= 84% strictly scored, no more than 6% false
    # bounds; the whole table (1,000 studies per regime) is `make bench`'s
    s = run_regime(REGIMES[regime], 150, seed=100 + regime)
    assert s["b_crit_covered"] >= 0.84 and s["alpha_covered"] >= 0.84, s
    assert s["b_crit_false_bounds"] <= 0.06, s


def test_the_ratio_of_two_arms_critical_batches():
    # two arms of one study: B_crit 128 and 512 (a ratio of 4), noise-free optima known within 2% at 5 batches
    # each, 3 LRs; the ratio's interval holds 4 and excludes 1 (the seeds' claim that an optimizer extends the
    # critical batch); two arms alike hold 1
    from lbscale.report.steps_model import ratio

    def arm(b_crit, seed):
        rng = np.random.default_rng(seed)
        b, lr, steps = [], [], []
        for x in (32, 64, 128, 256, 512, 1024):
            for f in (-0.7, 0.0, 0.7):
                for _ in range(2):
                    b.append(x)
                    lr.append(0.01 * x ** 0.5 * math.exp(f))
                    steps.append(100 * (1 + b_crit / x) * (1 + 0.5 * f * f) * math.exp(0.05 * rng.standard_normal()))
        steps = np.array(steps)
        return fit(Observations.of(b, lr, steps * 0.98, steps))

    small, large = arm(128, 1), arm(512, 2)
    e = ratio(large, small)
    assert e.kind == "interval" and e.lo < 4 < e.hi and e.lo > 1, e
    same = ratio(arm(128, 3), small)
    assert same.lo < 1 < same.hi


def test_mlperf_reference_convergence_points_give_b_crit_with_an_interval():
    # real replicates: MLPerf's ResNet-50 reference convergence points (lbscale/published), 10-28 runs per batch
    # at 10 batches 1,632..67,840, the LR tuned per batch, epochs to 75.9% top-1 as whole epochs: each run's
    # steps lie in ((e - 1), e] x 1,281,167 / B. The batches scatter about S_min (1 + B_crit / B) far more than the
    # runs within them (lack of fit rejected), so the interval takes that scatter; the old least-squares point
    # through the per-batch means (47,065) lies inside
    from benchmarks.bench_verdict_coverage import mlperf_runs
    from lbscale.report import published

    b, lo, hi = mlperf_runs(published("mlperf-resnet50")[0])
    model = fit(Observations.of(b, None, lo, hi))
    e = model.estimates["b_crit"]
    assert model.n == 130 and not model.bowl and model.extra["lack_of_fit"]["rejected"]
    assert e.kind == "interval" and 20000 < e.lo < 47065 < e.hi < 80000, e
    # the knee fitted with it (10 batches) is McCandlish's within its interval (at 95%, the knee's words' level:
    # 1.44, from 0.72 up to the knees' range's end at 2, open there); held at g = 1 the fit gives back the figure
    # the model had before the knee, 45,167 [40,345, 50,166]
    knee = model.estimates["knee"]
    assert knee.kind in ("interval", "lower") and knee.lo < 1 < knee.hi and 1.3 < knee.value < 1.6, knee
    held = fit(Observations.of(b, None, lo, hi), knee=False).estimates["b_crit"]
    assert held.value == pytest.approx(45167, rel=0.01) and 40000 < held.lo < held.hi < 51000, held


# Issue 53 item 3: the lack-of-fit test took chi^2 for its deviance, which ignores that sigma is estimated from
# the replicates; it rejected a true model 20-24% of the time at its nominal 10%. Its reference is the textbook
# lack-of-fit F; checked here without censoring, bowl or noise slope, where the deviance is n log(RSS0 / RSS1).
REPLICATED = np.repeat([32.0, 64, 128, 256, 512], 4)


def replicated(tau: float, seed: int) -> np.ndarray:
    """log steps of four exact replicates at each of five batches: S_min (1 + B_crit / B) (200, 128) with a
    shared offset per batch (sd `tau`: lack of fit) and noise 0.1 within each batch."""
    rng = np.random.default_rng(seed)
    offset = np.repeat(tau * rng.standard_normal(5), 4)
    return np.log(200 * (1 + 128 / REPLICATED)) + offset + 0.1 * rng.standard_normal(len(REPLICATED))


def curve_residuals(y: np.ndarray, log_b_crit: float, batch: np.ndarray) -> np.ndarray:
    """y - log(1 + B_crit / B) about its mean: the residuals of the curve with log S_min at its least squares."""
    r = y - np.log1p(math.exp(log_b_crit) / batch)
    return r - r.mean()


def textbook_lack_of_fit(y: np.ndarray) -> tuple[float, float, float, float]:
    """(F, p, RSS of the curve, RSS within the batches): the curve by least squares, the pure error about the
    batch means, F on (batches - 2, n - batches - 1) dof (the model's sigma is its one other parameter)."""
    from scipy.optimize import minimize_scalar

    means = np.array([y[REPLICATED == b].mean() for b in np.unique(REPLICATED)])
    rss1 = float(((y - np.repeat(means, 4)) ** 2).sum())
    best = minimize_scalar(lambda c: float((curve_residuals(y, c, REPLICATED) ** 2).sum()), bounds=(0.0, 10.0),
                           method="bounded", options={"xatol": 1e-10})
    rss0 = float(best.fun)
    dof, pure = 3, len(y) - 6
    f = (rss0 - rss1) / dof / (rss1 / pure)
    return f, float(stats.f.sf(f, dof, pure)), rss0, rss1


def test_lack_of_fit_is_the_textbook_f_test_where_nothing_is_censored():
    # a true curve with a mild shared offset per batch: F p = 0.17, not rejected at 10%; chi^2 on the deviance
    # (20 log(RSS0 / RSS1) = 6.9 on 3 dof) gave p = 0.076 and widened the intervals
    y = replicated(0.05, 14)
    f, p, rss0, rss1 = textbook_lack_of_fit(y)
    model = fit(Observations.of(REPLICATED, None, np.exp(y), np.exp(y)), noise_slope=False, quantities=(),
                knee=False)  # the textbook test of the curve S_min (1 + B_crit / B) (the knee nests it)
    lack = model.extra["lack_of_fit"]
    assert lack["deviance"] == pytest.approx(20 * math.log(rss0 / rss1), rel=1e-4)
    assert lack["p"] == pytest.approx(p, rel=1e-3) and lack["F"] == pytest.approx(f, rel=1e-4)
    assert lack["dof"] == 3 and lack["pure_dof"] == 14
    assert 0.15 < lack["p"] < 0.2 and not lack["rejected"]
    assert model.extra["curve_threshold"] == model.threshold


def test_a_rejected_fit_takes_the_t_interval_of_the_curve_through_the_batch_means():
    # batches far off the curve (sd 0.3 against 0.1 within): rejected. With four replicates at every batch the
    # quasi-likelihood interval is the least-squares curve through the five batch means, its scale their own
    # scatter about it: Q(B_crit) - Q_min = Q_min t^2 / 3, t on batches - 2 = 3 dof (Q: the means' residual SS)
    from scipy.optimize import brentq, minimize_scalar

    y = replicated(0.3, 0)
    f, p, *_ = textbook_lack_of_fit(y)
    model = fit(Observations.of(REPLICATED, None, np.exp(y), np.exp(y)), noise_slope=False, quantities=("b_crit",),
                knee=False)
    lack = model.extra["lack_of_fit"]
    batches = np.unique(REPLICATED)
    means = np.array([y[REPLICATED == b].mean() for b in batches])

    def q(c):
        return float((curve_residuals(means, c, batches) ** 2).sum())

    hat = minimize_scalar(q, bounds=(0.0, 10.0), method="bounded", options={"xatol": 1e-10}).x
    rise = q(hat) * stats.t.ppf(0.95, 3) ** 2 / 3
    lo, hi = (math.exp(brentq(lambda c: q(c) - q(hat) - rise, a, b)) for a, b in ((hat - 5, hat), (hat, hat + 5)))
    e = model.estimates["b_crit"]
    assert e.value == pytest.approx(math.exp(hat), rel=1e-3)
    assert e.kind == "interval" and e.lo == pytest.approx(lo, rel=0.02) and e.hi == pytest.approx(hi, rel=0.02)
    assert lack["rejected"] and lack["p"] == pytest.approx(p, rel=1e-3) and p < 0.01


def test_a_search_whose_other_lrs_missed_the_target_is_still_a_search():
    # three LRs per batch, only the middle one reached the target (the others stopped unreached at 2x its steps):
    # the LR was tuned, and the model keeps its bowl (the verdict said "LR not tuned (one LR per batch)")
    b, lr, low, high = [], [], [], []
    for x in BATCHES:
        need = 200 * (1 + 128 / x)
        for f in (-1.5, 0.0, 1.5):
            b.append(x)
            lr.append(0.01 * x ** 0.5 * math.exp(f))
            low.append(need * 0.98 if f == 0 else 2 * need)
            high.append(need if f == 0 else math.inf)
    model = fit(Observations.of(b, lr, low, high))
    assert model.bowl and "alpha" in model.estimates


# Issue 53 item 1: the profile's search warm-started from its far probe found another deviance at the same point
# (21.45 where it first gave 0.0), brentq saw no sign change, and the search limit (512 e^7) came back as the
# interval's end: "B_crit 17.86 [13.97, 5.615e+05]"; a stepped profile gives about [14.19, 47.4].
LIMIT_CASE = dict(
    batch=[64, 64, 64, 128, 128, 128, 256, 256, 256, 512, 512, 512],
    lr=[0.023232273807548068, 0.12866611252614824, 0.07757413817452899, 0.07698574871538963, 0.03844087177816637,
        0.04686573635549869, 0.14584909656558603, 0.05068116452035646, 0.04848193615540102, 0.08128506937593946,
        0.3874530000700034, 0.04483231250375518],
    low=[64, 64, 53, 45, 53, 45, 37, 45, 45, 45, 53, 64],
    high=[77, 77, 64, 53, 64, 53, 45, 53, 53, 53, 64, 77])


def _stepped_profile_end(m, side: int, thr: float) -> float:
    """Where the profile deviance of log B_crit first reaches `thr` on a fine grid stepped outward from the estimate,
    each point warm-started from the one inside it (another way to find the end than the bracketing search)."""
    from lbscale.report.steps_model import b_crit_profile

    hat = m.params["log_b_crit"]
    grid = hat + side * np.arange(1, 121) * 0.02  # out to e^2.4, past both ends here
    dev = b_crit_profile(m, grid)
    (hit,) = np.flatnonzero(dev >= thr)[:1]
    return float(np.exp(grid[hit]))


@pytest.mark.parametrize("knee", [False, True], ids=["the knee held at 1, as reported", "the knee fitted"])
def test_an_interval_end_is_a_crossing_never_the_search_limit(knee):
    # as reported (g = 1) both ends are found crossings; with the knee free within its range (12 trials for 8
    # parameters) B_crit sits below the batches, the knee is not resolved, and both ends are still crossings
    from lbscale.report.likelihood import KNEE_LIMITS

    m = fit(Observations.of(**LIMIT_CASE), quantities=("b_crit",), knee=knee)
    e = m.estimates["b_crit"]
    limit = 512 * math.exp(7)
    assert e.hi is None or not math.isclose(e.hi, limit, rel_tol=1e-6), e
    thr = m.extra["curve_threshold"]
    assert e.kind == "interval", e
    for end, side in ((e.lo, -1), (e.hi, 1)):
        assert end is not None and math.isfinite(end)
        if not knee:
            stepped = _stepped_profile_end(m, side, thr)
            assert abs(math.log(end / stepped)) < 0.05, (end, stepped)  # the grid's step and brentq's tolerance
            continue
        # with the knee a warm-started chain of grid points can be caught on the knee's bound: the deviance at the
        # end, minimised afresh from five knees across the range, is the threshold
        def deviance(b, fitter=m.extra["fitter"], theta=m.extra["theta"]):
            starts = [np.concatenate([theta[:7], [lg], theta[8:]]) for lg in np.linspace(*KNEE_LIMITS, 5)]
            return min(2 * (fitter.minimise(t, {1: math.log(b)})[0] - m.nll) for t in starts)
        inside = end * 1.05 ** -side
        assert abs(deviance(end) - thr) < 0.1 and deviance(inside) < thr, (end, deviance(end), thr)


def _random_study(rng):
    """Issue 53 item 1's other generator (not the benchmark's): 6 batches 16..512, 3 LRs per batch within e^+-1.2
    of lr*(B) = 0.1 (B / 32)^0.5, B_crit 100, S_min 40, a bowl 1 + ln^2(lr / lr*), lognormal sigma 0.15,
    evaluations 20% apart, a budget of 4 S(B)."""
    batch, lr, low, high = [], [], [], []
    for b in (16, 32, 64, 128, 256, 512):
        s_b = 40 * (1 + 100 / b)
        evals = np.unique(np.ceil(1.2 ** np.arange(60)))
        evals = evals[evals <= 4 * s_b]
        for d in rng.uniform(-1.2, 1.2, size=3):
            steps = s_b * (1 + d * d) * math.exp(0.15 * rng.standard_normal())
            after = evals[evals >= steps]
            batch.append(b)
            lr.append(0.1 * (b / 32) ** 0.5 * math.exp(d))
            if len(after):
                before = evals[evals < steps]
                low.append(before[-1] if len(before) else 0)
                high.append(after[0])
            else:
                low.append(evals[-1])
                high.append(math.inf)
    return batch, lr, low, high


def test_no_interval_end_at_the_search_limit_in_random_fits():
    from lbscale.report.likelihood import REACH

    rng = np.random.default_rng(53)
    limits = (math.log(16) - REACH, math.log(512) + REACH)
    for i in range(20):  # the property on fresh draws; LIMIT_CASE above is the reproduced failure
        m = fit(Observations.of(*_random_study(rng)), quantities=("b_crit",))
        e = m.estimates["b_crit"]
        for end in (e.lo, e.hi):
            if end is not None and 0 < end < math.inf:
                assert min(abs(math.log(end) - x) for x in limits) > 1e-6, (i, e)


def unstable_search(seed, batches=(32, 64, 128, 256, 512), grid=100 ** 0.2, edge=1.5, b_crit=128.0,
                    sigma=(0.10, 0.0)):
    """A search of 6 LRs a factor `grid` apart about lr*(B) = 0.01 B^0.5 (off by up to half a step) in an
    asymmetric bowl (an LR above lr* costs 4x what one below does), every LR above `edge` lr* diverging at step 5
    before the target; the rest need 200 (1 + B_crit / B) bowl e^(sigma(B) z) steps, met between need / 1.1 and
    need. (batch, lr, low, high, diverged)."""
    rng = np.random.default_rng(seed)
    shift = grid ** rng.uniform(-0.5, 0.5)
    rows = []
    for b in batches:
        star = 0.01 * b ** 0.5
        for i in range(6):
            lr = star * shift * grid ** (i - 2.5)
            d = math.log(lr / star)
            if lr > edge * star:
                rows.append((b, lr, 5.0, math.inf, True))
                continue
            need = 200 * (1 + b_crit / b) * (1 + (2.0 if d > 0 else 0.5) * d * d)
            need *= math.exp(sigma[0] * (b / batches[0]) ** sigma[1] * rng.standard_normal())
            rows.append((b, lr, need / 1.1, need, False))
    a = np.array(rows, dtype=float)
    return a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4].astype(bool)


def test_a_diverged_trial_bounds_lr_star_not_the_steps():
    # the issue's regime (divergence above 1.5 lr*, 6 LRs over 100x, B_crit 128): every reached trial sits at or
    # below lr*; with diverged trials as "needed more than 5 steps" the fit put lr* above every diverged LR at
    # 64..512, alpha 0.80 [0.62, 0.95] and B_crit 344 [179, 756], both missing the truth
    b, lr, low, high, diverged = unstable_search(1)
    model = fit(Observations.of(b, lr, low, high, diverged), quantities=("b_crit", "alpha"))
    assert model.unstable == int(diverged.sum()) and model.censored == 0
    for x in np.unique(b[diverged]):
        assert model.lr_star(x) < lr[diverged & (b == x)].min(), x
    e, a = model.estimates["b_crit"], model.estimates["alpha"]
    # one study: its interval covers the truth 90% of the time at best (the coverage benchmark counts that); what
    # the fix guarantees here is that the interval is no longer the old one, 2.7x the truth and excluding it by far:
    # it reaches within a factor 2 of the truth, and alpha's covers 0.5
    assert e.lo < 2 * 128 and e.hi > 128 / 2 and a.lo < 0.5 < a.hi, (e, a)
    s = steps_at(model, [90.5]).iloc[0]  # between two measured batches: both ends found, near the truth (483)
    truth = 200 * (1 + 128 / 90.5)
    assert 0 < s.steps_lo < s.steps_hi < math.inf and s.steps_lo / 1.1 < truth < 1.1 * s.steps_hi, s


def test_steps_between_two_batches_rest_on_the_lrs_tried_there():
    # the issue's second case: 4 batches, sigma ~ sqrt(B), a factor-2 grid, divergence above 2 lr*, B_crit 384;
    # with diverged trials as right-censored steps S(192) had no lower end ([0, 1,379]): the bowl's level could
    # sink wherever lr* wandered off among the diverged LRs
    b, lr, low, high, diverged = unstable_search(0, batches=(64, 128, 256, 512), grid=2.0, edge=2.0, b_crit=384.0,
                                                 sigma=(0.05, 0.5))
    model = fit(Observations.of(b, lr, low, high, diverged), quantities=("b_crit",))
    s = steps_at(model, [192.0]).iloc[0]
    assert 0 < s.steps_lo < 200 * (1 + 384 / 192) < s.steps_hi < math.inf, s


# Issue 53 item 2: a knee the data can reject. The curve S_min (1 + (B_c / B)^g)^(1 / g), g = 1 McCandlish's; the
# printed B_crit is the batch where a doubling saves 25% at every g. Truths below are roots of hand-written curves
# (scipy's brentq on S itself), not the model's closed form.
def knee_curve_steps(b, b_c=128.0, g=0.5, s_min=500.0):
    return s_min * (1 + (b_c / np.asarray(b, dtype=float)) ** g) ** (1 / g)


def batch_saving(share, b_c=128.0, g=0.5):
    from scipy.optimize import brentq

    return math.exp(brentq(lambda lb: 1 - knee_curve_steps(2 * math.exp(lb), b_c, g) / knee_curve_steps(
        math.exp(lb), b_c, g) - share, -20, 30, xtol=1e-13))


def test_the_batch_where_a_doubling_saves_a_share_is_the_root_of_the_curve_itself():
    # the issue's softer knee: S_min (1 + (128 / B)^0.5)^2 saves 25% a doubling at B = 180 (and at g = 1 at B_c)
    assert batch_saving(0.25) == pytest.approx(180.1, abs=0.05)
    assert batch_saving(0.25, g=1.0) == pytest.approx(128)
    for g in (0.3, 0.5, 1.0, 2.0, 4.0):
        b_crit = batch_saving(0.25, g=g)
        for share in (0.45, 0.25, 0.10):
            b = batch_saving(share, g=g)
            assert doubling_saving(b, b_crit, g) == pytest.approx(share, abs=1e-9), (g, share)
        for b in (8.0, 100.0, 3000.0):  # and everywhere along it
            want = 1 - knee_curve_steps(2 * b, g=g) / knee_curve_steps(b, g=g)
            assert doubling_saving(b, b_crit, g) == pytest.approx(want, rel=1e-9)


def knee_study(g, factors=(-1.0, -0.4, 0.0, 0.5, 1.2), batches=BATCHES):
    b, lr, steps = [], [], []
    for x in batches:
        for f in factors:
            b.append(x)
            lr.append(0.01 * x ** 0.5 * math.exp(f))
            steps.append(float(knee_curve_steps(x, g=g)) * (1 + 0.5 * f * f))
    steps = np.array(steps)
    return Observations.of(b, lr, steps, steps)


@pytest.mark.parametrize("g", [0.6, 1.0, 1.8])  # inside the knees' range (at its ends the knee's interval is open)
def test_noise_free_trials_give_back_the_knee_the_critical_batch_and_the_doubling_thresholds(g):
    model = fit(knee_study(g))
    assert model.knee == pytest.approx(g, rel=1e-2)
    assert model.estimates["b_crit"].value == pytest.approx(batch_saving(0.25, g=g), rel=1e-2)
    assert model.estimates["saves_45"].value == pytest.approx(batch_saving(0.45, g=g), rel=3e-2)
    assert model.estimates["saves_10"].value == pytest.approx(batch_saving(0.10, g=g), rel=3e-2)
    np.testing.assert_allclose(model.steps(BATCHES), knee_curve_steps(BATCHES, g=g), rtol=1e-2)
    # E_min = S_min B_c: the samples at the small-batch limit of B S(B)
    assert model.estimates["e_min"].value == pytest.approx(500 * 128, rel=2e-2)


def test_what_each_measured_step_saved_holds_the_truth_and_needs_no_shape_past_the_batches():
    from lbscale.report.steps_model import doublings

    rng = np.random.default_rng(11)
    obs = knee_study(0.6)
    noisy = obs.high * np.exp(0.05 * rng.standard_normal(len(obs.high)))
    model = fit(Observations.of(obs.batch, obs.lr, noisy * 0.97, noisy))
    rows = doublings(model)
    assert [(r["b1"], r["b2"]) for r in rows] == list(zip(BATCHES[:-1], BATCHES[1:]))
    for r in rows:
        truth = 1 - knee_curve_steps(r["b2"], g=0.6) / knee_curve_steps(r["b1"], g=0.6)
        assert r["kind"] == "interval" and r["saving_lo"] < truth < r["saving_hi"], (r, truth)
        assert r["saving_hi"] - r["saving_lo"] < 0.15


def test_the_measured_steps_are_one_statement_each_step_at_its_bonferroni_level():
    # the verdict says every measured step in one sentence: with m steps each interval is at 1 - 0.1 / m, so the
    # sentence holds at 90% (the benchmark's sharper knee: 78.8% per step at 90% each, in the studies whose knee
    # was not resolved). The deviance at each end, minimised afresh, is n log(1 + t^2 / (n - p)) with t the
    # two-sided t quantile at that level (scipy's, here)
    from scipy.stats import t as student

    from lbscale.report.likelihood import log_b_crit_for_ratio
    from lbscale.report.steps_model import doublings

    rng = np.random.default_rng(11)
    obs = knee_study(0.6)
    noisy = obs.high * np.exp(0.05 * rng.standard_normal(len(obs.high)))
    model = fit(Observations.of(obs.batch, obs.lr, noisy * 0.97, noisy))
    assert not model.extra["lack_of_fit"]["rejected"]
    rows = doublings(model)
    m, dof = len(rows), model.n - model.p
    q = student.ppf(1 - (0.1 / m) / 2, dof)
    want = model.n * math.log1p(q * q / dof)
    fitter, theta = model.extra["fitter"], model.extra["theta"]
    for r in rows:
        l1, l2 = math.log(r["b1"]), math.log(r["b2"])
        for saving in (r["saving_lo"], r["saving_hi"]):
            v = math.log1p(-saving)
            val, _ = fitter.minimise(theta, solve=(1, log_b_crit_for_ratio(v, l1, l2)))
            assert 2 * (val - model.nll) == pytest.approx(want, abs=0.15), (r, saving)


def test_a_three_batch_study_holds_the_knee_at_mccandlishs_and_says_no_thresholds():
    from lbscale.report.steps_model import thresholds_supported

    model = fit(knee_study(0.5, batches=BATCHES[:3]))
    assert model.knee == 1.0 and "knee" not in model.estimates and "saves_10" not in model.estimates
    assert not thresholds_supported(model.estimates)


def test_softer_knee_studies_never_print_thresholds_that_miss_and_b_crit_covers():
    # the issue's softer knee (the reviewer's setup: S_min 500, k = 1, 6 LRs over 100x, evaluations 15% apart, 3x
    # the largest batch's samples): "saves under 10% above ~489 [397, 600]" was false in 99.3% of studies (the
    # truth: 2,836). 40 studies of the benchmark's own simulator: where the words are printed both thresholds'
    # intervals hold the truth's (at the level they state), else the measured steps' savings are given, and
    # B_crit (the batch where a doubling saves 25%: 180) is covered
    from benchmarks.bench_verdict_coverage import KNEE_REGIMES

    s = run_regime(KNEE_REGIMES[0], 40, seed=7, words=True)
    assert s["b_crit_covered"] >= 0.85, s
    assert s["words_printed"] == 0 or s["words_words_true"] >= 0.75, s
    assert s["words_steps_covered"] >= 0.8 and s["words_knee_covered"] >= 0.8, s


def test_the_fits_run_on_one_blas_thread(monkeypatch):
    # OpenBLAS's threads spin for work (OMP_WAIT_POLICY does not reach them): beside a training trial a fit took ~3x
    # as long on the 2-core machine (benchmarks measure it; here: the thread count every minimisation sees)
    from threadpoolctl import threadpool_info

    from lbscale.report import likelihood
    from lbscale.report.steps_model import doublings, ratio

    seen = []
    minimise = likelihood.Fitter.minimise

    def spy(self, *args, **kwargs):
        seen.append({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
        return minimise(self, *args, **kwargs)

    monkeypatch.setattr(likelihood.Fitter, "minimise", spy)
    model = fit(knee_study(1.0), quantities=("b_crit",))
    steps_at(model, [100.0])
    doublings(model)
    ratio(model, model)
    assert seen and all(s == {1} for s in seen), seen[:3]
