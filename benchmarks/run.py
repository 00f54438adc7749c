"""`make bench`: every benchmark, each printing figures and ratios measured in this one run."""

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lbscale.progress import set_quiet  # noqa: E402

# Imported one at a time, so that e.g. the prepare benchmark does not fork a process holding torch.
BENCHES = ["loader", "prepare", "folder", "train", "step", "eval", "report", "report_tuned", "filter", "jpeg",
           "scaling_model", "time_to_target", "checksums", "gns_interval", "local_critical", "verdict_coverage",
           "designed", "adaptive", "threads"]

if __name__ == "__main__":
    set_quiet(True)
    for name in sys.argv[1:] or BENCHES:
        print(f"== {name}", flush=True)
        importlib.import_module(f"benchmarks.bench_{name}").main()
