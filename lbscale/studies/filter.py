"""`lbscale filter`: the data-optimised large-batch study's filter. A trained network's penultimate-layer
features of the train split -> PCA -> t-SNE to 2-D -> DBSCAN per class -> the points DBSCAN labels noise are
dropped; a random control drops the same number per class at random.

The filtered file is a normal prepared HDF5 file: val and test are copied untouched, train keeps the samples
that were not dropped (in their stored order) with a `source_index` extra (their index in the source's train
split); the band statistics are recomputed over the kept train samples, as `prepare` computes them; the
`notes` attribute's `filter` entry records the dropped indices, the feature model and every parameter.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lbscale.errors import LbscaleError

REDUCTIONS = {
    "pca+tsne": "PCA to --pca-dims, then t-SNE to 2-D (the study's pipeline; PCA makes t-SNE's neighbours cheap)",
    "tsne": "t-SNE to 2-D straight from the features",
    "pca": "PCA to --pca-dims only; DBSCAN runs in that space",
}


@dataclass
class FilterOptions:
    data: str
    out: str
    checkpoint: str | None = None  # a trial directory whose checkpointed network gives the features
    model: str | None = None  # or a timm model name (with pretrained=True: timm's weights, where available)
    pretrained: bool = False
    reduce: str = "pca+tsne"
    pca_dims: int = 50
    eps: float | None = None  # None: per class, the knee of the k-distance curve
    min_samples: int | None = None  # None: 2 x the embedding's dimensions (4 in 2-D)
    random_control: str | None = None
    seed: int = 0
    batch: int = 256
    device: str = "auto"
    force: bool = False


@dataclass
class FilterResult:
    kept: int
    total: int
    per_class: list = field(default_factory=list)  # dicts: class, total, removed, kept, eps, min_samples
    seconds: dict = field(default_factory=dict)  # features, pca, tsne, dbscan, write
    noise: dict | None = None  # where the file records flipped labels: precision / recall of the filter
    random_noise: dict | None = None
    files: dict = field(default_factory=dict)


# --- the math -----------------------------------------------------------------------------------
def knee_eps(points: np.ndarray, min_samples: int) -> float:
    """DBSCAN's eps from the k-distance curve (k = min_samples): the sorted distances to each point's k-th
    neighbour rise slowly and then steeply; the knee is the point farthest from the chord between the
    curve's ends (Kneedle), after scaling both axes to [0, 1]."""
    from sklearn.neighbors import NearestNeighbors

    n = len(points)
    if n <= min_samples:
        return float("inf")  # too few points for a core point: the whole class is one cluster or noise
    dist, _ = NearestNeighbors(n_neighbors=min_samples).fit(points).kneighbors(points)
    k = np.sort(dist[:, -1])
    x = np.linspace(0.0, 1.0, n)
    span = k[-1] - k[0]
    if span <= 0:
        return float(k[0]) if k[0] > 0 else 1e-12
    y = (k - k[0]) / span
    return float(k[int(np.argmax(x - y))])  # the curve is convex: the chord lies above it


def dbscan_per_class(embedding: np.ndarray, labels: np.ndarray, num_classes: int, eps: float | None,
                     min_samples: int | None) -> tuple[np.ndarray, list[dict]]:
    """A noise mask (True: dropped) from DBSCAN run on each class's points separately, and per-class counts."""
    from sklearn.cluster import DBSCAN

    noise = np.zeros(len(labels), dtype=bool)
    rows = []
    ms = min_samples or 2 * embedding.shape[1]
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)
        if len(idx) == 0:
            rows.append({"class": c, "total": 0, "removed": 0, "kept": 0, "eps": None, "min_samples": ms})
            continue
        e = eps if eps is not None else knee_eps(embedding[idx], ms)
        if not np.isfinite(e):
            assigned = np.zeros(len(idx), dtype=int)
        else:
            assigned = DBSCAN(eps=e, min_samples=ms).fit(embedding[idx]).labels_
        noise[idx[assigned == -1]] = True
        removed = int((assigned == -1).sum())
        rows.append({"class": c, "total": len(idx), "removed": removed, "kept": len(idx) - removed,
                     "eps": None if not np.isfinite(e) else float(e), "min_samples": ms})
    return noise, rows


