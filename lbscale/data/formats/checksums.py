"""The prepared file's checksums: HDF5's Fletcher32 per chunk, read through h5py (a refused chunk as one line
naming the file and its rows) or verified by lbscale itself for the loader's memory maps, which skip HDF5's filter
pipeline (`ChunkChecks`, exactly as H5checksum.c folds its sums)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from lbscale.errors import LbscaleError


def checksummable(dtype) -> bool:
    """Whether HDF5 can keep a Fletcher32 checksum per chunk: not for variable-length data (sample names),
    whose chunks hold only references into the heap and refuse filters."""
    return h5py.check_vlen_dtype(np.dtype(dtype)) is None


def has_checksums(ds) -> bool:
    """Whether a dataset's chunks carry Fletcher32 checksums."""
    plist = ds.id.get_create_plist()
    return any(plist.get_filter(i)[0] == h5py.h5z.FILTER_FLETCHER32 for i in range(plist.get_nfilters()))


def checksum_coverage(h5: h5py.File) -> tuple[list[str], list[str]]:
    """The datasets whose chunks carry Fletcher32 checksums, and those that could but do not."""
    kept: list[str] = []
    bare: list[str] = []

    def visit(_, ds):
        if isinstance(ds, h5py.Dataset) and checksummable(ds.dtype):
            (kept if has_checksums(ds) else bare).append(ds.name)

    h5.visititems(visit)
    return kept, bare


def verify_checksums(h5: h5py.File) -> tuple[list[str], list[str], list[str]]:
    """Read every chunk of every dataset through HDF5's Fletcher32 check. Returns one problem per corrupted
    chunk (naming the dataset and its rows), the datasets verified and those that could hold checksums but
    have none."""
    kept, bare = checksum_coverage(h5)
    return [p for name in kept for p in corrupt_chunks(h5[name])], kept, bare


def corrupt_chunks(ds) -> list[str]:
    """Chunks of `ds` (chunked along its first axis) whose Fletcher32 checksum does not match their bytes."""
    return [f"{chunk_span(ds, a, b)}: checksum mismatch (corrupted chunk)" for a, b in refused_chunks(ds)]


