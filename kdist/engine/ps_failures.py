"""Which parameter server a TensorFlow error means is lost, told in one line."""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Mapping, Sequence

import tensorflow as tf

from kdist.compat.tf_private import ps_cluster_resolver

__all__ = ["ParameterServerUnavailableError", "cluster_spec", "diagnose"]

log = logging.getLogger(__name__)

_PS_TASK = re.compile(r"/job:ps/replica:0/task:(\d+)")


class ParameterServerUnavailableError(RuntimeError):
    """A parameter server stopped answering: the variables live there, so the run stops.

    Args:
        task: the ps task's index, or `None` when it cannot be told.
        address: its `host:port`, or `None`.
        detail: the first line of TensorFlow's error.
    """

    def __init__(self, *, task: int | None, address: str | None, detail: str):
        self.task = task
        self.address = address
        self.detail = detail
        if task is None:
            who = "a parameter server"
        else:
            who = f"parameter server ps {task}" + (f" ({address})" if address else "")
        super().__init__(f"{who} is unreachable: {detail}")


def cluster_spec(strategy: tf.distribute.Strategy) -> dict[str, list[str]]:
    """The cluster of a `ParameterServerStrategy` as `{job: [address, ...]}` (`{}` if none)."""
    # ParameterServerStrategy keeps its resolver but does not expose it through
    # `Strategy.cluster_resolver` (which answers None), so read the private attribute.
    resolver = ps_cluster_resolver(strategy)
    if resolver is None:
        return {}
    return {job: list(tasks) for job, tasks in resolver.cluster_spec().as_dict().items()}


def diagnose(
    error: BaseException, cluster: Mapping[str, Sequence[str]]
) -> ParameterServerUnavailableError | None:
    """The lost parameter server behind a TensorFlow error, or `None` if none is lost.

    The ps is the one TensorFlow's message names, else the first that does not accept
    a connection. A lost ps surfaces wherever the chief next touches a variable (a
    scheduled function, a metric, a checkpoint save), so callers ask here about errors
    raised anywhere in a parameter-server run.

    Args:
        error: the exception.
        cluster: `{job: [address, ...]}`, as from `cluster_spec`.

    Returns:
        A `ParameterServerUnavailableError` (logged), or `None`.
    """
    if not isinstance(error, tf.errors.OpError):
        return None
    addresses = list(cluster.get("ps", []))
    task = None
    if isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError)):
        named = _PS_TASK.search(str(error))
        task = int(named.group(1)) if named else None
    if task is None:
        task = next((i for i, a in enumerate(addresses) if not _reachable(a)), None)
    if task is None:
        return None
    address = addresses[task] if task < len(addresses) else None
    failure = ParameterServerUnavailableError(task=task, address=address, detail=first_line(error))
    log.error("%s", failure)
    return failure


def first_line(error: BaseException) -> str:
    """`"<ErrorType>: <first line of the message>"`, at most 200 characters of it."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:200] if lines else 'no details'}"


def _reachable(address: str, timeout: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False
