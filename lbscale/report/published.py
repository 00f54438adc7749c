"""The published tables shipped with lbscale (lbscale/published/*.csv) and `--compare`'s reading of one."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from lbscale.errors import LbscaleError


def published_tables() -> dict:
    """The published tables shipped in the package (lbscale/published/*.csv), by name."""
    from importlib.resources import files

    folder = files("lbscale") / "published"
    return {p.name.removesuffix(".csv"): p for p in folder.iterdir() if p.name.endswith(".csv")}


def published(name_or_file: str) -> tuple[pd.DataFrame, str]:
    """A published table: a CSV file, or the NAME of one shipped with lbscale (sat4-lamb, bigearthnet-lars, ...)."""
    path = Path(name_or_file)
    if not path.is_file():
        shipped = published_tables()
        if name_or_file not in shipped:
            raise LbscaleError(f"--compare: no file or published table {name_or_file!r} "
                               f"(known: {', '.join(sorted(shipped))})")
        path = shipped[name_or_file]
    text = path.read_text()
    source = next((line[1:].strip().removeprefix("source:").strip() for line in text.splitlines()
                   if line.startswith("# source:")), str(path))
    try:
        df = pd.read_csv(io.StringIO(text), comment="#")
    except (ValueError, pd.errors.ParserError) as e:
        raise LbscaleError(f"{path}: not a readable CSV ({e})") from None
    if "global_batch" not in df:
        raise LbscaleError(f"{path}: needs a global_batch column")
    if "gpus" not in df:
        df["gpus"] = float("nan")
    return df, source
