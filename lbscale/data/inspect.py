"""`lbscale data info` and `lbscale data check` on a prepared file."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from lbscale.data.formats import open_prepared
from lbscale.data.formats.base import IMAGERY, SPLITS, UNKNOWN_IMAGERY, auto_augmentation
from lbscale.data.formats.checksums import checksum_coverage, verify_checksums
from lbscale.data.formats.hdf5 import Hdf5File
from lbscale.data.prepare import label_histogram
from lbscale.task import TASKS

SCAN = 4096  # images are scanned for NaN in blocks of this many samples
NO_CHECKSUMS = "no checksums: written before lbscale stored them; re-prepare to get them"
TFRECORD_CRC_MASK = 0xA282EAD8  # TFRecord stores each CRC32C rotated right by 15 bits plus this constant


def describe(path) -> str:
    """A human-readable summary: splits, shapes, classes, label histogram, band stats."""
    with open_prepared(path) as f:
        lines = [f"{path}: {f.dataset} ({f.task}), {len(f.class_names)} classes, {len(f.band_names)} bands",
                 f"  source: {f.attrs.get('source_version', '?')}; lbscale {f.attrs.get('lbscale_version', '?')}",
                 f"  created by: {f.attrs.get('command', '?')}",
                 f"  checksums: {checksum_summary(f)}",
                 f"  imagery: {imagery_summary(f.imagery, f.encoding)}",
                 "  splits:"]
        hists = {}
        for s in f.splits():
            img = f.images(s)
            if f.encoding != "raw":
                sizes, n_bytes = f.labels(s, "sizes"), int(f.labels(s, "lengths").sum())
                median = np.median(sizes, axis=0).astype(int) if len(sizes) else (0, 0)
                shape = f"{f.encoding.upper()}, median {median[1]}x{median[0]} px, {n_bytes / 2**20:,.1f} MiB"
            else:
                shape = f"{tuple(img.shape[1:])} {np.dtype(img.dtype).name}"
            lines.append(f"    {s:<5} {f.size(s):>9} images  {shape}")
            hists[s] = label_histogram(f.labels(s), f.num_classes)
        lines.append("  label histogram:")
        width = max(len(c) for c in f.class_names)
        lines.append(f"    {'class':<{width}} " + " ".join(f"{s:>9}" for s in hists))
        for i, c in enumerate(f.class_names):
            lines.append(f"    {c:<{width}} " + " ".join(f"{int(h[i]):>9}" for h in hists.values()))
        lines.append("  band stats (train):")
        for b, m, sd in zip(f.band_names, f.mean, f.std):
            lines.append(f"    {b:<8} mean {m:12.3f}  std {sd:12.3f}")
        for key, names in f.extra_class_names.items():
            lines.append(f"  extra label set {key}: {len(names)} classes")
    return "\n".join(lines)


def imagery_summary(imagery: str | None, encoding: str) -> str:
    """What a file's pixels show and what `augmentation: auto` trains it with, in a line for `data info`."""
    auto = auto_augmentation(encoding, imagery)
    if imagery is None:
        return f"not recorded (prepared before lbscale recorded it): auto augmentation takes {auto} as before"
    if encoding != "raw":
        return f"{imagery}: auto augmentation takes {auto} (at decode time)"
    if imagery == UNKNOWN_IMAGERY:
        return (f"unknown (its source cannot tell what the pixels show): auto augmentation takes {auto} as before; "
                "--augmentation chooses another")
    if imagery not in IMAGERY:  # from a newer lbscale
        return f"{imagery} (a kind this lbscale does not know): auto augmentation takes {auto}"
    return f"{imagery}: auto augmentation takes {auto}"


def checksum_summary(f) -> str:
    """What guards the stored bytes of an open prepared file, in a few words for `data info`."""
    if not isinstance(f, Hdf5File):
        return "CRC32C per record (TFRecord framing; lbscale data check verifies them)"
    kept, bare = checksum_coverage(f.h5)
    if not bare:
        return "Fletcher32 per chunk (lbscale data check verifies them)"
    return f"Fletcher32 on {len(kept)} of {len(kept) + len(bare)} datasets" if kept else \
        "none (written before lbscale stored them)"


def check(path) -> list[str]:
    """Problems found (empty when the file is sound): checksums, shapes, dtypes, label ranges, NaN, disjoint
    splits."""
    return examine(path)[0]


def examine(path) -> tuple[list[str], list[str]]:
    """`lbscale data check`: (problems, one per corrupted chunk or record or broken rule; notes that are no
    failure, such as a file written before lbscale stored checksums)."""
    with open_prepared(path) as f:
        problems, notes = integrity(f)
        if not problems:  # the content checks would only trip over the same damaged bytes
            problems = content_problems(f)
    return problems, notes


def integrity(f) -> tuple[list[str], list[str]]:
    """Every stored checksum verified: HDF5's Fletcher32 per chunk, TFRecord's CRC32C per record."""
    if not isinstance(f, Hdf5File):
        return tfrecord_crc_problems(f.path, f.shards)
    try:
        problems, checked, bare = verify_checksums(f.h5)
    except OSError as e:  # damage outside the chunks (an object header, a chunk index) fails before any check
        return [f"unreadable HDF5 structure ({e})"], []
    if bare and not checked:
        return problems, [NO_CHECKSUMS]
    return problems, [f"no checksums on {', '.join(bare)}"] if bare else []


