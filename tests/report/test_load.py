"""Loading a study: which records become Study.steps, and a large study read by two processes giving the same
frames as one process reading it alone (`parallel.shared`)."""

import json
import os

import pandas as pd
import pytest

from lbscale.report import load as load_module
from lbscale.report.load import load_results
from lbscale.report.parallel import can_fork, shared
from tests.fixtures.make_results import make_trial


def _add_step_evaluation(trial, step: int, value: float) -> None:
    """A step evaluation (`kind: step`, as --eval-every writes it) appended to a trial's records."""
    with open(trial / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "step", "step": step, "epoch": 1.5, "val_top1": value, "val_loss": 0.5,
                            "samples_seen": step * 8192, "elapsed_seconds": 999.0}) + "\n")


def test_steps_hold_each_trials_step_evaluations_and_no_partial_epoch(tmp_path):
    """A diverged trial's partial epoch is an epoch record but no evaluation; another trial's step evaluation is
    an evaluation but no epoch record. With one of each, the study has as many epoch records as evaluations, and
    the evaluations must still be the right ones."""
    res = tmp_path / "res"
    make_trial(res, 8192, 4, 0, epochs=4, state="diverged", diverge_epoch=3, jitter=False)
    done = make_trial(res, 16384, 8, 0, epochs=4, jitter=False)
    _add_step_evaluation(done, 6, 0.123)
    study = load_results([res])
    assert len(study.epochs) == len(study.steps)  # 2 full + 1 partial; 4 full + 1 step evaluation
    diverged = study.steps[study.steps["global_batch"] == 8192]
    assert list(diverged["kind"]) == ["epoch", "epoch"]  # the partial third epoch evaluated nothing
    step = study.steps[(study.steps["global_batch"] == 16384) & (study.steps["kind"] == "step")]
    assert list(step["step"]) == [6] and list(step["val_top1"]) == [0.123]
    assert list(step["samples_seen"]) == [6 * 8192]
    assert study.epochs["partial"].sum() == 1


@pytest.mark.skipif(not can_fork(), reason="needs fork and two cores")
def test_shared_returns_the_chunks_in_order():
    items = list(range(103))
    parts = shared(lambda chunk: [x * x for x in chunk], items, chunks=7)
    assert len(parts) == 7
    assert [x for p in parts for x in p] == [x * x for x in items]


@pytest.mark.skipif(not can_fork(), reason="needs fork and two cores")
def test_shared_runs_first_in_this_process_and_raises_the_earliest_chunks_error():
    seen = []
    shared(lambda chunk: chunk, list(range(10)), chunks=5, first=lambda: seen.append(os.getpid()))
    assert seen == [os.getpid()]

    def fails(chunk):
        if chunk[0] in (2, 8):
            raise ValueError(f"chunk at {chunk[0]}")
        return chunk
    with pytest.raises(ValueError, match="chunk at 2"):
        shared(fails, list(range(10)), chunks=5)


@pytest.mark.skipif(not can_fork(), reason="needs fork and two cores")
def test_a_study_read_by_two_processes_equals_one_read_alone(tmp_path, monkeypatch):
    res = tmp_path / "res"
    for batch in (8192, 16384, 32768):
        for seed in range(4):
            make_trial(res, batch, batch // 2048, seed, epochs=3,
                       state="diverged" if (batch, seed) == (32768, 1) else "completed", diverge_epoch=2)
    _add_step_evaluation(res / "b16384-g8-lamb-sqrt-s2", 7, 0.5)
    ran = []
    monkeypatch.setattr(load_module, "SHARED", 10 ** 9)
    alone = load_results([res], meanwhile=lambda: ran.append("alone"))
    monkeypatch.setattr(load_module, "SHARED", 2)
    together = load_results([res], meanwhile=lambda: ran.append("shared"))
    assert ran == ["alone", "shared"]
    for a, b in [(alone.trials, together.trials), (alone.epochs, together.epochs), (alone.steps, together.steps)]:
        pd.testing.assert_frame_equal(a, b)


def _copies_used(monkeypatch) -> None:
    """metrics.jsonl is not parsed from here on: a trial without a valid copy fails the load."""
    from lbscale.report import trialdir

    def refuse(data, path):
        raise AssertionError(f"{path} parsed: its copy was not read")

    monkeypatch.setattr(trialdir, "parse_records", refuse)


