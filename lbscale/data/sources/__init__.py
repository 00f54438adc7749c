"""One module per raw dataset, each a `Source` declaring the `lbscale prepare` options it reads (`SourceOption`);
`SOURCES` maps the CLI name to its class, and the CLI is made from it."""

from lbscale.data.sources.arrays import ArraysSource
from lbscale.data.sources.base import Source, SourceOption, SplitBatch
from lbscale.data.sources.bigearthnet import BigEarthNetSource
from lbscale.data.sources.cifar import Cifar10Source
from lbscale.data.sources.eurosat import EuroSatSource
from lbscale.data.sources.folder import FolderSource
from lbscale.data.sources.idx import IdxSource
from lbscale.data.sources.imagenet import ImagenetSource
from lbscale.data.sources.sat import SatSource
from lbscale.data.sources.synthetic import SyntheticSource

SOURCES = {
    "sat4": SatSource,
    "sat6": SatSource,
    "bigearthnet": BigEarthNetSource,
    "cifar10": Cifar10Source,
    "idx": IdxSource,
    "eurosat": EuroSatSource,
    "imagenet": ImagenetSource,
    "synthetic": SyntheticSource,
    "arrays": ArraysSource,
    "folder": FolderSource,
}

__all__ = ["Source", "SourceOption", "SplitBatch", "SOURCES"]
