"""Raw datasets -> prepared files -> per-rank batches."""
