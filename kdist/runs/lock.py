"""One owner per run folder: `run_dir/.lock`, held by the chief while it trains.

Two `kdist.train` commands writing the same run folder would resume from each other's
half-written backups. The chief takes an exclusive `fcntl.flock` on `run_dir/.lock` and
writes its pid and host into it; the kernel releases the lock when the process exits,
however it exits (kill -9 included), so a lock file left behind by a dead process is
stale by construction and the next run takes it over.

`check_free` asks the same question without writing anything (a run checks its folder
before it changes a byte of it), and the lock file is opened with `O_NOFOLLOW`: a
symbolic link at `.lock` is refused, never written through.

A folder has one kind of owner: a training run (`kind="run"`, `kdist.train`) or a
hyperparameter search (`kind="search"`, `kdist.tune`). A search writes its kind into the
lock file while it holds it and leaves it there when done (`recorded_kind`), so that a
`check_free(..., kind="run")` refuses a search's folder even after the search ended.

Every entry that trains takes it: `kdist train`, `kdist tune`, and `Experiment.fit` in a
notebook (`owned_by`), which holds it for the length of the call unless this process
holds it already (`kdist train` around its `fit`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from kdist.config.errors import ConfigError
from kdist.runs.layout import LOCK

__all__ = [
    "KINDS",
    "LOCK_NAME",
    "check_free",
    "held_here",
    "hold",
    "holder",
    "owned_by",
    "recorded_kind",
]

log = logging.getLogger(__name__)

LOCK_NAME = LOCK
# The kinds of owner a run folder may have; only a search's is written down for good.
KINDS = ("run", "search")
_SEARCH = "search"
_WHAT = {"run": "a training run (kdist.train)", "search": "a hyperparameter search (kdist.tune)"}
# The lock files this process holds (`hold`): (resolved folder, lock file name) -> depth.
_HELD: dict[tuple[str, str], int] = {}


def holder(run_dir: str | os.PathLike[str], *, name: str = LOCK_NAME) -> str:
    """Who the lock file of `run_dir` says holds it: `"pid N on HOST"` (or `"unknown"`)."""
    try:
        fields = (Path(run_dir) / name).read_text().split()
    except OSError:
        return "unknown"
    if len(fields) >= 2 and fields[0].isdigit():
        return f"pid {fields[0]} on {fields[1]}"
    return "unknown"


def recorded_kind(run_dir: str | os.PathLike[str]) -> str | None:
    """The kind of owner `run_dir`'s lock file records: `"search"`, or `None` when it says
    nothing (a training run's folder, a new one, or a lock file kdist did not write)."""
    path = Path(run_dir) / LOCK_NAME
    if path.is_symlink():
        return None
    try:
        fields = path.read_text(errors="replace").split()
    except OSError:
        return None
    # `pid host search` while a search holds it, `search` once it is done.
    held = len(fields) >= 3 and fields[0].isdigit() and fields[2] == _SEARCH
    return _SEARCH if held or fields == [_SEARCH] else None


def _holder_alive(fields: list[str]) -> bool:
    """Whether the lock file's `pid host` names another live process on this host.

    A process on another host cannot be checked from here: it counts as alive.
    """
    if len(fields) < 2 or not fields[0].isdigit():
        return False
    pid = int(fields[0])
    if fields[1] != socket.gethostname():
        return True
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def _in_use(run_dir: str | os.PathLike[str], key: str, name: str = LOCK_NAME) -> ConfigError:
    what = "kdist run" if name == LOCK_NAME else f"kdist process ({name})"
    return ConfigError(
        key,
        f"is in use by another {what} ({holder(run_dir, name=name)})",
        value=str(run_dir),
        hint=f"wait for it to finish, stop it, or choose another {key}",
    )


def _link_error(run_dir: str | os.PathLike[str], key: str, name: str = LOCK_NAME) -> ConfigError:
    return ConfigError(
        key,
        f"holds a symbolic link at {name}; kdist does not write through links",
        value=str(run_dir),
        hint=f"remove {Path(run_dir) / name} or choose another hydra.run.dir",
    )


# A folder (or file system) this process may not write.
_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)


def _read_only(
    run_dir: str | os.PathLike[str], key: str, name: str, error: OSError, hint: str | None
) -> ConfigError:
    return ConfigError(
        key,
        f"is read-only: {name} cannot be written there ({os.strerror(error.errno or 0)})",
        value=str(run_dir),
        hint=hint or f"copy the folder somewhere writable and give {key}=<the copy>",
    )


