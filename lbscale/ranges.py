"""Counts and sizes as specs and options write them: a batch size (512, 8k), a LO..HI doubling range (batches,
message sizes), a comma-separated list of counts (GPUs, process counts), the points of --keep-checkpoints. The
sweep planner, the trial, the report and the benchmarks read them here."""

from __future__ import annotations

import math
import re

from lbscale.errors import LbscaleError

K = 1024
SIZE = re.compile(r"^\s*(\d+)\s*([kK]?)\s*$")


def parse_size(text) -> int:
    """512 -> 512, '8k' / '8K' -> 8192 (k = 1024); a size is >= 1."""
    if isinstance(text, bool):
        raise LbscaleError(f"malformed batch size {text!r}")
    if isinstance(text, int):
        size = text
    else:
        m = SIZE.match(str(text))
        if not m:
            raise LbscaleError(f"malformed batch size {text!r} (e.g. 512, 8000, 8k)")
        size = int(m.group(1)) * (K if m.group(2) else 1)
    if size < 1:
        raise LbscaleError(f"batch size {text!r}: must be >= 1")
    return size


def doubling(lo: int, hi: int) -> list[int] | None:
    """LO, 2 LO, 4 LO, ... up to HI (the `LO..HI` ranges of batches and message sizes); None unless LO is a
    power of two <= HI."""
    if lo < 1 or lo & (lo - 1) or hi < lo:
        return None
    out = [lo]
    while out[-1] * 2 <= hi:
        out.append(out[-1] * 2)
    return out


def parse_ints(value, what: str) -> list[int]:
    """'2,4,8', [2, 4] or 8 -> integers >= 1; `what` names them in the error."""
    items = value.split(",") if isinstance(value, str) else (value if isinstance(value, list) else [value])
    try:
        out = [int(v) for v in items]
    except (TypeError, ValueError):
        raise LbscaleError(f"malformed {what} {value!r}: expected integers") from None
    if not out or min(out) < 1:
        raise LbscaleError(f"malformed {what} {value!r}: expected integers >= 1")
    return out


KEEP_UNITS = {"%": "of the run's optimizer steps", "ep": "epochs", "st": "optimizer steps"}


def parse_keep(text: str) -> list[tuple[str, float, str]]:
    """'5%,10%,2ep,300st' -> [(label, value, unit)]; LbscaleError naming the bad item."""
    out = []
    for item in (t.strip() for t in str(text).split(",") if t.strip()):
        unit = next((u for u in KEEP_UNITS if item.endswith(u)), None)
        try:
            value = float(item[: -len(unit)]) if unit else math.nan
        except ValueError:
            value = math.nan
        if unit is None or not value > 0 or (unit == "%" and value >= 100):
            raise LbscaleError(f"--keep-checkpoints: {item!r} is not N% (0 < N < 100), Nep (epochs) or Nst (steps)")
        out.append((item, value, unit))
    return out
