import os
import shutil
import subprocess
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


@pytest.fixture(scope="session")
def slurm():
    """A reachable SLURM controller; skipped where there is none, a failure where CI requires one."""
    ok = shutil.which("sbatch") is not None
    if ok:
        try:
            ok = subprocess.run(["sinfo", "-h"], capture_output=True, timeout=20).returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
    if not ok:
        why = "no SLURM controller reachable (start one with tests/slurm/start-slurm.sh, which needs root)"
        if os.environ.get("LBSCALE_REQUIRE_SLURM") == "1":
            pytest.fail(why + "; LBSCALE_REQUIRE_SLURM=1 forbids skipping")
        pytest.skip(why)
    return True


@pytest.fixture(scope="session")
def horovod():
    """Horovod's torch module with its Gloo controller (`make horovod`); skipped where it is not installed, a
    failure where CI requires it (LBSCALE_REQUIRE_HOROVOD=1)."""
    try:
        import horovod.torch as hvd

        ok = hvd.gloo_built()
        why = "Horovod was built without Gloo"
    except ImportError as e:
        ok, why = False, f"Horovod is not installed ({e}; make horovod builds it)"
    if not ok:
        if os.environ.get("LBSCALE_REQUIRE_HOROVOD") == "1":
            pytest.fail(why + "; LBSCALE_REQUIRE_HOROVOD=1 forbids skipping")
        pytest.skip(why)
    return hvd


@pytest.fixture
def live_pid():
    """The pid of a process of this host that runs while the test does."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p.pid
    p.kill()
    p.wait()
