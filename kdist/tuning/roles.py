"""Who does what in a distributed search: `Role`, `resolve_role`, keras-tuner's variables.

Roles follow keras-tuner's own distributed mode (its environment variables
`KERASTUNER_TUNER_ID`, `KERASTUNER_ORACLE_IP`, `KERASTUNER_ORACLE_PORT`; the process whose
id contains `chief` serves the oracle). When they are not set, kdist derives them from the
cluster (`TF_CONFIG` or SLURM, see `kdist.cluster`), so
`python -m kdist.launch --workers N --module kdist.tune` needs nothing more: the chief
serves the oracle on its own cluster address (trials use single-process strategies, so
that port is otherwise unused) and runs trials too; worker `i` runs trials as `worker<i>`.
The chief's server is `kdist.tuning.oracle_chief`, the other tuners' client
`kdist.tuning.oracle_client`.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kdist.cluster import chief_task
from kdist.cluster import resolve as resolve_cluster
from kdist.config.errors import ConfigError

__all__ = [
    "ENV_ORACLE_IP",
    "ENV_ORACLE_PORT",
    "ENV_TUNER_ID",
    "Role",
    "resolve_role",
    "tuner_environment",
]

ENV_TUNER_ID = "KERASTUNER_TUNER_ID"
ENV_ORACLE_IP = "KERASTUNER_ORACLE_IP"
ENV_ORACLE_PORT = "KERASTUNER_ORACLE_PORT"


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _is_literal_or_local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Role:
    """This process's part in a search.

    Attributes:
        tuner_id: the id the oracle knows this process by (`chief` on the oracle's host).
        address: `host:port` of the oracle; `None` for a search in one process.
        expected_tuners: how many tuners (the chief included) the chief waits for before
            it takes trials itself.
        source: `none`, `env` (keras-tuner's variables) or `cluster` (TF_CONFIG, SLURM).
    """

    tuner_id: str = "tuner0"
    address: str | None = None
    expected_tuners: int = 1
    source: str = "none"

    @property
    def distributed(self) -> bool:
        return self.address is not None

    @property
    def is_chief(self) -> bool:
        """Whether this process serves the oracle and writes the search's shared files."""
        return not self.distributed or "chief" in self.tuner_id

    def environment(self) -> dict[str, str]:
        """keras-tuner's environment variables for this role (empty when not distributed)."""
        if self.address is None:
            return {}
        host, port = _split(self.address)
        return {ENV_TUNER_ID: self.tuner_id, ENV_ORACLE_IP: host, ENV_ORACLE_PORT: str(port)}

    def bind_address(self) -> str:
        """Where the chief's server listens: its own address, or every interface when the
        address is a host name (the server has no authentication, see FACTS.md)."""
        assert self.address is not None
        host, port = _split(self.address)
        if _is_literal_or_local(host):
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return f"[::]:{port}"


def tuner_environment(index: int, *, host: str, port: int) -> dict[str, str]:
    """keras-tuner's variables for process `index` of a search (0 serves the oracle)."""
    if index < 0:
        raise ValueError(f"`index` ({index}) must be >= 0.")
    tuner_id = "chief" if index == 0 else f"tuner{index}"
    return {ENV_TUNER_ID: tuner_id, ENV_ORACLE_IP: host, ENV_ORACLE_PORT: str(port)}


def resolve_role(
    env: Mapping[str, str] | None = None, *, tuners: int | None = None, cluster: Any = None
) -> Role:
    """This process's role: keras-tuner's variables first, then the cluster, else alone.

    Args:
        env: the environment. Defaults to `None`: `os.environ`.
        tuners: `tuner.distributed.tuners`. Defaults to `None`: every chief and worker
            task of the cluster (1 with keras-tuner's variables).
        cluster: a `kdist.cluster.ClusterInfo`. Defaults to `None`: resolved from `env`.

    Returns:
        The `Role`.

    Raises:
        ConfigError: naming the variable for an incomplete keras-tuner set-up, or
            `TF_CONFIG` for a cluster with parameter servers.
    """
    env = os.environ if env is None else env
    if env.get(ENV_ORACLE_IP):
        port = env.get(ENV_ORACLE_PORT, "")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                ENV_ORACLE_PORT,
                "must be the oracle's port (1-65535) when KERASTUNER_ORACLE_IP is set",
                value=port or None,
            )
        tuner_id = env.get(ENV_TUNER_ID, "")
        if not tuner_id:
            raise ConfigError(
                ENV_TUNER_ID,
                "is not set but KERASTUNER_ORACLE_IP is",
                hint="use chief on the process serving the oracle, tuner1, tuner2, ... elsewhere",
            )
        return Role(tuner_id, f"{env[ENV_ORACLE_IP]}:{port}", tuners or 1, "env")
    if cluster is None:
        cluster = resolve_cluster(env)
    if cluster.source == "none" or cluster.num_workers < 2:
        return Role()
    if cluster.cluster.get("ps") or cluster.task_type not in ("chief", "worker"):
        raise ConfigError(
            "TF_CONFIG",
            f"describes a {cluster.task_type} task / parameter servers; a distributed "
            "search runs trials on the chief and worker tasks only",
            hint="launch it with --workers N and no --ps",
        )
    chief_job, chief_index = chief_task(cluster.cluster)
    chief_address = cluster.cluster[chief_job][chief_index]
    tuner_id = "chief" if cluster.is_chief else f"{cluster.task_type}{cluster.task_index}"
    return Role(tuner_id, chief_address, tuners or cluster.num_workers, "cluster")
