"""The one exception type for user errors; the CLI turns it into one stderr line and exit code 2."""

ERROR_PREFIX = "lbscale: error: "  # how that line starts; launchers read a failed command's reason from it


class LbscaleError(Exception):
    """Bad input from the user (file, option, spec): reported in one line, never as a traceback."""


def error_line(lines: list[str]) -> str | None:
    """The reason of a failed lbscale command from its output lines: its last error line, without the prefix.
    Under torchrun or srun the last lines are the launcher's (a ChildFailedError banner, "srun: error: ...
    Exited with exit code 2"), so the command's own line is searched for; None where it wrote none."""
    own = [line.strip() for line in lines if line.strip().startswith(ERROR_PREFIX)]
    return own[-1].removeprefix(ERROR_PREFIX) if own else None
