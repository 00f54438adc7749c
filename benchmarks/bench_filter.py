"""`lbscale filter`'s pipeline on the study's size: 50,000 CIFAR-sized train images (32x32x3, 10 classes) ->
ResNet-18 penultimate features (512-d) -> PCA to 50 -> t-SNE to 2-D (openTSNE, all cores) -> DBSCAN per class.
The network is randomly initialised (the timing does not depend on the weights). Prints each stage's seconds
and share, measured in this one run."""

import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import report
from lbscale.studies.filter import dbscan_per_class, extract_features, reduce
from lbscale.data.formats import open_prepared
from lbscale.data.prepare import prepare
from lbscale.train.models import build_model

TRAIN, CLASSES = 50_000, 10


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "cifar-like.h5"
        prepare("synthetic", None, data, count=TRAIN, bands=3, size=32, classes=CLASSES, val_fraction=0.0,
                test_fraction=0.0)
        f = open_prepared(data)
        torch.manual_seed(0)
        model = build_model("resnet18", 3, CLASSES, channels_last=False)
        seconds = {}
        t = time.perf_counter()
        features = extract_features(model, f, torch.device("cpu"), 500)
        seconds["features"] = time.perf_counter() - t
        embedding = reduce(features, "pca+tsne", 50, 0, seconds)
        t = time.perf_counter()
        noise, _ = dbscan_per_class(embedding, np.asarray(f.labels("train")), CLASSES, None, None)
        seconds["dbscan"] = time.perf_counter() - t
        f.close()
    total = sum(seconds.values())
    report(f"filter pipeline, {TRAIN:,} points of {features.shape[1]}-d, {torch.get_num_threads()} threads", total,
           "s", f"{int(noise.sum()):,} dropped")
    for stage in ("features", "pca", "tsne", "dbscan"):
        report(f"  {stage}", seconds[stage], "s", f"{100 * seconds[stage] / total:.0f}% of the pipeline")


if __name__ == "__main__":
    main()
