"""The runner for ParameterServerStrategy: the chief schedules K-step functions on workers.

Keras 3 `fit` does not support `ParameterServerStrategy`; this runner brings it back for
Keras 3 models through `tf.distribute.coordinator.ClusterCoordinator`, driven by the same
controller (epochs, validation, Keras callbacks, progress bar) as every other strategy,
with the same step (`StepRunner`).
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from kdist.data.pipeline import DatasetFn
from kdist.engine.building import own_optimizers
from kdist.engine.ps_failures import (
    ParameterServerUnavailableError,
    cluster_spec,
    diagnose,
    first_line,
)
from kdist.engine.runner import Logs, to_floats
from kdist.engine.sharded import (
    atomic_increments,
    checkpointable,
    savable_model,
    sharded_variables,
    training_variables,
)
from kdist.engine.step import StepRunner

__all__ = [
    "ParameterServerRunner",
    "ParameterServerUnavailableError",
    "savable_model",
    "training_variables",
]

log = logging.getLogger(__name__)

# Workers start their copy of the (identically seeded) training stream this many batches
# apart at most, so that they do not train on the same batches at the same time.
_DESYNC_BATCHES = 32


class _SaverRetracing(logging.Filter):
    """Drops TensorFlow's retracing warning for checkpoint saves that span several tasks.

    With variables on the parameter servers, `MultiDeviceSaver.save` defines a new
    `tf.function` on every save by design (see its source), so every save from the fifth
    on warns that it retraced; there is nothing for the user to change.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "MultiDeviceSaver.save" not in record.getMessage()


def _quiet_saver_retracing() -> None:
    logger = logging.getLogger("tensorflow")
    if not any(isinstance(f, _SaverRetracing) for f in logger.filters):
        logger.addFilter(_SaverRetracing())


def _desynchronized(dataset_fn: DatasetFn) -> DatasetFn:
    """`dataset_fn`, starting a random number of batches in, drawn on each worker.

    Every worker builds the training stream from the same seed (ParameterServerStrategy
    gives each one the same input context). The offset comes from a random op with seeds
    0/0, which TensorFlow seeds afresh in each worker process, whatever the global seed.
    """

    def shifted(context: tf.distribute.InputContext) -> tf.data.Dataset:
        offset = tf.raw_ops.RandomUniformInt(
            shape=tf.constant([], tf.int32),
            minval=tf.constant(0, tf.int64),
            maxval=tf.constant(_DESYNC_BATCHES, tf.int64),
            seed=0,
            seed2=0,
        )
        return dataset_fn(context).skip(offset)

    return shifted


