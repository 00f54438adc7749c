"""The package's own metadata: what `make venv` (pip install -e .) reads must build without warnings."""
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_applies_without_a_deprecation_warning():
    # setuptools >= 77 warns on `license = { text = ... }`; the SPDX string is the current form.
    pytest.importorskip("setuptools", minversion="77")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert dist.metadata.license_expression == "MIT"