def random_removal(labels: np.ndarray, noise: np.ndarray, num_classes: int, seed: int) -> np.ndarray:
    """The random control: per class, exactly as many samples dropped as the filter dropped, chosen at random."""
    rng = np.random.default_rng(seed)
    drop = np.zeros(len(labels), dtype=bool)
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)
        k = int(noise[idx].sum())
        if k:
            drop[rng.choice(idx, size=k, replace=False)] = True
    return drop


def detection(dropped: np.ndarray, flipped: np.ndarray) -> dict:
    """How well the dropped set finds the flipped labels: precision, recall, and the chance level (the noise
    rate: what random removal's precision is in expectation)."""
    hit = int((dropped & flipped).sum())
    return {"dropped": int(dropped.sum()), "flipped": int(flipped.sum()), "found": hit,
            "precision": hit / max(int(dropped.sum()), 1), "recall": hit / max(int(flipped.sum()), 1),
            "noise_rate": float(flipped.mean()) if len(flipped) else 0.0}


def reduce(features: np.ndarray, how: str, pca_dims: int, seed: int, seconds: dict) -> np.ndarray:
    """Features -> the embedding DBSCAN clusters (see REDUCTIONS)."""
    x = features.astype(np.float32, copy=False)
    if how in ("pca", "pca+tsne") and x.shape[1] > pca_dims:
        from sklearn.decomposition import PCA

        t = time.perf_counter()
        x = PCA(n_components=pca_dims, random_state=seed, svd_solver="randomized").fit_transform(x)
        seconds["pca"] = time.perf_counter() - t
    if how in ("tsne", "pca+tsne"):
        t = time.perf_counter()
        x = tsne(x, seed)
        seconds["tsne"] = time.perf_counter() - t
    return np.ascontiguousarray(x, dtype=np.float64)


def tsne(x: np.ndarray, seed: int) -> np.ndarray:
    """2-D t-SNE: openTSNE on all cores (FFT-accelerated), else scikit-learn's Barnes-Hut t-SNE."""
    import os

    n = len(x)
    perplexity = float(min(30.0, max(2.0, (n - 1) / 3.0)))
    try:
        from openTSNE import TSNE
    except ImportError:
        from sklearn.manifold import TSNE as SkTSNE

        return SkTSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed,
                      n_jobs=os.cpu_count()).fit_transform(x)
    return np.asarray(TSNE(n_components=2, perplexity=perplexity, n_jobs=os.cpu_count() or 1, random_state=seed,
                           verbose=False).fit(x))


# --- the network side --------------------------------------------------------------------------
def _feature_model(o: FilterOptions, f):
    """The network whose penultimate layer gives the features, and a description for the record."""
    bands = len(f.band_names)
    if o.checkpoint:
        from lbscale.train.models import load_trial_model

        model, config, saved = load_trial_model(o.checkpoint, bands)
        cfg = config["config"]
        if config.get("num_classes") not in (None, f.num_classes) and cfg.get("label_set", "labels") == "labels":
            raise LbscaleError(f"{o.checkpoint}: trained on {config['num_classes']} classes; {o.data} has "
                               f"{f.num_classes}")
        return model, {"source": "checkpoint", "trial": str(o.checkpoint), "model": cfg["model"],
                       "step": saved.get("step"), "data": cfg.get("data")}
    import timm

    from lbscale.train.models import MODELS, check_model

    check_model(o.model)
    if not o.pretrained:
        raise LbscaleError("--model without --pretrained has random weights: its features mean nothing; "
                           "give --checkpoint TRIAL_DIR or --pretrained")
    if o.model in MODELS:
        raise LbscaleError(f"--pretrained: {o.model} is lbscale's own model, with no pretrained weights; train a "
                           "trial and give --checkpoint")
    if not timm.list_pretrained(o.model):
        raise LbscaleError(f"--pretrained: timm has no pretrained weights for {o.model}; train a trial and give "
                           "--checkpoint")
    try:
        model = timm.create_model(o.model, pretrained=True, in_chans=bands, num_classes=0)
    except _weights_out_of_reach() as e:  # anything else is a bug, shown as itself
        raise LbscaleError(f"--pretrained: timm's weights for {o.model} are not available here "
                           f"({type(e).__name__}); offline, train a trial and give --checkpoint") from None
    return model, {"source": "timm-pretrained", "model": o.model}


