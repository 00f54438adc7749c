"""The one exception type for user errors; the CLI turns it into one stderr line and exit code 2, as it does an
OSError the user caused (os_error_line)."""

import errno

ERROR_PREFIX = "lbscale: error: "  # how that line starts; launchers read a failed command's reason from it


class LbscaleError(Exception):
    """Bad input from the user (file, option, spec): reported in one line, never as a traceback."""


def error_line(lines: list[str]) -> str | None:
    """The reason of a failed lbscale command from its output lines: its last error line, without the prefix.
    Under torchrun or srun the last lines are the launcher's (a ChildFailedError banner, "srun: error: ...
    Exited with exit code 2"), so the command's own line is searched for; None where it wrote none."""
    own = [line.strip() for line in lines if line.strip().startswith(ERROR_PREFIX)]
    return own[-1].removeprefix(ERROR_PREFIX) if own else None


# OSErrors a user causes (a full disk, a folder they may not write, a file where a folder should be): what to do
_OS_ADVICE = {
    errno.ENOSPC: "no space left on the device; free space there or choose another folder, then run the same command "
                  "again (what finished is kept)",
    errno.EDQUOT: "disk quota exceeded; free space in your quota or choose another folder, then run the same command "
                  "again (what finished is kept)",
    errno.EACCES: "permission denied; choose a folder you may write (and files you may read) or ask their owner",
    errno.EPERM: "permission denied (operation not permitted); choose a folder you own or ask its owner",
    errno.EROFS: "read-only file system; choose a folder on a writable one",
    errno.ENOTDIR: "a part of this path is a file, not a folder; choose another path",
    errno.EEXIST: "exists already where lbscale makes a folder (is it a file, not a folder?); choose another path",
    errno.EISDIR: "a folder where a file was expected; give a file's path",
    errno.ENAMETOOLONG: "file name too long; choose a shorter path",
    errno.ENOENT: "no such file or folder (moved or removed while lbscale ran?)",
}


def os_error_line(e: OSError) -> str | None:
    """One line for an OSError the user can cause, naming the path and what to do; None for any other (a bug)."""
    advice = _OS_ADVICE.get(e.errno)
    if advice is None:
        return None
    path = e.filename if e.filename2 is None else f"{e.filename} -> {e.filename2}"
    return f"{path}: {advice}" if path is not None else f"while writing: {advice}"
