"""Stored checksums: `lbscale data check` names each corrupted HDF5 chunk (Fletcher32) and TFRecord record
(CRC32C), one line each; files written before lbscale stored checksums get a note, not a failure."""

import h5py
import numpy as np
import pytest

from lbscale.data.formats import create_writer, open_prepared
from lbscale.data.formats.base import DatasetMeta
from lbscale.data.inspect import NO_CHECKSUMS
from lbscale.errors import LbscaleError

GARBAGE = 64 << 10


@pytest.fixture
def prepared(tmp_path, run_cli):
    """600 synthetic 4x64x64 samples: /train/images is 420 rows in chunks of 128."""
    out = tmp_path / "f.h5"
    rc, _, err = run_cli("prepare", "synthetic", "--out", out, "--count", "600", "--size", "64")
    assert rc == 0, err
    return out


def _garble(path, dataset: str, chunk: int, seed: int = 0) -> None:
    """Overwrite 64 KiB in the middle of the `chunk`-th stored chunk of `dataset`."""
    with h5py.File(path, "r") as h:
        info = h[dataset].id.get_chunk_info(chunk)
    assert info.size > GARBAGE
    with open(path, "r+b") as f:
        f.seek(info.byte_offset + (info.size - GARBAGE) // 2)
        f.write(np.random.default_rng(seed).bytes(GARBAGE))


def test_prepared_datasets_carry_checksums(prepared, run_cli):
    with h5py.File(prepared, "r") as h:
        images = h["train/images"]
        assert images.fletcher32 and images.chunks == (128, 4, 64, 64)
        assert all(h[s][k].fletcher32 for s in ("train", "val", "test") for k in ("images", "labels"))
    assert run_cli("data", "check", prepared) == (0, f"{prepared}: OK\n", "")
    rc, out, _ = run_cli("data", "info", prepared)
    assert rc == 0 and "checksums: Fletcher32 per chunk" in out


def test_check_names_the_corrupted_chunk(prepared, run_cli):
    with h5py.File(prepared, "r") as h:
        chunk = next(i for i in range(4) if h["train/images"].id.get_chunk_info(i).chunk_offset[0] == 256)
    _garble(prepared, "/train/images", chunk)
    rc, out, err = run_cli("data", "check", prepared)
    assert rc == 2 and not out
    assert err == f"lbscale: error: {prepared}: /train/images rows 256-383: checksum mismatch (corrupted chunk)\n"


def test_each_corrupted_chunk_is_one_line(prepared, run_cli):
    with h5py.File(prepared, "r") as h:
        last = {h["train/images"].id.get_chunk_info(i).chunk_offset[0]: i for i in range(4)}[384]
    _garble(prepared, "/train/images", last)
    _garble(prepared, "/test/images", 0, seed=1)
    rc, _, err = run_cli("data", "check", prepared)
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 2 and all(line.startswith(f"lbscale: error: {prepared}: ") for line in lines)
    assert "/test/images rows 0-119: checksum mismatch" in err  # the partial chunk: its 120 rows
    assert "/train/images rows 384-419: checksum mismatch" in err


def _without_checksums(src, dst) -> None:
    """The same layout and attributes as `src`, written as lbscale did before it stored checksums."""
    with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
        for split in ("train", "val", "test"):
            for key, ds in a[split].items():
                b.create_dataset(f"{split}/{key}", data=ds[...], chunks=ds.chunks, maxshape=ds.maxshape)
        b.attrs.update(a.attrs)


def test_old_file_without_checksums_is_a_note(prepared, run_cli, tmp_path):
    old = tmp_path / "old.h5"
    _without_checksums(prepared, old)
    with h5py.File(old, "r") as h:
        assert not h["train/images"].fletcher32
    assert run_cli("data", "check", old) == (0, f"{old}: note: {NO_CHECKSUMS}\n{old}: OK\n", "")
    rc, out, _ = run_cli("data", "info", old)
    assert rc == 0 and "checksums: none (written before lbscale stored them)" in out


def test_loader_still_maps_checksummed_chunks(prepared):
    with open_prepared(prepared) as f:
        views = f.chunk_views("train")
        assert views is not None and len(views) == 4  # Fletcher32 appends its 4 bytes; the pixels stay put
        np.testing.assert_array_equal(np.concatenate(views)[:420], f.images("train")[...])


def _encoded(path):
    """20 JPEG-shaped byte strings: the stream spans three 2 MiB chunks."""
    jpegs = np.empty(20, dtype=object)
    jpegs[:] = [np.frombuffer(b"\xff\xd8" + bytes([i]) * (300_000 + i) + b"\xff\xd9", np.uint8) for i in range(20)]
    meta = DatasetMeta("enc", "multiclass", ["a", "b"], ["R", "G", "B"], "test", encoding="jpeg")
    with create_writer("hdf5", path, meta, "test") as w:
        w.append("train", jpegs, np.arange(20) % 2, extras={"sizes": np.ones((20, 2), np.int32)},
                 stats=np.ones((20, 7)))
        w.finish()
    return jpegs


def test_encoded_stream_is_checksummed_and_mapped(tmp_path):
    jpegs = _encoded(tmp_path / "e.h5")
    with open_prepared(tmp_path / "e.h5") as f:
        images = f.images("train")
        assert images.ds.fletcher32 and images.views is not None
        assert all(np.array_equal(a, b) for a, b in zip(images.take(range(20)), jpegs))


def test_tfrecord_crcs_are_verified(tmp_path, run_cli):
    pytest.importorskip("tfrecord")
    out = tmp_path / "records"
    rc, _, err = run_cli("prepare", "synthetic", "--out", out, "--format", "tfrecord", "--count", "600",
                         "--size", "16")
    assert rc == 0, err
    assert run_cli("data", "check", out) == (0, f"{out}: OK\n", "")
    shard = out / "val-00000-of-00001.tfrecord"
    data = bytearray(shard.read_bytes())
    record = len(data) // 60  # 60 val records of one size
    for i in (2, 3, 7):  # a byte inside the image of records 2, 3 and 7
        data[i * record + 40] ^= 0xFF
    shard.write_bytes(bytes(data[:-10]))  # and the last record cut short
    rc, _, err = run_cli("data", "check", out)
    assert rc == 2 and err.splitlines() == [
        f"lbscale: error: {out}: {shard.name} records 2-3: CRC mismatch (corrupted record)",
        f"lbscale: error: {out}: {shard.name} record 7: CRC mismatch (corrupted record)",
        f"lbscale: error: {out}: {shard.name} record 59 (byte {59 * record}): cut short",
    ]


# ---- checksums at training time: the loader's memory maps verify each chunk the first time they read it ----

@pytest.mark.parametrize("dtype, shape, chunk, fill", [
    (np.uint8, (37, 3, 5, 7), 8, "random"),  # 840 bytes a chunk; the last chunk's rows are partly unused
    (np.uint8, (9, 1, 3, 3), 3, "random"),  # 27 bytes: an odd byte at the end
    (np.float32, (64, 4, 33, 31), 16, "random"),  # 65,472 bytes: past one row of the vectorised sums
    (np.uint8, (4, 1, 2, 3), 2, "zeros"),
    (np.uint8, (6, 1, 256, 256), 3, "ones"),  # sums that are multiples of 65535: HDF5 writes 65535, not 0
    (np.float64, (3, 1, 300, 300), 3, "random"),  # 2,160,000 bytes: many rows of 2^15 words
])
def test_fletcher32_is_hdf5s(tmp_path, dtype, shape, chunk, fill):
    from lbscale.data.formats.checksums import ChunkChecks, fletcher32

    rng = np.random.default_rng(1)
    data = {"random": lambda: (rng.random(shape) * 250).astype(dtype), "zeros": lambda: np.zeros(shape, dtype),
            "ones": lambda: np.full(shape, 255, dtype)}[fill]()
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as h:
        h.create_dataset("x", data=data, chunks=(chunk, *shape[1:]), fletcher32=True)
    with h5py.File(path, "r") as h:
        ds = h["x"]
        raw = np.fromfile(path, np.uint8)
        for k in range(ds.id.get_num_chunks()):
            info = ds.id.get_chunk_info(k)
            end = info.byte_offset + info.size
            stored = int(raw[end - 4:end].view("<u4")[0])  # what the HDF5 library computed
            assert fletcher32(raw[info.byte_offset:end - 4].tobytes()) == (stored & 0xFFFF, stored >> 16)
        checks = ChunkChecks(path, ds)
        for k in range(ds.id.get_num_chunks()):
            checks.verify(k)  # no mismatch on a sound file


def test_a_chunk_summing_to_a_multiple_of_65535_is_not_an_all_zero_one(tmp_path):
    """HDF5 writes a half of 0 only for all-zero data and 65535 for any other sum that is a multiple of 65535: a
    comparison modulo 65535 took an all-zero chunk whose first word became FFFF for a sound one."""
    from lbscale.data.formats.checksums import ChunkChecks

    path = tmp_path / "z.h5"
    with h5py.File(path, "w") as h:
        h.create_dataset("x", data=np.zeros(1000, np.uint8), chunks=(1000,), fletcher32=True)
    with h5py.File(path, "r") as h:
        offset = h["x"].id.get_chunk_info(0).byte_offset
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff\xff")
    with h5py.File(path, "r") as h:
        with pytest.raises(OSError, match="filter returned failure"):
            h["x"][...]  # HDF5 refuses it
        with pytest.raises(LbscaleError, match="z.h5: /x rows 0-999: checksum mismatch"):
            ChunkChecks(path, h["x"]).verify(0)


def test_training_on_a_corrupted_chunk_stops_in_one_line(prepared, run_cli, tmp_path):
    _garble(prepared, "train/images", 2)
    rc, _, err = run_cli("train", "--data", prepared, "--out", tmp_path / "t", "--model", "test_resnet",
                         "--global-batch", "64", "--epochs", "1", "--optimizer", "sgd", "--base-lr", "0.05",
                         "--device", "cpu")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{prepared}: /train/images rows 256-383: checksum mismatch (corrupted chunk)" in err
    assert f"lbscale data check {prepared}" in err


def _flip_byte(path, dataset: str, at: int = 10) -> None:
    """Flip one byte of the first stored chunk of `dataset`."""
    with h5py.File(path, "r") as h:
        offset = h[dataset].id.get_chunk_info(0).byte_offset + at
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0xFF]))


