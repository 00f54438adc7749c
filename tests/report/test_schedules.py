"""The batch-schedule table: each growing arm beside every fixed batch, steps and samples saved with their
intervals, worked out by hand."""

from types import SimpleNamespace

import pandas as pd

from lbscale.report.schedules import schedule_table


def _trial(name, variant, batch, schedule, steps, final, before=None, last=None):
    seconds = None if steps is None else steps / 10
    return ({"trial": name, "variant": variant, "global_batch": batch, "batch_schedule": schedule,
             "final_val_top1": final}, {"trial": name, "steps": steps, "seconds": seconds,
                                        "step_before": before if before is not None or steps is None else steps - 4,
                                        "last_step": last if last is not None else steps})


def _welch(a, b, which):
    import math

    from scipy import stats

    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    va, vb = stats.tvar(la) / len(la), stats.tvar(lb) / len(lb)
    dof = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
    half = stats.t.ppf(0.95, dof) * math.sqrt(va + vb)
    return math.exp(sum(la) / len(la) - sum(lb) / len(lb) + which * half)


def test_arm_beside_every_fixed_batch_with_the_steps_and_samples_it_saves():
    import math


    rows = [_trial("a0", "sgd-grow", 32, "32@0,128@512", 28, 0.97),
            _trial("a1", "sgd-grow", 32, "32@0,128@512", 32, 0.98),
            _trial("s0", "sgd", 32, None, 38, 0.99), _trial("s1", "sgd", 32, None, 42, 0.97),
            _trial("l0", "sgd", 128, None, 36, 0.97), _trial("l1", "sgd", 128, None, None, 0.95, last=60),
            _trial("f0", "sgd-fixed-256", 256, "256@0", 20, 0.97),
            _trial("f1", "sgd-fixed-256", 256, "256@0", 22, 0.97)]
    samples = {"a0": 1600, "a1": 1800, "s0": 38 * 32, "s1": 42 * 32, "l0": 36 * 128, "f0": 20 * 256, "f1": 22 * 256}
    steps = pd.DataFrame([{"trial": r[1]["trial"], "step": r[1]["steps"], "samples_seen": samples[r[1]["trial"]]}
                          for r in rows if r[1]["steps"] is not None])
    study = SimpleNamespace(trials=pd.DataFrame([r[0] for r in rows]), steps=steps)
    t = schedule_table(study, "val_top1", 0.97, pd.DataFrame([r[1] for r in rows]))
    d = t.display
    # a one-point schedule (256@0) is a fixed batch; every fixed batch stands beside the growing arm
    assert list(d["Arm"]) == ["sgd-grow", "batch 32 (sgd)", "batch 128 (sgd)", "batch 256 (sgd-fixed-256)"]
    assert list(d["Reached"]) == ["2 of 2", "2 of 2", "1 of 2", "2 of 2"]
    # by hand: geometric means 29.93 over 39.95 = 0.749 (25% fewer); each seed's steps between the evaluation
    # before its crossing (4 steps earlier) and the one that met it: the savings' upper end from the arm's 24, 28
    # against 38, 42, its lower end from 28, 32 against 34, 38 (Welch on the logs, 2 + 2 seeds), rounded outward
    lo, hi = 100 * (1 - _welch([28, 32], [34, 38], 1)), 100 * (1 - _welch([24, 28], [38, 42], -1))
    assert d["sgd-grow's steps"].iloc[1] == f"25 [{math.floor(lo)}, {math.ceil(hi)}]% fewer"
    assert math.isclose(t.tidy["steps_ratio"].iloc[1], math.sqrt(28 * 32) / math.sqrt(38 * 42))
    # one seed of 128 reached, the other missed after 60 steps: no lower end of the ratio (the miss may need any
    # more), its upper end from 28, 32 against 32 and 60; no point
    up = _welch([28, 32], [32, 60], 1)
    assert d["sgd-grow's steps"].iloc[2] == (f"at least {math.floor(100 * (1 - up))}% fewer" if up < 1 else
                                             f"at most {math.ceil(100 * (up - 1))}% more")
    assert d["sgd-grow's samples"].iloc[2] == "-"  # a seed missed: no samples compared
    assert d["sgd-grow's steps"].iloc[3].endswith("% more")  # 256 took fewer steps than the arm
    assert d["sgd-grow's samples"].iloc[1].endswith("% more")  # 1,697 over 1,281 samples
    assert t.notes[0].startswith("The schedule sgd-grow reached val_top1 0.97 in 25 [")
    assert " than batch 128 (sgd) (2 of 2 and 1 of 2 seeds reached)" in t.notes[0]
    assert d["Steps to target"].iloc[0] == "30.0 [17.4, 42.6]"  # 30 +- t(1, 0.95) 6.314 x 2.828 / sqrt 2


