"""Raw datasets -> prepared files -> per-rank batches."""


def worker_context():
    """The multiprocessing context of lbscale's worker processes (prepare readers, JPEG decoders): a
    forkserver, else spawn; never a fork of the caller, which may run other threads (torch's, gloo's,
    pyarrow's jemalloc) and hand a child a lock one of them held; such a child hung in CI."""
    import multiprocessing as mp

    return mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
