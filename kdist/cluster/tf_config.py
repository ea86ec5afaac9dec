"""TF_CONFIG (Kubernetes, any cluster manager): parse and check it, or write one."""

from __future__ import annotations

import json
from collections.abc import Mapping

from kdist.cluster.info import TASK_TYPES, ClusterInfo
from kdist.config.errors import ConfigError

__all__ = ["parse_tf_config", "tf_config_for"]

_TF_CONFIG_KEYS = ("cluster", "task", "environment", "rpc_layer")
_TASK_KEYS = ("type", "index", "trial")


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


def tf_config_for(cluster: Mapping[str, list[str]], task_type: str, index: int) -> str:
    """The TF_CONFIG JSON for one task of `cluster` (used by `kdist.launch`)."""
    return json.dumps(
        {
            "cluster": {job: list(a) for job, a in cluster.items()},
            "task": {"type": task_type, "index": index},
        }
    )
