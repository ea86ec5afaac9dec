"""A run folder's layout: where a run writes when not told, the names of what it writes there.

Every module that reads or writes a run folder takes the names from here (`METRICS`,
`CHECKPOINTS`, `SAVED_CONFIGS`, ...), so a name is spelled once; `clean_leftovers` is the
one clean-up of what an interrupted save leaves.

`kdist.experiment` (a notebook's `Experiment` without `run_dir`) and `kdist.launch` call
`default_run_dir`; `conf/train.yaml` spells the same folders with Hydra's `${now:...}`
resolver as `HYDRA_RUN_DIR` and `HYDRA_SWEEP_DIR` below, and a test checks that it does.

`RUN_FILES` names what kdist writes at the top of a run folder: `kdist.train` refuses a
folder that holds anything else (unless `trainer.allow_foreign_files=true`) or whose
output names are symbolic links (`foreign_entries`, `linked_entries`).
"""

from __future__ import annotations

import logging
import os
import shutil
from datetime import datetime
from pathlib import Path

from kdist.config.errors import ConfigError
from kdist.config.path_limits import check_path_length

__all__ = [
    "BACKUP",
    "CHECKPOINTS",
    "CONFIG",
    "CURVES",
    "DATE_FORMAT",
    "EVAL",
    "EVAL_LOCK",
    "HISTORY",
    "HYDRA",
    "HYDRA_RUN_DIR",
    "HYDRA_SWEEP_DIR",
    "LOCK",
    "METRICS",
    "MODEL",
    "MULTIRUN_ROOT",
    "PREDICTIONS",
    "RUN_FILES",
    "RUN_ROOT",
    "RUN_SUBFOLDERS",
    "SAVED_MODEL",
    "SAVE_FOLDERS",
    "SUMMARY",
    "TENSORBOARD",
    "TIME_FORMAT",
    "TRAIN_LOG",
    "clean_leftovers",
    "default_run_dir",
    "enclosing_run",
    "foreign_entries",
    "is_run_file",
    "linked_entries",
    "saved_configs",
]

log = logging.getLogger(__name__)

RUN_ROOT = "outputs"
MULTIRUN_ROOT = "multirun"
DATE_FORMAT = "%Y-%m-%d"
TIME_FORMAT = "%H-%M-%S"
# `hydra.run.dir` and `hydra.sweep.dir` in `conf/train.yaml`.
HYDRA_RUN_DIR = f"{RUN_ROOT}/${{now:{DATE_FORMAT}}}/${{now:{TIME_FORMAT}}}"
HYDRA_SWEEP_DIR = f"{MULTIRUN_ROOT}/${{now:{DATE_FORMAT}}}/${{now:{TIME_FORMAT}}}"


def default_run_dir(*, microseconds: bool = False, now: datetime | None = None) -> Path:
    """The run folder for a run started `now`: `outputs/<date>/<time>`, relative.

    Args:
        microseconds: add `-<microseconds>` to the time, so that several runs started in
            one second (a notebook's experiments) get folders of their own.
            Defaults to `False`.
        now: the start time. Defaults to `None`: the current local time.

    Returns:
        e.g. `Path("outputs/2026-11-21/10-00-00")`.
    """
    now = now or datetime.now()
    time_format = f"{TIME_FORMAT}-%f" if microseconds else TIME_FORMAT
    return Path(RUN_ROOT) / now.strftime(DATE_FORMAT) / now.strftime(time_format)


# -- the names kdist writes at the top of a run folder (`DESIGN.md`'s run directory) ------

HYDRA = ".hydra"  # the composed config Hydra (or kdist, once the run is accepted) writes
LOCK = ".lock"  # held by the chief while it trains, by kdist.predict while it writes
EVAL_LOCK = ".eval.lock"  # held by the sidecar evaluator while it writes eval.csv
TRAIN_LOG = "train.log"
CONFIG = "config.yaml"  # the resolved config; also `.hydra/config.yaml`
METRICS = "metrics.json"
HISTORY = "history.csv"
CURVES = "curves.png"
CHECKPOINTS = "checkpoints"
BACKUP = "backup"
TENSORBOARD = "tensorboard"
MODEL = "model.keras"
SAVED_MODEL = "saved_model"
EVAL = "eval.csv"  # the sidecar evaluator's rows
PREDICTIONS = "predictions.npz"
SUMMARY = "summary.csv"  # in a multirun's sweep folder, one row per job
# The folders of checkpoints a run resumes from, the newest-saved first.
SAVE_FOLDERS = (BACKUP, CHECKPOINTS)

RUN_FILES = frozenset(
    {
        HYDRA,
        LOCK,
        EVAL_LOCK,
        TRAIN_LOG,
        CONFIG,
        METRICS,
        HISTORY,
        CURVES,
        CHECKPOINTS,
        BACKUP,
        TENSORBOARD,
        MODEL,
        SAVED_MODEL,
        EVAL,
        PREDICTIONS,
    }
)


