"""The other tuners' side of a distributed search: `DeadlineOracleClient` and `Heartbeat`.

What kdist adds to keras-tuner's gRPC client:

- every call has a deadline (`tuner.distributed.timeout`; the first one
  `connect_timeout`, while the chief starts); keras-tuner waits up to an hour
  (keras-team/keras-tuner#990);
- a worker sends a heartbeat while it trains; when the chief stops answering, the trial
  stops at the next step and the worker exits with an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from kdist.compat.tools_private import oracle_client_class, tuner_protos

__all__ = ["DeadlineOracleClient", "Heartbeat", "OracleError", "OracleUnreachable"]


def _fatal_base() -> type[Exception]:
    from keras_tuner.errors import FatalError

    return FatalError


class OracleUnreachable(_fatal_base()):  # type: ignore[misc]
    """The chief's oracle did not answer within its deadline; the search cannot go on."""


class OracleError(_fatal_base()):  # type: ignore[misc]
    """The chief's oracle answered a call with an error."""


def _client_base() -> type:
    return oracle_client_class()


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

        protos = tuner_protos()

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
        from keras_tuner.engine import hyperparameters as hp_module

        protos = tuner_protos()

        response = self._call("GetSpace", protos.get_service().GetSpaceRequest())
        return hp_module.HyperParameters.from_proto(response.hyperparameters)

    def update_space(self, hyperparameters: Any) -> None:
        protos = tuner_protos()

        request = protos.get_service().UpdateSpaceRequest(
            hyperparameters=hyperparameters.to_proto()
        )
        self._call("UpdateSpace", request)

    def create_trial(self, tuner_id: str) -> Any:
        from keras_tuner.engine import trial as trial_module

        protos = tuner_protos()

        request = protos.get_service().CreateTrialRequest(tuner_id=tuner_id)
        trial = trial_module.Trial.from_proto(self._call("CreateTrial", request).trial)
        if trial.status == trial_module.TrialStatus.IDLE:
            # keras-tuner's search loop asks again at once; do not spin on the chief.
            time.sleep(self.idle_wait)
        return trial

    def update_trial(self, trial_id: str, metrics: Mapping[str, float], step: int = 0) -> Any:
        from keras_tuner.engine import trial as trial_module

        protos = tuner_protos()

        request = protos.get_service().UpdateTrialRequest(
            trial_id=trial_id, metrics=dict(metrics), step=step
        )
        return trial_module.Trial.from_proto(self._call("UpdateTrial", request).trial)

    def end_trial(self, trial: Any) -> None:
        protos = tuner_protos()

        self._call("EndTrial", protos.get_service().EndTrialRequest(trial=trial.to_proto()))

    def get_trial(self, trial_id: str) -> Any:
        from keras_tuner.engine import trial as trial_module

        protos = tuner_protos()

        request = protos.get_service().GetTrialRequest(trial_id=trial_id)
        return trial_module.Trial.from_proto(self._call("GetTrial", request).trial)

    def get_best_trials(self, num_trials: int = 1) -> list[Any]:
        from keras_tuner.engine import trial as trial_module

        protos = tuner_protos()

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
