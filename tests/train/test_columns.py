"""metrics.columns.json: the copy of a trial's records that a report reads instead of metrics.jsonl. What it holds
is checked against hand-made records; that it is read only for the bytes it was made from, by changing them."""

import json
import math

import numpy as np
import pytest

from lbscale.train import columns
from lbscale.train.columns import COLUMNS, TIMING, digest, parse_records, read_columns, write_columns

# a hand-made trial: a full epoch, a step evaluation on the whole split (subset null), a full epoch that
# carries the all-reduce time, a partial epoch cut short by divergence (loss NaN, pace infinite)
RECORDS = [
    {"epoch": 1, "step": 4, "train_loss": 1.5, "val_top1": 0.25, "train_seconds": 10.0, "data_seconds": 1.0,
     "compute_seconds": 9.0, "samples": 128, "elapsed_seconds": 11.0},
    {"kind": "step", "step": 6, "epoch": 1.5, "samples_seen": 192, "val_top1": 0.375, "elapsed_seconds": 14.0,
     "subset": None},
    {"epoch": 2, "step": 8, "train_loss": 1.25, "val_top1": 0.5, "train_seconds": 8.0, "data_seconds": 1.0,
     "compute_seconds": 6.0, "comm_seconds": 1.0, "samples": 128, "elapsed_seconds": 21.0},
    {"epoch": 3, "step": 9, "partial": True, "train_loss": float("nan"), "train_seconds": 2.0,
     "data_seconds": 0.5, "compute_seconds": 1.5, "samples": 32, "elapsed_seconds": 23.0,
     "epoch_seconds_estimate": float("inf")},
]


def _trial(tmp_path, records=RECORDS):
    d = tmp_path / "t"
    d.mkdir()
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return d


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN, and of the same types (1 is not 1.0, None is not NaN); a float64 or int64 array
    (a packed column) as the list of its values."""
    if isinstance(a, np.ndarray):
        return a.dtype in (np.float64, np.int64) and _same(a.tolist(), b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def test_the_digest_of_hand_made_records():
    d = digest(RECORDS)
    nan = float("nan")
    assert d["epoch_count"] == 3 and d["evaluation_count"] == 3  # two full epochs and the step evaluation
    assert _same(d["epochs"]["epoch"], [1, 2, 3])
    assert _same(d["epochs"]["val_top1"], [0.25, 0.5, nan])  # the partial epoch evaluated nothing
    assert _same(d["epochs"]["comm_seconds"], [nan, 1.0, nan])
    assert _same(d["evaluations"]["step"], [4, 8, 6])  # full epochs, then the step evaluations
    assert _same(d["evaluations"]["train_loss"], [1.5, 1.25, nan])
    assert _same(d["evaluations"]["subset"], [nan, nan, None])  # the whole split: no subset
    assert "samples" not in d["evaluations"]
    assert _same(d["samples_seen"], [128, 256, 192])  # epochs' samples summed; the step record's own
    t = d["timing"]
    assert list(t) == list(TIMING)
    assert t["epochs_done"] == 2
    assert t["epoch_seconds"] == 8.0 and t["epoch_seconds_estimated"] is False  # full epochs after the first
    assert t["train_seconds"] == 20.0 and t["data_seconds"] == 2.5 and t["compute_seconds"] == 16.5
    assert t["comm_seconds"] == 1.0 and math.isnan(t["imbalance_seconds"])
    assert t["comm_share"] == 1.0 / 8.0


def test_a_trial_whose_evaluations_are_its_epochs_keeps_them_once():
    d = digest(RECORDS[:1] + RECORDS[2:3])
    assert d["evaluations"] is None and d["evaluation_count"] == d["epoch_count"] == 2


def test_the_copy_reads_back_as_the_digest_nan_infinity_and_null_apart(tmp_path):
    d = _trial(tmp_path)
    assert write_columns(d)
    data = (d / "metrics.jsonl").read_bytes()
    text = (d / COLUMNS).read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON: orjson reads it
    copy = read_columns(str(d / COLUMNS), data)
    assert copy is not None and _same(copy, digest(parse_records(data, "m")))
    assert copy["epochs"]["epoch_seconds_estimate"][2] == math.inf


def test_numeric_columns_are_packed_and_the_others_stay_lists(tmp_path):
    """A column of floats only (NaN and infinity among them) or of integers only is one row of its kind's block,
    written as the little-endian bytes of float64 / int64 values; a column of None and NaN, or of integers and
    floats, stays a JSON list. The blocks hold exactly the digest's values."""
    d = _trial(tmp_path)
    write_columns(d)
    copy = json.loads((d / COLUMNS).read_text())
    assert copy["epochs"]["epoch"] == {"i8": 0} and copy["epochs"]["step"] == {"i8": 1}
    assert copy["epochs"]["epoch_seconds_estimate"] == {"f8": copy["epochs"]["epoch_seconds_estimate"]["f8"]}
    assert copy["evaluations"]["subset"] == [None, None, None] and copy["special"]["evaluations"]["subset"] == [
        [0, "nan"], [1, "nan"]]  # NaN, NaN, then the whole split's explicit null
    assert copy["evaluations"]["epoch"] == [1, 2, 1.5]  # integers and a float
    ints = np.frombuffer(bytes.fromhex(copy["packed"]["epochs"]["i8"]), "<i8").reshape(-1, 3)
    assert ints[0].tolist() == [1, 2, 3] and ints[1].tolist() == [4, 8, 9]
    floats = np.frombuffer(bytes.fromhex(copy["packed"]["epochs"]["f8"]), "<f8").reshape(-1, 3)
    row = copy["epochs"]["epoch_seconds_estimate"]["f8"]
    assert np.isnan(floats[row][:2]).all() and floats[row][2] == math.inf
    assert np.frombuffer(bytes.fromhex(copy["packed"]["samples_seen"]["i8"]), "<i8").tolist() == [128, 256, 192]


