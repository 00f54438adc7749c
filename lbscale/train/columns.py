"""metrics.columns.json: a finished trial's metrics.jsonl as the report reads it, written beside it by the trial.

A report turns every trial's records into columns: its epoch records, its evaluations (step evaluations and
full epochs) with the training samples seen at each, and the figures taken over its epoch records (time per
epoch, time by part: `record_timing`). That is `digest`, and over 2,000 trials of 100 epochs it was most of the
report's loading time: 200,000 JSON records built as dictionaries and taken apart again in Python, about 0.7 ms
a trial. A trial that ends writes its digest once (`write_columns`, just before summary.json), so that the
report reads a few lists per trial instead.

metrics.jsonl stays the record. The copy names the SHA-1 of the metrics.jsonl bytes it was made from, and is
made from those bytes as read back, not from the trial's records in memory: the report reads a copy only where
its format is this one and metrics.jsonl is byte for byte what the copy was made from (`read_columns`), and
otherwise makes the digest from metrics.jsonl itself, the same function over the same records. A resumed or
rerun trial, a hand-edited file, a copy from another lbscale version or an unreadable copy therefore costs
time, never a different number.

A column of floats only or of integers only is packed: its values' bytes in one block per kind (`_pack`), read
back by one numpy call instead of parsed number by number. JSON has no NaN or infinity: a list column's
non-finite floats (a diverged epoch's loss, a record that lacks a key, which reads as NaN) are written as null
and listed by position under "special", so that an explicit null (a step evaluation's `subset` where it used
the whole split) stays None.

Torch-free: the report imports it."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from itertools import chain
from operator import itemgetter, methodcaller
from pathlib import Path

import numpy as np

try:  # three to four times faster than json on large result sets; optional
    import orjson
except ImportError:
    orjson = None

from lbscale.errors import LbscaleError
from lbscale.results import METRICS, write_atomic
from lbscale.train.summary import steady_among, epoch_records, epoch_seconds

COLUMNS = "metrics.columns.json"
FORMAT = 2  # raise it whenever `digest` or the copy's layout changes: older copies are then not read (2: packed)
# the evaluation records' keys Study.steps keeps, and metrics; `subset`: the images of a subset evaluation (none
# for the whole split), which never counts as reaching a target; `check`: the images a check of the whole split near
# the target read (one that stopped early bounds the crossing from below)
EVALUATED = ("step", "epoch", "elapsed_seconds", "kind", "subset", "check")
_PARTIAL = methodcaller("get", "partial")
_READ = os.O_RDONLY | getattr(os, "O_BINARY", 0)
_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def is_metric(column: str) -> bool:
    return column.startswith(("val_", "test_")) or column in ("train_loss", "gns_b_simple")


def read_bytes(path: str) -> bytes | None:
    """A file's bytes (None where it does not exist): os.read, without a file object's layers."""
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) > size:  # grown since (a running trial appends records): read to the end
            data += b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
        return data
    finally:
        os.close(fd)


def parse_records(data: bytes, path: str) -> list[dict]:
    """The records of a JSON-lines file's bytes, parsed in one call: a report may read 200,000 records. What
    orjson refuses goes to the standard parser (NaN, which a diverged epoch's loss is), and a corrupt line is
    named (`path`, line number)."""
    if orjson is not None:
        try:  # one line per record: the newlines become the array's commas (a blank line makes ",,": below)
            return orjson.loads(b"[" + data.strip().replace(b"\n", b",") + b"]")
        except orjson.JSONDecodeError:
            pass
        try:
            return orjson.loads(b"[" + b",".join(line for line in data.splitlines() if line.strip()) + b"]")
        except orjson.JSONDecodeError:
            pass  # NaN (a diverged epoch's loss) is not strict JSON: the standard parser takes it
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise LbscaleError(f"{path}: not valid JSON lines ({e})") from None
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        return json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        pass
    for n, line in enumerate(text.splitlines(), 1):  # name the bad line
        if line.strip():
            try:
                json.loads(line)
            except ValueError as e:
                raise LbscaleError(f"{path}:{n}: not valid JSON ({e})") from None
    raise LbscaleError(f"{path}: not valid JSON lines")


def first_seen(records: list[dict]) -> list[str]:
    """Every key of the records, in the order it first appears (DataFrame.from_records' column order)."""
    return list(dict.fromkeys(chain.from_iterable(records)))


def lists(records: list[dict], keys) -> dict:
    """The records' values of each key in `keys` (in that order) as one list, NaN where a record lacks the key,
    as DataFrame.from_records fills it."""
    cols = {}
    for k in keys:
        try:
            cols[k] = list(map(itemgetter(k), records))
        except KeyError:
            cols[k] = [r.get(k, math.nan) for r in records]
    return cols


def _total(records: list[dict], key: str, default=0.0):
    """sum(r.get(key, default) for r in records), in C where every record has the key (the same additions in the
    same order: the same number)."""
    try:
        return sum(map(itemgetter(key), records))
    except KeyError:
        return sum(r.get(key, default) for r in records)


def _present(records: list[dict], key: str) -> list:
    """[r[key] for r in records if key in r], in C where every record has it."""
    try:
        return list(map(itemgetter(key), records))
    except KeyError:
        return [r[key] for r in records if key in r]


def record_timing(epochs: list[dict]) -> dict:
    """What a trial's epoch records say of its time: epochs done, time per epoch (`summary.epoch_seconds`, None
    where there are no records), and seconds in total and by part (data, compute, the exposed all-reduce, the
    wait for slower ranks)."""
    seconds, estimated = epoch_seconds(epochs)
    # an lbscale before the all-reduce wait was timed apart counted it in compute: unknown (NaN), not 0
    comm = _present(epochs, "comm_seconds")
    # the wait for slower ranks, apart from the collective since lbscale records it; before, it was in comm
    imbalance = _present(epochs, "imbalance_seconds")
    # the exposed all-reduce share of the training time over the epochs epoch_seconds averages (the full ones
    # after the first): what the scaling model's base step carries
    steady = [r for r in steady_among(epochs) if "comm_seconds" in r and r.get("train_seconds")] if comm else []
    return {
        "epochs_done": len(epochs) - sum(map(bool, map(_PARTIAL, epochs))),
        "epoch_seconds": seconds, "epoch_seconds_estimated": estimated,
        "train_seconds": _total(epochs, "train_seconds", 0),
        "data_seconds": _total(epochs, "data_seconds"), "compute_seconds": _total(epochs, "compute_seconds"),
        "comm_seconds": sum(comm) if comm else math.nan,
        "imbalance_seconds": sum(imbalance) if imbalance else math.nan,
        "comm_share": float(np.mean([r["comm_seconds"] / r["train_seconds"] for r in steady])) if steady else math.nan,
    }


def measured(records: list[dict], per_epoch: list[dict]) -> tuple[list[dict], list]:
    """A trial's evaluations: its full epoch records, then its step records; and beside each its `samples_seen`,
    the training samples seen so far: an epoch record's the sum of its epochs' `samples`, a step record's its own
    (an lbscale before `samples_seen` called the step records' cumulative count `samples`)."""
    out, seen_out, seen = [], [], 0
    for r in per_epoch:
        seen = seen + r["samples"] if seen is not None and r.get("samples") is not None else None
        if not r.get("partial"):
            out.append(r)
            seen_out.append(seen)
    steps = [r for r in records if r.get("kind") == "step"]
    return out + steps, seen_out + [r["samples_seen"] if "samples_seen" in r else r.get("samples") for r in steps]


def digest(records: list[dict]) -> dict:
    """A trial's records as the report reads them: its epoch records' columns (partial epochs included), its
    evaluations' columns (None where they are the epoch records themselves: no partial epoch, no step
    evaluation), the samples seen at each evaluation, and `record_timing` of its epoch records."""
    per_epoch = epoch_records(records)
    evaluated, seen = measured(records, per_epoch)
    same = len(evaluated) == len(per_epoch) == len(records)
    return {"epoch_count": len(per_epoch), "evaluation_count": len(evaluated),
            "epochs": lists(per_epoch, first_seen(per_epoch)),
            "evaluations": None if same else lists(evaluated, [k for k in first_seen(evaluated)
                                                               if k in EVALUATED or is_metric(k)]),
            "samples_seen": seen, "timing": record_timing(per_epoch)}


TIMING = ("epochs_done", "epoch_seconds", "epoch_seconds_estimated", "train_seconds", "data_seconds",
          "compute_seconds", "comm_seconds", "imbalance_seconds", "comm_share")  # record_timing's keys
_INT64 = 2 ** 63


class _Unwritten(Exception):
    """A digest that strict JSON would not give back as it is: no copy is written."""


@functools.cache
def code_mark() -> str:
    """The copy's format: FORMAT and a hash of the source of every function `digest` runs (and of the keys it
    keeps), so that a copy made by other code than this (an lbscale whose epoch_seconds or metric filter
    differed, with FORMAT not raised) is not read; FORMAT alone where the source cannot be read."""
    import inspect

    try:
        code = "".join(inspect.getsource(f) for f in (digest, measured, lists, first_seen, record_timing, _total,
                                                       _present, is_metric, epoch_records, steady_among, epoch_seconds))
    except (OSError, TypeError):
        return str(FORMAT)
    return f"{FORMAT}:{hashlib.sha1((code + repr(EVALUATED) + repr(TIMING)).encode()).hexdigest()[:16]}"


def _finite(v) -> bool:
    return not isinstance(v, float) or math.isfinite(v)


def _encoded(values: list) -> tuple[list, list]:
    """`values` with their non-finite floats as None, and those as [position, "nan" / "inf" / "-inf"]. An integer
    past 64 bits is refused (_Unwritten): orjson and json read it back differently."""
    if any(type(v) is int and not -_INT64 <= v < _INT64 for v in values):
        raise _Unwritten
    marks = [[i, "nan" if v != v else "inf" if v > 0 else "-inf"] for i, v in enumerate(values) if not _finite(v)]
    return ([v if _finite(v) else None for v in values] if marks else values), marks


def _decoded(values: list, marks: list) -> list:
    for i, name in marks:
        values[i] = _SPECIAL[name]
    return values


_PACKED = {"f8": "<f8", "i8": "<i8"}  # a packed column's kind: its values' numpy type, little-endian


def array(values: list):
    """A column as pandas infers it from a list, the common cases (all floats, all integers of 64 bits) in one
    numpy call (float64, int64); the list itself for anything else (an empty column, None or strings among the
    values, floats and integers mixed), which pandas' own inference (several times slower) then takes."""
    kinds = set(map(type, values))
    if kinds == {float}:
        return np.array(values, dtype=np.float64)
    if kinds == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return values


def _pack(columns: dict) -> tuple[dict, dict]:
    """A part's columns (its keys in order) with each column that `array` makes float64 or int64 replaced by
    {kind: row} ("f8", "i8"), its row in that kind's block; and the blocks, each the kind's columns as one array's
    bytes (columns x values, little-endian, in hexadecimal: read back three times faster than base64; a float's
    NaN or infinity among them). Any other column stays a JSON list. A report reads a trial's columns with a call
    or two per block (`_unpack`) where a list of numbers is parsed one by one and its type inferred again
    (`array`)."""
    rows: dict = {"f8": [], "i8": []}
    out = {}
    for key, values in columns.items():
        a = array(values)
        if isinstance(a, np.ndarray):
            kind = f"{a.dtype.kind}8"
            out[key] = {kind: len(rows[kind])}
            rows[kind].append(a)
        else:
            out[key] = values
    blocks = {kind: np.stack(r).astype(_PACKED[kind]).tobytes().hex() for kind, r in rows.items() if r}
    return out, blocks


def _unpack(columns: dict, blocks: dict, n: int) -> dict:
    """`_pack` undone: a packed column is a row of its kind's block, n values long, the rows taken in order (the
    first packed column of a kind its row 0, and so on, every row once); anything else raises ValueError."""
    arrays = {kind: np.frombuffer(bytes.fromhex(text), dtype=_PACKED[kind]).reshape(-1, n)
              for kind, text in blocks.items()}
    taken = dict.fromkeys(arrays, 0)
    out = {}
    for key, v in columns.items():
        if type(v) is dict:
            (kind, row), = v.items()
            if type(row) is not int or row != taken[kind]:
                raise ValueError(f"{key}: row {row!r} of {kind}, not the next ({taken[kind]})")
            taken[kind] += 1
            v = arrays[kind][row]
        out[key] = v
    if any(taken[kind] != len(block) for kind, block in arrays.items()):
        raise ValueError("a block with rows no column names")
    return out


def columns_text(data: bytes, path: str) -> str | None:
    """metrics.columns.json's text for the metrics.jsonl bytes `data` (read from `path`); None where strict JSON
    would not give the digest back as it is."""
    d = digest(parse_records(data, path))
    special: dict = {"epochs": {}, "evaluations": {}}
    packed: dict = {}
    try:
        for part in ("epochs", "evaluations"):
            if d[part] is not None:
                d[part], packed[part] = _pack(d[part])
                for k, v in d[part].items():
                    if type(v) is list:
                        d[part][k], marks = _encoded(v)
                        if marks:
                            special[part][k] = marks
        seen, packed["samples_seen"] = _pack({"samples_seen": d["samples_seen"]})
        d["samples_seen"], special["samples_seen"] = _encoded(seen["samples_seen"]) \
            if type(seen["samples_seen"]) is list else (seen["samples_seen"], [])
        values, special["timing"] = _encoded([d["timing"][k] for k in TIMING])
    except _Unwritten:
        return None
    d["timing"] = dict(zip(TIMING, values))
    source = {"bytes": len(data), "sha1": hashlib.sha1(data).hexdigest()}
    return json.dumps({"format": code_mark(), "source": source, **d, "special": special, "packed": packed},
                      allow_nan=False)


def write_columns(out: Path) -> bool:
    """Write metrics.columns.json beside the trial's metrics.jsonl (atomically), a trial just before its
    summary.json; False where none is written: no metrics.jsonl, records strict JSON would not give back, or the
    file could not be written (the copy only saves a report time: a trial never fails for it)."""
    path = Path(out) / METRICS
    data = read_bytes(str(path))
    if data is None:
        return False
    try:
        text = columns_text(data, str(path))
    except LbscaleError:  # a corrupt metrics.jsonl: the report will name its line
        return False
    if text is None:
        return False
    try:
        write_atomic(Path(out) / COLUMNS, text)
    except OSError:
        return False
    return True


def read_columns(path: str, data: bytes) -> dict | None:
    """The digest in the copy at `path` of the metrics.jsonl bytes `data`; None where there is no copy, or it is
    unreadable, of another format or other code (`code_mark`), made from other bytes, or not in the shape it
    names: the caller then digests `data` itself. A copy never fails a report."""
    try:
        return _copy(path, data)
    except Exception:  # noqa: BLE001 - whatever is wrong with a copy, metrics.jsonl has the records
        return None


def _copy(path: str, data: bytes) -> dict | None:
    raw = read_bytes(path)
    if raw is None:
        return None
    d = orjson.loads(raw) if orjson is not None else json.loads(raw)
    if d.get("format") != code_mark() or d["source"] != {"bytes": len(data), "sha1": hashlib.sha1(data).hexdigest()}:
        return None
    special, packed = d["special"], d["packed"]
    n, m = d["epoch_count"], d["evaluation_count"]
    for part, count in (("epochs", n), ("evaluations", m)):
        if d[part] is not None:
            d[part] = _unpack(d[part], packed[part], count)
        for key, marks in special[part].items():
            _decoded(d[part][key], marks)
    d["samples_seen"] = _unpack({"s": d["samples_seen"]}, packed["samples_seen"], m)["s"]
    _decoded(d["samples_seen"], special["samples_seen"])
    d["timing"] = dict(zip(TIMING, _decoded([d["timing"][k] for k in TIMING], special["timing"])))
    shaped = (type(n) is int and type(m) is int and len(d["samples_seen"]) == m
              and all(isinstance(v, (list, np.ndarray)) and len(v) == n for v in d["epochs"].values())
              and (m == n if d["evaluations"] is None
                   else all(isinstance(v, (list, np.ndarray)) and len(v) == m for v in d["evaluations"].values())))
    return {k: d[k] for k in ("epoch_count", "evaluation_count", "epochs", "evaluations", "samples_seen", "timing")} \
        if shaped else None