def tfrecord_crc_problems(folder: Path, shards: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """Both masked CRC32C of every record (of its length field and of its bytes), as TensorFlow's reader
    checks them; the `tfrecord` package lbscale reads with skips them."""
    try:
        import crc32c
    except ImportError:  # installed with the tfrecord extra; a bare install cannot read the shards anyway
        return [], ["record CRCs not verified: pip install crc32c"]
    problems = []
    for split in SPLITS:
        for name in shards.get(split, []):
            problems += shard_crc_problems(Path(folder) / name, crc32c.crc32c)
    return problems, []


def shard_crc_problems(path: Path, crc32c) -> list[str]:
    """One shard's records walked by their length fields: a run of records with bad bytes is one line; a bad
    length field ends the walk (the records after it cannot be found)."""

    def masked(data) -> int:
        crc = crc32c(data)
        return (((crc >> 15) | (crc << 17)) + TFRECORD_CRC_MASK) & 0xFFFFFFFF

    with open(path, "rb") as fh:
        data = memoryview(fh.read())
    bad, lost, pos, record = [], [], 0, 0
    while pos < len(data):
        if pos + 12 > len(data) or masked(data[pos:pos + 8]) != struct.unpack_from("<I", data, pos + 8)[0]:
            lost.append(f"{path.name} record {record} (byte {pos}): length field corrupted or cut short; "
                        "the records after it cannot be read")
            break
        end = pos + 12 + struct.unpack_from("<Q", data, pos)[0]
        if end + 4 > len(data):
            lost.append(f"{path.name} record {record} (byte {pos}): cut short")
            break
        if masked(data[pos + 12:end]) != struct.unpack_from("<I", data, end)[0]:
            bad.append(record)
        pos, record = end + 4, record + 1
    runs = np.split(np.asarray(bad), np.flatnonzero(np.diff(bad) != 1) + 1) if bad else []
    spans = [f"record {r[0]}" if len(r) == 1 else f"records {r[0]}-{r[-1]}" for r in runs]
    return [f"{path.name} {span}: CRC mismatch (corrupted record)" for span in spans] + lost


def content_problems(f) -> list[str]:
    """What `check` finds in an open prepared file besides checksums: shapes, dtypes, label ranges, NaN,
    disjoint splits."""
    problems = []
    if f.task not in TASKS:
        problems.append(f"unknown task {f.task!r}")
    k, shape, seen = f.num_classes, None, {}
    if len(f.mean) != len(f.band_names) or not (np.all(np.isfinite(f.mean)) and np.all(np.isfinite(f.std))):
        problems.append("band stats missing, of the wrong length or not finite")
    for s in f.splits():
        img, lab, n = f.images(s), f.labels(s), f.size(s)
        if f.encoding != "raw":
            problems += [f"{s}: {p}" for p in check_encoded(img, f.labels(s, "sizes"))]
        elif img.ndim != 4 or img.shape[1] != len(f.band_names):
            problems.append(f"{s}: images shape {tuple(img.shape)} is not (N, {len(f.band_names)}, H, W)")
        if shape is not None and n and tuple(img.shape[1:]) != shape:
            problems.append(f"{s}: image shape {tuple(img.shape[1:])} differs from {shape}")
        shape = shape or (tuple(img.shape[1:]) if n else None)
        if f.encoding == "raw" and not (np.issubdtype(img.dtype, np.integer)
                                       or np.issubdtype(img.dtype, np.floating)):
            problems.append(f"{s}: image dtype {img.dtype} is not numeric")
        if len(lab) != n:
            problems.append(f"{s}: {len(lab)} labels for {n} images")
        if f.task == "multiclass" and lab.size:
            if lab.ndim != 1 or not np.issubdtype(lab.dtype, np.integer) or lab.min() < 0 or lab.max() >= k:
                problems.append(f"{s}: multiclass labels must be integer ids in 0..{k - 1}")
        if f.task == "multilabel" and lab.size:
            if lab.ndim != 2 or lab.shape[1] != k or not np.all((lab == 0) | (lab == 1)):
                problems.append(f"{s}: multilabel labels must be 0/1 rows of width {k}")
        if f.encoding == "raw" and np.issubdtype(img.dtype, np.floating):
            for a in range(0, n, SCAN):
                if not np.all(np.isfinite(img[a:a + SCAN])):
                    problems.append(f"{s}: images contain NaN or inf")
                    break
        names = f.names(s)
        if names is not None:
            if len(names) != n:
                problems.append(f"{s}: {len(names)} names for {n} images")
            if len(set(names)) != len(names):
                problems.append(f"{s}: duplicate sample names")
            for other, other_names in seen.items():
                both = set(names) & other_names
                if both:
                    problems.append(f"{s} and {other} share {len(both)} samples (e.g. {sorted(both)[0]})")
            seen[s] = set(names)
    return problems


def check_encoded(images, sizes: np.ndarray) -> list[str]:
    """JPEG samples: inside the byte stream, non-empty, JPEG start and end markers, positive sizes."""
    problems = []
    stream = images.ds.shape[0]
    if len(sizes) != len(images):
        problems.append(f"{len(sizes)} sizes for {len(images)} samples")
    if len(images) and (images.offsets.min() < 0 or (images.offsets + images.lengths).max() > stream
                        or images.lengths.min() < 4):
        problems.append("sample offsets or lengths outside the byte stream")
        return problems
    if len(sizes) and sizes.min() < 1:
        problems.append("decoded sizes must be positive")
    for a in range(0, len(images), SCAN):
        for i, data in enumerate(images[a:a + SCAN]):
            if bytes(data[:2]) != b"\xff\xd8" or bytes(data[-2:]) != b"\xff\xd9":
                problems.append(f"sample {a + i} is not a complete JPEG (start/end markers)")
                return problems
    return problems
