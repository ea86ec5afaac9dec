"""Who is chief, in one function (`is_chief_task`), and chief-only side effects.

Every file kdist writes goes through `writable_dir`.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "chief_task",
    "cleanup_dir",
    "is_chief",
    "is_chief_task",
    "non_chief_overrides",
    "on_chief",
    "remove_scratch",
    "scratch_dir",
    "scratch_prefix",
    "task_info",
    "writable_dir",
]

T = TypeVar("T")


def chief_task(cluster: Mapping[str, Any]) -> tuple[str, int]:
    """`(task_type, task_index)` of the chief of `cluster`: its `chief` task, else worker 0.

    Args:
        cluster: job name -> the job's tasks (addresses); a job with no task counts as absent.
    """
    return ("chief", 0) if cluster.get("chief") else ("worker", 0)


def is_chief_task(task_type: str | None, task_index: int, cluster: Mapping[str, Any]) -> bool:
    """Whether task `task_type` `task_index` of `cluster` writes the run's files.

    The one rule every caller uses: the `chief` task when the cluster has one, else
    worker 0 (`chief_task`); a process with no cluster (`task_type` `None`) is always
    the chief.

    Args:
        task_type: the task's job (`"chief"`, `"worker"`, `"ps"`, ...), or `None` alone.
        task_index: the task's index in its job.
        cluster: job name -> the job's tasks (addresses); a job with no task counts as absent.

    Returns:
        `True` on the chief.
    """
    if task_type is None or task_type == "chief":
        return True
    return (task_type, task_index) == chief_task(cluster)


def task_info(strategy: Any = None) -> tuple[str | None, int]:
    """`(task_type, task_id)` of this process in its cluster; `(None, 0)` when alone."""
    resolver = getattr(strategy, "cluster_resolver", None) if strategy is not None else None
    if resolver is None:
        return None, 0
    task_type = getattr(resolver, "task_type", None)
    task_id = getattr(resolver, "task_id", None)
    return task_type, int(task_id or 0)


def is_chief(strategy: Any = None) -> bool:
    """Whether this process writes the run's files (`is_chief_task` for its task).

    A process with no cluster (one device, mirrored) is always the chief.

    Args:
        strategy: the run's `tf.distribute.Strategy`. Defaults to `None` (single process).
    """
    task_type, task_id = task_info(strategy)
    if task_type is None:
        return True
    return is_chief_task(task_type, task_id, strategy.cluster_resolver.cluster_spec().as_dict())


def on_chief(strategy: Any, action: Callable[[], T]) -> T | None:
    """Run `action` on the chief only and return its result (`None` elsewhere)."""
    return action() if is_chief(strategy) else None


def scratch_prefix(run_dir: str | Path, task_type: str | None, task_id: int) -> str:
    """The common start of the paths of a task's scratch folders for run `run_dir`."""
    digest = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:10]
    return str(Path(tempfile.gettempdir()) / f"kdist-{task_type}{task_id}-{digest}-")


def remove_scratch(run_dir: str | Path, task_type: str | None, task_id: int) -> None:
    """Remove every scratch folder of a task of run `run_dir` (e.g. after it was killed)."""
    prefix = Path(scratch_prefix(run_dir, task_type, task_id))
    for path in prefix.parent.glob(f"{prefix.name}*"):
        shutil.rmtree(path, ignore_errors=True)


def scratch_dir(run_dir: str | Path, strategy: Any, purpose: str) -> Path:
    """An empty temporary folder for this task's throw-away writes in run `run_dir`.

    Its name is fixed by the run directory, the task and `purpose`, so a task that was
    killed before it could remove its folder reuses (and empties) it when the run is
    restarted, and a finished run leaves nothing behind.
    """
    task_type, task_id = task_info(strategy)
    path = Path(f"{scratch_prefix(run_dir, task_type, task_id)}{purpose}")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def writable_dir(run_dir: str | Path, strategy: Any = None) -> Path:
    """The folder this process may write to: `run_dir` on the chief, a temporary folder
    elsewhere (collective ops such as saving still need every worker to take part).
    Remove the temporary one with `cleanup_dir`.
    """
    if is_chief(strategy):
        from kdist.config.path_limits import check_path_length
        from kdist.runs.layout import check_run_dir

        check_path_length("run_dir", run_dir)  # `is_dir` raises for a name too long
        path = Path(run_dir)
        if not path.is_dir():
            # A file, a folder it cannot create, or one inside another run's checkpoints/:
            # one line naming run_dir (an existing folder is read from, even read-only).
            check_run_dir("run_dir", path)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return scratch_dir(run_dir, strategy, "outputs")


def cleanup_dir(path: str | Path, run_dir: str | Path) -> None:
    """Remove `path` when it is a non-chief temporary folder (not `run_dir`)."""
    if Path(path).resolve() != Path(run_dir).resolve():
        shutil.rmtree(path, ignore_errors=True)


def non_chief_overrides(info: Any, *, multirun: bool = False) -> list[str]:
    """Hydra overrides that keep a non-chief task from writing the run directory.

    Hydra writes `.hydra/` and `train.log` into its output folder in every process. Only
    the chief may write the run's files, so the other tasks get no `.hydra/` copy and
    console-only logging; under multirun their sweep folder is a temporary one (removed
    at exit).

    Args:
        info: this process's cluster position (a `kdist.cluster.ClusterInfo`).
        multirun: the command is a Hydra multirun. Defaults to `False`.

    Returns:
        Overrides to append to the command line (empty on the chief).
    """
    if is_chief_task(info.task_type, info.task_index, info.cluster):  # info.is_chief's rule
        return []
    quiet = ["hydra.output_subdir=null", "hydra/job_logging=stdout"]
    if not multirun:
        # Same run directory as the chief (to read its backups), but nothing written.
        return quiet
    # A sweep writes multirun.yaml into its folder: give other tasks their own.
    scratch = tempfile.mkdtemp(prefix=f"kdist-{info.task_type}{info.task_index}-hydra-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return [f"hydra.sweep.dir={scratch}", *quiet]
