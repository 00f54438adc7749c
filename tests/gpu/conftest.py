"""The GPU set: `make test-gpu` on a machine with CUDA, its own torch / timm / h5py and the project on
PYTHONPATH. Every test here carries the `gpu` marker and skips without a visible GPU (so `make test` on a CPU
machine collects and skips them), or without a package it needs, naming it. Figures measured on the way
(img/s, ratios, the GPU's name) are printed at the end and written, as JSON, to the file that
LBSCALE_GPU_FIGURES names. This conftest imports nothing of lbscale's, so that a missing package is a skip
with its name, not a collection error (make test-gpu runs with --confcutdir, without tests/conftest.py)."""

import json
import os

import pytest

FIGURES: dict = {}


def need(*modules: str) -> None:
    """Skip the calling test where one of `modules` does not import on this machine."""
    for name in modules:
        pytest.importorskip(name, reason=f"{name} is not installed on this machine (the GPU set fetches nothing)")


@pytest.fixture(scope="session")
def cuda():
    """The first visible GPU, after the packages every GPU test needs; a skip where there is none."""
    need("torch")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU visible to torch (torch.cuda.is_available() is False)")
    need("numpy", "h5py", "timm", "yaml", "click", "tqdm")
    FIGURES.setdefault("gpu", torch.cuda.get_device_name(0))
    FIGURES.setdefault("torch", torch.__version__)
    FIGURES.setdefault("cuda", torch.version.cuda)
    return torch.device("cuda", 0)


@pytest.fixture
def lbscale(capsys):
    """Run `lbscale ARGS` in this process; (exit code, stdout, stderr)."""
    from lbscale.cli import main
    from lbscale.progress import set_quiet

    set_quiet(True)

    def run(*args):
        rc = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return rc, out, err

    return run


@pytest.fixture
def figure():
    """figure(name, value): a measured figure for the end-of-run summary and LBSCALE_GPU_FIGURES."""

    def record(name: str, value) -> None:
        FIGURES[name] = value

    return record


def pytest_terminal_summary(terminalreporter):
    if not FIGURES:
        return
    terminalreporter.section("GPU figures")
    for name, value in FIGURES.items():
        terminalreporter.write_line(f"{name}: {value}")
    path = os.environ.get("LBSCALE_GPU_FIGURES")
    if path:
        with open(path, "w") as f:
            json.dump(FIGURES, f, indent=1)


@pytest.fixture(scope="session")
def tiny(cuda, tmp_path_factory):
    """560 train / 80 val images of 16x16x3, 4 classes (tests/conftest.py's tiny_h5, prepared here)."""
    from lbscale.data.prepare import prepare

    path = tmp_path_factory.mktemp("tiny") / "tiny.h5"
    prepare("synthetic", None, path, count=800, bands=3, size=16, classes=4, seed=3, command="test")
    return path
