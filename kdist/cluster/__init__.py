"""Cluster resolution in one place: TF_CONFIG (Kubernetes, any manager), SLURM, or none.

Resolving is plain Python and runs before TensorFlow starts, so a malformed cluster
description fails with one line naming the problem instead of a silent 1-replica run (a
misspelled TF_CONFIG key gives exactly that in TensorFlow). Who is chief is decided by
one function, `is_chief_task`; `is_chief(strategy)` and `ClusterInfo.is_chief` use it.

Modules: `info` (`ClusterInfo`), `tf_config`, `slurm`, `submitit` (a `submitit_local`
job's tasks), `resolver` (TensorFlow's cluster resolver of a `ClusterInfo`), `discovery`
(`resolve`), `chief` (who is chief, chief-only writes and per-task scratch folders).
"""

from kdist.cluster.chief import (
    chief_task,
    cleanup_dir,
    is_chief,
    is_chief_task,
    non_chief_overrides,
    on_chief,
    remove_scratch,
    scratch_dir,
    scratch_prefix,
    task_info,
    writable_dir,
)
from kdist.cluster.discovery import resolve
from kdist.cluster.info import TASK_TYPES, ClusterInfo
from kdist.cluster.resolver import cluster_resolver
from kdist.cluster.slurm import slurm_info
from kdist.cluster.submitit import submitit_local_info
from kdist.cluster.tf_config import parse_tf_config, tf_config_for

__all__ = [
    "TASK_TYPES",
    "ClusterInfo",
    "chief_task",
    "cleanup_dir",
    "cluster_resolver",
    "is_chief",
    "is_chief_task",
    "non_chief_overrides",
    "on_chief",
    "parse_tf_config",
    "remove_scratch",
    "resolve",
    "scratch_dir",
    "scratch_prefix",
    "slurm_info",
    "submitit_local_info",
    "task_info",
    "tf_config_for",
    "writable_dir",
]
