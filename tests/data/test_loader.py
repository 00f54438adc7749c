"""The sharded loader: disjoint and covering shards, deterministic order, equal batch counts, contiguous reads."""

import numpy as np
import pytest
import torch

from lbscale.data.formats import open_prepared
from lbscale.data.loader import ShardedLoader
from lbscale.data.transforms import Normalize, random_crop_flip, random_flip_rot90


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shards_disjoint_and_covering(synthetic_h5, world):
    loaders = [ShardedLoader(synthetic_h5, "train", r, world, local_batch=64, seed=1, drop_last=False, even=False)
               for r in range(world)]
    parts = [ld.indices(epoch=2) for ld in loaders]
    everything = np.concatenate(parts)
    assert len(everything) == len(set(everything.tolist())) == loaders[0].n  # disjoint and covering


@pytest.mark.parametrize("world", [2, 3])
def test_even_shards_equal_batches_and_disjoint(synthetic_h5, world):
    loaders = [ShardedLoader(synthetic_h5, "train", r, world, local_batch=100, seed=0) for r in range(world)]
    counts = [sum(1 for _ in ld) for ld in loaders]
    assert len(set(counts)) == 1 and counts[0] == len(loaders[0]) > 0
    parts = [set(ld.indices().tolist()) for ld in loaders]
    assert sum(len(p) for p in parts) == len(set().union(*parts))


def test_batches_match_file_and_order_is_deterministic(synthetic_h5):
    f = open_prepared(synthetic_h5)
    images, labels = f.images("train")[...], f.labels("train")
    a = ShardedLoader(f, "train", 1, 2, local_batch=50, seed=9)
    b = ShardedLoader(synthetic_h5, "train", 1, 2, local_batch=50, seed=9)
    for epoch in (0, 1):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        order = a.indices()
        got = list(a)
        assert torch.equal(torch.cat([x.labels for x in got]), torch.from_numpy(labels[order]))
        assert torch.equal(torch.cat([x.images for x in got]), torch.from_numpy(images[order]))
        assert np.array_equal(order, b.indices())
    assert not np.array_equal(a.indices(0), a.indices(1))  # reshuffled per epoch
    assert not np.array_equal(a.indices(0), np.sort(a.indices(0)))


def test_chunk_order_shuffled_and_runs_contiguous(synthetic_h5):
    ld = ShardedLoader(synthetic_h5, "train", 0, 1, local_batch=32, seed=0, buffer_blocks=2)
    order = ld.indices()
    window = np.sort(order[: ld.buffer])
    runs = np.split(window, np.flatnonzero(np.diff(window) != 1) + 1)
    assert len(runs) <= 3  # a buffer is a couple of whole storage blocks: a few contiguous reads


def test_in_memory_mode_same_coverage(synthetic_h5):
    ld = ShardedLoader(synthetic_h5, "val", 0, 1, local_batch=64, in_memory=True, drop_last=False, even=False)
    labels = torch.cat([b.labels for b in ld])
    assert sorted(labels.tolist()) == sorted(open_prepared(synthetic_h5).labels("val").tolist())


def test_resume_mid_epoch_skips_exactly(synthetic_h5):
    ld = ShardedLoader(synthetic_h5, "train", 0, 2, local_batch=40, seed=4)
    ld.set_epoch(3)
    full = list(ld)
    tail = list(ld.iterate(start_batch=5))
    assert len(tail) == len(full) - 5
    assert all(torch.equal(x.labels, y.labels) for x, y in zip(full[5:], tail))


def test_drop_last_explicit(synthetic_h5):
    n = open_prepared(synthetic_h5).size("train")
    keep = ShardedLoader(synthetic_h5, "train", 0, 1, local_batch=1000, drop_last=False)
    drop = ShardedLoader(synthetic_h5, "train", 0, 1, local_batch=1000, drop_last=True)
    assert len(drop) == n // 1000 and len(keep) == -(-n // 1000)
    assert sum(len(b.labels) for b in keep) == n


def test_transforms():
    x = torch.arange(2 * 1 * 3 * 3, dtype=torch.uint8).view(2, 1, 3, 3)
    norm = Normalize([4.0], [2.0])
    assert torch.allclose(norm(x), (x.float() - 4) / 2)
    g = torch.Generator().manual_seed(0)
    y = random_flip_rot90(x, g)
    for i in range(2):  # each output is one of the 8 symmetries of its input
        options = [torch.rot90(v, k, (-2, -1)) for v in (x[i], x[i].flip(-1)) for k in range(4)]
        assert any(torch.equal(y[i], o) for o in options)


