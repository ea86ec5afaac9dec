"""The runner for ParameterServerStrategy: the chief schedules K-step functions on workers.

Keras 3 `fit` does not support `ParameterServerStrategy`; this runner brings it back for
Keras 3 models through `tf.distribute.coordinator.ClusterCoordinator`, driven by the same
controller (epochs, validation, Keras callbacks, progress bar) as every other strategy.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf
from tensorflow.python.distribute.sharded_variable import ShardedVariable

from kdist.data.pipeline import DatasetFn
from kdist.engine.runner import Logs, Runner, metric_results, to_floats

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
_PS_TASK = re.compile(r"/job:ps/replica:0/task:(\d+)")


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


def _as_raw(variable: Any) -> Any:
    """The TensorFlow variable behind a Keras variable (or the variable itself)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


def training_variables(model: keras.Model) -> list[Any]:
    """The variables an optimizer updates: the model's trainable variables, each sharded one
    (a `ShardedVariable` made by the strategy's partitioner) replaced by its shards.

    Keras 3 variables cannot hand a `ShardedVariable` to `GradientTape` or to the
    strategy's update (both need a single resource handle), so kdist differentiates and
    updates the shards, each with optimizer slots on its own parameter server — what
    tf.keras did. Build the optimizer on this list.

    Args:
        model: a built Keras model.

    Returns:
        Keras variables, and the shards' `tf.Variable`s in place of sharded ones.
    """
    variables: list[Any] = []
    for variable in model.trainable_variables:
        raw = _as_raw(variable)
        if isinstance(raw, ShardedVariable):
            variables.extend(raw.variables)
        else:
            variables.append(variable)
    return variables


def _sharded(model: keras.Model) -> list[tuple[str, ShardedVariable]]:
    found = []
    for variable in model.variables:
        raw = _as_raw(variable)
        if isinstance(raw, ShardedVariable):
            found.append((getattr(variable, "path", raw.name), raw))
    return found


def savable_model(model: keras.Model) -> keras.Model:
    """`model`, or a copy on this process when it holds sharded variables.

    Keras saving reads each variable with NumPy, which a `ShardedVariable` does not
    support; the copy has the same architecture, weights and compile configuration (a
    fresh optimizer: the optimizer state of a sharded run lives in its checkpoints).
    Call it outside `strategy.scope()`.

    Args:
        model: the trained model.

    Returns:
        A model that `model.save` and `model.export` accept.
    """
    if not _sharded(model):
        return model
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    config = model.get_compile_config()
    if config:
        copy.compile_from_config(config)
    return copy


def _atomic_increments(variable: Any) -> None:
    """Make `assign_add`/`assign_sub` of one Keras variable a single TensorFlow op.

    Keras 3 implements `Variable.assign_add(v)` as `assign(self + v)`, a read then a
    write. Workers update the same parameter-server variable concurrently, and an
    increment made between another worker's read and write is lost (measured with 2
    workers: `optimizer.iterations` counted 74 of 100 steps; a running accuracy went
    above 1). TensorFlow's `assign_add` is one op that holds the variable's lock.
    """
    if not isinstance(variable, keras.Variable):
        return
    raw = variable.value
    if not hasattr(raw, "assign_add"):
        return

    def assign_add(value: Any) -> Any:
        return raw.assign_add(tf.cast(value, raw.dtype))

    def assign_sub(value: Any) -> Any:
        return raw.assign_sub(tf.cast(value, raw.dtype))

    # Instance attributes shadow Keras's methods for these variables only.
    variable.assign_add = assign_add
    variable.assign_sub = assign_sub


