"""`lbscale prepare`: a raw dataset -> one prepared file (HDF5) or directory (TFRecord), atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lbscale.data.formats import create_writer, open_prepared
from lbscale.data.formats.base import IMAGERY, SPLITS, UNKNOWN_IMAGERY, auto_augmentation
from lbscale.data.sources import SOURCES
from lbscale.data.sources.base import carve
from lbscale.errors import LbscaleError
from lbscale.progress import bar, log_line


def prepare(dataset: str, src: Path | None, out: Path, fmt: str = "hdf5", val_fraction: float = 0.1,
            test_fraction: float = 0.2, seed: int = 0, workers: int = 1, force: bool = False,
            command: str = "", max_train: int | None = None, imagery: str | None = None,
            **source_options) -> dict[str, int]:
    """Prepare `dataset` from `src` into `out`; returns samples written per split. `imagery`: what the pixels show
    (a key of IMAGERY), recorded in place of what the source infers."""
    out = Path(out)
    if dataset not in SOURCES:
        raise LbscaleError(f"unknown dataset {dataset!r}; choose one of {', '.join(SOURCES)}")
    if imagery is not None and imagery not in IMAGERY:
        raise LbscaleError(f"unknown --imagery {imagery!r}; choose one of {', '.join(IMAGERY)}")
    if out.exists() and not force:
        raise LbscaleError(f"{out}: exists (use --force to replace it)")
    if not out.parent.is_dir():
        raise LbscaleError(f"{out.parent}: {'a file, not a folder' if out.parent.exists() else 'no such folder'}")
    if not 0 <= val_fraction < 1 or not 0 <= test_fraction < 1:
        raise LbscaleError("--val-fraction and --test-fraction must be in [0, 1)")
    if max_train is not None and max_train < 1:
        raise LbscaleError("--max-train must be >= 1")
    cls = SOURCES[dataset]
    if cls.needs_src and src is None:
        raise LbscaleError(f"{dataset}: --src is required")
    _check_format(dataset, cls.encoding, fmt)
    foreign = sorted(set(source_options) - {option.name for option in cls.options})
    if foreign:
        raise LbscaleError(f"--{foreign[0].replace('_', '-')} does not apply to {dataset}")
    common = dict(workers=workers, seed=seed, val_fraction=val_fraction, test_fraction=test_fraction)
    source = cls(dataset, src, **{k: common[k] for k in cls.common}, **source_options)  # checks before any output
    if source.meta.task == "multiclass" and len(source.meta.class_names) < 2:  # every target would be met at once
        names = ", ".join(map(str, source.meta.class_names)) or "none"
        raise LbscaleError(f"{dataset}: one class ({names}): a classification study needs two or more (check the "
                           "labels, or the class folders)")
    if imagery is not None:  # the user knows what the pixels show; a source only guesses (or cannot tell)
        source.meta.notes["imagery"] = imagery
    _check_format(dataset, source.encoding, fmt)  # a source whose encoding is an option (folder)
    assign = _assignment(dataset, source, val_fraction, test_fraction, max_train, seed)
    counts = {s: 0 for s in SPLITS}
    with create_writer(fmt, out, source.meta, command) as writer:
        for split in source.splits:
            _write_split(dataset, source, split, writer, assign if split == "train" else None, counts)
        writer.finish()
    skipped = getattr(source, "skipped", None)
    if skipped:
        log_line(f"left out {len(skipped)} unreadable files (--skip-bad); listed in notes.skipped of {out}")
    return counts


def _check_format(dataset: str, encoding: str, fmt: str) -> None:
    if encoding != "raw" and fmt != "hdf5":
        raise LbscaleError(f"{dataset}: --format {fmt} does not store {encoding.upper()}-encoded samples; use hdf5")


def _assignment(dataset: str, source, val_fraction: float, test_fraction: float, max_train: int | None,
                seed: int) -> np.ndarray | None:
    """The split each train sample goes to (None: left out), or None where all of train stays train: the splits the
    source lacks carved from train (stratified, seeded), then --max-train's subset of what is left."""
    fractions = {}
    if "val" not in source.splits and val_fraction > 0:
        fractions["val"] = val_fraction
    if "test" not in source.splits and test_fraction > 0:
        fractions["test"] = test_fraction
    assign = carve(source.train_labels(), fractions, seed) if fractions else None
    if max_train is None:
        return assign
    try:
        labels = source.train_labels()
    except NotImplementedError:  # a source that generates its splits (synthetic): nothing to choose from
        raise LbscaleError(f"{dataset}: --max-train chooses from a train split read from --src; {dataset} "
                           "generates its splits (use its own size options, e.g. --count)") from None
    before = assign if assign is not None else np.full(len(labels), "train", dtype=object)
    assign = limit_train(before, labels, max_train, seed)
    source.meta.notes["train_subset"] = (f"{max_train} of {int((before == 'train').sum())} train samples kept "
                                         f"(--max-train, stratified by class, seed {seed})")
    return assign