def _mismatch(path, what: str) -> str:
    return (f"lbscale: error: {path}: {what}: checksum mismatch (corrupted chunk); `lbscale data check {path}` lists "
            "every one: prepare the file again or restore it\n")


def test_a_checksum_failure_read_through_hdf5_is_one_line(prepared, run_cli, tmp_path):
    """HDF5 verifies the labels itself and fails the read with an OSError that names neither the file nor the rows:
    `data info` and `train` turn it into the one line the memory-mapped images give."""
    _flip_byte(prepared, "train/labels")
    line = _mismatch(prepared, "/train/labels rows 0-419")
    assert run_cli("data", "info", prepared) == (2, "", line)
    rc, _, err = run_cli("train", "--data", prepared, "--out", tmp_path / "t", "--model", "test_resnet",
                         "--global-batch", "64", "--epochs", "1", "--optimizer", "sgd", "--base-lr", "0.05",
                         "--device", "cpu")
    assert (rc, err) == (2, line)


def test_in_memory_training_on_a_corrupted_chunk_stops_in_one_line(prepared, run_cli, tmp_path):
    _garble(prepared, "train/images", 2)
    rc, _, err = run_cli("train", "--data", prepared, "--out", tmp_path / "t", "--model", "test_resnet",
                         "--global-batch", "64", "--epochs", "1", "--optimizer", "sgd", "--base-lr", "0.05",
                         "--device", "cpu", "--in-memory")
    assert (rc, err) == (2, _mismatch(prepared, "/train/images rows 256-383"))


