"""The runner for synchronous strategies: `strategy.run` inside a `tf.function`, K steps a call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from kdist.data.pipeline import DatasetFn
from kdist.engine.runner import Logs, Runner, metric_results, to_floats

__all__ = ["StandardRunner"]


class StandardRunner(Runner):
    """Trains a Keras model under a synchronous `tf.distribute` strategy.

    One call of the compiled train function runs up to `steps_per_execution` steps, each
    through `strategy.run`, so small models are not dominated by per-call overhead. The
    loss of a replica is summed over its examples and divided by the global batch size,
    and the optimizer all-reduces (sums) the gradients: the update equals one-device
    training on the global batch.

    All arguments are keyword-only. Build the runner inside `strategy.scope()`.

    Args:
        strategy: the `tf.distribute.Strategy`.
        model: the `keras.Model`, built in the strategy's scope.
        optimizer: a Keras optimizer, built in the strategy's scope.
        loss: a Keras loss with `reduction=None` (per-example values).
        make_metrics: returns fresh Keras metrics; called once for training and once for
            validation.
        train_dataset_fn: the training `dataset_fn` (infinite, batched per replica).
        validation_dataset_fn: the validation `dataset_fn`, or `None` for no validation.
        global_batch_size: examples per step over all replicas.
        steps_per_execution: most steps run inside one `tf.function` call.
        jit_compile: compile the step with XLA. Defaults to `False`.
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
        jit_compile: bool = False,
    ):
        if steps_per_execution < 1:
            raise ValueError(
                f"`steps_per_execution` ({steps_per_execution}) must be a positive integer."
            )
        if global_batch_size < 1:
            raise ValueError(
                f"`global_batch_size` ({global_batch_size}) must be a positive integer."
            )
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.loss = loss
        self.global_batch_size = global_batch_size
        self.steps_per_execution = steps_per_execution
        with strategy.scope():
            self.train_loss = keras.metrics.Mean(name="loss")
            self.train_metrics = list(make_metrics())
            self.val_loss = keras.metrics.Mean(name="loss")
            self.val_metrics = list(make_metrics()) if validation_dataset_fn else []
        self._train_data = self._distribute_train(train_dataset_fn)
        self._val_data = (
            strategy.distribute_datasets_from_function(validation_dataset_fn)
            if validation_dataset_fn
            else None
        )
        self._iterator: Any = None
        self._train_fn = self._make_train_function(jit_compile)
        self._eval_fn = self._make_eval_function(jit_compile) if self._val_data else None
        # Resetting Keras metrics eagerly runs one op per variable, and under
        # MirroredStrategy each assign goes to every replica: about 5 ms per reset of a
        # loss and an accuracy on 2 replicas (benchmarks/README.md). One compiled call
        # resets them all in well under a millisecond.
        self._reset_train = _compiled_reset([self.train_loss, *self.train_metrics])
        self._reset_val = _compiled_reset([self.val_loss, *self.val_metrics])
        # The metrics the last `train_steps` call returned: `train_loop_end` reuses them
        # instead of reading the (mirrored) metric variables again.
        self._last_logs: Logs | None = None

    # -- building the step functions ---------------------------------------------------

    def _per_example_loss(self, y: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        values = self.loss(y, logits)
        return tf.cast(values, tf.float32)

    def _make_train_function(self, jit_compile: bool) -> Callable[..., Logs]:
        model, optimizer, strategy = self.model, self.optimizer, self.strategy
        scale_loss = getattr(optimizer, "scale_loss", None)

        def step(x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
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
            gradients = tape.gradient(scaled, model.trainable_variables)
            self.train_loss.update_state(per_example)
            for metric in self.train_metrics:
                metric.update_state(y, logits)
            return gradients

        compiled_step = tf.function(step, jit_compile=True) if jit_compile else step

        def replica_step(batch: Any) -> None:
            x, y = batch
            # `apply_gradients` all-reduces across replicas (a `merge_call`), which cannot
            # run inside a nested (XLA) tf.function: only forward and backward are compiled.
            gradients = compiled_step(x, y)
            variables = model.trainable_variables
            optimizer.apply_gradients(zip(gradients, variables, strict=True))

        @tf.function
        def train_function(iterator: Any, num_steps: tf.Tensor) -> Logs:
            for _ in tf.range(num_steps):
                strategy.run(replica_step, args=(next(iterator),))
            return metric_results(self.train_loss, self.train_metrics)

        return train_function

    def _make_eval_function(self, jit_compile: bool) -> Callable[[], Logs]:
        model, strategy, dataset = self.model, self.strategy, self._val_data
        assert dataset is not None

        def step(x: tf.Tensor, y: tf.Tensor) -> None:
            logits = model(x, training=False)
            self.val_loss.update_state(self._per_example_loss(y, logits))
            for metric in self.val_metrics:
                metric.update_state(y, logits)

        compiled_step = tf.function(step, jit_compile=True) if jit_compile else step

        def replica_step(batch: Any) -> None:
            x, y = batch
            compiled_step(x, y)

        @tf.function
        def eval_function() -> Logs:
            for batch in dataset:
                strategy.run(replica_step, args=(batch,))
            return metric_results(self.val_loss, self.val_metrics)

        return eval_function

    def set_train_dataset_fn(self, dataset_fn: DatasetFn) -> None:
        """Replace the training data (e.g. advanced to a resumed position).

        The compiled train function takes the iterator as an argument, so it is not
        traced again.
        """
        self._train_data = self._distribute_train(dataset_fn)
        self._iterator = None

    def _distribute_train(self, dataset_fn: DatasetFn) -> Any:
        """The training input: the distributed dataset of `dataset_fn`, lighter on CPUs.

        TensorFlow's default input path stages every batch through a multi-device
        iterator made for copying to accelerators; on CPU devices, where the batch
        already is, that costs about 0.25 ms per batch under OneDeviceStrategy and
        0.3-0.4 ms under MirroredStrategy, i.e. 10-20% of a small model's step
        (benchmarks/README.md). With CPU devices only, OneDeviceStrategy iterates the
        dataset itself, and MirroredStrategy gets one input pipeline per replica placed
        on the replica's device (`InputReplicationMode.PER_REPLICA`); both give every
        step the same global batch as before. Other cases keep the default path.
        """
        strategy = self.strategy
        local = (tf.distribute.OneDeviceStrategy, tf.distribute.MirroredStrategy)
        if type(strategy) not in local:
            return strategy.distribute_datasets_from_function(dataset_fn)
        devices = tuple(strategy.extended.worker_devices)
        on_cpu = all(tf.DeviceSpec.from_string(d).device_type == "CPU" for d in devices)
        if on_cpu and isinstance(strategy, tf.distribute.OneDeviceStrategy):
            return dataset_fn(tf.distribute.InputContext(1, 0, 1))
        if on_cpu:
            options = tf.distribute.InputOptions(
                experimental_fetch_to_device=False,
                experimental_place_dataset_on_device=True,
                experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            )
            return strategy.distribute_datasets_from_function(dataset_fn, options)
        return strategy.distribute_datasets_from_function(dataset_fn)

    @property
    def train_metric_variables(self) -> list[Any]:
        """The running training metrics' variables, saved with checkpoints."""
        return [v.value for m in (self.train_loss, *self.train_metrics) for v in m.variables]

    # -- the Runner interface ----------------------------------------------------------

    def train_loop_begin(self, *, reset_metrics: bool = True) -> None:
        if reset_metrics:
            self._reset_train()
        self._last_logs = None
        if self._iterator is None:
            self._iterator = iter(self._train_data)

    def train_steps(self, num_steps: int) -> Logs:
        if self._iterator is None:
            self._iterator = iter(self._train_data)
        logs = self._train_fn(self._iterator, tf.constant(num_steps, dtype=tf.int32))
        self._last_logs = logs
        return logs

    def train_loop_end(self) -> dict[str, float]:
        # The last call's results are the metrics' values now: nothing ran since.
        logs = self._last_logs
        if logs is None:  # no step in this epoch (e.g. stopped before the first call)
            logs = metric_results(self.train_loss, self.train_metrics)
        return to_floats(logs)

    def evaluate(self) -> dict[str, float]:
        if self._eval_fn is None:
            return {}
        self._reset_val()
        return to_floats(self._eval_fn())


def _compiled_reset(metrics: Sequence[keras.metrics.Metric]) -> Callable[[], None]:
    """One `tf.function` that resets every metric in `metrics`."""

    @tf.function
    def reset() -> None:
        for metric in metrics:
            metric.reset_state()

    return reset
