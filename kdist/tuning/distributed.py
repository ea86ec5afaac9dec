"""Distributed tuning: the oracle on the chief, trials on every tuner, deadlines everywhere.

Roles follow keras-tuner's own distributed mode (its environment variables
`KERASTUNER_TUNER_ID`, `KERASTUNER_ORACLE_IP`, `KERASTUNER_ORACLE_PORT`; the process whose
id contains `chief` serves the oracle). When they are not set, kdist derives them from the
cluster (`TF_CONFIG` or SLURM, see `kdist.cluster`), so
`python -m kdist.launch --workers N --module kdist.tune` needs nothing more: the chief
serves the oracle on its own cluster address (trials use single-process strategies, so
that port is otherwise unused) and runs trials too; worker `i` runs trials as `worker<i>`.

What kdist adds to keras-tuner's gRPC client and server:

- every call has a deadline (`tuner.distributed.timeout`; the first one
  `connect_timeout`, while the chief starts); keras-tuner waits up to an hour
  (keras-team/keras-tuner#990);
- a worker sends a heartbeat while it trains; when the chief stops answering, the trial
  stops at the next step and the worker exits with an error;
- the chief ends a worker's trial as failed after `worker_timeout` seconds of silence,
  and waits for the other tuners to receive their last `STOPPED` answer before it stops
  serving (keras-team/keras-tuner#645: workers hung on a chief that had quit).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
import time
from collections.abc import Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from kdist.config.errors import ConfigError

__all__ = [
    "ENV_ORACLE_IP",
    "ENV_ORACLE_PORT",
    "ENV_TUNER_ID",
    "DeadlineOracleClient",
    "Heartbeat",
    "OracleError",
    "OracleServer",
    "OracleUnreachable",
    "Role",
    "resolve_role",
    "tuner_environment",
]

log = logging.getLogger(__name__)

ENV_TUNER_ID = "KERASTUNER_TUNER_ID"
ENV_ORACLE_IP = "KERASTUNER_ORACLE_IP"
ENV_ORACLE_PORT = "KERASTUNER_ORACLE_PORT"


def _fatal_base() -> type[Exception]:
    from keras_tuner.src.errors import FatalError

    return FatalError


class OracleUnreachable(_fatal_base()):  # type: ignore[misc]
    """The chief's oracle did not answer within its deadline; the search cannot go on."""


class OracleError(_fatal_base()):  # type: ignore[misc]
    """The chief's oracle answered a call with an error."""


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
        from kdist.cluster import resolve

        cluster = resolve(env)
    if cluster.source == "none" or cluster.num_workers < 2:
        return Role()
    if cluster.cluster.get("ps") or cluster.task_type not in ("chief", "worker"):
        raise ConfigError(
            "TF_CONFIG",
            f"describes a {cluster.task_type} task / parameter servers; a distributed "
            "search runs trials on the chief and worker tasks only",
            hint="launch it with --workers N and no --ps",
        )
    chief_address = (cluster.cluster.get("chief") or cluster.cluster["worker"])[0]
    tuner_id = "chief" if cluster.is_chief else f"{cluster.task_type}{cluster.task_index}"
    return Role(tuner_id, chief_address, tuners or cluster.num_workers, "cluster")


# --- the chief's server ---------------------------------------------------------------


def _servicer_class() -> type:
    from keras_tuner.src.distribute import oracle_chief

    class _Servicer(oracle_chief.OracleServicer):
        """keras-tuner's servicer, noting when each tuner was last heard from."""

        def __init__(self, oracle: Any, server: OracleServer):
            super().__init__(oracle)
            self._kdist_server = server

        def CreateTrial(self, request: Any, context: Any) -> Any:
            self._kdist_server.touch(request.tuner_id)
            return super().CreateTrial(request, context)

        def UpdateTrial(self, request: Any, context: Any) -> Any:
            self._kdist_server.touch_trial(request.trial_id)
            return super().UpdateTrial(request, context)

        def EndTrial(self, request: Any, context: Any) -> Any:
            self._kdist_server.touch_trial(request.trial.trial_id)
            return super().EndTrial(request, context)

        def GetTrial(self, request: Any, context: Any) -> Any:
            # Also the workers' heartbeat.
            self._kdist_server.touch_trial(request.trial_id)
            return super().GetTrial(request, context)

    return _Servicer


