"""Prepared formats: one writer and one reader per layout, chosen by `create_writer` / `open_prepared`."""

from pathlib import Path

from lbscale.data.formats.base import DatasetMeta, PreparedFile, SPLITS
from lbscale.errors import LbscaleError

FORMATS = ("hdf5", "tfrecord")


def create_writer(fmt: str, out: Path, meta: DatasetMeta, command: str):
    """The atomic writer for `fmt`; use as a context manager, call `append`, then `finish`."""
    if fmt == "hdf5":
        from lbscale.data.formats.hdf5 import Hdf5Writer

        return Hdf5Writer(out, meta, command)
    if fmt == "tfrecord":
        from lbscale.data.formats.tfrecord import TfrecordWriter

        return TfrecordWriter(out, meta, command)
    raise LbscaleError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def open_prepared(path) -> PreparedFile:
    """Open a prepared HDF5 file or TFRecord directory for reading."""
    path = Path(path)
    if not path.exists():
        raise LbscaleError(f"{path}: no such file")
    if path.is_dir():
        from lbscale.data.formats.tfrecord import TfrecordFile

        return TfrecordFile(path)
    from lbscale.data.formats.hdf5 import Hdf5File

    return Hdf5File(path)


__all__ = ["DatasetMeta", "PreparedFile", "SPLITS", "FORMATS", "create_writer", "open_prepared"]
