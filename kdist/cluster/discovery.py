"""Find this process's cluster: TF_CONFIG, a SLURM job step, or none (`resolve`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from kdist.cluster.info import ClusterInfo
from kdist.cluster.slurm import slurm_info
from kdist.cluster.submitit import LOCAL_TASKS, submitit_local_info
from kdist.cluster.tf_config import parse_tf_config
from kdist.config.constants import LOCAL_CLUSTER_ENV
from kdist.config.errors import ConfigError

__all__ = ["resolve"]


def resolve(
    env: Mapping[str, str] | None = None, *, mode: str = "auto", port_base: int = 8888
) -> ClusterInfo:
    """Find this process's cluster: TF_CONFIG, a multi-task SLURM step or submitit job, or none.

    A task of Hydra's `submitit_slurm` launcher is a SLURM step (srun); a task of
    `submitit_local` with `tasks_per_node` > 1 reads submitit's variables
    (`kdist.cluster.submitit`).

    Args:
        env: the environment to read. Defaults to `None`: `os.environ`.
        mode: `auto`, `tf_config`, `slurm` or `none`. Defaults to `"auto"`.
        port_base: SLURM tasks listen on `port_base + i` on each node. Defaults to `8888`.

    Returns:
        The `ClusterInfo`.

    Raises:
        ConfigError: for a malformed TF_CONFIG or SLURM environment, or when `mode` asks
            for a source that is absent.
    """
    env = os.environ if env is None else env
    if mode not in ("auto", "tf_config", "slurm", "none"):
        raise ConfigError(
            "strategy.cluster",
            "is not a valid choice",
            value=mode,
            hint="use one of: auto, tf_config, slurm, none",
        )
    if mode == "none":
        return ClusterInfo()
    text = env.get("TF_CONFIG", "").strip()
    if mode in ("auto", "tf_config") and text:
        return dataclasses.replace(parse_tf_config(text), launched=_launched(env))
    if mode == "tf_config":
        raise ConfigError("TF_CONFIG", "is not set but strategy.cluster=tf_config asks for it")
    slurm_tasks = env.get("SLURM_STEP_NUM_TASKS")
    if mode == "slurm" or (mode == "auto" and slurm_tasks and int(slurm_tasks) > 1):
        return slurm_info(env, port_base=port_base)
    local_tasks = env.get(LOCAL_TASKS, "")
    if mode == "auto" and local_tasks.isdigit() and int(local_tasks) > 1:
        return submitit_local_info(env, port_base=port_base)
    return ClusterInfo()


def _launched(env: Mapping[str, str]) -> tuple[int, int] | None:
    """The `(workers, ps)` of the local cluster `kdist.launch` started, or `None`."""
    try:
        workers, ps = (int(part) for part in env.get(LOCAL_CLUSTER_ENV, "").split(","))
    except ValueError:
        return None
    return (workers, ps) if workers >= 1 and ps >= 0 else None
