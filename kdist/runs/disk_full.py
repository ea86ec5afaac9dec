"""A full disk named as one, not as TensorFlow's `ResourceExhaustedError`.

TensorFlow turns `ENOSPC` into `ResourceExhaustedError`, and inside a traced write its
message starts "Graph execution error:", so a checkpoint that did not fit on the disk
read as a memory or graph problem. `is_disk_full` finds the cause in the error (or the
errors it was raised from); `disk_full_message` says which folder's disk is full, how
much is free there, and about how much the save needed.
"""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

__all__ = [
    "NO_SPACE",
    "DiskFullError",
    "disk_full_error",
    "disk_full_message",
    "is_disk_full",
    "named_disk_full",
]

# What the C library says for a full disk and a full quota, in TensorFlow's messages.
NO_SPACE = ("No space left on device", "Disk quota exceeded")
_SAID = "is full (no space left writing"
_FILE = re.compile(r"([^\s;'\"]+); (?:" + "|".join(NO_SPACE) + ")")


def _chain(error: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` (or one it was raised from) is a full disk or quota."""
    for cause in _chain(error):
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(text in str(cause) for text in NO_SPACE):
            return True
    return False


def _written(error: BaseException) -> str | None:
    """The file the failed write was writing, as TensorFlow's message or the OSError names it."""
    found = next((m.group(1) for c in _chain(error) if (m := _FILE.search(str(c)))), None)
    if found is None:
        found = next(
            (c.filename for c in _chain(error) if isinstance(c, OSError) and c.filename),
            None,
        )
    return None if found is None else str(found)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def disk_full_message(error: BaseException, folder: Path, *, needed: int | None) -> str:
    """One line: the disk of `folder` is full, what was written, free and needed bytes.

    Args:
        error: the write's error (`is_disk_full`).
        folder: where the save was written.
        needed: about how many bytes the save writes; `None` when not known.
    """
    written = _written(error)
    where = Path(folder)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = f"{_size(shutil.disk_usage(where).free)} free there"
    except OSError:
        free = "free space unknown"
    text = f"the disk holding {folder} {_SAID} {written or 'a file'}"
    text += f"; {free}"
    if needed is not None:
        text += f", the save needs about {_size(needed)}"
    return text + "); free some space or give the run another folder (hydra.run.dir)"


class DiskFullError(OSError):
    """A full disk (`ENOSPC`) said in one line: `str()` is the message alone."""

    def __str__(self) -> str:
        return str(self.strerror)


def disk_full_error(error: BaseException, path: Path, *, needed: int | None = None) -> OSError:
    """An `OSError` (`ENOSPC`) for a write of `path` that found the disk full, whose
    message says so (`disk_full_message`): `kdist.train` stops with it in one line."""
    return DiskFullError(
        errno.ENOSPC, disk_full_message(error, Path(path).parent, needed=needed), str(path)
    )


def named_disk_full(error: BaseException, folder: Path | None = None) -> OSError | None:
    """`error` said as a full disk (`disk_full_error`) where it is one that was not named
    yet (TensorFlow's `ResourceExhaustedError` from a TensorBoard event file, h5py's
    error); `None` for any other error, and for a full disk already named.

    Args:
        error: what a write raised.
        folder: where the write went when the error does not name its file. Defaults
            to the working folder (`.`), read only then.
    """
    if not is_disk_full(error):
        return None
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return None
    if _SAID in str(error):  # e.g. kdist's `CheckpointWriteError`
        return None
    written = _written(error)
    return disk_full_error(error, Path(written) if written else Path(folder or ".") / "a file")