def test_a_study_read_from_the_trials_copies_equals_one_read_from_metrics_jsonl(tmp_path, monkeypatch):
    """metrics.columns.json (written by each trial before its summary) gives the same Study as metrics.jsonl:
    complete, diverged (partial epoch, NaN loss), failed trials, step evaluations with and without a subset,
    the all-reduce and imbalance times of some trials only, an infinite pace; the copy of a trial whose records
    changed since is not read, and a study read from copies reads no metrics.jsonl."""
    from lbscale.train.columns import COLUMNS, write_columns

    res = tmp_path / "res"
    make_trial(res, 8192, 4, 0, epochs=4, state="diverged", diverge_epoch=3)
    make_trial(res, 8192, 4, 1, epochs=4, comm_share=0.1, imbalance_share=0.05)
    make_trial(res, 16384, 8, 0, epochs=4, state="failed", comm_share=0.2)
    make_trial(res, 16384, 8, 1, epochs=4, state="running")
    make_trial(res, 32768, 8, 0, epochs=4, state="pending")
    for seed, subset in ((2, 256), (3, None)):
        trial = make_trial(res, 16384, 8, seed, epochs=4, target=0.5)
        with open(trial / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"kind": "step", "step": 7, "epoch": 1.5, "val_top1": 0.5, "samples_seen": 57344,
                                "elapsed_seconds": 99.0, "subset": subset}) + "\n")
            f.write(json.dumps({"epoch": 5, "step": 9, "partial": True, "train_seconds": 1.0, "samples": 100,
                                "elapsed_seconds": 100.0, "epoch_seconds_estimate": float("inf")}) + "\n")
        write_columns(trial)
    stale = make_trial(res, 65536, 8, 0, epochs=4)
    _add_step_evaluation(stale, 6, 0.123)  # appended after the trial wrote its copy
    assert sum((t / COLUMNS).exists() for t in res.iterdir()) == 6  # not the running or pending trial
    with_copies = load_results([res])
    assert with_copies.steps["trial"].eq(stale.name).sum() == 5  # the stale copy was not read: 4 epochs + 1 step
    for t in res.iterdir():
        (t / COLUMNS).unlink(missing_ok=True)
    from_jsonl = load_results([res])
    for a, b in [(with_copies.trials, from_jsonl.trials), (with_copies.epochs, from_jsonl.epochs),
                 (with_copies.steps, from_jsonl.steps)]:
        pd.testing.assert_frame_equal(a, b)

    other = tmp_path / "other"
    for seed in range(3):
        make_trial(other, 8192, 4, seed, epochs=3)
    _copies_used(monkeypatch)
    assert len(load_results([other]).epochs) == 9


def _rewritten(trial, change) -> None:
    """A trial's records changed by `change(record)`, and its copy written again."""
    from lbscale.train.columns import write_columns

    path = trial / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(change(dict(r))) + "\n" for r in records))
    assert write_columns(trial)


@pytest.mark.parametrize("chunks", [1, 3])
def test_packed_columns_join_as_the_records_values_would(tmp_path, chunks):
    """Each copy packs its trial's numeric columns (`columns._pack`); joined across trials they must give the
    columns pandas infers from all the records' values: a float column one trial lacks (NaN there, float64), an
    integer column two trials lack (integers and NaN: float64, 2 ** 60 + 1 rounded as pandas rounds it), a column
    of integers in one trial and floats in another, one trial's column of None. The reference is the same study
    read from metrics.jsonl alone, in one chunk or in three (`read_trials` per chunk, then `load._merged`)."""
    from lbscale.report import trialdir
    from lbscale.train.columns import COLUMNS

    res = tmp_path / "res"
    trials = [make_trial(res, 8192 * 2 ** i, 4, 0, epochs=3, jitter=False) for i in range(4)]
    _rewritten(trials[0], lambda r: {**r, "extra": r["epoch"] * 7, "only_here": 0.5, "count": r["step"]})
    _rewritten(trials[1], lambda r: {**r, "val_top1": round(r["val_top1"])})  # integers where others have floats
    _rewritten(trials[2], lambda r: {**r, "extra": None})
    _rewritten(trials[3], lambda r: {**r, "extra": r["epoch"] * 3, "count": 2 ** 60 + r["step"]})

    def read(candidates):
        bounds = [round(i * len(candidates) / chunks) for i in range(chunks + 1)]
        parts = [trialdir.read_trials(candidates[a:b]) for a, b in zip(bounds, bounds[1:])]
        columns = load_module._merged([p.epochs for p in parts], [sum(p.epoch_counts) for p in parts])
        return pd.DataFrame(columns)

    candidates = sorted(res.iterdir())
    packed = read(candidates)
    for t in trials:
        (t / COLUMNS).unlink()
    records = read(candidates)
    pd.testing.assert_frame_equal(packed, records, check_exact=True)
    assert packed["extra"].isna().sum() == 6 and packed["only_here"].isna().sum() == 9  # None reads as NaN
    assert packed["val_top1"].dtype == float and packed["epoch"].dtype == "int64"
    assert packed["count"].dtype == float and packed["count"].isna().sum() == 6  # integers beside NaN


