"""Progress output: bars only where a terminal can show them."""

import fcntl
import os
import struct
import sys
import termios

from lbscale.progress import interactive


def test_a_terminal_without_columns_gets_log_lines_not_a_bar(monkeypatch):
    """A terminal that reports 0 columns (a bare pty, some CI runners) showed no progress at all: tqdm drew its bar
    into no width and the log lines were off because stderr was a tty."""
    main, side = os.openpty()
    with os.fdopen(side, "w") as stderr:
        monkeypatch.setattr(sys, "stderr", stderr)
        assert os.get_terminal_size(side).columns == 0
        assert not interactive()
        fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        assert interactive()
    os.close(main)