def test_pad_and_crop_with_flip_matches_a_per_sample_reference():
    x = torch.randn(16, 3, 8, 8)
    y = random_crop_flip(x, torch.Generator().manual_seed(1), pad=2)
    assert y.shape == x.shape
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(16):  # each output is one 8x8 window of its zero-padded input, maybe mirrored
        windows = [padded[i, :, r:r + 8, c:c + 8] for r in range(5) for c in range(5)]
        assert any(torch.equal(y[i], w) or torch.equal(y[i], w.flip(-1)) for w in windows)
    assert not all(torch.equal(y[i], x[i]) for i in range(16))
    again = random_crop_flip(x, torch.Generator().manual_seed(1), pad=2)
    assert torch.equal(y, again)  # seeded: exact resume


def test_memory_mapped_and_filtered_storage_give_the_same_batches(synthetic_h5, tmp_path):
    import h5py

    packed = tmp_path / "gzip.h5"
    with h5py.File(synthetic_h5) as src, h5py.File(packed, "w") as dst:
        for k, v in src.attrs.items():
            dst.attrs[k] = v
        for split in src:
            for key, ds in src[split].items():
                images = key == "images"
                dst.create_dataset(f"{split}/{key}", data=ds[...], compression="gzip" if images else None,
                                   chunks=ds.chunks if images and split == "train" else None)
    plain = ShardedLoader(synthetic_h5, "train", 0, 1, local_batch=128, seed=2)
    gz = ShardedLoader(packed, "train", 0, 1, local_batch=128, seed=2)
    assert plain.views is not None and gz.views is None
    for x, y in zip(plain, gz):
        assert torch.equal(x.images, y.images) and torch.equal(x.labels, y.labels)


def test_order_independent_of_local_batch_for_accumulation(synthetic_h5):
    # 4 micro-batches of 16 hold the same samples as one batch of 64
    small = ShardedLoader(synthetic_h5, "train", 0, 1, local_batch=16, seed=1).indices(0)
    big = ShardedLoader(synthetic_h5, "train", 0, 1, local_batch=64, seed=1).indices(0)
    for k in range(len(big) // 64):
        assert set(small[64 * k:64 * (k + 1)].tolist()) == set(big[64 * k:64 * (k + 1)].tolist())


def test_prefetcher_yields_the_same_batches_and_stops_cleanly(synthetic_h5):
    import threading

    from lbscale.data.loader import Prefetcher

    loader = ShardedLoader(synthetic_h5, "train", 0, 2, 64, seed=3)
    loader.set_epoch(1)
    plain = list(loader.iterate(2))
    fetched = list(Prefetcher(loader.iterate(2), depth=2))
    assert len(plain) == len(fetched) > 3
    for a, b in zip(plain, fetched):
        assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    early = Prefetcher(loader.iterate(0), depth=1)
    next(early)
    early.close()  # stopped mid-epoch: the reader thread ends, nothing hangs
    assert not any(t.name == "lbscale-prefetch" and t.is_alive() for t in threading.enumerate())


def test_prefetcher_raises_reader_errors_in_the_training_thread():
    from lbscale.data.loader import Prefetcher

    def broken():
        yield 1
        raise OSError("disk gone")

    p = Prefetcher(broken())
    assert next(p) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(p)
    p.close()


@pytest.mark.parametrize("world", [1, 2])
def test_a_reordered_loader_keeps_the_order_before_its_point_and_redraws_the_rest(synthetic_h5, world):
    # a branch's repeat (--branch-reseed): before micro-batch 3 of epoch 1 the parent's order, past it the same
    # samples of that epoch in another order, later epochs drawn afresh; two loaders with the same seed agree
    # (repeat r is the same data at every factor), two seeds differ
    for rank in range(world):
        plain = ShardedLoader(synthetic_h5, "train", rank, world, local_batch=20, seed=4)
        again = [ShardedLoader(synthetic_h5, "train", rank, world, local_batch=20, seed=4) for _ in range(3)]
        for ld, s in zip(again, (1, 1, 2)):
            ld.reorder(s, 1, 3)
        assert all(np.array_equal(plain.indices(0), ld.indices(0)) for ld in again)
        first, changed = plain.indices(1), again[0].indices(1)
        assert np.array_equal(first[:60], changed[:60])
        assert sorted(first[60:].tolist()) == sorted(changed[60:].tolist()) and not np.array_equal(first, changed)
        assert all(np.array_equal(np.sort(changed[a:a + 20]), changed[a:a + 20]) for a in range(0, len(changed), 20))
        for epoch in (1, 2):
            assert np.array_equal(again[0].indices(epoch), again[1].indices(epoch))
            assert not np.array_equal(again[0].indices(epoch), again[2].indices(epoch))
        assert not np.array_equal(plain.indices(2), again[0].indices(2))
        if world == 1:  # a later epoch's shards are drawn afresh too: the same samples over all ranks
            assert sorted(plain.indices(2).tolist()) == sorted(again[0].indices(2).tolist())