@pytest.mark.parametrize("other", ["a", True, None])
def test_an_integer_column_some_trials_lack_joins_with_a_chunk_of_other_values(tmp_path, other):
    """Chunk one: a trial with integers under a key (2 ** 53 + 1 among them) and a trial without it; chunk two:
    a trial with strings, booleans or None and a string there. From the records the column is Python objects, the
    integers kept whole; joined as float64 within the first chunk (found by a review), they came back as 2.0 and
    9007199254740992.0."""
    from lbscale.report import trialdir
    from lbscale.train.columns import COLUMNS

    res = tmp_path / "res"
    trials = [make_trial(res, 8192 * 2 ** i, 4, 0, epochs=2, jitter=False) for i in range(3)]
    _rewritten(trials[1], lambda r: {**r, "x": 2 ** 53 + 1 if r["epoch"] == 1 else 2})
    _rewritten(trials[0], lambda r: {**r, "x": other if r["epoch"] == 1 else "s"})

    def read():
        candidates = sorted(res.iterdir())  # [b16384 (integers), b32768 (no x)], [b8192 (the other values)]
        parts = [trialdir.read_trials(candidates[:2]), trialdir.read_trials(candidates[2:])]
        return pd.DataFrame(load_module._merged([p.epochs for p in parts], [sum(p.epoch_counts) for p in parts]))

    packed = read()
    for t in trials:
        (t / COLUMNS).unlink()
    records = read()
    pd.testing.assert_frame_equal(packed, records, check_exact=True)
    assert [type(v) for v in packed["x"][:2]] == [int, int] and packed["x"][0] == 2 ** 53 + 1


def test_records_with_blank_lines_crlf_and_nan_read_as_written(tmp_path):
    """metrics.jsonl as a hand-edited or older file may hold it: blank lines, CRLF line ends, a diverged epoch's
    NaN (not strict JSON). Each reads as the standard parser reads its lines."""
    from lbscale.train.columns import parse_records

    lines = ['{"epoch": 1, "val_top1": 0.5}', '{"epoch": 2, "val_top1": 0.625}', '{"epoch": 3, "train_loss": NaN}']
    cases = {"plain": "\n".join(lines[:2]) + "\n", "blank": lines[0] + "\n\n  \n" + lines[1] + "\n",
             "crlf": "\r\n".join(lines[:2]) + "\r\n", "nan": "\n".join(lines) + "\n", "empty": ""}
    for name, text in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(text.encode())
        expected = [json.loads(line) for line in text.splitlines() if line.strip()]
        got = parse_records(path.read_bytes(), str(path))
        assert len(got) == len(expected), name
        for g, e in zip(got, expected):
            assert g.keys() == e.keys(), name
            assert all(g[k] == e[k] or (g[k] != g[k] and e[k] != e[k]) for k in e), name


@pytest.mark.skipif(not can_fork(), reason="needs fork and two cores")
def test_shared_stops_the_child_soon_after_this_processs_chunk_fails(tmp_path):
    """A corrupt trial early in a large study is reported without the other process reading the rest first: once
    chunk 0 has failed, neither takes another chunk (the other finishes the one it holds)."""
    import time

    ran = tmp_path / "ran"

    def slow(chunk):
        if chunk[0] == 0:
            raise ValueError("bad chunk 0")
        with open(ran, "a") as f:  # one short append per chunk, from either process
            f.write(f"{chunk[0]}\n")
        time.sleep(0.3)
        return chunk
    with pytest.raises(ValueError, match="bad chunk 0"):
        shared(slow, list(range(20)), chunks=20)
    read = ran.read_text().split() if ran.exists() else []
    assert len(read) <= 3, read  # all 19 others before the fix
