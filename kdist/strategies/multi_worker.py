"""MultiWorkerMirroredStrategy from the resolved cluster (TF_CONFIG, SLURM or none)."""

from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

from kdist import cluster as kdist_cluster
from kdist.config.errors import ConfigError
from kdist.config.validate import check_choice
from kdist.strategies.shared import check_nccl, reuse

__all__ = ["multi_worker_mirrored"]

log = logging.getLogger(__name__)

_IMPLEMENTATIONS = {
    "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
    "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
}

# TensorFlow enables collective ops once per process, so a process builds one
# MultiWorkerMirroredStrategy; later experiments (a Hydra multirun, a notebook) reuse it.
_built: dict[tuple[Any, ...], tf.distribute.Strategy] = {}


def multi_worker_mirrored(
    *,
    communication: str = "auto",
    timeout_seconds: float | None = None,
    bytes_per_pack: int = 0,
    cluster: str = "auto",
    port_base: int = 8888,
    resolved: kdist_cluster.ClusterInfo | None = None,
) -> tf.distribute.Strategy:
    """`tf.distribute.MultiWorkerMirroredStrategy` over the resolved cluster.

    Args:
        communication: collective implementation: `auto`, `ring` or `nccl` (GPUs only).
            Defaults to `"auto"`.
        timeout_seconds: deadline of each collective; a worker that stops responding makes
            the others fail with `DeadlineExceededError` instead of waiting for the
            heartbeat. Defaults to `None` (TensorFlow's default).
        bytes_per_pack: split each step's all-reduce into packs of about this many bytes
            (TensorFlow's `CommunicationOptions(bytes_per_pack=...)`), which can start
            while the backward pass still runs; 0 lets TensorFlow choose. Defaults to `0`.
        cluster: where the cluster comes from: `auto` (TF_CONFIG, else a multi-task SLURM
            step, else this process alone), `tf_config`, `slurm` or `none`.
            Defaults to `"auto"`.
        port_base: first port of the tasks on each SLURM node. Defaults to `8888`.
        resolved: this process's cluster, resolved once for the run with `cluster` and
            `port_base` (`kdist.run_setup`). Defaults to `None`: resolved here.

    Returns:
        The strategy.

    Raises:
        ConfigError: naming `strategy.communication`, `strategy.timeout_seconds`,
            `strategy.bytes_per_pack`,
            TF_CONFIG or a SLURM variable.
    """
    check_choice("strategy.communication", communication, _IMPLEMENTATIONS)
    # Physical devices: listing logical ones would start TensorFlow before the cluster is set.
    check_nccl(
        "strategy.communication", communication, tf.config.list_physical_devices, "use auto or ring"
    )
    if timeout_seconds is not None and timeout_seconds <= 0:
        raise ConfigError(
            "strategy.timeout_seconds", "must be a positive number or null", value=timeout_seconds
        )
    if not isinstance(bytes_per_pack, int) or bytes_per_pack < 0:
        raise ConfigError(
            "strategy.bytes_per_pack", "must be an integer >= 0", value=bytes_per_pack
        )
    info = (
        resolved
        if resolved is not None
        else kdist_cluster.resolve(mode=cluster, port_base=port_base)
    )
    if "ps" in info.cluster:
        raise ConfigError(
            "strategy",
            "multi_worker_mirrored cannot use a cluster with ps tasks",
            value="multi_worker_mirrored",
            hint="use strategy=parameter_server",
        )
    if info.source != "none" and info.task_type not in ("chief", "worker"):
        raise ConfigError(
            "TF_CONFIG",
            f"task type {info.task_type!r} does not train under multi_worker_mirrored",
            hint="run chief and worker tasks only",
        )
    if info.source == "none":
        log.warning(
            "strategy=multi_worker_mirrored found no cluster (no TF_CONFIG, no SLURM step): "
            "training as one worker; start several with `python -m kdist.launch --workers N`"
        )
    key = (
        communication,
        timeout_seconds,
        bytes_per_pack,
        info.source,
        info.task_type,
        info.task_index,
        info.addresses,
    )
    reused = reuse(
        _built,
        key,
        conflict="this process already runs a different multi-worker cluster",
        hint="TensorFlow allows one per process; start a new process",
    )
    if reused is not None:
        return reused
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=_IMPLEMENTATIONS[communication],
        timeout_seconds=timeout_seconds,
        bytes_per_pack=bytes_per_pack,
    )
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=kdist_cluster.cluster_resolver(info), communication_options=options
        )
    except tf.errors.UnknownError as error:
        if "Could not start gRPC server" not in str(error):
            raise
        raise _port_taken(info) from None
    log.info(
        "MultiWorkerMirroredStrategy: %s of %d worker(s) from %s, %d replica(s) in sync",
        info.task_name,
        max(info.num_workers, 1),
        info.source,
        strategy.num_replicas_in_sync,
    )
    _built[key] = strategy
    return strategy


def _port_taken(info: Any) -> ConfigError:
    """This task's gRPC server could not listen: its port is taken (one line)."""
    own = dict(info.addresses).get(info.task_type, ())
    index = info.task_index or 0
    address = own[index] if index < len(own) else "?"
    return ConfigError(
        "TF_CONFIG",
        f"cluster.{info.task_type}[{index}]={address!r}: this task cannot listen there (address "
        "in use by another process, or not this machine's)",
        hint="free the port or give this task another one",
    )
