"""The result store: per-trial files written atomically (temp file + rename), read back as records."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

CONFIG, METRICS, SUMMARY, CHECKPOINT = "config.json", "metrics.jsonl", "summary.json", "checkpoint"


def write_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never a part (rename within one directory is atomic)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=1, default=str) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_atomic(path, "".join(json.dumps(r, default=str) + "\n" for r in rows))


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return None


def read_jsonl(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []
