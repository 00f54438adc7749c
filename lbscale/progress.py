"""Progress for long steps: bars on a terminal; in a log file (SLURM, CI) plain lines instead of hundreds of
carriage-return updates. `--quiet` silences both."""

import os
import sys
import time

from tqdm.auto import tqdm

_QUIET = False


def set_quiet(quiet: bool) -> None:
    global _QUIET
    _QUIET = quiet


def is_quiet() -> bool:
    return _QUIET


def interactive() -> bool:
    """A terminal that can show a bar: stderr is a tty with a width (a bare pty reports 0 columns, where a bar
    would show nothing and log lines are the progress)."""
    if not sys.stderr.isatty():
        return False
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (OSError, ValueError):
        return False


class LogLines:
    """A progress bar's interface for logs: one line per `every` of the total (10%), or one at the end when
    the total is unknown. `every=None` prints nothing (the caller writes its own line, e.g. one per epoch)."""

    def __init__(self, total=None, desc: str = "", unit: str = "it", every: float | None = 0.1):
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.n, self.shown, self.disable = 0, 0, _QUIET or every is None

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.disable or not self.total:
            return
        step = int(self.n / self.total / self.every)
        if step > self.shown:
            self.shown = step
            print(f"{self.desc}: {self.n:,}/{self.total:,} {self.unit} ({100 * self.n / self.total:.0f}%)",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if not self.disable and not self.total and self.n:
            print(f"{self.desc}: {self.n:,} {self.unit}", file=sys.stderr, flush=True)


def bar(total=None, desc: str = "", unit: str = "it", log_every: float | None = 0.1, start: int = 0,
        shown: bool = True):
    """A tqdm bar on a terminal, else `LogLines(log_every)`; `start`: done already (a resumed epoch); `shown`
    False: a silent one (ranks other than 0)."""
    if not interactive():
        out = LogLines(total, desc, unit, log_every)
    else:
        out = tqdm(total=total, desc=desc, unit=unit, disable=_QUIET, dynamic_ncols=True, leave=False)
    out.disable = out.disable or not shown
    if start:
        out.update(start)
    return out


def record_line(text: str) -> None:
    """A line of a running job's record (an epoch, a step evaluation): always in a log, so train.log shows a trial
    while it runs (--quiet silences bars, not these); above the bar on a terminal, unless --quiet."""
    if not interactive():
        print(text, file=sys.stderr, flush=True)
    elif not _QUIET:
        tqdm.write(text, file=sys.stderr)


def log_line(text: str) -> None:
    """A line for logs only (a terminal has the bar): e.g. one per training epoch."""
    if not _QUIET and not interactive():
        print(text, file=sys.stderr, flush=True)


class Board:
    """Another process's progress, as the caller reads it (`show`: position, total, text): on a terminal a bar it
    redraws; in a log (not a terminal) a plain line, when told there is news and `log_every` seconds have passed
    since the last line, or after `heartbeat` seconds without one. --quiet shows nothing."""

    def __init__(self, desc: str, log_every: float, heartbeat: float):
        self.desc, self.log_every, self.heartbeat = desc, log_every, heartbeat
        self.last_line, self.started = float("-inf"), time.monotonic()
        self.bar = None
        if interactive() and not _QUIET:
            self.bar = tqdm(total=None, desc=desc, bar_format="{desc}", file=sys.stderr, dynamic_ncols=True,
                            leave=False)

    def show(self, n: int, total: int | None, text: str, news: bool) -> None:
        """At `n` of `total` (None: not known yet), with `text`; `news`: something moved since the last call."""
        if self.bar is not None:
            self.bar.total, self.bar.n = total, n
            shown = text.replace("{", "{{").replace("}", "}}")
            self.bar.bar_format = "{desc} |{bar:24}| " + shown if total else "{desc} " + shown
            self.bar.refresh()
            return
        now = time.monotonic()
        quiet_since = max(self.last_line, self.started)
        if news and now - self.last_line >= self.log_every or now - quiet_since >= self.heartbeat:
            log_line(f"{self.desc}: {text}")
            self.last_line = now

    def close(self) -> None:
        """Clear the bar from the terminal (the caller prints the outcome)."""
        if self.bar is not None:
            self.bar.close()