def refused_chunks(ds, lo: int = 0, hi: int | None = None):
    """(first row, end row) of each chunk of `ds` holding rows lo..hi-1 that HDF5's filter pipeline refuses (on a
    checksum mismatch it fails the read), in order."""
    n_chunk, n = ds.chunks[0], ds.shape[0]
    buffer = np.empty(ds.chunks, dtype=ds.dtype)
    for a in range(lo // n_chunk * n_chunk, n if hi is None else min(hi, n), n_chunk):
        b = min(a + n_chunk, n)
        try:
            ds.read_direct(buffer, np.s_[a:b], np.s_[0:b - a])
        except OSError:
            yield a, b


def chunk_span(ds, a: int, b: int) -> str:
    """'/train/images rows 256-383': a chunk's place, in bytes for a JPEG byte stream."""
    unit = "bytes" if ds.ndim == 1 and ds.name.endswith("/images") else "rows"
    return f"{ds.name} {unit} {a}-{b - 1}"


def mismatch_line(path: Path, ds, span: tuple[int, int] | None) -> str:
    """The one line for a corrupted chunk of a prepared file, whichever read finds it (the loader's own check, or
    HDF5's through h5py)."""
    where = chunk_span(ds, *span) if span else ds.name
    return (f"{path}: {where}: checksum mismatch (corrupted chunk); `lbscale data check {path}` lists every one: "
            "prepare the file again or restore it")


FILTER_FAILURE = "filter returned failure"  # HDF5's words when a chunk's Fletcher32 does not match its bytes


def read_rows(ds, key) -> tuple[int, int | None]:
    """The rows (along the first axis) a read of ds[key] covers: those of a slice or an index, else all."""
    first = key[0] if isinstance(key, tuple) and key else key
    n = ds.shape[0] if ds.ndim else 0
    if isinstance(first, slice):
        rows = range(*first.indices(n))
        return (min(rows), max(rows) + 1) if rows else (0, 0)
    if isinstance(first, (int, np.integer)):
        return int(first) % max(n, 1), int(first) % max(n, 1) + 1
    return 0, None


class CheckedDataset(h5py.Dataset):
    """An h5py dataset of a prepared file whose reads turn HDF5's checksum failure (an OSError that names neither
    the file nor the rows, and a traceback) into the one line of `mismatch_line`: the first refused chunk among
    those read (`lbscale data check` lists every one)."""

    def __init__(self, path: Path, ds: h5py.Dataset):
        super().__init__(ds.id)
        self.path = Path(path)

    def __getitem__(self, key):
        try:
            return super().__getitem__(key)
        except OSError as e:
            if FILTER_FAILURE not in str(e) or self.chunks is None:
                raise
            span = next(refused_chunks(self, *read_rows(self, key)), None) or next(refused_chunks(self), None)
            raise LbscaleError(mismatch_line(self.path, self, span)) from None


FLETCHER_MOD = 65535
_WORDS = 1 << 15  # words per row of the vectorised sums: each row's sums stay exact in float64


def fletcher32(data) -> tuple[int, int]:
    """HDF5's Fletcher32 of a chunk's bytes (H5_checksum_fletcher32: big-endian 16-bit words, a trailing odd byte
    as a high byte; sum1 = the words' sum, sum2 = the sum of sum1's running values), as the two halves HDF5 stores
    (each folded by ones_complement), to be compared exactly. Vectorised: sum2 = n sum1 - sum_i i w_i, the dot
    product by rows of 2^15 words."""
    b = np.frombuffer(data, dtype=np.uint8)
    odd = len(b) % 2
    w = b[:len(b) - odd].view(">u2")
    n, full = len(w), len(w) // _WORDS * _WORDS
    rows = w[:full].reshape(-1, _WORDS).astype(np.float64)
    sums = rows.sum(axis=1).astype(np.int64)  # < 2^31 each
    dots = (rows @ np.arange(_WORDS, dtype=np.float64)).astype(np.int64)  # < 2^46 each: exact
    starts = np.arange(len(sums), dtype=np.int64) * _WORDS % FLETCHER_MOD
    tail = w[full:].astype(np.int64)
    sum1 = int(sums.sum()) + int(tail.sum())
    weighted = int((dots % FLETCHER_MOD).sum() + (starts * (sums % FLETCHER_MOD) % FLETCHER_MOD).sum()) \
        + int((np.arange(full, n, dtype=np.int64) * tail).sum())
    sum2 = n * sum1 - weighted
    if odd:
        sum1 += int(b[-1]) << 8
        sum2 += sum1
    # sum1 is exact and every word is >= 0, so sum2 (congruent to its true value) is 0 exactly where sum1 is
    return ones_complement(sum1, sum1 > 0), ones_complement(sum2, sum1 > 0)


def ones_complement(total: int, nonzero: bool) -> int:
    """A sum folded as HDF5 folds it (the high 16 bits added to the low until it fits): congruent modulo 65535,
    0 only where nothing nonzero was added and 65535, never 0, for a nonzero multiple of 65535. A comparison modulo
    65535 would take an all-zero chunk whose first word became FFFF for a sound one."""
    return (total - 1) % FLETCHER_MOD + 1 if nonzero else 0


class ChunkChecks:
    """The Fletcher32 checksums of a dataset's chunks (chunked along its first axis), each verified the first
    time it is asked for: the loader's memory maps skip HDF5's filter pipeline, so they ask before they read a
    chunk. A mismatch is an LbscaleError naming the rows, as `lbscale data check` names them."""

    def __init__(self, path: Path, ds):
        self.path, self.ds, self.n_chunk = Path(path), ds, int(ds.chunks[0])
        self.mm = np.memmap(path, dtype=np.uint8, mode="r")
        self.verified: set[int] = set()

    def verify(self, chunk: int) -> None:
        if chunk in self.verified:
            return
        info = self.ds.id.get_chunk_info_by_coord((chunk * self.n_chunk,) + (0,) * (self.ds.ndim - 1))
        if not info.filter_mask:  # the filter ran on this chunk: its 4 bytes follow the data
            end = info.byte_offset + info.size
            stored = int(np.frombuffer(self.mm[end - 4:end], "<u4")[0])
            sum1, sum2 = fletcher32(self.mm[info.byte_offset:end - 4])
            if (sum1, sum2) != (stored & 0xFFFF, stored >> 16):
                a = chunk * self.n_chunk
                raise LbscaleError(mismatch_line(self.path, self.ds, (a, min(a + self.n_chunk, self.ds.shape[0]))))
        self.verified.add(chunk)


def chunk_checks(path: Path, ds) -> ChunkChecks | None:
    """ChunkChecks of a mapped dataset (mapped_chunks) that carries checksums, else None."""
    return ChunkChecks(path, ds) if ds.chunks is not None and has_checksums(ds) else None
