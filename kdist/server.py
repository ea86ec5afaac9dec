"""`python -m kdist.server`: a worker or parameter-server task for parameter-server training.

Under `strategy=parameter_server` only the chief (the coordinator) runs model code; the
`worker` and `ps` tasks are plain TensorFlow gRPC servers that the chief sends functions
and variables to. This module starts one from the task's TF_CONFIG (checked by
`kdist.cluster`) and serves until it is stopped: SIGTERM or SIGINT end it with status 0.

Example:

```bash
TF_CONFIG='{"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222"], "ps": ["h2:2222"]},
            "task": {"type": "ps", "index": 0}}' python -m kdist.server
```

`python -m kdist.launch --workers N --ps M -- strategy=parameter_server` starts these
itself, in a private network namespace where the kernel allows it. The servers have no
authentication and listen on every interface of their network namespace: on a real
cluster, run them on a private network only (README, "Security of local and real
clusters").
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from kdist.cluster import ClusterInfo, cluster_resolver, resolve
from kdist.config.errors import ConfigError, exit_with
from kdist.process import quiet
from kdist.process.runtime import INTRA_OP_THREADS, enable_memory_growth, quiet_tensorflow

__all__ = ["SERVER_TASK_TYPES", "main", "server_config", "start_server"]

log = logging.getLogger("kdist.server")

# Task types that run as bare servers; the chief runs `kdist.train` instead.
SERVER_TASK_TYPES = ("worker", "ps")


def server_config(info: ClusterInfo) -> Any:
    """The `tf.compat.v1.ConfigProto` of this task's server.

    A worker runs each scheduled closure and the reads it sends to the parameter
    servers on its inter-op thread pool; with fewer threads than `num_workers + 1` a
    2-core host can deadlock (measured with in-process clusters). The pool is never
    made smaller than TensorFlow's default (the core count). Its intra-op threads are
    `TF_NUM_INTRAOP_THREADS` when set (`kdist.launch` shares the cores out among the
    workers it starts), else TensorFlow's default.

    Args:
        info: the task's cluster position.

    Returns:
        A `ConfigProto`, or `None` for TensorFlow's defaults (parameter servers).
    """
    import tensorflow as tf

    if info.task_type != "worker":
        return None
    threads = max(os.cpu_count() or 1, info.num_workers + 1)
    intra = os.environ.get(INTRA_OP_THREADS, "").strip()
    return tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=threads,
        intra_op_parallelism_threads=int(intra) if intra.isdigit() else 0,
    )


def start_server(info: ClusterInfo) -> Any:
    """Start the `tf.distribute.Server` of a `worker` or `ps` task.

    Args:
        info: the task's cluster position (from `kdist.cluster.resolve`).

    Returns:
        The started server.

    Raises:
        ConfigError: when there is no cluster, or the task is not a worker or ps.
    """
    if info.source == "none":
        raise ConfigError(
            "TF_CONFIG",
            "is not set: kdist.server runs one task of a cluster",
            hint="set TF_CONFIG (or run under srun), or start a local cluster with "
            "`python -m kdist.launch --workers N --ps M -- strategy=parameter_server`",
        )
    if info.task_type not in SERVER_TASK_TYPES:
        raise ConfigError(
            "TF_CONFIG",
            f"task type {info.task_type!r} does not run kdist.server",
            hint="kdist.server runs worker and ps tasks; the chief runs "
            "`python -m kdist.train strategy=parameter_server`",
        )
    import tensorflow as tf

    resolver = cluster_resolver(info)
    # Starting the server is the first device use: drop the no-driver ERROR line it
    # prints on machines without CUDA, as `kdist.process.runtime.setup` does for the chief.
    noise = quiet.filtered_stderr(quiet.stderr_noise()) if quiet.enabled() else None
    with noise or contextlib.nullcontext():
        # Before the server takes the GPUs: a worker sharing a GPU with others must not
        # reserve all of its memory.
        enable_memory_growth()
        return tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=info.task_type,
            task_index=info.task_index,
            protocol="grpc",
            config=server_config(info),
            start=True,
        )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m kdist.server`."""
    parser = argparse.ArgumentParser(
        prog="python -m kdist.server",
        description="Serve one worker or ps task of a parameter-server cluster (TF_CONFIG).",
    )
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    quiet_tensorflow()
    try:
        # TF_CONFIG only: a SLURM step has no roles (recipes/cluster/slurm-ps.sbatch
        # gives each task its TF_CONFIG).
        has_config = bool(os.environ.get("TF_CONFIG", "").strip())
        info = resolve(mode="tf_config") if has_config else ClusterInfo()
        stop = threading.Event()

        def _stop(signum: int, frame: object) -> None:
            stop.set()

        # Handlers before the (slow) TensorFlow import, so an early SIGTERM is clean too.
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        start_server(info)
    except ConfigError as error:
        exit_with(error)
    address = info.cluster[str(info.task_type)][info.task_index]
    log.info(
        "%s serving on %s (listening on every interface of its network namespace)",
        info.task_name,
        address,
    )
    while not stop.wait(timeout=1.0):
        pass
    log.info("%s stopping", info.task_name)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # A running gRPC server cannot be shut down from Python; interpreter teardown with
    # its threads alive can abort, so leave at once with a clean status.
    os._exit(0)


if __name__ == "__main__":
    main()
