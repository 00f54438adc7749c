"""Progress bars for long steps; `--quiet` silences them all."""

from tqdm.auto import tqdm

_QUIET = False


def set_quiet(quiet: bool) -> None:
    global _QUIET
    _QUIET = quiet


def is_quiet() -> bool:
    return _QUIET


def bar(total=None, desc: str = "", unit: str = "it"):
    return tqdm(total=total, desc=desc, unit=unit, disable=_QUIET, dynamic_ncols=True, leave=False)
