import sys
from pathlib import Path

import pytest

from lbscale.cli import main
from lbscale.progress import set_quiet

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

set_quiet(True)


@pytest.fixture
def run_cli(capsys):
    """Run `lbscale ARGS` in-process; returns (exit code, stdout, stderr)."""

    def run(*args):
        rc = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return rc, out, err

    return run


@pytest.fixture(scope="session")
def synthetic_h5(tmp_path_factory):
    from lbscale.data.prepare import prepare

    path = tmp_path_factory.mktemp("syn") / "syn.h5"
    prepare("synthetic", None, path, count=3000, label_noise=0.1, command="test")
    return path


@pytest.fixture(scope="session")
def tiny_h5(tmp_path_factory):
    """560 train / 80 val images of 16x16x3, 4 classes: a few seconds per epoch with timm's test models."""
    from lbscale.data.prepare import prepare

    path = tmp_path_factory.mktemp("tiny") / "tiny.h5"
    prepare("synthetic", None, path, count=800, bands=3, size=16, classes=4, seed=3, command="test")
    return path
