"""A job of Hydra's submitit launcher run as several tasks on this machine (`submitit_local`).

`hydra/launcher=submitit_slurm` with `nodes`/`tasks_per_node` starts each task with srun, so
the task reads SLURM's variables (`kdist.cluster.slurm`). `submitit_local` starts the same
tasks as child processes of one job and tells each its place in its own variables (those
`submitit.JobEnvironment` reads): the tasks listen on `localhost:port_base + rank`.
"""

from __future__ import annotations

from collections.abc import Mapping

from kdist.cluster.info import ClusterInfo
from kdist.config.errors import ConfigError

__all__ = ["LOCAL_TASKS", "submitit_local_info"]

# Set by submitit's local executor in each task (`submitit.local.local.LocalJobEnvironment`).
LOCAL_TASKS = "SUBMITIT_LOCAL_NTASKS"
_LOCAL_RANK = "SUBMITIT_LOCAL_GLOBALID"


def submitit_local_info(env: Mapping[str, str], *, port_base: int = 8888) -> ClusterInfo:
    """The cluster of a multi-task `submitit_local` job: one worker per task, on loopback.

    Args:
        env: the task's environment.
        port_base: task `i` listens on `localhost:port_base + i`. Defaults to `8888`.

    Returns:
        The `ClusterInfo` (source `"submitit"`, every task a `worker`, task 0 the chief).

    Raises:
        ConfigError: naming the submitit variable that is missing or out of range.
    """
    try:
        num_tasks = int(env[LOCAL_TASKS])
        rank = int(env[_LOCAL_RANK])
    except KeyError as error:
        raise ConfigError(str(error.args[0]), "is not set in a submitit_local task") from None
    except ValueError as error:
        raise ConfigError(_LOCAL_RANK, f"cannot be read ({error})") from None
    if not 0 <= rank < num_tasks:
        raise ConfigError(_LOCAL_RANK, f"={rank} is out of range for {num_tasks} tasks")
    return ClusterInfo(
        source="submitit",
        cluster={"worker": [f"localhost:{port_base + i}" for i in range(num_tasks)]},
        task_type="worker",
        task_index=rank,
        port_base=port_base,
    )
