"""The TensorFlow cluster resolver of a `ClusterInfo`: SLURM's, or one from its addresses."""

from __future__ import annotations

from typing import Any

from kdist.cluster.info import ClusterInfo
from kdist.cluster.slurm import slurm_resolver

__all__ = ["cluster_resolver"]


def cluster_resolver(info: ClusterInfo) -> Any:
    """The TensorFlow cluster resolver for `info`'s cluster, or `None` when alone.

    Args:
        info: where this process sits (`kdist.cluster.resolve`).

    Returns:
        `SlurmClusterResolver` for a SLURM job step, a `SimpleClusterResolver` over the
        addresses of a `TF_CONFIG` cluster, `None` for a single process.
    """
    if info.source == "none":
        return None
    if info.source == "slurm":
        return slurm_resolver(info.port_base)
    import tensorflow as tf

    spec = tf.train.ClusterSpec({job: list(addrs) for job, addrs in info.cluster.items()})
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type=info.task_type, task_id=info.task_index, rpc_layer="grpc"
    )
