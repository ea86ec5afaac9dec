"""The chief's side of a distributed search: keras-tuner's oracle service, `OracleServer`.

What kdist adds to keras-tuner's gRPC server: the chief ends a worker's trial as failed
after `worker_timeout` seconds of silence, and waits for the other tuners to receive
their last `STOPPED` answer before it stops serving (keras-team/keras-tuner#645: workers
hung on a chief that had quit).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent import futures
from typing import Any

from kdist.compat.tools_private import oracle_servicer_class, tuner_protos
from kdist.config.errors import ConfigError
from kdist.tuning.roles import ENV_ORACLE_PORT

__all__ = ["OracleServer"]

log = logging.getLogger(__name__)


def _servicer_class() -> type:
    class _Servicer(oracle_servicer_class()):  # type: ignore[misc]
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

        protos = tuner_protos()

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
