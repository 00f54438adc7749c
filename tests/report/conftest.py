import pytest


@pytest.fixture(autouse=True)
def _close_figures():
    """Figure tests inspect matplotlib figures directly; close them so pyplot does not keep them all."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")