def test_seeds_that_tie_at_one_evaluation_get_the_brackets_interval_and_one_seed_alone_no_figure():
    """Seeds that crossed at the same evaluation gave '36 [36, 36]% fewer'; an arm with 1 seed of 3 against 3 of 3
    printed a bare '37% fewer'."""
    rows = [_trial(f"a{i}", "g", 32, "32@0,64@100", 16, 0.97, before=14) for i in range(3)] + \
        [_trial(f"f{i}", "f", 32, None, 25, 0.97, before=22) for i in range(3)]
    study = SimpleNamespace(trials=pd.DataFrame([r[0] for r in rows]), steps=pd.DataFrame())
    t = schedule_table(study, "val_top1", 0.97, pd.DataFrame([r[1] for r in rows]))
    # 16 / 25 = 0.64: 36% fewer; the ends 14 / 25 and 16 / 22: 44% and 27% fewer
    assert t.display["g's steps"].iloc[1] == "36 [27, 44]% fewer"
    one = [_trial("a0", "g", 32, "32@0,64@100", 16, 0.97, before=14),
           _trial("a1", "g", 32, "32@0,64@100", None, 0.9, last=40),
           _trial("a2", "g", 32, "32@0,64@100", None, 0.9, last=40)] + rows[3:]
    study = SimpleNamespace(trials=pd.DataFrame([r[0] for r in one]), steps=pd.DataFrame())
    t = schedule_table(study, "val_top1", 0.97, pd.DataFrame([r[1] for r in one]))
    cell = t.display["g's steps"].iloc[1]
    assert cell.startswith("at most ") and "37%" not in cell and "(1 of 3 and 3 of 3 seeds reached)" in t.notes[0]


def test_no_arm_no_table():
    study = SimpleNamespace(trials=pd.DataFrame([{"trial": "s0", "variant": "sgd", "global_batch": 32,
                                                  "batch_schedule": None}]), steps=pd.DataFrame())
    assert schedule_table(study, "val_top1", 0.9, pd.DataFrame([{"trial": "s0", "steps": 3, "seconds": 1}])) is None


def test_modelled_time_where_the_gpus_grow_with_the_batch_by_hand():
    from lbscale.report.schedules import modelled_seconds

    fit = {"alpha_seconds": 1e-4, "beta_seconds_per_byte": 1e-9}
    model = {"a": 0.01, "c": 0.001, "per_gpu_span": (32.0, 32.0), "exposed": 0.5, "imbalance": 0.002,
             "gradient_bytes": 4e6, "allreduce": {"fit": fit}, "startup": 3.0}
    # 32 per GPU: 10 steps at batch 32 on 1 GPU, 5 at 128 on 4 GPUs (one bucket: 4 MB < 25 MiB)
    step1 = 0.01 + 0.001 * 32
    ring4 = 2 * 3 * 1e-4 + 2 * 3 / 4 * 4e6 * 1e-9
    step4 = step1 + 0.5 * ring4 + 0.002
    assert abs(modelled_seconds(model, [(32, 10), (128, 5)], 32) - (3.0 + 10 * step1 + 5 * step4)) < 1e-12


def test_the_checks_verdict_leads_the_report():
    from lbscale.report.sections import _schedule_first
    from lbscale.report.tables import Table

    with_ratio = Table("schedules", "t", pd.DataFrame(), pd.DataFrame({"steps_ratio": [None, 0.5]}), ["The line", "x"])
    without = Table("schedules", "t", pd.DataFrame(), pd.DataFrame({"steps_ratio": [None]}), ["No schedule ...", "x"])
    other = Table("time", "t", pd.DataFrame(), pd.DataFrame({"steps_ratio": [0.5]}), ["not this"])
    assert _schedule_first([other, with_ratio]) == ["The line"]
    assert _schedule_first([without]) == [] and _schedule_first([other]) == []


def test_the_checks_figure_draws_each_arm_per_seed():
    import matplotlib

    matplotlib.use("Agg")
    from lbscale.report.schedules import figure

    trials = pd.DataFrame([{"trial": "a0", "variant": "g", "global_batch": 32, "batch_schedule": "32@0,64@64"},
                           {"trial": "f0", "variant": "f", "global_batch": 64, "batch_schedule": None},
                           {"trial": "f1", "variant": "f", "global_batch": 64, "batch_schedule": None}])
    steps = pd.DataFrame([{"trial": t, "step": k, "kind": "step", "val_top1": 0.1 * k} for t in ("a0", "f0", "f1")
                          for k in range(1, 5)])
    fig = figure(SimpleNamespace(trials=trials, steps=steps), "val_top1", 0.3)
    ax = fig.axes[0]
    drawn = [line for line in ax.lines if len(line.get_xdata()) == 4]
    assert len(drawn) == 3  # one line per seed: the schedule's, and the fixed batch's two
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["g (1 seed)", "batch 64 (2 seeds)", "target 0.3"]
    assert figure(SimpleNamespace(trials=trials.assign(batch_schedule=None), steps=steps), "val_top1", 0.3) is None


def test_two_schedules_each_name_their_comparisons_and_the_line_keeps_its_case():
    rows = [_trial("a0", "LARS-grow", 32, "32@0,128@512", 28, 0.97), _trial("b0", "LARS-grow", 32, "32@0,64@256", 30,
                                                                             0.97),
            _trial("s0", "LARS", 8192, None, 38, 0.99)]
    study = SimpleNamespace(trials=pd.DataFrame([r[0] for r in rows]), steps=pd.DataFrame())
    t = schedule_table(study, "val_mAP", 0.97, pd.DataFrame([r[1] for r in rows]))
    line = t.notes[0]
    assert line.startswith("The schedule LARS-grow (32@0,128@512) reached val_mAP 0.97 in ")
    assert "; the schedule LARS-grow (32@0,64@256) reached val_mAP 0.97 in " in line and "batch 8K" in line