class ParameterServerRunner(StepRunner):
    """Trains a Keras model under `tf.distribute.ParameterServerStrategy`.

    The chief (this process) is the coordinator: each call of `train_steps` schedules
    functions of up to `steps_per_schedule` steps with `ClusterCoordinator.schedule`; any
    free worker runs them on its own copy of the training data
    (`create_per_worker_dataset` over the same `dataset_fn` the other strategies use)
    and updates the variables on the parameter servers asynchronously. At most
    `max_in_flight` functions wait at a time, so the progress bar follows the training.
    Metrics live on the parameter servers and are read back on the chief; their
    increments are made atomic (`kdist.engine.sharded.atomic_increments`). An epoch ends
    with `join`. Validation runs on the chief, reading the variables from the servers.

    A worker that dies does not stop training: its functions run again on the others
    (at least once; a step may run twice). The steps actually applied are counted by
    `optimizer.iterations`. A parameter server that dies raises
    `ParameterServerUnavailableError` naming it.

    All arguments are keyword-only; those of `StepRunner`, and:

    Args:
        steps_per_schedule: steps in one scheduled function. Defaults to `1`.
        max_in_flight: scheduled functions allowed to wait before `train_steps` blocks.
            Defaults to `None`: twice the number of workers.
    """

    def __init__(
        self,
        *,
        steps_per_schedule: int = 1,
        max_in_flight: int | None = None,
        **kwargs: Any,
    ):
        strategy = kwargs.get("strategy")
        if not isinstance(strategy, tf.distribute.ParameterServerStrategy):
            raise ValueError(
                f"`strategy` must be a tf.distribute.ParameterServerStrategy, got "
                f"{type(strategy).__name__}; other strategies use StandardRunner."
            )
        if steps_per_schedule < 1:
            raise ValueError(
                f"`steps_per_schedule` ({steps_per_schedule}) must be a positive integer."
            )
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"`max_in_flight` ({max_in_flight}) must be a positive integer.")
        super().__init__(**kwargs)
        self.steps_per_schedule = steps_per_schedule
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        _quiet_saver_retracing()
        self._cluster = cluster_spec(self.strategy)
        workers = len(self._cluster.get("worker", [])) or 1
        self.max_in_flight = max_in_flight or 2 * workers
        for metric in self.model.metrics:
            for variable in metric.variables:
                atomic_increments(variable)
        atomic_increments(self.optimizer.iterations)
        for optimizer in own_optimizers(self.model):  # a GAN's two
            atomic_increments(optimizer.iterations)
        for variable in self.model.variables:
            checkpointable(variable)
        self._train_data = self._per_worker_dataset(self.train_dataset_fn)
        self._iterator: Any = None
        self._in_flight: deque[Any] = deque()
        self._val_data = (
            self.validation_dataset_fn(tf.distribute.InputContext())
            if self.validation_dataset_fn
            else None
        )
        self._train_fn = self._make_train_function()
        self._eval_fn = self._make_eval_function() if self._val_data is not None else None
        for name, sharded in sharded_variables(self.model):
            places = ", ".join(_ps_name(v.device) for v in sharded.variables)
            log.info("%s: %d shards on %s", name, len(sharded.variables), places)

    # -- building ----------------------------------------------------------------------

    def _per_worker_dataset(self, dataset_fn: DatasetFn) -> Any:
        shifted = _desynchronized(dataset_fn)

        def per_worker_dataset_fn() -> Any:
            return self.strategy.distribute_datasets_from_function(shifted)

        return self.coordinator.create_per_worker_dataset(per_worker_dataset_fn)

    def _make_train_function(self) -> Callable[..., Any]:
        return tf.function(self.run_train_steps)

    def _make_eval_function(self) -> Callable[[Any], Logs]:
        replica_step = self.replica_test_step

        # It loops over an iterator, not the dataset: a dataset loop becomes a
        # `ReduceDataset` op, whose function cache cannot release functions that touch
        # remote variables (TensorFlow logs an UNIMPLEMENTED error after every call).
        @tf.function
        def eval_function(iterator: Any) -> Logs:
            for batch in iterator:
                replica_step(batch)
            return self.metric_results()

        return eval_function

    # -- failures ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _parameter_servers(self) -> Iterator[None]:
        """Turn a lost parameter server into one clear error naming it."""
        try:
            yield
        except (tf.errors.UnavailableError, tf.errors.AbortedError) as error:
            failure = self.failure(error)
            if failure is None:
                # A failure TensorFlow blames on the network, but every ps answers.
                failure = ParameterServerUnavailableError(
                    task=None, address=None, detail=first_line(error)
                )
                log.error("%s", failure)
            raise failure from error
        except tf.errors.CancelledError as error:
            # Closures are cancelled after a parameter server failure; anything else
            # that cancelled them is reported as it is.
            failure = self.failure(error)
            if failure is None:
                raise
            raise failure from error

    def failure(self, error: BaseException) -> ParameterServerUnavailableError | None:
        """The lost parameter server behind `error`, or `None` (`ps_failures.diagnose`)."""
        return diagnose(error, self._cluster)

    # -- the Runner interface ----------------------------------------------------------

    def _wait(self, limit: int) -> None:
        while len(self._in_flight) > limit:
            self._in_flight.popleft().fetch()

    def train_loop_begin(self, *, reset_metrics: bool = True, first_step: int = 0) -> None:
        del first_step  # the workers read the data as one stream (`set_train_dataset_fn`)
        if reset_metrics:
            with self._parameter_servers():
                self.coordinator.join()
                for metric in self.model.metrics:
                    metric.reset_state()
        if self._iterator is None:
            self._iterator = iter(self._train_data)

    def train_steps(self, num_steps: int) -> Logs:
        if self._iterator is None:
            self._iterator = iter(self._train_data)
        with self._parameter_servers():
            remaining = num_steps
            while remaining > 0:
                count = min(self.steps_per_schedule, remaining)
                self._in_flight.append(
                    self.coordinator.schedule(
                        self._train_fn,
                        args=(self._iterator, tf.constant(count, dtype=tf.int32)),
                    )
                )
                remaining -= count
                self._wait(self.max_in_flight)
            return self.metric_results()

    def settle(self) -> None:
        """Wait for the scheduled functions: a save then holds every step it counts."""
        with self._parameter_servers():
            self.coordinator.join()
        self._in_flight.clear()

    def train_loop_end(self, *, complete: bool = True) -> dict[str, float]:
        del complete  # the workers read the data as one stream
        with self._parameter_servers():
            self.coordinator.join()
            self._in_flight.clear()
            return to_floats(self.metric_results())

    def evaluate(self, callbacks: Any = None) -> dict[str, float]:
        # kdist: the coordinator validates in one function over the whole split, with
        # no test-batch hook (`callbacks` unused; `batch_hook_note` says so).
        del callbacks
        if self._eval_fn is None or self._val_data is None:
            return {}
        with self._parameter_servers():
            for metric in self.model.metrics:
                metric.reset_state()
            return to_floats(self._eval_fn(iter(self._val_data)))

    # -- resuming ----------------------------------------------------------------------

    def set_train_dataset_fn(self, dataset_fn: DatasetFn) -> None:
        """Replace the training data (e.g. advanced to a resumed position).

        Each worker reads its own copy of the stream, so a resumed position is where
        every worker starts (give or take the random offset that keeps them apart).
        """
        with self._parameter_servers():
            self.coordinator.join()
        self._in_flight.clear()
        self._train_data = self._per_worker_dataset(dataset_fn)
        self._iterator = None


def _ps_name(device: str) -> str:
    spec = tf.DeviceSpec.from_string(device)
    return f"{spec.job} {spec.task}"
