"""Sources own their options: `lbscale prepare`'s options are made from what each source declares, so a new dataset
is its module and a registry entry (and a fixture generator), never a line in cli.py or data/prepare.py."""

import importlib
from typing import Iterator

import numpy as np
import pytest

from lbscale.data.formats.base import DatasetMeta
from lbscale.data.sources import SOURCES
from lbscale.data.sources.base import Source, SourceOption, SplitBatch, prepare_options


class TinySource(Source):
    """A dataset a newcomer might add: 40 generated 4x4 one-band images of two classes, read with one option."""

    splits = ("train",)
    help = "a tiny generated set for the test"
    options = (SourceOption("wobble", "how far each image wobbles", int),)
    common = ("seed",)
    needs_src = False

    def __init__(self, name: str, src=None, wobble: int = 1, seed: int = 0):
        self.wobble, self.seed = wobble, seed
        self.labels = np.arange(40) % 2
        self.meta = DatasetMeta(name, "multiclass", ["even", "odd"], ["gray"], "tiny v1", notes={"wobble": str(wobble)})

    def train_labels(self) -> np.ndarray:
        return self.labels

    def batches(self, split: str) -> Iterator[SplitBatch]:
        images = np.random.default_rng(self.seed).integers(0, 255, (40, 1, 4, 4), dtype=np.uint8) // self.wobble
        yield SplitBatch(images, self.labels)


@pytest.fixture
def tiny_registered():
    """TinySource in the registry, and the CLI made again from it (as a new module's import would)."""
    import lbscale.cli

    SOURCES["tiny"] = TinySource
    importlib.reload(lbscale.cli)
    try:
        yield
    finally:
        del SOURCES["tiny"]
        importlib.reload(lbscale.cli)


def test_a_new_source_needs_only_its_module_and_the_registry(tiny_registered, run_cli, tmp_path):
    from lbscale.data.formats import open_prepared

    rc, out, _ = run_cli("prepare", "--help")
    assert rc == 0 and "--wobble" in out and "tiny: how far each image wobbles" in " ".join(out.split())
    rc, out, err = run_cli("prepare", "tiny", "--out", tmp_path / "t.h5", "--wobble", "3", "--test-fraction", "0.25")
    assert rc == 0, err
    with open_prepared(tmp_path / "t.h5") as f:
        assert f.notes["wobble"] == "3" and f.size("train") + f.size("val") + f.size("test") == 40
    rc, _, err = run_cli("prepare", "synthetic", "--out", tmp_path / "s.h5", "--wobble", "3")
    assert rc == 2 and err.strip() == "lbscale: error: --wobble does not apply to synthetic"


def test_a_shared_name_lists_each_meaning():
    """--size: synthetic's image side, arrays' and folder's resize; each says its own default where they differ."""
    spec, default = prepare_options(SOURCES)["size"]
    assert default is None and spec.type is int
    assert spec.help == ("synthetic: image side in pixels (default 32); arrays, folder: resize every image to SIZE x "
                         "SIZE (bilinear).")
    assert prepare_options(SOURCES)["count"][1] == 6000  # one reader: its default is the option's


def test_a_shared_name_means_one_kind_of_value():
    class Side(TinySource):
        options = (SourceOption("wobble", "an image side", str),)

    with pytest.raises(TypeError, match="--wobble means different kinds of value to tiny, side"):
        prepare_options({"tiny": TinySource, "side": Side})


@pytest.mark.parametrize("name", sorted(prepare_options(SOURCES)))
def test_every_source_option_is_refused_where_it_does_not_apply(run_cli, tmp_path, name):
    spec, _ = prepare_options(SOURCES)[name]
    value = [] if spec.type is bool else [spec.choices[0] if spec.choices else "1"]
    rc, _, err = run_cli("prepare", "sat4", "--src", tmp_path, "--out", tmp_path / "x.h5", spec.flag, *value)
    assert rc == 2 and err.strip() == f"lbscale: error: {spec.flag} does not apply to sat4"