def _checkpointable(variable: Any) -> None:
    """Let `tf.train.Checkpoint` save a Keras variable that holds a `ShardedVariable`.

    Keras hands TensorFlow's saver the variable it wraps, and the saver needs one
    device per saved value, which a `ShardedVariable` does not have. This variable saves
    its whole value instead (gathered on the chief); restoring assigns it back, which
    splits it over the shards again.
    """
    raw = variable.value

    def serialize_to_tensors() -> dict[str, Any]:
        return {"VARIABLE_VALUE": tf.convert_to_tensor(raw)}

    def restore_from_tensors(restored: dict[str, Any]) -> Any:
        # Restoring from several tasks runs in a tf.function where the value's shape is
        # unknown, which Keras's `assign` rejects: assign each shard its rows directly.
        value = restored["VARIABLE_VALUE"]
        updates, start = [], 0
        for shard in raw.variables:
            rows = int(shard.shape[0])
            updates.append(shard.assign(value[start : start + rows], read_value=False))
            start += rows
        return tf.group(*updates)

    # Instance attributes: TensorFlow's saver calls the object's methods.
    variable._serialize_to_tensors = serialize_to_tensors
    variable._restore_from_tensors = restore_from_tensors


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


class ParameterServerRunner(Runner):
    """Trains a Keras model under `tf.distribute.ParameterServerStrategy`.

    The chief (this process) is the coordinator: each call of `train_steps` schedules
    functions of up to `steps_per_schedule` steps with `ClusterCoordinator.schedule`; any
    free worker runs them on its own copy of the training data
    (`create_per_worker_dataset` over the same `dataset_fn` the other strategies use)
    and updates the variables on the parameter servers asynchronously. At most
    `max_in_flight` functions wait at a time, so the progress bar follows the training.
    Metrics live on the parameter servers and are read back on the chief; an epoch ends
    with `join`. Validation runs on the chief, reading the variables from the servers.

    A worker that dies does not stop training: its functions run again on the others
    (at least once; a step may run twice). The steps actually applied are counted by
    `optimizer.iterations`. A parameter server that dies raises
    `ParameterServerUnavailableError` naming it.

    All arguments are keyword-only. Build the runner inside `strategy.scope()`, with the
    optimizer built on `training_variables(model)`.

    Args:
        strategy: the `tf.distribute.ParameterServerStrategy`.
        model: the `keras.Model`, built in the strategy's scope.
        optimizer: a Keras optimizer, built in the strategy's scope.
        loss: a Keras loss with `reduction=None` (per-example values).
        make_metrics: returns fresh Keras metrics; called once for training and once for
            validation. Their updates must use `assign_add` (all Keras metrics that sum
            or count do).
        train_dataset_fn: the training `dataset_fn` (infinite, batched per replica).
        validation_dataset_fn: the validation `dataset_fn`, or `None` for no validation.
        global_batch_size: examples per step (each worker's step uses a whole batch).
        steps_per_execution: most steps per `train_steps` call (the controller's unit).
        steps_per_schedule: steps in one scheduled function. Defaults to `1`.
        jit_compile: compile forward and backward with XLA. Defaults to `False`.
        max_in_flight: scheduled functions allowed to wait before `train_steps` blocks.
            Defaults to `None`: twice the number of workers.
    """

    def __init__(
        self,
        *,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        loss: keras.losses.Loss,
        make_metrics: Callable[[], Sequence[keras.metrics.Metric]],
        train_dataset_fn: DatasetFn,
        validation_dataset_fn: DatasetFn | None,
        global_batch_size: int,
        steps_per_execution: int,
        steps_per_schedule: int = 1,
        jit_compile: bool = False,
        max_in_flight: int | None = None,
    ):
        if not isinstance(strategy, tf.distribute.ParameterServerStrategy):
            raise ValueError(
                f"`strategy` must be a tf.distribute.ParameterServerStrategy, got "
                f"{type(strategy).__name__}; other strategies use StandardRunner."
            )
        for name, value in (
            ("global_batch_size", global_batch_size),
            ("steps_per_execution", steps_per_execution),
            ("steps_per_schedule", steps_per_schedule),
        ):
            if value < 1:
                raise ValueError(f"`{name}` ({value}) must be a positive integer.")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"`max_in_flight` ({max_in_flight}) must be a positive integer.")
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.loss = loss
        self.global_batch_size = global_batch_size
        self.steps_per_execution = steps_per_execution
        self.steps_per_schedule = steps_per_schedule
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        _quiet_saver_retracing()
        self._cluster = _cluster_spec(strategy)
        workers = len(self._cluster.get("worker", [])) or 1
        self.max_in_flight = max_in_flight or 2 * workers
        self._variables = training_variables(model)
        with strategy.scope():
            self.train_loss = keras.metrics.Mean(name="loss")
            self.train_metrics = list(make_metrics())
            self.val_loss = keras.metrics.Mean(name="loss")
            self.val_metrics = list(make_metrics()) if validation_dataset_fn else []
        for metric in (self.train_loss, *self.train_metrics):
            for variable in metric.variables:
                _atomic_increments(variable)
        _atomic_increments(optimizer.iterations)
        self._train_data = self._per_worker_dataset(train_dataset_fn)
        self._iterator: Any = None
        self._in_flight: deque[Any] = deque()
        self._val_data = (
            validation_dataset_fn(tf.distribute.InputContext()) if validation_dataset_fn else None
        )
        self._train_fn = self._make_train_function(jit_compile)
        self._eval_fn = self._make_eval_function() if self._val_data is not None else None
        for variable in model.variables:
            if isinstance(_as_raw(variable), ShardedVariable):
                _checkpointable(variable)
        for name, sharded in _sharded(model):
            places = ", ".join(_ps_name(v.device) for v in sharded.variables)
            log.info("%s: %d shards on %s", name, len(sharded.variables), places)

    # -- building ----------------------------------------------------------------------

    def _per_worker_dataset(self, dataset_fn: DatasetFn) -> Any:
        shifted = _desynchronized(dataset_fn)

        def per_worker_dataset_fn() -> Any:
            return self.strategy.distribute_datasets_from_function(shifted)

        return self.coordinator.create_per_worker_dataset(per_worker_dataset_fn)

    def _per_example_loss(self, y: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        return tf.cast(self.loss(y, logits), tf.float32)

    def _make_train_function(self, jit_compile: bool) -> Callable[..., Any]:
        model, optimizer, strategy = self.model, self.optimizer, self.strategy
        variables = self._variables
        scale_loss = getattr(optimizer, "scale_loss", None)

        def step(x: tf.Tensor, y: tf.Tensor) -> list[Any]:
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = self._per_example_loss(y, logits)
                loss = tf.nn.compute_average_loss(
                    per_example, global_batch_size=self.global_batch_size
                )
                if model.losses:
                    regularization = tf.add_n([tf.cast(v, tf.float32) for v in model.losses])
                    loss += tf.nn.scale_regularization_loss(regularization)
                    per_example = per_example + regularization
                scaled = scale_loss(loss) if scale_loss is not None else loss
            gradients = tape.gradient(scaled, variables)
            self.train_loss.update_state(per_example)
            for metric in self.train_metrics:
                metric.update_state(y, logits)
            return gradients

        compiled_step = tf.function(step, jit_compile=True) if jit_compile else step

        def replica_step(batch: Any) -> None:
            x, y = batch
            # The update runs in the strategy's cross-replica context (a `merge_call`),
            # which cannot run inside a nested (XLA) tf.function.
            gradients = compiled_step(x, y)
            optimizer.apply_gradients(zip(gradients, variables, strict=True))

        @tf.function
        def train_function(iterator: Any, num_steps: tf.Tensor) -> None:
            for _ in tf.range(num_steps):
                strategy.run(replica_step, args=(next(iterator),))

        return train_function

    def _make_eval_function(self) -> Callable[[Any], Logs]:
        model = self.model

        # It loops over an iterator, not the dataset: a dataset loop becomes a
        # `ReduceDataset` op, whose function cache cannot release functions that touch
        # remote variables (TensorFlow logs an UNIMPLEMENTED error after every call).
        @tf.function
        def eval_function(iterator: Any) -> Logs:
            for x, y in iterator:
                logits = model(x, training=False)
                self.val_loss.update_state(self._per_example_loss(y, logits))
                for metric in self.val_metrics:
                    metric.update_state(y, logits)
            return metric_results(self.val_loss, self.val_metrics)

        return eval_function

    # -- failures ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _parameter_servers(self) -> Iterator[None]:
        """Turn a lost parameter server into one clear error naming it."""
        try:
            yield
        except (tf.errors.UnavailableError, tf.errors.AbortedError) as error:
            failure = self.ps_failure(error)
            if failure is None:
                # A failure TensorFlow blames on the network, but every ps answers.
                failure = ParameterServerUnavailableError(
                    task=None, address=None, detail=_first_line(error)
                )
                log.error("%s", failure)
            raise failure from error
        except tf.errors.CancelledError as error:
            # Closures are cancelled after a parameter server failure; anything else
            # that cancelled them is reported as it is.
            failure = self.ps_failure(error)
            if failure is None:
                raise
            raise failure from error

    def ps_failure(self, error: BaseException) -> ParameterServerUnavailableError | None:
        """The lost parameter server behind a TensorFlow error, or `None` if none is lost.

        The ps is the one TensorFlow's message names, else the first that does not accept
        a connection. A lost ps surfaces wherever the chief next touches a variable (a
        scheduled function, a metric, a checkpoint save), so the experiment also asks
        here about errors raised outside the runner.

        Args:
            error: the exception.

        Returns:
            A `ParameterServerUnavailableError` (logged), or `None`.
        """
        if not isinstance(error, tf.errors.OpError):
            return None
        addresses = self._cluster.get("ps", [])
        task = None
        if isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError)):
            named = _PS_TASK.search(str(error))
            task = int(named.group(1)) if named else None
        if task is None:
            task = next((i for i, a in enumerate(addresses) if not _reachable(a)), None)
        if task is None:
            return None
        address = addresses[task] if task < len(addresses) else None
        failure = ParameterServerUnavailableError(
            task=task, address=address, detail=_first_line(error)
        )
        log.error("%s", failure)
        return failure

    # -- the Runner interface ----------------------------------------------------------

    def _wait(self, limit: int) -> None:
        while len(self._in_flight) > limit:
            self._in_flight.popleft().fetch()

    def train_loop_begin(self, *, reset_metrics: bool = True) -> None:
        if reset_metrics:
            with self._parameter_servers():
                self.coordinator.join()
                self.train_loss.reset_state()
                for metric in self.train_metrics:
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
            return metric_results(self.train_loss, self.train_metrics)

    def train_loop_end(self) -> dict[str, float]:
        with self._parameter_servers():
            self.coordinator.join()
            self._in_flight.clear()
            return to_floats(metric_results(self.train_loss, self.train_metrics))

    def evaluate(self) -> dict[str, float]:
        if self._eval_fn is None or self._val_data is None:
            return {}
        with self._parameter_servers():
            self.val_loss.reset_state()
            for metric in self.val_metrics:
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

    @property
    def train_metric_variables(self) -> list[Any]:
        """The running training metrics' variables, saved with checkpoints."""
        return [v.value for m in (self.train_loss, *self.train_metrics) for v in m.variables]


def _cluster_spec(strategy: tf.distribute.Strategy) -> dict[str, list[str]]:
    # ParameterServerStrategy keeps its resolver but does not expose it through
    # `Strategy.cluster_resolver` (which answers None), so read the private attribute.
    resolver = getattr(strategy, "_cluster_resolver", None)
    if resolver is None:
        return {}
    return {job: list(tasks) for job, tasks in resolver.cluster_spec().as_dict().items()}


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:200] if lines else 'no details'}"


def _ps_name(device: str) -> str:
    spec = tf.DeviceSpec.from_string(device)
    return f"{spec.job} {spec.task}"


def _reachable(address: str, timeout: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False