def test_a_trial_without_records_writes_no_copy(tmp_path):
    assert not write_columns(tmp_path) and not (tmp_path / COLUMNS).exists()


CHANGES = ["appended", "same size", "other format", "corrupt", "cut list", "cut block", "not hexadecimal",
           "unknown kind", "row null", "row true", "row [0]", "row -1", "row 1", "a block with a row more", "empty",
           "source not a dict",
           "bad mark", "a directory", "no timing", "evaluations null but more of them", "not an object"]


@pytest.mark.parametrize("change", CHANGES)
def test_a_copy_of_other_bytes_or_format_is_not_read(tmp_path, change):
    d = _trial(tmp_path)
    write_columns(d)
    data = (d / "metrics.jsonl").read_bytes()
    copy = json.loads((d / COLUMNS).read_text())
    if change == "appended":  # a resumed or rerun trial's records
        data += b'{"epoch": 4, "step": 12}\n'
    elif change == "same size":
        data = data.replace(b'"val_top1": 0.25', b'"val_top1": 0.75')
    elif change == "other format":  # or other code: code_mark below
        (d / COLUMNS).write_text(json.dumps({**copy, "format": "1:0123456789abcdef"}))
    elif change == "corrupt":
        (d / COLUMNS).write_text((d / COLUMNS).read_text()[:-20])
    elif change == "cut list":  # the right bytes named, but a column one value short
        copy["evaluations"]["subset"].pop()
        (d / COLUMNS).write_text(json.dumps(copy))
    elif change == "cut block":  # the packed float columns one value short
        copy["packed"]["epochs"]["f8"] = copy["packed"]["epochs"]["f8"][:-16]
        (d / COLUMNS).write_text(json.dumps(copy))
    elif change == "not hexadecimal":
        copy["packed"]["epochs"]["i8"] = "zz" + copy["packed"]["epochs"]["i8"][2:]
        (d / COLUMNS).write_text(json.dumps(copy))
    elif change == "unknown kind":
        copy["epochs"]["epoch"] = {"f4": 0}
        (d / COLUMNS).write_text(json.dumps(copy))
    elif change.startswith("row "):  # a packed column's row not the next row of its block
        copy["epochs"]["epoch"] = {"i8": json.loads(change[4:])}
        (d / COLUMNS).write_text(json.dumps(copy))
    elif change == "a block with a row more":
        block = copy["packed"]["epochs"]["i8"]
        copy["packed"]["epochs"]["i8"] = block + block[:48]
        (d / COLUMNS).write_text(json.dumps(copy))
    elif change == "empty":
        (d / COLUMNS).write_text("")
    elif change == "source not a dict":
        (d / COLUMNS).write_text(json.dumps({**copy, "source": "x"}))
    elif change == "bad mark":
        copy["special"]["epochs"]["val_top1"] = [[2]]
        (d / COLUMNS).write_text(json.dumps(copy))
    elif change == "a directory":
        (d / COLUMNS).unlink()
        (d / COLUMNS).mkdir()
    elif change == "no timing":
        (d / COLUMNS).write_text(json.dumps({**copy, "timing": {}}))
    elif change == "evaluations null but more of them":
        (d / COLUMNS).write_text(json.dumps({**copy, "evaluations": None}))
    else:
        (d / COLUMNS).write_text("[1, 2]")
    assert read_columns(str(d / COLUMNS), data) is None


def test_a_copy_made_by_other_code_is_not_read(monkeypatch):
    """The format names a hash of the source of what the digest runs: a changed metric filter (or time per epoch)
    gives another mark, so that a copy it made is not read by this code, nor the other way round."""
    this = columns.code_mark()
    monkeypatch.setattr(columns, "is_metric", lambda column: column.startswith("val_"))
    assert columns.code_mark.__wrapped__() != this


def test_records_strict_json_would_not_give_back_write_no_copy(tmp_path):
    """An integer past 64 bits beside a NaN: the standard parser keeps it whole, orjson would not."""
    d = _trial(tmp_path, [{"epoch": 1, "step": 4, "train_loss": float("nan"), "train_seconds": 1.0,
                           "elapsed_seconds": 1.0, "images": 2 ** 70}])
    assert not write_columns(d) and not (d / COLUMNS).exists()
