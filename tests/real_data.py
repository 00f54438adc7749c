"""Real data that a system package ships: Debian's dataset-fashion-mnist (Zalando's four IDX files). A test that
needs it skips with the reason where it is not installed; CI installs it and sets LBSCALE_REQUIRE_REAL_DATA=1,
which turns that skip into a failure."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def _skip(why: str):
    if os.environ.get("LBSCALE_REQUIRE_REAL_DATA") == "1":
        pytest.fail(why + "; LBSCALE_REQUIRE_REAL_DATA=1 forbids skipping")
    pytest.skip(why)


def debian_fashion_mnist() -> Path:
    """The folder of the installed package's IDX files."""
    if shutil.which("dpkg") is None:
        _skip("no dpkg: Debian's dataset-fashion-mnist package cannot be installed here")
    listed = subprocess.run(["dpkg", "-L", "dataset-fashion-mnist"], capture_output=True, text=True)
    files = [Path(p) for p in listed.stdout.splitlines() if p.endswith("train-images-idx3-ubyte.gz")]
    if listed.returncode != 0 or not files:
        _skip("Debian's dataset-fashion-mnist is not installed (apt-get install dataset-fashion-mnist)")
    return files[0].parent
