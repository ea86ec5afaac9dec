"""SLURM job steps (srun): the cluster from SLURM's variables, and TensorFlow's resolver."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Any

from kdist.cluster.info import ClusterInfo
from kdist.compat.tf_private import expand_hostlist, expand_tasks_per_node
from kdist.config.errors import ConfigError

__all__ = ["slurm_info", "slurm_resolver"]

_SLURM_VARS = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST")


def _has_gpus() -> bool:
    return bool(os.environ.get("CUDA_VISIBLE_DEVICES")) or shutil.which("nvidia-smi") is not None


def slurm_resolver(port_base: int) -> Any:
    """TensorFlow's `SlurmClusterResolver` for this job step, on GPU or CPU nodes."""
    import tensorflow as tf

    resolver_class = tf.distribute.cluster_resolver.SlurmClusterResolver
    # With --gpus-per-task SLURM gives each task its own CUDA_VISIBLE_DEVICES (and often
    # hides the other GPUs from nvidia-smi): the resolver must not count or reassign them.
    slurm_binds_gpus = bool(os.environ.get("SLURM_GPUS_PER_TASK"))
    if _has_gpus() and not slurm_binds_gpus:
        return resolver_class(port_base=port_base)
    # On CPU nodes SlurmClusterResolver asks nvidia-smi for GPUs (and fails when it is
    # absent), and with 0 GPUs per task its port loop has a zero step. Declaring one
    # pseudo-GPU per task keeps its host:port layout; auto_set_gpu=False leaves
    # CUDA_VISIBLE_DEVICES alone (as SLURM set it, under --gpus-per-task).
    tasks_per_node = max(int(n) for n in _slurm_tasks_per_node())
    return resolver_class(
        port_base=port_base,
        gpus_per_node=tasks_per_node,
        gpus_per_task=1,
        auto_set_gpu=False,
    )


def _slurm_tasks_per_node() -> list[int]:
    return expand_tasks_per_node(os.environ["SLURM_STEP_TASKS_PER_NODE"])


def slurm_info(env: Mapping[str, str], *, port_base: int = 8888) -> ClusterInfo:
    """The cluster of a SLURM job step (srun), from its environment variables.

    Raises:
        ConfigError: naming the SLURM variable that is missing or inconsistent.
    """
    for name in (*_SLURM_VARS, "SLURM_STEP_TASKS_PER_NODE"):
        if name not in env:
            raise ConfigError(name, "is not set; run the training command with srun")
    try:
        rank = int(env["SLURM_PROCID"])
        num_tasks = int(env["SLURM_STEP_NUM_TASKS"])
        hosts = expand_hostlist(env["SLURM_STEP_NODELIST"])
        per_node = expand_tasks_per_node(env["SLURM_STEP_TASKS_PER_NODE"])
    except (ValueError, IndexError) as error:
        raise ConfigError("SLURM_STEP_NODELIST", f"cannot be read ({error})") from None
    if sum(per_node) != num_tasks or len(per_node) != len(hosts):
        raise ConfigError(
            "SLURM_STEP_TASKS_PER_NODE",
            f"gives {sum(per_node)} tasks on {len(per_node)} node(s) but "
            f"SLURM_STEP_NUM_TASKS={num_tasks} on {len(hosts)} node(s)",
        )
    # The same layout as SlurmClusterResolver: hosts sorted, tasks numbered from port_base.
    addresses = [
        f"{host}:{port_base + offset}"
        for host, count in sorted(zip(hosts, per_node, strict=True))
        for offset in range(count)
    ]
    if not 0 <= rank < num_tasks:
        raise ConfigError("SLURM_PROCID", f"={rank} is out of range for {num_tasks} tasks")
    return ClusterInfo(
        source="slurm",
        cluster={"worker": addresses},
        task_type="worker",
        task_index=rank,
        port_base=port_base,
    )
