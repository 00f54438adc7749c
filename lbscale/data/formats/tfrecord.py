"""TFRecord layout: a directory of sharded ``<split>-NNNNN-of-MMMMM.tfrecord`` files plus ``meta.json``.

Each record is a tf.train.Example with features (schema in docs/formats.md):
  image  bytes  raw little-endian array, C,H,W order, dtype and shape from meta.json
  label  int64  class id (multiclass, one value) or multi-hot vector (multilabel)
  name   bytes  sample name (where the source has names)
  <extra> int64 or float  further per-sample arrays (e.g. labels_43), flattened
Written and read with the `tfrecord` package: no TensorFlow needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lbscale.data.formats.base import (
    FORMAT_VERSION,
    SPLITS,
    AtomicWriter,
    BandStats,
    DatasetMeta,
    PreparedFile,
    check_splits,
    commit_path,
    claim_partial,
)
from lbscale.errors import LbscaleError

SHARD_BYTES = 128 << 20


def _require_tfrecord():
    try:
        import tfrecord  # noqa: F401
    except ImportError:
        raise LbscaleError("TFRecord support needs the 'tfrecord' extra: pip install 'lbscale[tfrecord]'") from None


def _kind(dtype: np.dtype) -> str:
    return "float" if np.issubdtype(dtype, np.floating) else "int"


class TfrecordWriter(AtomicWriter):
    """Writes records into per-split shards in a partial directory; `finish` writes meta.json and renames."""

    def __init__(self, out: Path, meta: DatasetMeta, command: str):
        _require_tfrecord()
        from tfrecord import TFRecordWriter

        self._writer_cls = TFRecordWriter
        self.out = Path(out)
        self.meta = meta
        self.command = command
        self.tmp = claim_partial(self.out)
        self.tmp.mkdir(parents=True)
        self.stats = BandStats()
        self.schema: dict[str, dict] = {}
        self.extras: dict[str, dict] = {}  # split -> extra per-sample arrays (train may have more)
        self.counts = {s: 0 for s in SPLITS}
        self.shards: dict[str, list[str]] = {s: [] for s in SPLITS}
        self.current = None  # (split, writer, records in shard)
        self.per_shard = None

    def _writer_for(self, split: str):
        if self.current and (self.current[0] != split or self.current[2] >= self.per_shard):
            self.current[1].close()
            self.current = None
        if self.current is None:
            name = f"{split}-{len(self.shards[split]):05d}.tfrecord"
            self.shards[split].append(name)
            self.current = [split, self._writer_cls(str(self.tmp / name)), 0]
        return self.current

    def append(self, split: str, images: np.ndarray, labels: np.ndarray, names=None, extras=None) -> None:
        extras = extras or {}
        if not self.schema:
            self.schema = {
                "image": {"shape": list(images.shape[1:]), "dtype": images.dtype.str},
                "label": {"shape": list(labels.shape[1:]), "dtype": labels.dtype.str},
            }
            self.per_shard = max(1, SHARD_BYTES // max(1, images[0].nbytes))
        spec = {k: {"shape": list(v.shape[1:]), "dtype": v.dtype.str} for k, v in extras.items()}
        self.extras.setdefault(split, spec)
        for i in range(len(images)):
            rec = {
                "image": (images[i].astype(images.dtype.newbyteorder("<")).tobytes(), "byte"),
                "label": (np.atleast_1d(labels[i]).astype(np.int64).tolist(), "int"),
            }
            if names is not None:
                rec["name"] = (str(names[i]).encode(), "byte")
            for k, v in extras.items():
                kind = _kind(v.dtype)
                flat = np.atleast_1d(v[i]).ravel()
                rec[k] = (flat.astype(np.float32 if kind == "float" else np.int64).tolist(), kind)
            state = self._writer_for(split)
            state[1].write(rec)
            state[2] += 1
        self.counts[split] += len(images)
        if names is not None:
            self.schema["name"] = {"shape": [], "dtype": "str"}
        if split == "train":
            self.stats.update(images)

    def finish(self) -> None:
        if not self.schema:
            raise LbscaleError(f"{self.out}: the source yielded no samples")
        self.close()
        total = {s: len(v) for s, v in self.shards.items()}
        shards = {s: [n.replace(".tfrecord", f"-of-{total[s]:05d}.tfrecord") for n in v]
                  for s, v in self.shards.items()}
        for s in SPLITS:
            for old, new in zip(self.shards[s], shards[s]):
                (self.tmp / old).rename(self.tmp / new)
        mean, std = self.stats.result(self.schema["image"]["shape"][0])
        attrs = self.meta.attrs()
        attrs.update(mean=json.dumps(mean), std=json.dumps(std), command=self.command, complete=True)
        meta = {"attrs": attrs, "schema": self.schema, "extras": self.extras, "counts": self.counts,
                "shards": shards}
        (self.tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        commit_path(self.tmp, self.out)

    def close(self) -> None:
        if self.current:
            self.current[1].close()
            self.current = None


class TfrecordFile(PreparedFile):
    """Reads a TFRecord directory fully into memory, split by split, on first use."""

    def __init__(self, path: Path):
        _require_tfrecord()
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if not meta_path.exists():
            raise LbscaleError(f"{self.path}: not an lbscale TFRecord directory (no meta.json)")
        try:
            meta = json.loads(meta_path.read_text())
            self.attrs, self.schema, self.extra_specs = meta["attrs"], meta["schema"], meta["extras"]
            self.counts, self.shards = meta["counts"], meta["shards"]
        except (ValueError, KeyError) as e:
            raise LbscaleError(f"{meta_path}: malformed ({e})") from None
        if int(self.attrs.get("format_version", 0)) > FORMAT_VERSION:
            raise LbscaleError(f"{self.path}: format version {self.attrs['format_version']} is newer than this lbscale")
        # a split is its record count and its shards (image and label are fields of every record)
        check_splits(self.path, {s: set() for s in self.counts if s in self.shards}, ())
        self._cache: dict[str, dict] = {}

    def _load(self, split: str) -> dict:
        if split in self._cache:
            return self._cache[split]
        from tfrecord.reader import tfrecord_loader

        n = int(self.counts.get(split, 0))
        # record feature -> (array key, shape, dtype)
        specs = {"label": ("labels", self.schema["label"])}
        specs.update({k: (k, v) for k, v in self.extra_specs.get(split, {}).items()})
        specs = {k: (key, tuple(v["shape"]), np.dtype(v["dtype"])) for k, (key, v) in specs.items()}
        img_shape, img_dtype = tuple(self.schema["image"]["shape"]), np.dtype(self.schema["image"]["dtype"])
        out = {"images": np.empty((n, *img_shape), dtype=img_dtype)}
        out.update({key: np.empty((n, *shape), dtype=dtype) for key, shape, dtype in specs.values()})
        names = [] if "name" in self.schema else None
        i = 0
        for shard in self.shards.get(split, []):
            try:
                for rec in tfrecord_loader(str(self.path / shard), None):
                    pixels = np.frombuffer(bytes(rec["image"]), dtype=img_dtype.newbyteorder("<"))
                    out["images"][i] = pixels.reshape(img_shape)
                    for k, (key, shape, _) in specs.items():
                        out[key][i] = np.asarray(rec[k]).reshape(shape)
                    if names is not None:
                        names.append(bytes(rec["name"]).decode())
                    i += 1
            except (OSError, ValueError, IndexError) as e:
                raise LbscaleError(f"{self.path / shard}: unreadable TFRecord shard ({e})") from None
        if i != n:
            raise LbscaleError(f"{self.path}: split {split} has {i} records, meta.json says {n}")
        out["names"] = names
        self._cache[split] = out
        return out

    def has_split(self, split: str) -> bool:
        return split in self.counts

    def images(self, split: str):
        return self._load(split)["images"]

    def labels(self, split: str, key: str = "labels") -> np.ndarray:
        return self._load(split)[key]

    def names(self, split: str):
        return self._load(split)["names"]

    def extras(self, split: str) -> list[str]:
        return list(self.extra_specs.get(split, {}))