class OracleServer:
    """keras-tuner's oracle service on the chief, with liveness checks and a clean stop.

    Args:
        oracle: the kdist oracle (`kdist.tuning.oracles`).
        bind: `host:port` to listen on.
        worker_timeout: seconds of silence after which a tuner counts as lost.
        local_tuner: the chief's own tuner id, which runs in-process. Defaults to `None`.
        threads: server threads. Defaults to `8`.

    Raises:
        ValueError: for a non-positive `worker_timeout` or `threads`.
    """

    def __init__(
        self,
        oracle: Any,
        *,
        bind: str,
        worker_timeout: float,
        local_tuner: str | None = None,
        threads: int = 8,
    ):
        if worker_timeout <= 0:
            raise ValueError(f"`worker_timeout` ({worker_timeout}) must be positive.")
        if threads < 1:
            raise ValueError(f"`threads` ({threads}) must be a positive integer.")
        self.oracle = oracle
        self.bind = bind
        self.worker_timeout = float(worker_timeout)
        self.local_tuner = local_tuner
        self.threads = threads
        self._contacts: dict[str, float] = {}
        self._lock = threading.Lock()
        self._server: Any = None
        self._servicer: Any = None

    def start(self) -> OracleServer:
        """Start serving; returns `self`.

        Raises:
            ConfigError: when the address cannot be bound.
        """
        import grpc
        from keras_tuner.src import protos

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.threads))
        self._servicer = _servicer_class()(self.oracle, self)
        protos.get_service_grpc().add_OracleServicer_to_server(self._servicer, server)
        try:
            port = server.add_insecure_port(self.bind)
        except RuntimeError:
            port = 0
        if not port:
            raise ConfigError(
                ENV_ORACLE_PORT,
                f"the oracle cannot listen on {self.bind} (the port is taken or the address "
                "is not this machine's)",
            )
        server.start()
        self._server = server
        log.info("tuning oracle serving on %s", self.bind)
        return self

    def touch(self, tuner_id: str) -> None:
        with self._lock:
            self._contacts[tuner_id] = time.monotonic()

    def touch_trial(self, trial_id: str) -> None:
        tuner_id = self.oracle.trial_tuners.get(trial_id)
        if tuner_id is not None:
            self.touch(tuner_id)

    def tuners_seen(self) -> set[str]:
        """Tuner ids that have called the oracle (the local tuner included)."""
        with self._lock:
            seen = set(self._contacts)
        return seen | ({self.local_tuner} if self.local_tuner else set())

    def wait_for_tuners(self, count: int, *, timeout: float, poll: float = 0.2) -> set[str]:
        """Wait until `count` tuners have called (or `timeout` seconds); return them."""
        deadline = time.monotonic() + timeout
        while len(self.tuners_seen()) < count and time.monotonic() < deadline:
            time.sleep(poll)
        seen = self.tuners_seen()
        if len(seen) < count:
            log.warning(
                "only %d of %d tuners called the oracle within %g s "
                "(tuner.distributed.connect_timeout); going on with them",
                len(seen),
                count,
                timeout,
            )
        return seen

    @property
    def stop_triggered(self) -> bool:
        """Whether the oracle has answered `STOPPED` to a remote tuner."""
        return bool(self._servicer is not None and self._servicer.stop_triggered)

    def drain(self, *, until_stopped: bool = False, poll: float = 0.2) -> list[str]:
        """Wait until every remote tuner has finished its trial and received `STOPPED`,
        failing the trials of tuners silent for `worker_timeout`.

        Args:
            until_stopped: also wait for the search to end (a chief that runs no trial
                itself). Defaults to `False`: the local search has ended already.
            poll: seconds between checks. Defaults to `0.2`.

        Returns:
            The tuner ids given up as lost.
        """
        lost: list[str] = []
        started = time.monotonic()
        while True:
            ongoing, waiting = self.oracle.remote_state(exclude=self.local_tuner)
            now = time.monotonic()
            with self._lock:
                contacts = dict(self._contacts)
            if not ongoing and not waiting:
                if not until_stopped or self.stop_triggered:
                    return lost
                last = max(contacts.values(), default=started)
                if now - last > self.worker_timeout:
                    log.warning(
                        "no tuner called the oracle for %.0f s "
                        "(tuner.distributed.worker_timeout); ending the search",
                        now - last,
                    )
                    return lost
            for tuner_id in sorted(set(ongoing) | waiting):
                silent = now - contacts.get(tuner_id, started)
                if silent > self.worker_timeout:
                    message = (
                        f"tuner {tuner_id} was lost: no call for {silent:.0f} s "
                        f"(tuner.distributed.worker_timeout={self.worker_timeout:g})"
                    )
                    log.warning(message)
                    self.oracle.abandon(tuner_id, message)
                    lost.append(tuner_id)
            time.sleep(poll)

    def stop(self, grace: float = 2.0) -> None:
        """Stop serving; calls in flight get `grace` seconds to finish."""
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None


# --- the workers' client ----------------------------------------------------------------


def _client_base() -> type:
    from keras_tuner.src.distribute import oracle_client

    return oracle_client.OracleClient


