"""The file system's limits on a folder's path, checked before anything is written there.

A run folder whose name has a part longer than the file system allows (`NAME_MAX`, 255
bytes on Linux and macOS) fails at the first `stat` with `OSError: [Errno 36] File name too
long` and a traceback; one whose whole path leaves no room for the files kdist writes in it
(`PATH_MAX`, 4096 bytes on Linux) fails later, at a checkpoint. Both are said in one line
naming the config key and the limit.
"""

from __future__ import annotations

import os
from pathlib import Path

from kdist.config.errors import ConfigError

__all__ = ["FILES_ROOM", "check_path_length"]

# Room left in the path for what kdist writes inside a run folder (the longest:
# `tensorboard/validation/events.out.tfevents.<time>.<host name>.<pid>.<n>.v2`, host
# names up to 64 bytes; checkpoint shards `ckpt-<step>.data-00000-of-00001`).
FILES_ROOM = 256
# Where `os.pathconf` cannot tell (Windows): POSIX's usual values.
_NAME_MAX = 255
_PATH_MAX = 4096


def _limit(folder: Path, name: str, default: int) -> int:
    """`os.pathconf(name)` of the nearest existing folder, else `default`."""
    for candidate in (folder, *folder.parents):
        try:
            if candidate.is_dir():
                return os.pathconf(candidate, name)
        except (AttributeError, OSError, ValueError):
            continue  # `File name too long` itself, or no `pathconf` (Windows)
    return default


def _short(part: str) -> str:
    return part if len(part) <= 24 else f"{part[:12]}...{part[-8:]}"


def check_path_length(key: str, path: str | os.PathLike[str]) -> None:
    """Refuse a folder path the file system cannot hold, with room for kdist's files.

    Args:
        key: the config key that names the folder (e.g. `hydra.run.dir`), for messages.
        path: the folder; it may not exist yet.

    Raises:
        ConfigError: naming `key` and the limit, when a part of `path` is longer than a
            file name may be (`NAME_MAX`) or the whole path leaves less than `FILES_ROOM`
            bytes below `PATH_MAX`.
    """
    folder = Path(os.path.abspath(path))
    name_max = _limit(folder, "PC_NAME_MAX", _NAME_MAX)
    for part in folder.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            raise ConfigError(
                key,
                f"its part {_short(part)!r} is {size} bytes long; a file or folder name is at "
                f"most {name_max} bytes on this file system",
                hint="shorten that part, or split it into folders (a/b/c)",
            )
    path_max = _limit(folder, "PC_PATH_MAX", _PATH_MAX)
    size = len(os.fsencode(str(folder)))
    if size > path_max - FILES_ROOM:
        raise ConfigError(
            key,
            f"is {size} bytes long (as an absolute path); a path is at most {path_max} bytes "
            f"on this file system and kdist needs {FILES_ROOM} of them for the files it "
            "writes inside",
            hint=f"give a folder of at most {path_max - FILES_ROOM} bytes",
        )