def _weights_out_of_reach() -> tuple[type[BaseException], ...]:
    """What a download of timm's weights raises when they cannot be had: no network or offline mode, a missing
    cache entry, an HTTP error (all OSError), or a file the hub repository lacks."""
    try:
        from huggingface_hub.errors import EntryNotFoundError
    except ImportError:  # timm without the hub: its weights come from URLs (urllib: OSError)
        return (OSError,)
    return (OSError, EntryNotFoundError)


def penultimate(model, x):
    """The features before the classifier (512-d for ResNet-18/34, 2048-d for ResNet-50/101/152)."""
    if hasattr(model, "forward_head"):
        return model.forward_head(model.forward_features(x), pre_logits=True)
    return model(x)


def extract_features(model, f, device, batch: int, progress=None) -> np.ndarray:
    """Penultimate-layer features of the train split, in storage order (evaluation mode, no augmentation)."""
    import torch

    from lbscale.data.transforms import Normalize

    model = model.to(device).eval()
    normalize = Normalize(f.mean, f.std, device)
    images = f.images("train")
    n = f.size("train")
    out = None
    with torch.no_grad():
        for a in range(0, n, batch):
            x = normalize(torch.from_numpy(np.ascontiguousarray(images[a:min(a + batch, n)])).to(device))
            feats = penultimate(model, x).float().flatten(1).cpu().numpy()
            if out is None:
                out = np.empty((n, feats.shape[1]), dtype=np.float32)
            out[a:a + len(feats)] = feats
            if progress is not None:
                progress.update(len(feats))
    return out


# --- files ---------------------------------------------------------------------------------------
def write_subset(f, out: Path, drop: np.ndarray, record: dict, command: str, chunk: int = 4096) -> int:
    """A prepared HDF5 file holding f's val and test and the train samples not in `drop`; returns kept."""
    from lbscale.data.formats.base import DatasetMeta
    from lbscale.data.formats.hdf5 import Hdf5Writer

    attrs = f.attrs
    notes = json.loads(attrs.get("notes") or "{}") if isinstance(attrs.get("notes"), str) else dict(
        attrs.get("notes") or {})
    notes["filter"] = json.dumps(record)
    meta = DatasetMeta(dataset=f.dataset, task=f.task, class_names=list(f.class_names),
                       band_names=list(f.band_names), source_version=str(attrs.get("source_version", "")),
                       extra_class_names=dict(f.extra_class_names), notes=notes)
    with Hdf5Writer(out, meta, command) as w:
        for split in ("train", "val", "test"):
            n = f.size(split)
            images, extras = f.images(split), f.extras(split)
            labels = f.labels(split)
            names = f.names(split)
            for a in range(0, n, chunk):
                b = min(a + chunk, n)
                keep = np.arange(a, b)
                if split == "train":
                    keep = keep[~drop[a:b]]
                    if len(keep) == 0:
                        continue
                sel = keep - a
                block = np.asarray(images[a:b])[sel]
                ex = {k: np.asarray(f.labels(split, k)[a:b])[sel] for k in extras}
                if split == "train":
                    ex["source_index"] = keep.astype(np.int64)
                w.append(split, block, np.asarray(labels[a:b])[sel],
                         names=None if names is None else [names[i] for i in keep], extras=ex)
        w.finish()
    return int((~drop).sum())