def test_the_loader_verifies_each_chunk_once(prepared):
    from lbscale.data.loader import ShardedLoader

    loader = ShardedLoader(prepared, "train", local_batch=32, seed=0)
    assert loader.checks is not None
    for _ in loader:
        pass
    assert loader.checks.verified == {0, 1, 2, 3}
    _garble(prepared, "train/images", 1)  # after the check: this process does not read the chunk's sum again
    loader.set_epoch(1)
    assert sum(1 for _ in loader) == len(loader)
    with pytest.raises(LbscaleError, match="rows 128-255: checksum mismatch"):
        for _ in ShardedLoader(prepared, "train", local_batch=32, seed=0):
            pass


def test_a_corrupted_encoded_chunk_is_named_when_read(tmp_path):
    _encoded(tmp_path / "e.h5")
    _garble(tmp_path / "e.h5", "train/images", 1)
    with open_prepared(tmp_path / "e.h5") as f:
        images = f.images("train")
        assert len(images.take(range(3))) == 3  # the first chunk is sound
        with pytest.raises(LbscaleError, match=r"/train/images bytes 2097152-4194303: checksum mismatch"):
            images.take(range(20))
        with pytest.raises(LbscaleError, match=r"/train/images bytes 2097152-4194303: checksum mismatch"):
            images.load()  # in memory: read through HDF5, which refuses the chunk
