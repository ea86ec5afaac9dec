"""A run refused after it took its folder leaves the folder as it was, byte for byte.

Most refusals come before a run changes anything (`kdist.train.accept_run_dir` reads only).
Some checks can only run once the run holds the folder and has written its config: the
strategy is built (`strategy=auto` found one device where `strategy.sync.mode=diloco`
needs replicas), the model and the data meet. Such a refusal (a `ConfigError`, or exit
status 2) puts back what the run changed: the saved configs (`.hydra/*.yaml`,
`backup/config.yaml`, `checkpoints/config.yaml`) get their previous bytes, `train.log` its
previous length, and entries the run made are removed. It is done under the folder's lock,
so no other process writes there meanwhile.

Once training has changed anything else (a checkpoint written, a file kdist keeps
replaced), the error is not a refusal of the folder: nothing is put back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from kdist.config.errors import ConfigError
from kdist.process.exit_codes import EXIT_CONFIG_ERROR
from kdist.runs.layout import BACKUP, CHECKPOINTS, CONFIG, HYDRA, LOCK, TRAIN_LOG

__all__ = ["as_it_was_on_refusal"]

log = logging.getLogger(__name__)

# What a run writes before it trains, put back on a refusal.
_CONFIGS = (
    f"{HYDRA}/{CONFIG}",
    f"{HYDRA}/hydra.yaml",
    f"{HYDRA}/overrides.yaml",
    f"{BACKUP}/{CONFIG}",
    f"{CHECKPOINTS}/{CONFIG}",
)
_PUT_BACK = frozenset({*_CONFIGS, TRAIN_LOG, LOCK})
# A run folder's listing: relative path -> (is a folder, size, modification time).
_Listing = dict[str, tuple[bool, int, int]]


def _listing(root: Path) -> _Listing:
    found: _Listing = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            try:
                stat = path.lstat()
            except OSError:
                continue
            is_dir = path.is_dir() and not path.is_symlink()
            found[str(path.relative_to(root))] = (is_dir, stat.st_size, stat.st_mtime_ns)
    return found


def _read(path: Path) -> bytes | None:
    try:
        return None if path.is_symlink() else path.read_bytes()
    except OSError:
        return None


def _is_refusal(error: BaseException) -> bool:
    if isinstance(error, ConfigError):
        return True
    return isinstance(error, SystemExit) and error.code == EXIT_CONFIG_ERROR


@contextlib.contextmanager
def as_it_was_on_refusal(
    run_dir: str | os.PathLike[str], *, enabled: bool = True
) -> Iterator[None]:
    """Put `run_dir` back as it was when the block is left by a refusal before training.

    Args:
        run_dir: the run folder, held by this process (`kdist.runs.lock.hold`).
        enabled: `False` (a task that writes nothing there) does nothing. Defaults to `True`.
    """
    if not enabled:
        yield
        return
    root = Path(run_dir)
    before = _listing(root)
    saved = {name: _read(root / name) for name in _CONFIGS}
    log_size = before[TRAIN_LOG][1] if TRAIN_LOG in before else None
    try:
        yield
    except BaseException as error:
        if _is_refusal(error):
            _put_back(root, before, saved, log_size)
        raise


def _put_back(
    root: Path, before: _Listing, saved: dict[str, bytes | None], log_size: int | None
) -> None:
    after = _listing(root)
    changed = [
        name
        for name, entry in before.items()
        if name not in _PUT_BACK and not entry[0] and after.get(name) != entry
    ]
    if changed:
        log.info("training had changed %s: the folder is left as it is", changed[0])
        return
    for name, content in saved.items():
        path = root / name
        if content is None:
            if name not in before:
                path.unlink(missing_ok=True)
            continue
        if _read(path) != content:
            path.write_bytes(content)
    path = root / TRAIN_LOG
    with contextlib.suppress(OSError):
        if log_size is None:
            path.unlink(missing_ok=True)
        elif not path.is_symlink() and path.stat().st_size > log_size:
            os.truncate(path, log_size)
    # What the run made (deepest first); `.lock` stays: the lock is held through it.
    for name in sorted(set(after) - set(before) - {LOCK}, key=len, reverse=True):
        path = root / name
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    # Their old times too: a folder left as it was does not look touched.
    for name in [*saved, TRAIN_LOG]:
        entry = before.get(name)
        if entry is not None and (root / name).exists():
            with contextlib.suppress(OSError):
                os.utime(root / name, ns=(entry[2], entry[2]))
