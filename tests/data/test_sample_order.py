"""Sample order across batch sizes over a train split several shuffle windows long: k micro-batches of B hold
exactly the samples of one batch of k x B, on disk and in memory (the studies compare batch sizes on the same
order). The window is `buffer_blocks` storage blocks; 2 blocks make the shared fixture span several windows."""

import pytest

from lbscale.data.formats import open_prepared
from lbscale.data.loader import ShardedLoader

WINDOW_BLOCKS = 2


def _order(path, batch, world=1, rank=0, in_memory=False):
    return ShardedLoader(path, "train", rank, world, local_batch=batch, seed=5, buffer_blocks=WINDOW_BLOCKS,
                         in_memory=in_memory).indices(0)


def test_fixture_spans_several_windows(synthetic_h5):
    f = open_prepared(synthetic_h5)
    assert f.size("train") >= 2 * WINDOW_BLOCKS * f.chunk_len("train")


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("small, k", [(16, 4), (48, 4), (100, 3), (7, 9)])
def test_micro_batches_hold_the_samples_of_one_big_batch(synthetic_h5, world, small, k):
    for rank in range(world):
        micro, big = _order(synthetic_h5, small, world, rank), _order(synthetic_h5, small * k, world, rank)
        n_big = len(big) // (small * k)
        assert n_big >= 2
        matched = sum(set(micro[j * small * k:(j + 1) * small * k].tolist()) ==
                      set(big[j * small * k:(j + 1) * small * k].tolist()) for j in range(n_big))
        assert matched == n_big


@pytest.mark.parametrize("batch", [32, 100])
def test_in_memory_gives_the_epoch_order_of_the_file(synthetic_h5, batch):
    assert _order(synthetic_h5, batch, in_memory=True).tolist() == _order(synthetic_h5, batch).tolist()
