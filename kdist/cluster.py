"""Cluster resolution in one place: TF_CONFIG (Kubernetes, any manager), SLURM, or none.

Everything here is plain Python and runs before TensorFlow starts, so a malformed
cluster description fails with one line naming the problem instead of a silent
1-replica run (a misspelled TF_CONFIG key gives exactly that in TensorFlow).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kdist.config.errors import ConfigError

__all__ = [
    "TASK_TYPES",
    "ClusterInfo",
    "parse_tf_config",
    "resolve",
    "slurm_info",
    "tf_config_for",
]

TASK_TYPES = ("chief", "worker", "ps", "evaluator")
_TF_CONFIG_KEYS = ("cluster", "task", "environment", "rpc_layer")
_TASK_KEYS = ("type", "index", "trial")
_SLURM_VARS = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST")


@dataclass(frozen=True)
class ClusterInfo:
    """Where this process sits in its cluster.

    Attributes:
        source: `"tf_config"`, `"slurm"` or `"none"` (a single process).
        cluster: job name -> list of `host:port` addresses (empty for `"none"`).
        task_type: this process's job (`"worker"`, `"chief"`, `"ps"`, ...), or `None`.
        task_index: this process's index in its job.
        port_base: first port of each SLURM node's tasks (SLURM only).
    """

    source: str = "none"
    cluster: Mapping[str, list[str]] = field(default_factory=dict)
    task_type: str | None = None
    task_index: int = 0
    port_base: int = 8888

    @property
    def num_workers(self) -> int:
        """Tasks that run training steps (`chief` and `worker` jobs)."""
        return len(self.cluster.get("chief", [])) + len(self.cluster.get("worker", []))

    @property
    def is_chief(self) -> bool:
        """The `chief` task, else worker 0 when the cluster has no chief; True when alone."""
        if self.task_type is None or self.task_type == "chief":
            return True
        return self.task_type == "worker" and self.task_index == 0 and not self.cluster.get("chief")

    @property
    def task_name(self) -> str:
        """E.g. `"worker 1"`, for messages."""
        return f"{self.task_type or 'local'} {self.task_index}"

    def resolver(self) -> Any:
        """The TensorFlow cluster resolver for this cluster, or `None` when alone."""
        if self.source == "none":
            return None
        import tensorflow as tf

        if self.source == "slurm":
            return _slurm_resolver(self.port_base)
        spec = tf.train.ClusterSpec({job: list(addrs) for job, addrs in self.cluster.items()})
        return tf.distribute.cluster_resolver.SimpleClusterResolver(
            spec, task_type=self.task_type, task_id=self.task_index, rpc_layer="grpc"
        )


def _fail(problem: str, hint: str | None = None) -> ConfigError:
    return ConfigError("TF_CONFIG", problem, hint=hint)


def parse_tf_config(text: str) -> ClusterInfo:
    """Parse and check a TF_CONFIG value.

    Args:
        text: the JSON text of the TF_CONFIG environment variable.

    Returns:
        The `ClusterInfo` it describes.

    Raises:
        ConfigError: naming TF_CONFIG and the problem: malformed JSON, an unknown key,
            a missing cluster or task, a task type or index out of range, duplicate
            addresses.
    """
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise _fail(f"is not valid JSON ({error.msg} at character {error.pos})") from None
    if not isinstance(config, dict):
        raise _fail(f"must be a JSON object, got {type(config).__name__}")
    for key in config:
        if key not in _TF_CONFIG_KEYS:
            close = [k for k in _TF_CONFIG_KEYS if k[:4] == str(key)[:4]]
            hint = f"did you mean '{close[0]}'?" if close else None
            raise _fail(
                f"unknown key {key!r} (valid keys: {', '.join(_TF_CONFIG_KEYS)})",
                hint,
            )
    cluster = config.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        raise _fail(
            "has no 'cluster' mapping of job names to address lists",
            'e.g. {"cluster": {"worker": ["host0:2222", "host1:2222"]}, '
            '"task": {"type": "worker", "index": 0}}',
        )
    seen: dict[str, str] = {}
    checked: dict[str, list[str]] = {}
    for job, addresses in cluster.items():
        if job not in TASK_TYPES:
            raise _fail(f"cluster has an unknown job {job!r} (valid: {', '.join(TASK_TYPES)})")
        if not isinstance(addresses, list) or not addresses:
            raise _fail(f"cluster.{job} must be a non-empty list of 'host:port' strings")
        for i, address in enumerate(addresses):
            if not isinstance(address, str) or not _is_host_port(address):
                raise _fail(f"cluster.{job}[{i}]={address!r} is not a 'host:port' address")
            if address in seen:
                raise _fail(
                    f"address {address!r} appears twice ({seen[address]} and {job} {i})",
                    "give every task its own host:port",
                )
            seen[address] = f"{job} {i}"
        checked[job] = list(addresses)
    if len(checked.get("chief", [])) > 1:
        raise _fail(f"cluster.chief has {len(checked['chief'])} addresses; a cluster has one chief")
    task = config.get("task")
    if not isinstance(task, dict):
        raise _fail("has no 'task' mapping", 'e.g. "task": {"type": "worker", "index": 0}')
    for key in task:
        if key not in _TASK_KEYS:
            raise _fail(f"task has an unknown key {key!r} (valid keys: type, index)")
    task_type = task.get("type")
    if task_type is None:
        raise _fail("task.type is missing", f"use one of: {', '.join(checked)}")
    if task_type not in checked:
        raise _fail(
            f"task.type={task_type!r} is not a job of the cluster",
            f"use one of: {', '.join(checked)}",
        )
    index = task.get("index")
    if index is None:
        raise _fail("task.index is missing", f"use 0 to {len(checked[task_type]) - 1}")
    if not isinstance(index, int) or isinstance(index, bool):
        raise _fail(f"task.index={index!r} must be an integer")
    if not 0 <= index < len(checked[task_type]):
        raise _fail(
            f"task.index={index} is out of range for {len(checked[task_type])} {task_type} task(s)",
            f"use 0 to {len(checked[task_type]) - 1}",
        )
    return ClusterInfo(source="tf_config", cluster=checked, task_type=task_type, task_index=index)


def _is_host_port(address: str) -> bool:
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def _has_gpus() -> bool:
    return bool(os.environ.get("CUDA_VISIBLE_DEVICES")) or shutil.which("nvidia-smi") is not None


def _slurm_resolver(port_base: int) -> Any:
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
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import (
        expand_tasks_per_node,
    )

    return list(expand_tasks_per_node(os.environ["SLURM_STEP_TASKS_PER_NODE"]))


def slurm_info(env: Mapping[str, str], *, port_base: int = 8888) -> ClusterInfo:
    """The cluster of a SLURM job step (srun), from its environment variables.

    Raises:
        ConfigError: naming the SLURM variable that is missing or inconsistent.
    """
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import (
        expand_hostlist,
        expand_tasks_per_node,
    )

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


def resolve(
    env: Mapping[str, str] | None = None, *, mode: str = "auto", port_base: int = 8888
) -> ClusterInfo:
    """Find this process's cluster: TF_CONFIG first, then a multi-task SLURM step, else none.

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
        return parse_tf_config(text)
    if mode == "tf_config":
        raise ConfigError("TF_CONFIG", "is not set but strategy.cluster=tf_config asks for it")
    slurm_tasks = env.get("SLURM_STEP_NUM_TASKS")
    if mode == "slurm" or (mode == "auto" and slurm_tasks and int(slurm_tasks) > 1):
        return slurm_info(env, port_base=port_base)
    return ClusterInfo()


def tf_config_for(cluster: Mapping[str, list[str]], task_type: str, index: int) -> str:
    """The TF_CONFIG JSON for one task of `cluster` (used by `kdist.launch`)."""
    return json.dumps(
        {
            "cluster": {job: list(a) for job, a in cluster.items()},
            "task": {"type": task_type, "index": index},
        }
    )
