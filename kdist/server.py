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
authentication: on a real cluster, run them on a private network only (README, "Security
of local and real clusters"). TensorFlow's server listens on every interface; kdist holds
the port on the machine's other addresses (`guard_other_addresses`), so a task that
TF_CONFIG puts at 127.0.0.1 is reachable there only.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import itertools
import logging
import os
import selectors
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kdist.cluster import ClusterInfo, cluster_resolver, resolve
from kdist.config.errors import ConfigError, exit_with
from kdist.process import quiet
from kdist.process.runtime import INTRA_OP_THREADS, enable_memory_growth, quiet_tensorflow

__all__ = [
    "SERVER_TASK_TYPES",
    "guard_other_addresses",
    "main",
    "serve_guards",
    "server_config",
    "start_server",
]

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


def _local_addresses() -> set[tuple[int, str, int]]:
    """This machine's addresses, as `(family, address, scope id)`, read from Linux's
    `/proc/net/fib_trie` (IPv4, secondary addresses too) and `/proc/net/if_inet6`; empty
    elsewhere."""
    found: set[tuple[int, str, int]] = set()
    with contextlib.suppress(OSError):
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for before, line in itertools.pairwise(lines):
            if "/32 host LOCAL" in line:
                found.add((socket.AF_INET, before.split()[-1], 0))
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            fields = line.split()
            text = ":".join(fields[0][i : i + 4] for i in range(0, 32, 4))
            address = str(ipaddress.IPv6Address(text))
            scope = int(fields[1], 16) if address.startswith("fe80:") else 0
            found.add((socket.AF_INET6, address, scope))
    return found


def guard_other_addresses(address: str) -> list[socket.socket]:
    """Hold the task's port on every local address but the task's own.

    TensorFlow's gRPC server listens on every interface (`0.0.0.0:<port>` is written
    into TensorFlow 2.21; `ServerDef` has no address). A listening socket on a specific
    address takes the connections to that address before a wildcard one does, so
    sockets on the machine's other addresses, which close what they accept, leave the
    server reachable at the address the cluster gives the task only. TensorFlow must
    share the port (`TF_GRPC_REUSE_PORT=1`, set here when a socket is made).

    Args:
        address: the task's `host:port` in the cluster (`[v6]:port` for IPv6).

    Returns:
        The sockets, listening (`serve_guards` closes what they accept); empty when the
        host is a wildcard, is not one of this machine's addresses, or the addresses
        cannot be read (not Linux).
    """
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
        own = {info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except (OSError, ValueError):
        return []
    if not host or any(ipaddress.ip_address(a).is_unspecified for a in own):
        return []
    local = _local_addresses()
    if not own & {a for _, a, _ in local}:
        log.info("%s is not an address of this machine: listening on every interface", host)
        return []
    guards = []
    for family, other, scope in sorted(x for x in local if x[1] not in own):
        guard = socket.socket(family, socket.SOCK_STREAM)
        try:
            guard.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                guard.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                guard.bind((other, port, 0, scope))
            else:
                guard.bind((other, port))
            guard.listen(16)
        except OSError as error:
            log.debug("could not hold %s port %d: %s", other, port, error)
            guard.close()
            continue
        guards.append(guard)
    if guards:
        os.environ["TF_GRPC_REUSE_PORT"] = "1"
    return guards


def serve_guards(guards: Sequence[socket.socket]) -> None:
    """Close every connection the `guard_other_addresses` sockets accept (a thread)."""
    if not guards:
        return
    chooser = selectors.DefaultSelector()
    for guard in guards:
        chooser.register(guard, selectors.EVENT_READ)

    def refuse() -> None:
        while True:
            for key, _ in chooser.select():
                with contextlib.suppress(OSError):
                    connection, _ = key.fileobj.accept()  # type: ignore[union-attr]
                    connection.close()

    threading.Thread(target=refuse, name="kdist-server-guards", daemon=True).start()


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
        guards = []
        if info.task_type in SERVER_TASK_TYPES:
            guards = guard_other_addresses(info.cluster[str(info.task_type)][info.task_index])
        start_server(info)
    except ConfigError as error:
        exit_with(error)
    serve_guards(guards)
    address = info.cluster[str(info.task_type)][info.task_index]
    log.info(
        "%s serving on %s (%s)",
        info.task_name,
        address,
        "its other addresses refuse" if guards else "listening on every interface",
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
