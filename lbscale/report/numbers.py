"""How the report writes a number: one home for the tables, the verdict lines and the figures' labels."""

from __future__ import annotations

import math

SUB = "  "  # a verdict line that starts with this is a detail of the line above it (rendered nested)


def number(v, digits: int = 3) -> str:
    """A table cell's number: thousands as integers with separators (1,234), tens with one decimal (12.3),
    smaller ones with `digits` decimals; '-' for a missing or non-finite value."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


def tick(v: float) -> str:
    """An axis tick: at most 3 significant digits, thousands with separators (2,048), never a float's repr
    (0.013, not 0.012980000000000002)."""
    if v is None or not math.isfinite(v):
        return ""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def whole(v) -> str:
    """Steps and batches: whole numbers without a thousands comma (an interval [128, 2688] stays readable)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.0f}" if abs(v) >= 10 else f"{v:.2g}"


def _finite(v) -> bool:
    return v is not None and not (isinstance(v, float) and not math.isfinite(v))


def bounded(value, lo, hi, fmt) -> str:
    """'180 [110, 290]'; an end the data do not bound is open: '180 [110, inf)', '0.52 (-inf, 0.74]', and for a
    positive quantity bounded by nothing from below '(0, 290]'."""
    if not _finite(value):
        return "-"
    left = f"[{fmt(lo)}" if _finite(lo) and lo != 0 else ("(0" if lo == 0 else "(-inf")
    right = f"{fmt(hi)}]" if _finite(hi) else "inf)"
    return f"{fmt(value)} {left}, {right}"


def interval_after(lo, hi, fmt) -> str:
    """The interval written after its value: ' [110, 290]', ' [110, inf]' where the upper end is open; '' where an
    end is missing or not finite below, or both agree (nothing to show)."""
    if not _finite(lo) or hi is None or hi != hi or lo == hi:
        return ""
    return f" [{fmt(lo)}, {fmt(hi) if math.isfinite(hi) else 'inf'}]"


def estimate_cell(value, lo, hi, kind, fmt) -> str:
    """A quantity with its interval as the data support it, for a table cell: '410 [260, 900]' (both ends
    finite), '> 256' (bounded from below only), '< 64' (from above only), 'not resolved' (neither)."""
    if kind == "interval" and _finite(value):
        return f"{fmt(value)} [{fmt(lo)}, {fmt(hi)}]"
    if kind == "lower":
        return f"> {fmt(lo)}"
    if kind == "upper":
        return f"< {fmt(hi)}"
    return "not resolved"


def estimate_text(name: str, value, lo, hi, kind, fmt, level: float) -> str:
    """The same in words: 'B_crit ~ 410 [260, 900]', 'B_crit > 256 (90% lower bound)', 'B_crit < 64 (90% upper
    bound)', 'B_crit not resolved by this study'."""
    cell = estimate_cell(value, lo, hi, kind, fmt)
    if cell == "not resolved":
        return f"{name} not resolved by this study"
    if kind in ("lower", "upper"):
        return f"{name} {cell} ({100 * level:.0f}% {kind} bound)"
    return f"{name} ~ {cell}"
