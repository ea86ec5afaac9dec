"""ParameterServerStrategy from the resolved cluster, with an optional variable partitioner."""

from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

from kdist import cluster as kdist_cluster
from kdist.config.errors import ConfigError
from kdist.strategies.shared import reuse

__all__ = ["parameter_server", "partitioner"]

log = logging.getLogger(__name__)

_LAUNCH_HINT = "start a local cluster with `python -m kdist.launch --workers N --ps M -- ...`"

# Connecting to a cluster reconfigures the process's eager context, so a process builds
# one ParameterServerStrategy; later experiments (a Hydra multirun, a notebook) reuse it.
_built: dict[tuple[Any, ...], tf.distribute.Strategy] = {}


def _check_optional_positive(key: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(key, "must be a positive integer or null", value=value)


def partitioner(
    *,
    min_shard_bytes: int | None = None,
    max_shard_bytes: int | None = None,
    max_shards: int | None = None,
    num_ps: int = 1,
) -> Any:
    """The variable partitioner the `strategy` keys ask for, or `None` for no sharding.

    Only the first axis is split (an embedding table's rows), and only variables of more
    than one shard become `ShardedVariable`s; the others stay whole on one ps.

    Args:
        min_shard_bytes: `MinSizePartitioner`: as many shards as possible of at least
            this many bytes. Defaults to `None`.
        max_shard_bytes: `MaxSizePartitioner`: as few shards as possible of at most
            this many bytes. Defaults to `None`.
        max_shards: most shards per variable. Defaults to `None`: the number of ps.
        num_ps: parameter servers in the cluster. Defaults to `1`.

    Returns:
        A `tf.distribute.experimental.partitioners.Partitioner`, or `None`.

    Raises:
        ConfigError: naming `strategy.min_shard_bytes`, `strategy.max_shard_bytes` or
            `strategy.max_shards`.
    """
    _check_optional_positive("strategy.min_shard_bytes", min_shard_bytes)
    _check_optional_positive("strategy.max_shard_bytes", max_shard_bytes)
    _check_optional_positive("strategy.max_shards", max_shards)
    if min_shard_bytes is not None and max_shard_bytes is not None:
        raise ConfigError(
            "strategy.max_shard_bytes",
            "cannot be set together with strategy.min_shard_bytes",
            value=max_shard_bytes,
            hint="set one of them (or neither, for no sharding)",
        )
    partitioners = tf.distribute.experimental.partitioners
    shards = max_shards or num_ps
    if min_shard_bytes is not None:
        return partitioners.MinSizePartitioner(min_shard_bytes=min_shard_bytes, max_shards=shards)
    if max_shard_bytes is not None:
        return partitioners.MaxSizePartitioner(max_shard_bytes=max_shard_bytes, max_shards=shards)
    if max_shards is not None:
        raise ConfigError(
            "strategy.max_shards",
            "needs strategy.min_shard_bytes or strategy.max_shard_bytes",
            value=max_shards,
            hint="e.g. strategy.min_shard_bytes=262144 (256 KiB)",
        )
    return None


def parameter_server(
    *,
    steps_per_schedule: int = 8,
    min_shard_bytes: int | None = None,
    max_shard_bytes: int | None = None,
    max_shards: int | None = None,
    cluster: str = "auto",
    port_base: int = 8888,
    resolved: kdist_cluster.ClusterInfo | None = None,
) -> tf.distribute.Strategy:
    """`tf.distribute.ParameterServerStrategy` over the resolved cluster.

    This process is the coordinator (the `chief` task): it builds the model, places the
    variables on the `ps` tasks and schedules training steps on the `worker` tasks, which,
    like the parameter servers, run `python -m kdist.server`. The kdist engine drives it
    with a `tf.distribute.coordinator.ClusterCoordinator` (`kdist.engine.ps_runner`).

    Args:
        steps_per_schedule: optimizer steps run by one scheduled function on a worker;
            the engine reads it (`schedule` costs Python time per call, so pack steps).
            Defaults to `8`.
        min_shard_bytes: split variables into shards of at least this many bytes, at
            most `max_shards` (`MinSizePartitioner`). Defaults to `None`.
        max_shard_bytes: split variables into shards of at most this many bytes
            (`MaxSizePartitioner`). Defaults to `None`.
        max_shards: most shards per variable. Defaults to `None`: the number of ps.
        cluster: where the cluster comes from: `auto` (TF_CONFIG, else a SLURM step),
            `tf_config` or `slurm`. A SLURM step has no roles, so SLURM jobs give each
            task a TF_CONFIG (`recipes/cluster/slurm-ps.sbatch`). Defaults to `"auto"`.
        port_base: first port of the tasks on each SLURM node. Defaults to `8888`.
        resolved: this process's cluster, resolved once for the run with `cluster` and
            `port_base` (`kdist.run_setup`). Defaults to `None`: resolved here.

    Returns:
        The strategy.

    Raises:
        ConfigError: naming the strategy key, TF_CONFIG or a SLURM variable, e.g. when
            there is no cluster, it has no `ps` or `worker` task, or this process is not
            the chief.
    """
    if isinstance(steps_per_schedule, bool) or not isinstance(steps_per_schedule, int):
        raise ConfigError(
            "strategy.steps_per_schedule", "must be a positive integer", value=steps_per_schedule
        )
    if steps_per_schedule < 1:
        raise ConfigError(
            "strategy.steps_per_schedule", "must be a positive integer", value=steps_per_schedule
        )
    info = (
        resolved
        if resolved is not None
        else kdist_cluster.resolve(mode=cluster, port_base=port_base)
    )
    if info.source == "none":
        raise ConfigError(
            "strategy",
            "parameter_server needs a cluster with worker and ps tasks, and found none "
            "(no TF_CONFIG, no SLURM step)",
            value="parameter_server",
            hint=_LAUNCH_HINT,
        )
    if info.source == "slurm":
        raise ConfigError(
            "strategy.cluster",
            "a SLURM step gives every task the worker role; parameter_server needs chief, "
            "worker and ps tasks",
            value=cluster,
            hint="give each task its TF_CONFIG as recipes/cluster/slurm-ps.sbatch does, with "
            "strategy.cluster=tf_config",
        )
    for job in ("worker", "ps"):
        if not info.cluster.get(job):
            raise ConfigError(
                "TF_CONFIG" if info.source == "tf_config" else "strategy.cluster",
                f"the cluster has no {job!r} task; parameter_server needs workers and ps",
                hint=_LAUNCH_HINT,
            )
    if info.task_type != "chief":
        raise ConfigError(
            "TF_CONFIG",
            f"task type {info.task_type!r} does not run the training program under "
            "parameter_server; only the chief does",
            hint="run worker and ps tasks with `python -m kdist.server`",
        )
    num_ps = len(info.cluster["ps"])
    variable_partitioner = partitioner(
        min_shard_bytes=min_shard_bytes,
        max_shard_bytes=max_shard_bytes,
        max_shards=max_shards,
        num_ps=num_ps,
    )
    key = (
        min_shard_bytes,
        max_shard_bytes,
        max_shards,
        info.source,
        info.addresses,
    )
    reused = reuse(
        _built,
        key,
        conflict="this process already coordinates a different parameter-server cluster or "
        "partitioning",
        hint="TensorFlow connects a process to one cluster; start a new process",
    )
    if reused is not None:
        return reused
    strategy = tf.distribute.ParameterServerStrategy(
        kdist_cluster.cluster_resolver(info), variable_partitioner=variable_partitioner
    )
    log.info(
        "ParameterServerStrategy: chief coordinating %d worker(s) and %d ps from %s; "
        "%s; %d step(s) per scheduled function",
        len(info.cluster["worker"]),
        num_ps,
        info.source,
        "no variable sharding"
        if variable_partitioner is None
        else f"variables sharded by {type(variable_partitioner).__name__}",
        steps_per_schedule,
    )
    _built[key] = strategy
    return strategy