# --- the command -------------------------------------------------------------------------------------
def _check(o: FilterOptions) -> None:
    if o.reduce not in REDUCTIONS:
        raise LbscaleError(f"--reduce: {o.reduce!r} is not one of {', '.join(REDUCTIONS)}")
    if (o.checkpoint is None) == (o.model is None):
        raise LbscaleError("give --checkpoint TRIAL_DIR (a trained trial) or --model NAME --pretrained, one of them")
    if o.eps is not None and not o.eps > 0:
        raise LbscaleError(f"--eps must be > 0 (got {o.eps})")
    if o.min_samples is not None and o.min_samples < 1:
        raise LbscaleError(f"--min-samples must be >= 1 (got {o.min_samples})")
    if o.pca_dims < 2:
        raise LbscaleError(f"--pca-dims must be >= 2 (got {o.pca_dims})")
    if o.batch < 1:
        raise LbscaleError(f"--batch must be >= 1 (got {o.batch})")
    outs = [Path(o.out)] + ([Path(o.random_control)] if o.random_control else [])
    if len({p.resolve() for p in outs}) != len(outs) or Path(o.data).resolve() in {p.resolve() for p in outs}:
        raise LbscaleError("--out, --random-control and --data must be three different files")
    for p in outs:
        if p.exists() and not o.force:
            raise LbscaleError(f"{p}: exists; use --force to replace it")


def side_dir(out: Path) -> Path:
    """Where the table, the record and the plots go: next to the filtered file."""
    return out.with_name(out.stem + "-filter")


def _open_checked(o: FilterOptions):
    """The prepared file of `o.data`, once the options and the file suit a filter (LbscaleError otherwise)."""
    from lbscale.data.formats import open_prepared

    _check(o)
    if not Path(o.data).exists():
        raise LbscaleError(f"{o.data}: no such prepared file")
    f = open_prepared(o.data)
    if f.task != "multiclass":
        raise LbscaleError(f"{o.data}: a {f.task} file; per-class DBSCAN is defined for multiclass data only "
                           "(a multilabel sample belongs to several classes)")
    if f.encoding != "raw":
        raise LbscaleError(f"{o.data}: {f.encoding.upper()}-encoded samples; lbscale filter reads pixel files "
                           "(CIFAR-10, SAT, EuroSAT, synthetic)")
    if f.size("train") < 10:
        raise LbscaleError(f"{o.data}: {f.size('train')} train samples; too few to filter")
    return f


def _write_arms(o: FilterOptions, f, noise, labels, flipped, record: dict, result: FilterResult, command: str):
    """The network-filtered file, and with o.random_control the random control that drops as many per class."""
    write_subset(f, Path(o.out), noise, {**record, "arm": "network-filtered"}, command)
    result.files["filtered"] = str(o.out)
    if o.random_control:
        drop = random_removal(labels, noise, f.num_classes, o.seed)
        ctrl = {**record, "arm": "random-control", "dropped": np.flatnonzero(drop).tolist()}
        if flipped is not None:
            result.random_noise = detection(drop, flipped)
            ctrl["label_noise_detection"] = result.random_noise
        write_subset(f, Path(o.random_control), drop, ctrl, command)
        result.files["random_control"] = str(o.random_control)


