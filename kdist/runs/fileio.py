"""Files kdist writes and reads: atomic writes and CSV tables, one way each.

A file a reader (or a kill) may catch half-written is written to a hidden sibling first and
moved into place with `os.replace`, which is atomic on one filesystem (and replaces a
symbolic link at `path` instead of writing through it). A file kdist appends to or writes
in place is opened with `O_NOFOLLOW` (`open_nofollow`): a link planted at its name is an
error, never a way to write another file.

A file kdist reads back from a run folder (`history.csv`, `summary.csv`, `metrics.json`)
may come from anyone: it is read within `MAX_READ_BYTES` (`read_text_limited`), and refused
in one line naming the file and the limit when it is larger. The CSV tables are only
informational: bytes that are not UTF-8 read as U+FFFD (a cell that no longer reads as a
number is left out) instead of stopping the run.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kdist.config.errors import ConfigError
from kdist.runs.disk_full import disk_full_error, is_disk_full

__all__ = [
    "MAX_READ_BYTES",
    "LinkError",
    "atomic_directory",
    "atomic_path",
    "open_nofollow",
    "read_csv",
    "read_csv_numbers",
    "read_json",
    "read_text_limited",
    "write_csv_atomic",
    "write_text_atomic",
]

# The most bytes kdist reads from a JSON or CSV file of a run folder: a run's history of
# a million epochs is ~100 MiB.
MAX_READ_BYTES = 128 * 2**20


def _named_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


class LinkError(OSError):
    """A file kdist writes is a symbolic link: kdist does not write through it."""


def open_nofollow(path: str | Path, mode: str = "a", *, newline: str | None = None) -> Any:
    """Open `path` for writing (`"w"`, `"a"`) or reading and writing (`"r+"`) without
    following a symbolic link at it; created (mode 0666 less the umask) when missing.

    Raises:
        LinkError: when `path` is a symbolic link (nothing is opened or created).
    """
    flags = {"w": os.O_WRONLY | os.O_TRUNC, "a": os.O_WRONLY | os.O_APPEND, "r+": os.O_RDWR}
    if mode not in flags:
        raise ValueError(f"`mode` ({mode!r}) must be one of w, a, r+.")
    try:
        fd = os.open(path, flags[mode] | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as error:
        if os.path.islink(path):
            raise LinkError(
                error.errno, f"{path} is a symbolic link; kdist does not write through it"
            ) from None
        raise
    return os.fdopen(fd, mode, newline=newline)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A hidden sibling of `path` to write; moved onto `path` when the block ends cleanly.

    The sibling is removed if the block raises, so a failed write leaves `path` as it was.

    Example:

    ```python
    with atomic_path(out / MODEL) as partial:
        model.save(partial)
    ```
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The suffix is kept: some writers (Keras's `model.save`) check it.
    partial = path.with_name(f".{path.stem}.partial-{os.getpid()}{path.suffix}")
    partial.unlink(missing_ok=True)  # a link planted at the name is removed, not followed
    try:
        yield partial
        os.replace(partial, path)
    except BaseException as error:
        partial.unlink(missing_ok=True)
        if is_disk_full(error) and not _named_disk_full(error):
            # TensorFlow's and h5py's full disk (`ResourceExhaustedError`, an `OSError`
            # without its errno): said as one.
            raise disk_full_error(error, path) from error
        raise


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """A hidden staging folder beside `path` to fill; swapped in for `path` when the block ends.

    `os.replace` cannot move a folder onto a folder that has files, so the old `path` is
    moved aside first and removed after the new one is in place: a reader sees the old
    folder or the new one, and only in the instant between two renames neither.
    The staging folder is removed if the block raises.

    Example:

    ```python
    with atomic_directory(out / SAVED_MODEL) as staging:
        model.export(str(staging), format="tf_saved_model")
    ```
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.partial")
    old = path.with_name(f".{path.name}.old")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        yield staging
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if is_disk_full(error) and not _named_disk_full(error):
            raise disk_full_error(error, path) from error
        raise
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        os.replace(path, old)
    os.replace(staging, path)
    shutil.rmtree(old, ignore_errors=True)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` so that a reader (or a kill) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            handle.write(text)
        # mkstemp makes the file private; give it the permissions of a normal new file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv_atomic(
    path: str | Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]
) -> None:
    """Write `rows` to `path` atomically, one column per name in `columns`."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in columns})
    write_text_atomic(path, buffer.getvalue())


def read_text_limited(path: str | Path, *, limit: int | None = None, errors: str = "strict") -> str:
    """The text of `path`, read only when it holds at most `limit` bytes.

    Both the size the file says it has and the bytes actually read are bounded (a file
    that grows while it is read, or a pipe, is cut at `limit + 1` bytes and refused).

    Args:
        path: the file.
        limit: most bytes. Defaults to `None`: `MAX_READ_BYTES`.
        errors: how bytes that are not UTF-8 are decoded (`"replace"`: as U+FFFD).
            Defaults to `"strict"`.

    Raises:
        ConfigError: naming the file and the limit when it is larger.
        FileNotFoundError: when `path` does not exist.
    """
    limit = MAX_READ_BYTES if limit is None else limit
    with Path(path).open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        data = b"" if size > limit else handle.read(limit + 1)
    if size > limit or len(data) > limit:
        raise ConfigError(
            str(path),
            f"is larger than kdist reads from a run folder ({max(size, len(data))} bytes; "
            f"the limit is {limit} bytes)",
            hint="remove or shorten the file if you trust the folder, or use another run_dir",
        )
    return data.decode("utf-8", errors=errors)


def read_json(path: str | Path, *, limit: int | None = None) -> Any:
    """The JSON value in `path` (`metrics.json`, ...), read within `limit` bytes.

    Raises:
        ConfigError: naming the file when it is larger than `limit`
            (`MAX_READ_BYTES`), not UTF-8 or not JSON.
        FileNotFoundError: when `path` does not exist.
    """
    try:
        return json.loads(read_text_limited(path, limit=limit))
    except (UnicodeDecodeError, ValueError) as error:
        if isinstance(error, ConfigError):
            raise
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(
            str(path),
            f"is not a readable JSON file ({first[:160]})",
            hint="delete it or start a new run_dir",
        ) from None


def read_csv(path: str | Path, *, limit: int | None = None) -> list[dict[str, str]]:
    """The rows of a CSV file (`history.csv`, `summary.csv`, ...) as dictionaries of strings.

    Read within `limit` bytes (`MAX_READ_BYTES`); bytes that are not UTF-8 read as U+FFFD
    (the tables are informational: a damaged cell does not stop a run).

    Raises:
        ConfigError: naming the file and the limit when it is larger.
        FileNotFoundError: when `path` does not exist.
    """
    text = read_text_limited(path, limit=limit, errors="replace")
    # NUL bytes make the csv module stop ("line contains NUL"): read them as U+FFFD too.
    return list(csv.DictReader(io.StringIO(text.replace("\0", "\ufffd"), newline="")))


def read_csv_numbers(path: str | Path) -> list[dict[str, float]]:
    """The rows of a CSV file with only the cells that read as numbers, as floats."""
    records = []
    for row in read_csv(path):
        record = {}
        for key, value in row.items():
            try:
                record[key] = float(value)
            except (TypeError, ValueError):
                continue
        records.append(record)
    return records