class DeadlineOracleClient(_client_base()):  # type: ignore[misc]
    """keras-tuner's `OracleClient` with a deadline on every call.

    Args:
        oracle: the local oracle (its `objective`, `max_trials`, ... are read from it).
        address: `host:port` of the chief's oracle.
        tuner_id: this tuner's id.
        timeout: seconds each call may take once connected.
        connect_timeout: seconds the first call may wait for the chief to start.
        idle_wait: seconds to wait before asking again when the oracle has no trial
            ready (Hyperband waits for other tuners' results). Defaults to `1.0`.

    Raises:
        ValueError: for non-positive deadlines.
    """

    def __init__(
        self,
        oracle: Any,
        *,
        address: str,
        tuner_id: str,
        timeout: float,
        connect_timeout: float,
        idle_wait: float = 1.0,
    ):
        # Not keras-tuner's __init__: it reads the environment and uses a 1-hour deadline.
        import grpc
        from keras_tuner.src import protos

        if timeout <= 0 or connect_timeout <= 0 or idle_wait < 0:
            raise ValueError(
                f"`timeout` ({timeout}) and `connect_timeout` ({connect_timeout}) must be "
                f"positive and `idle_wait` ({idle_wait}) >= 0."
            )
        self._oracle = oracle
        self.address = address
        self.tuner_id = tuner_id
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.idle_wait = float(idle_wait)
        self.multi_worker = False
        self.should_report = True
        self._connected = False
        self._channel = grpc.insecure_channel(address)
        self.stub = protos.get_service_grpc().OracleStub(self._channel)

    def _call(self, method: str, request: Any) -> Any:
        import grpc

        timeout = self.timeout if self._connected else self.connect_timeout
        key = "timeout" if self._connected else "connect_timeout"
        try:
            response = getattr(self.stub, method)(request, wait_for_ready=True, timeout=timeout)
        except grpc.RpcError as error:
            code = error.code() if hasattr(error, "code") else None
            if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                raise OracleUnreachable(
                    f"the tuning chief at {self.address} did not answer {method} within "
                    f"{timeout:g} s (tuner.distributed.{key}): it has stopped or is "
                    "unreachable"
                ) from None
            details = error.details() if hasattr(error, "details") else str(error)
            raise OracleError(
                f"the tuning chief at {self.address} failed {method}: {details}"
            ) from None
        self._connected = True
        return response

    def get_space(self) -> Any:
        from keras_tuner.src import protos
        from keras_tuner.src.engine import hyperparameters as hp_module

        response = self._call("GetSpace", protos.get_service().GetSpaceRequest())
        return hp_module.HyperParameters.from_proto(response.hyperparameters)

    def update_space(self, hyperparameters: Any) -> None:
        from keras_tuner.src import protos

        request = protos.get_service().UpdateSpaceRequest(
            hyperparameters=hyperparameters.to_proto()
        )
        self._call("UpdateSpace", request)

    def create_trial(self, tuner_id: str) -> Any:
        from keras_tuner.src import protos
        from keras_tuner.src.engine import trial as trial_module

        request = protos.get_service().CreateTrialRequest(tuner_id=tuner_id)
        trial = trial_module.Trial.from_proto(self._call("CreateTrial", request).trial)
        if trial.status == trial_module.TrialStatus.IDLE:
            # keras-tuner's search loop asks again at once; do not spin on the chief.
            time.sleep(self.idle_wait)
        return trial

    def update_trial(self, trial_id: str, metrics: Mapping[str, float], step: int = 0) -> Any:
        from keras_tuner.src import protos
        from keras_tuner.src.engine import trial as trial_module

        request = protos.get_service().UpdateTrialRequest(
            trial_id=trial_id, metrics=dict(metrics), step=step
        )
        return trial_module.Trial.from_proto(self._call("UpdateTrial", request).trial)

    def end_trial(self, trial: Any) -> None:
        from keras_tuner.src import protos

        self._call("EndTrial", protos.get_service().EndTrialRequest(trial=trial.to_proto()))

    def get_trial(self, trial_id: str) -> Any:
        from keras_tuner.src import protos
        from keras_tuner.src.engine import trial as trial_module

        request = protos.get_service().GetTrialRequest(trial_id=trial_id)
        return trial_module.Trial.from_proto(self._call("GetTrial", request).trial)

    def get_best_trials(self, num_trials: int = 1) -> list[Any]:
        from keras_tuner.src import protos
        from keras_tuner.src.engine import trial as trial_module

        request = protos.get_service().GetBestTrialsRequest(num_trials=num_trials)
        response = self._call("GetBestTrials", request)
        return [trial_module.Trial.from_proto(t) for t in response.trials]

    def close(self) -> None:
        self._channel.close()


class Heartbeat:
    """Tell the chief every `interval` seconds that a trial still runs; notice when the
    chief stops answering (`lost` is set, `error` says why).

    Args:
        client: the worker's `DeadlineOracleClient`.
        trial_id: the trial being run.
        interval: seconds between heartbeats.
    """

    def __init__(self, client: DeadlineOracleClient, trial_id: str, *, interval: float):
        if interval <= 0:
            raise ValueError(f"`interval` ({interval}) must be positive.")
        self.client = client
        self.trial_id = trial_id
        self.interval = float(interval)
        self.lost = threading.Event()
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kdist-heartbeat", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.client.get_trial(self.trial_id)
            except Exception as error:  # OracleUnreachable, OracleError: both end the trial
                self.error = error
                self.lost.set()
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.client.timeout + self.interval)