def run_filter(o: FilterOptions, command: str = "lbscale filter") -> tuple[FilterResult, str]:
    """Filter o.data into o.out (and the random control); returns the result and the outcome line."""
    from lbscale.progress import bar
    from lbscale.results import write_json
    from lbscale.train import distributed as dist

    f = _open_checked(o)
    n = f.size("train")
    model, source = _feature_model(o, f)
    device = dist.pick_device(o.device, dist.DistEnv())
    seconds: dict = {}
    t = time.perf_counter()
    progress = bar(total=n, desc="features", unit="img")
    features = extract_features(model, f, device, o.batch, progress)
    progress.close()
    seconds["features"] = time.perf_counter() - t
    labels = np.asarray(f.labels("train")).astype(np.int64)
    embedding = reduce(features, o.reduce, o.pca_dims, o.seed, seconds)
    t = time.perf_counter()
    noise, rows = dbscan_per_class(embedding, labels, f.num_classes, o.eps, o.min_samples)
    seconds["dbscan"] = time.perf_counter() - t
    for r in rows:
        r["name"] = f.class_names[r["class"]]
    result = FilterResult(kept=int((~noise).sum()), total=n, per_class=rows, seconds=seconds)
    if result.kept == 0:
        raise LbscaleError("DBSCAN labelled every train sample noise: nothing would be left (raise --eps or lower "
                           "--min-samples)")
    flipped = np.asarray(f.labels("train", "noisy")).astype(bool) if "noisy" in f.extras("train") else None
    record = {"feature_model": source, "features_dim": int(features.shape[1]), "reduce": o.reduce,
              "pca_dims": o.pca_dims, "eps": o.eps if o.eps is not None else "auto (k-distance knee per class)",
              "min_samples": rows[0]["min_samples"], "seed": o.seed, "per_class": rows,
              "source_file": str(o.data), "dropped": np.flatnonzero(noise).tolist()}
    if flipped is not None:
        result.noise = detection(noise, flipped)
        record["label_noise_detection"] = result.noise
    t = time.perf_counter()
    _write_arms(o, f, noise, labels, flipped, record, result, command)
    seconds["write"] = time.perf_counter() - t
    side = side_dir(Path(o.out))
    side.mkdir(parents=True, exist_ok=True)
    table = reduction_table(result, source)
    (side / "reduction.md").write_text(table)
    write_json(side / "filter.json", {**{k: v for k, v in record.items() if k != "dropped"},
                                      **asdict(result)})
    scatter(embedding, labels, noise, f.class_names, side / "tsne.png")
    result.files["table"] = str(side / "reduction.md")
    f.close()
    line = (f"filtered {o.data}: kept {result.kept:,} of {n:,} train samples ({100 * result.kept / n:.2f}%) with "
            f"{source['model']} features" + (f"; finds {result.noise['precision']:.0%} flipped labels among the "
                                              f"dropped (chance {result.noise['noise_rate']:.0%})"
                                              if result.noise else "")
            + f"; wrote {o.out}" + (f" and {o.random_control}" if o.random_control else "")
            + f", table and plots in {side}")
    return result, line


def reduction_table(result: FilterResult, source: dict) -> str:
    """Markdown: the study's Table I (feature model -> kept, removed, %), then per class, then the noise check."""
    n, kept = result.total, result.kept
    lines = ["| Feature model | Kept | Removed | Kept [%] |", "|---|---|---|---|",
             f"| {source['model']} | {kept:,} | {n - kept:,} | {100 * kept / n:.2f} |", "",
             "| Class | Samples | Removed | Kept | eps | min_samples |", "|---|---|---|---|---|---|"]
    for r in result.per_class:
        eps = "-" if r["eps"] is None else f"{r['eps']:.4g}"
        lines.append(f"| {r['name']} | {r['total']:,} | {r['removed']:,} | {r['kept']:,} | {eps} | "
                     f"{r['min_samples']} |")
    if result.noise:
        lines += ["", "| Removal | Dropped | Flipped labels found | Precision | Recall | Chance precision |",
                  "|---|---|---|---|---|---|"]
        for name, d in (("network filter", result.noise), ("random control", result.random_noise)):
            if d:
                lines.append(f"| {name} | {d['dropped']:,} | {d['found']:,} of {d['flipped']:,} | "
                             f"{d['precision']:.3f} | {d['recall']:.3f} | {d['noise_rate']:.3f} |")
    secs = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    return "\n".join(lines) + f"\n\nTime: {secs}\n"


def scatter(embedding: np.ndarray, labels: np.ndarray, noise: np.ndarray, class_names: list, path: Path) -> None:
    """One panel per class: its points in the 2-D embedding (first two dimensions), dropped ones in black."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(class_names)
    cols = min(k, 5)
    rows = (k + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for c, ax in enumerate(axes.flat):
        if c >= k:
            ax.axis("off")
            continue
        m = labels == c
        ax.scatter(embedding[m & ~noise, 0], embedding[m & ~noise, 1], s=2, color=f"C{c % 10}", alpha=0.5,
                   linewidths=0)
        ax.scatter(embedding[m & noise, 0], embedding[m & noise, 1], s=4, color="black", linewidths=0)
        ax.set_title(f"{class_names[c]}: {int((m & noise).sum())} of {int(m.sum())} dropped", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
