"""Where this process sits in its cluster: `ClusterInfo`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kdist.cluster.chief import is_chief_task

__all__ = ["TASK_TYPES", "ClusterInfo"]

TASK_TYPES = ("chief", "worker", "ps", "evaluator")


@dataclass(frozen=True)
class ClusterInfo:
    """Where this process sits in its cluster.

    Attributes:
        source: `"tf_config"`, `"slurm"`, `"submitit"` (a `submitit_local` job's tasks) or
            `"none"` (a single process).
        cluster: job name -> list of `host:port` addresses (empty for `"none"`).
        task_type: this process's job (`"worker"`, `"chief"`, `"ps"`, ...), or `None`.
        task_index: this process's index in its job.
        port_base: first port of each SLURM node's tasks (SLURM only).
        launched: `(workers, ps)` when `kdist.launch` started this task in a local
            cluster (its `KDIST_LOCAL_CLUSTER`), else `None`.
    """

    source: str = "none"
    cluster: Mapping[str, list[str]] = field(default_factory=dict)
    task_type: str | None = None
    task_index: int = 0
    port_base: int = 8888
    launched: tuple[int, int] | None = None

    @property
    def num_workers(self) -> int:
        """Tasks that run training steps (`chief` and `worker` jobs)."""
        return len(self.cluster.get("chief", [])) + len(self.cluster.get("worker", []))

    @property
    def is_chief(self) -> bool:
        """Whether this process writes the run's files (`kdist.cluster.chief.is_chief_task`)."""
        return is_chief_task(self.task_type, self.task_index, self.cluster)

    @property
    def task_name(self) -> str:
        """E.g. `"worker 1"`, for messages."""
        return f"{self.task_type or 'local'} {self.task_index}"

    @property
    def addresses(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The cluster as a sorted, hashable tuple, e.g. for a cache key."""
        return tuple(sorted((job, tuple(a)) for job, a in self.cluster.items()))
