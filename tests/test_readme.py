"""The README is the user's door: what it quotes of `make demo` must say how far another machine may differ."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _demo_section() -> str:
    text = README.read_text()
    return text[text.index("## Walk-through: the demo"):text.index("**How many GPUs.**")]


def test_the_quoted_demo_verdict_says_it_differs_between_machines_with_the_measured_spread():
    # A fresh clone on another machine printed 26 completed / 22 pruned and B_crit ~ 79 [49, 138] where the README
    # quoted 30 / 18 and 92 [65, 147] "to the digit" (issue 54 item 20): CPU kernels differ and pruning amplifies it.
    section = _demo_section()
    quoted = re.search(r"B_crit ~ (\d+) \[(\d+), (\d+)\]", section)
    assert quoted, "no quoted B_crit in the demo walk-through"
    spread = section[section.index("differ between machines"):]
    runs = re.findall(r"(\d+) completed / (\d+) pruned,\s+B_crit ~ (\d+) \[(\d+), (\d+)\]", spread)
    assert len(runs) >= 2, "the spread names at least two measured runs"
    assert quoted.groups() in [r[2:] for r in runs], "the quoted verdict is one of the measured runs"
