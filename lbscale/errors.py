"""The one exception type for user errors; the CLI turns it into one stderr line and exit code 2."""


class LbscaleError(Exception):
    """Bad input from the user (file, option, spec): reported in one line, never as a traceback."""
