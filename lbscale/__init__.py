"""lbscale: batch-size scaling studies of deep networks."""

__version__ = "0.1.0"
