"""One owner per search folder: what a search's run folder may hold, and who may write it.

A search (`kdist.tune`, `kdist.tune.search`) holds its run folder's lock for its whole
length (`kdist.runs.lock.hold(..., kind="search")`), so a second search in the same folder,
or a `kdist.train` run there, is refused in one line, and a search never runs a trial that
another process runs. Before anything in the folder changes, `accept_search_dir` refuses a
folder that another process holds, that holds a training run (running or finished), or
that holds files neither a search nor kdist writes.

This module reads files only; it imports neither TensorFlow nor keras-tuner, so the
command line checks a folder before they start.
"""

from __future__ import annotations

import os
from pathlib import Path

from kdist.config.errors import ConfigError
from kdist.runs import lock as run_lock
from kdist.runs.layout import (
    BACKUP,
    CHECKPOINTS,
    CONFIG,
    EVAL,
    HISTORY,
    HYDRA,
    LOCK,
    METRICS,
    MODEL,
    PREDICTIONS,
    SAVED_MODEL,
)

__all__ = ["SEARCH_FILES", "SEARCH_STATE", "accept_search_dir", "foreign_search_entries"]

# keras-tuner's state of the search, and the file recording its settings (`driver`).
SEARCH_STATE = "keras_tuner"
SEARCH_SETTINGS = "search.yaml"
# What a search writes at the top of its run folder (besides Hydra's `.hydra/` and a log).
SEARCH_FILES = frozenset(
    {
        HYDRA,
        LOCK,
        SEARCH_STATE,
        "trials",
        "trials.csv",
        "trials.png",
        "best.yaml",
        "data.npz",  # a notebook search's arrays (`kdist.tuning.notebook`)
    }
)
# What a training run leaves at the top of its folder and a search never writes.
_TRAINING_FILES = (METRICS, CHECKPOINTS, BACKUP, MODEL, SAVED_MODEL, HISTORY, EVAL, PREDICTIONS)
_FOREIGN_KEY = "trainer.allow_foreign_files"


def _is_search_file(name: str) -> bool:
    # Hidden staging names of atomic writes (`.trials.csv.x1y2`), Hydra's `<job>.log`.
    stems = tuple(f".{n.split('.')[0]}" for n in SEARCH_FILES if not n.startswith("."))
    return name in SEARCH_FILES or name.endswith(".log") or name.startswith(stems)


def foreign_search_entries(run_dir: str | os.PathLike[str]) -> list[str]:
    """The entries of `run_dir` a search does not write (sorted; empty when none)."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return []
    return sorted(e.name for e in folder.iterdir() if not _is_search_file(e.name))


def _is_search(folder: Path) -> bool:
    return (folder / SEARCH_STATE / SEARCH_SETTINGS).is_file() or (
        run_lock.recorded_kind(folder) == "search"
    )


def accept_search_dir(
    run_dir: str | os.PathLike[str],
    *,
    key: str = "hydra.run.dir",
    allow_foreign_files: bool = False,
) -> None:
    """Refuse a search's run folder before anything in it changes; reads only.

    In this order: another process holds the folder's lock (a search or a training run);
    it holds a training run's outputs (`metrics.json`, `checkpoints/`, `model.keras`, ...,
    or a `.hydra/` config with no search beside it); it holds files a search does not
    write (unless `allow_foreign_files`); a name a search writes there is a symbolic link.

    Args:
        run_dir: the search's run folder (it may not exist yet).
        key: the config key or argument naming the folder. Defaults to `"hydra.run.dir"`.
        allow_foreign_files: accept files kdist does not write (`trainer.allow_foreign_files`).
            A training run's outputs are refused all the same. Defaults to `False`.

    Raises:
        ConfigError: naming `key`, in one line, with what to do.
    """
    folder = Path(run_dir)
    run_lock.check_free(folder, key=key, kind="search")
    if not folder.is_dir():
        return
    if folder.is_symlink():
        raise ConfigError(
            key, "is a symbolic link; kdist does not write through links", value=str(folder)
        )
    training = [name for name in _TRAINING_FILES if (folder / name).exists()]
    if not training and (folder / HYDRA / CONFIG).exists() and not _is_search(folder):
        training = [f"{HYDRA}/{CONFIG}"]
    if training:
        raise ConfigError(
            key,
            f"holds a training run ({', '.join(training[:4])}); a search would mix its "
            "trials into it and replace its config",
            value=str(folder),
            hint="give the search a new or empty folder",
        )
    links = sorted(name for name in SEARCH_FILES if (folder / name).is_symlink() and name != LOCK)
    if links:
        raise ConfigError(
            key,
            f"holds symbolic links where a search writes ({', '.join(links)}); kdist does "
            "not write through links",
            value=str(folder),
            hint="remove them, or choose another folder",
        )
    foreign = foreign_search_entries(folder)
    if foreign and not allow_foreign_files:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise ConfigError(
            key,
            f"already holds files a search does not write ({shown}); the search would mix "
            "its outputs into them",
            value=str(folder),
            hint=f"choose a new or empty folder, or {_FOREIGN_KEY}=true",
        )