def _lock_exclusive(fd: int, *, seconds: float = 0.5) -> None:
    """`flock(LOCK_EX)` without blocking, retried for `seconds`: another run's `check_free`
    holds a shared lock for an instant, which must not read as "in use"."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"`kind` ({kind!r}) must be one of {', '.join(KINDS)}.")


def _other_kind(run_dir: str | os.PathLike[str], key: str, kind: str) -> ConfigError | None:
    found = recorded_kind(run_dir)
    if found is None or found == kind:
        return None
    return ConfigError(
        key,
        f"holds {_WHAT[found]}; {_WHAT[kind]} would mix its outputs into it",
        value=str(run_dir),
        hint="choose another hydra.run.dir",
    )


def check_free(
    run_dir: str | os.PathLike[str],
    *,
    key: str = "hydra.run.dir",
    kind: str | None = None,
    name: str = LOCK_NAME,
) -> None:
    """Refuse a run folder another process holds, without writing anything to it.

    Args:
        run_dir: the run folder (it may not exist yet).
        key: the config key that names the folder, for the message. Defaults to
            `"hydra.run.dir"`.
        kind: the kind of owner asking (`"run"` or `"search"`): a folder whose lock file
            records another kind is refused too, held or not. Defaults to `None`: any.
        name: the lock file: the folder's owner's (`.lock`) or the sidecar evaluator's
            (`kdist.runs.layout.EVAL_LOCK`). Defaults to `LOCK_NAME`.

    Raises:
        ConfigError: naming `key` when another process holds the lock, when `.lock`
            is a symbolic link, or when the folder belongs to another kind of owner.
        ValueError: for an unknown `kind`.
    """
    if kind is not None:
        _check_kind(kind)
    path = Path(run_dir) / name
    if path.is_symlink():
        raise _link_error(run_dir, key, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    try:
        try:
            # A shared lock conflicts only with the holder's exclusive one; released below.
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(run_dir, key, name) from None
        except OSError:
            if _holder_alive(os.pread(fd, 200, 0).decode(errors="replace").split()):
                raise _in_use(run_dir, key, name) from None
    finally:
        os.close(fd)
    if kind is not None:
        other = _other_kind(run_dir, key, kind)
        if other is not None:
            raise other


@contextlib.contextmanager
def hold(
    run_dir: str | os.PathLike[str],
    *,
    key: str = "hydra.run.dir",
    enabled: bool = True,
    kind: str = "run",
    name: str = LOCK_NAME,
    read_only_hint: str | None = None,
) -> Iterator[None]:
    """Hold the run folder's lock for the duration of the block.

    Args:
        run_dir: the run folder (created if missing).
        key: the config key that names the folder, for the message. Defaults to
            `"hydra.run.dir"`.
        enabled: take the lock; `False` (a non-chief task) does nothing. Defaults to `True`.
        kind: the kind of owner: `"run"`, or `"search"`, which is recorded in the lock
            file for good (`recorded_kind`). Defaults to `"run"`.
        name: the lock file (`check_free`). Defaults to `LOCK_NAME`.
        read_only_hint: what to do when the folder cannot be written (a read-only
            folder or file system). Defaults to `None`: copy it, or choose another `key`.

    Raises:
        ConfigError: naming `key` and the holder's pid when another process holds it,
            when `.lock` is a symbolic link, when the folder belongs to another kind
            of owner (a search's folder, for a run), or when it is read-only.
        ValueError: for an unknown `kind`.
    """
    _check_kind(kind)
    if not enabled:
        yield
        return
    folder = Path(run_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if (folder / name).is_symlink():
            raise _link_error(run_dir, key, name) from None
        if error.errno in _READ_ONLY:
            raise _read_only(run_dir, key, name, error, read_only_hint) from None
        raise
    try:
        try:
            _lock_exclusive(fd)
        except BlockingIOError:
            raise _in_use(folder, key, name) from None
        except OSError as error:
            # A file system without flock (some network mounts): the pid decides.
            log.warning("cannot lock %s (%s): checking its pid instead", folder / name, error)
            if _holder_alive(os.pread(fd, 200, 0).decode(errors="replace").split()):
                raise _in_use(folder, key, name) from None
        previous = os.pread(fd, 200, 0).decode(errors="replace").split()
        other = _other_kind(folder, key, kind)
        if other is not None:
            raise other
        if previous and previous[0].isdigit():
            log.info("taking over the lock of a process that has exited (pid %s)", previous[0])
        # A search's kind stays in the file after it ends; a run's lock file is left empty.
        after = f"{_SEARCH}\n" if kind == _SEARCH else ""
        os.ftruncate(fd, 0)
        suffix = f" {_SEARCH}" if after else ""
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}{suffix}\n".encode(), 0)
        held = _held_key(folder, name)
        _HELD[held] = _HELD.get(held, 0) + 1
        try:
            yield
        finally:
            _HELD[held] -= 1
            if not _HELD[held]:
                del _HELD[held]
            # A pid left in the file means its process died holding the lock.
            os.ftruncate(fd, 0)
            if after:
                os.pwrite(fd, after.encode(), 0)
    finally:
        # Closing releases the flock; the file stays (removing it would race with a
        # process that has it open and is about to lock it).
        os.close(fd)


def _held_key(run_dir: str | os.PathLike[str], name: str) -> tuple[str, str]:
    return os.path.realpath(run_dir), name


def held_here(run_dir: str | os.PathLike[str], *, name: str = LOCK_NAME) -> bool:
    """Whether this process holds `run_dir`'s lock now (`hold`)."""
    return _held_key(run_dir, name) in _HELD


def owned_by(
    run_dir: str | os.PathLike[str], *, chief: bool
) -> contextlib.AbstractContextManager[None]:
    """Hold the folder's lock while an `Experiment` trains in it (its `fit`).

    `run_dir` is held when `chief` is true and this process does not hold it already
    (`kdist train` holds it around `Experiment.fit`); it is released when the block
    ends or raises, so a later `fit` of the same object takes it again.

    Raises:
        ConfigError: naming `run_dir`, the folder and the owner's pid when another
            process (a `kdist train`, another notebook) holds the folder.
    """
    return hold(run_dir, key="run_dir", enabled=chief and not held_here(run_dir))