def outcome_line(out: Path, counts: dict[str, int]) -> str:
    """What `lbscale prepare` prints: the samples of each split, and the imagery the file records with the
    augmentation `augmentation: auto` trains it with."""
    with open_prepared(out) as f:
        imagery, encoding = f.imagery, f.encoding
    hint = " (--imagery says what the pixels show)" if imagery == UNKNOWN_IMAGERY else ""
    return (f"wrote {out}: " + ", ".join(f"{s} {n}" for s, n in counts.items())
            + f"; imagery {imagery}{hint}: auto augmentation takes {auto_augmentation(encoding, imagery)}")


def limit_train(assign: np.ndarray, labels: np.ndarray, max_train: int, seed: int) -> np.ndarray:
    """`assign` with only `max_train` of its train samples left in train (stratified by class: each class its
    share, largest remainders rounded up; seeded), the others None: left out of the file."""
    from lbscale.data.sources.base import stratify_key

    assign = assign.copy()
    rows = np.flatnonzero(assign == "train")
    if max_train >= len(rows):
        raise LbscaleError(f"--max-train {max_train}: the train split has {len(rows)} samples, no more to leave out")
    key = stratify_key(labels[rows])
    classes, counts = np.unique(key, return_counts=True)
    share = counts * max_train / len(rows)
    quota = np.floor(share).astype(int)
    quota[np.argsort(-(share - quota), kind="stable")[: max_train - quota.sum()]] += 1
    rng = np.random.default_rng([seed, 0x7A1])
    for c, q in zip(classes, quota):
        members = rng.permutation(rows[key == c])
        assign[members[q:]] = None
    return assign


def _write_split(dataset: str, source, split: str, writer, assign: np.ndarray | None, counts: dict) -> None:
    """Stream one split of `source` into `writer`; train's samples go to the split `assign` carved them into."""
    progress = bar(desc=f"read {split}", unit="img")  # the source's split, written into the splits assign says
    offset = 0
    for batch in source.batches(split):
        if assign is not None:
            rows = assign[offset:offset + len(batch.images)]
            offset += len(batch.images)
        else:
            rows = np.full(len(batch.images), split, dtype=object)
        if batch.keep is not None:
            rows = np.where(batch.keep, rows, None)
        for name in dict.fromkeys(rows[rows != None]):  # noqa: E711 (element-wise)
            part = batch if (rows == name).all() else batch.take(rows == name)
            if len(part.images):
                extra = {"stats": part.stats} if part.stats is not None else {}
                writer.append(name, part.images, part.labels, part.names, part.extras, **extra)
                counts[name] += len(part.images)
        progress.update(len(batch.images))
    progress.close()
    if assign is not None and offset != len(assign):
        raise LbscaleError(f"{dataset}: train stream has {offset} samples, labels say {len(assign)}")


def label_histogram(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Samples per class: counts of ids (multiclass) or column sums (multi-hot)."""
    if labels.ndim == 1:
        return np.bincount(labels.astype(np.int64), minlength=num_classes)
    return labels.sum(axis=0).astype(np.int64)