# A run's own folders: another run inside one would mix its files with that run's (a
# restore would read them as checkpoints, TensorBoard would show them as the run's).
RUN_SUBFOLDERS = (CHECKPOINTS, BACKUP, TENSORBOARD, SAVED_MODEL, HYDRA)


def _looks_like_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in (f"{HYDRA}/{CONFIG}", CONFIG, METRICS, LOCK))


def enclosing_run(folder: str | Path) -> tuple[Path, str] | None:
    """The run folder whose own subfolder (`checkpoints/`, `backup/`, ...) holds `folder`.

    Returns:
        `(run folder, subfolder name)`, or `None` when `folder` is in no run's subfolder.
    """
    path = Path(folder).absolute()
    for node in (path, *path.parents):
        if node.name in RUN_SUBFOLDERS and _looks_like_run(node.parent):
            return node.parent, node.name
    return None


def saved_configs(run_dir: str | Path) -> tuple[Path, Path]:
    """Where a run's config may be, in the order to read them.

    `.hydra/config.yaml` (a `kdist.train` run), then `config.yaml` (a run from the Python
    API, which has no `.hydra/`).
    """
    folder = Path(run_dir)
    return folder / HYDRA / CONFIG, folder / CONFIG


def clean_leftovers(folder: str | Path) -> list[Path]:
    """Remove what interrupted saves left in a checkpoint folder (`*_temp*` entries).

    A save cut short (a full disk, a kill) leaves e.g. `backup/ckpt-20_temp`; a restore
    skips it, but it takes disk space until the next save.

    Args:
        folder: a checkpoint folder (`run_dir/backup`, `run_dir/checkpoints`); nothing
            happens when it does not exist.

    Returns:
        What was removed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for entry in sorted(folder.iterdir()):
        if "_temp" not in entry.name:
            continue
        log.info("removing leftover temporary checkpoint files %s", entry)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


# -- what a run folder may already hold -------------------------------------------------

# Hidden staging names of kdist's atomic writes (`.metrics.json.x1y2`, `.model.partial-7.keras`,
# `.saved_model.partial`, ...) start with a dot and one of these.
_STAGING_STEMS = tuple(f".{name.split('.')[0]}" for name in RUN_FILES if not name.startswith("."))


def is_run_file(name: str) -> bool:
    """Whether `name` (an entry at the top of a run folder) is one kdist writes."""
    return name in RUN_FILES or (name.startswith(_STAGING_STEMS) and name != ".")


def foreign_entries(run_dir: str | Path) -> list[str]:
    """The entries of `run_dir` kdist does not write (sorted; empty when none or no folder)."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return []
    return sorted(entry.name for entry in folder.iterdir() if not is_run_file(entry.name))


def linked_entries(run_dir: str | Path) -> list[str]:
    """kdist's output names in `run_dir` (and in its checkpoint folders) that are links.

    A symbolic link at a name kdist writes would send the write elsewhere (another
    user's file emptied, overwritten or appended to).
    """
    folder = Path(run_dir)
    if folder.is_symlink():
        return [str(folder)]
    found = []
    for name in sorted(RUN_FILES):
        path = folder / name
        if path.is_symlink():
            found.append(name)
        elif path.is_dir() and name in (*SAVE_FOLDERS, HYDRA, TENSORBOARD):
            found.extend(f"{name}/{e.name}" for e in sorted(path.iterdir()) if e.is_symlink())
    return found


def check_run_dir(key: str, path: str | os.PathLike[str]) -> None:
    """Refuse a run folder that cannot be created or written, before Hydra tries to.

    Args:
        key: the config key that names the folder (e.g. `hydra.run.dir`), for messages.
        path: the folder; it may not exist yet.

    Raises:
        ConfigError: naming `key` when a part of `path` is a file, the nearest existing
            folder is not writable, or `path` is inside another run's own folders
            (`enclosing_run`).
    """
    check_path_length(key, path)  # before the first stat: `File name too long`
    folder = Path(path).absolute()
    inside = enclosing_run(folder)
    if inside is not None:
        run, name = inside
        raise ConfigError(
            key,
            f"is inside the {name}/ folder of the run {run}; its files would mix with that run's",
            value=str(path),
            hint="choose a folder outside every run's checkpoints/, backup/, tensorboard/",
        )
    for candidate in (folder, *folder.parents):
        if not candidate.exists():
            continue
        if not candidate.is_dir():
            where = "" if candidate == folder else f" ({candidate} is a file)"
            raise ConfigError(
                key,
                f"is not a folder{where}",
                value=str(path),
                hint="give a folder path that is free or a kdist run folder",
            )
        if not os.access(candidate, os.W_OK | os.X_OK):
            raise ConfigError(
                key,
                f"cannot be written ({candidate} is read-only)",
                value=str(path),
                hint="give a folder you can write to",
            )
        return
