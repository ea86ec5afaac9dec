"""Where a run writes when it is not told (`outputs/<date>/<time>`), and what it writes there.

`kdist.experiment` (a notebook's `Experiment` without `run_dir`) and `kdist.launch` call
`default_run_dir`; `conf/train.yaml` spells the same folders with Hydra's `${now:...}`
resolver as `HYDRA_RUN_DIR` and `HYDRA_SWEEP_DIR` below, and a test checks that it does.

`RUN_FILES` names what kdist writes at the top of a run folder: `kdist.train` refuses a
folder that holds anything else (unless `trainer.allow_foreign_files=true`) or whose
output names are symbolic links (`foreign_entries`, `linked_entries`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

__all__ = [
    "DATE_FORMAT",
    "HYDRA_RUN_DIR",
    "HYDRA_SWEEP_DIR",
    "MULTIRUN_ROOT",
    "RUN_FILES",
    "RUN_ROOT",
    "TIME_FORMAT",
    "default_run_dir",
    "foreign_entries",
    "is_run_file",
    "linked_entries",
]

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


# -- what a run folder may already hold -------------------------------------------------

# The names kdist writes at the top of a run folder (`DESIGN.md`'s run directory).
RUN_FILES = frozenset(
    {
        ".hydra",
        ".lock",
        "train.log",
        "config.yaml",
        "metrics.json",
        "history.csv",
        "curves.png",
        "checkpoints",
        "backup",
        "tensorboard",
        "model.keras",
        "saved_model",
        "eval.csv",
        "predictions.npz",
    }
)
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
        elif path.is_dir() and name in ("backup", "checkpoints", ".hydra", "tensorboard"):
            found.extend(f"{name}/{e.name}" for e in sorted(path.iterdir()) if e.is_symlink())
    return found
