"""Counts and sizes as specs and options write them: a batch size (512, 8k), a LO..HI doubling range (batches,
message sizes), a comma-separated list of counts (GPUs, process counts). The sweep planner, the report and the
benchmarks read them here."""

from __future__ import annotations

import re

from lbscale.errors import LbscaleError

K = 1024
SIZE = re.compile(r"^\s*(\d+)\s*([kK]?)\s*$")


def parse_size(text) -> int:
    """512 -> 512, '8k' / '8K' -> 8192 (k = 1024)."""
    if isinstance(text, bool):
        raise LbscaleError(f"malformed batch size {text!r}")
    if isinstance(text, int):
        return text
    m = SIZE.match(str(text))
    if not m:
        raise LbscaleError(f"malformed batch size {text!r} (e.g. 512, 8000, 8k)")
    return int(m.group(1)) * (K if m.group(2) else 1)


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
