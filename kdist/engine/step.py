"""`StepRunner`: Keras's training contract per replica, the base of every kdist runner."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import (
    call_has_training_arg,
    compile_config,
    compile_metrics,
    compute_loss,
    loss_tracker,
    optimizer_variables,
    unscale_loss_function,
)
from kdist.config.errors import ConfigError
from kdist.data.pipeline import DatasetFn
from kdist.engine.left_out import first_given
from kdist.engine.runner import Logs, Runner, flat_logs
from kdist.engine.sharded import has_sharded_variables, training_variables
from kdist.strategies.compression import ErrorFeedback, compress_all_reduce

__all__ = ["StepRunner", "as_fit_packs", "compiled_reset", "overrides"]

log = logging.getLogger(__name__)


def as_fit_packs(data: Any) -> Any:
    """A batch as `fit` hands it to `train_step`/`test_step`: Keras's own packing.

    kdist's pipelines carry `(x,)` for data without targets; Keras's data adapters pack
    it with `keras.utils.pack_x_y_sample_weight`, which gives `x` itself unless `x` is a
    tuple or list (keras.io's VAE calls `self.encoder(data)`).
    """
    return keras.utils.pack_x_y_sample_weight(*keras.utils.unpack_x_y_sample_weight(data))


def overrides(model: keras.Model, method: str) -> bool:
    """Whether `model`'s class defines its own `method` (e.g. `train_step`)."""
    return getattr(type(model), method) is not getattr(keras.Model, method)


class StepRunner(Runner):
    """The step and metric logic of every kdist runner: Keras's training contract.

    The per-replica train step is the model's own `train_step` when its class overrides
    it (GANs, VAEs, distillation...). Otherwise it is Keras's `train_step`, line for line
    (Keras's TensorFlow `trainer.py`): the model's `compute_loss` with the
    compiled losses, loss weights, sample weights and `model.losses`, the loss tracker,
    `optimizer.scale_loss`, then `compute_metrics`. Keras scales each replica's loss by
    the replica count, and the optimizer sums the replicas' gradients, so an update
    equals one-device training on the global batch. kdist's copy differs in two places
    only: the forward and backward pass can be XLA-compiled apart from the update (whose
    all-reduce cannot run inside XLA), and it differentiates the shards of sharded
    variables (`kdist.engine.sharded`). The test step is always the model's `test_step`.

    Metrics are the model's (`model.metrics`), shared by training and validation as in
    `fit`; they are reset by one compiled call and read in cross-replica context, so
    they cover every replica.

    All arguments are keyword-only. Build the runner inside `strategy.scope()`, after
    the model is compiled and built (`kdist.engine.building.build_for_training`).

    Args:
        strategy: the `tf.distribute.Strategy`.
        model: the compiled, built `keras.Model`; its optimizer is the one updated.
        train_dataset_fn: the training `dataset_fn` (infinite, batched per replica).
        validation_dataset_fn: the validation `dataset_fn`, or `None` for no validation.
        global_batch_size: examples per step over all replicas.
        steps_per_execution: most steps run by one call of `train_steps`.
        jit_compile: compile the step's forward and backward pass with XLA. Defaults to
            `False`.
        allreduce_dtype: the type gradients are summed across replicas in: `float32`, or
            `bfloat16`/`float16` for half the bytes (`kdist.strategies.compression`).
            Defaults to `"float32"`.
        allreduce_error_feedback: with a 16-bit `allreduce_dtype`, each replica carries
            what the cast dropped into its next gradient (`kdist.strategies.compression.
            ErrorFeedback`). Defaults to `True`.
        accumulate_steps: micro-batches per optimizer update. Each update reads this many
            batches (of `global_batch_size / accumulate_steps` examples), sums their
            gradients and applies their mean once: the same update as one step on the
            whole global batch (Keras 3's own `gradient_accumulation_steps` fails under
            `tf.distribute`, keras-team/keras#20582). `optimizer.iterations` counts
            updates. Defaults to `1`.
        previous: the runner of the model's earlier `fit`: with the same optimizer, its
            residuals (and averager) carry on here (`Runner.carried_on`). Defaults to `None`.

    Raises:
        ValueError: naming the argument, for values out of range, or a model whose own
            `train_step` cannot update sharded variables.
    """

    def __init__(
        self,
        *,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        train_dataset_fn: DatasetFn,
        validation_dataset_fn: DatasetFn | None,
        global_batch_size: int,
        steps_per_execution: int,
        jit_compile: bool = False,
        accumulate_steps: int = 1,
        allreduce_dtype: str = "float32",
        allreduce_error_feedback: bool = True,
        previous: Runner | None = None,
    ):
        for name, value in (
            ("global_batch_size", global_batch_size),
            ("steps_per_execution", steps_per_execution),
            ("accumulate_steps", accumulate_steps),
        ):
            if value < 1:
                raise ValueError(f"`{name}` ({value}) must be a positive integer.")
        if model.optimizer is None:
            raise ValueError("`model` must be compiled with an optimizer before training.")
        self.strategy = strategy
        self.model = model
        self.optimizer = model.optimizer
        self.global_batch_size = global_batch_size
        self.steps_per_execution = steps_per_execution
        self.custom_train_step = overrides(model, "train_step")
        self.accumulate_steps = accumulate_steps
        if self.custom_train_step and accumulate_steps > 1:
            raise ValueError(
                f"{type(model).__name__} overrides `train_step`, which applies its own "
                "updates: kdist cannot accumulate its gradients; set "
                "trainer.accumulate_steps=1, or accumulate inside the model's train_step."
            )
        if self.custom_train_step and has_sharded_variables(model):
            raise ValueError(
                f"{type(model).__name__} overrides `train_step`, which cannot update the "
                "sharded variables of a parameter-server partitioner (Keras 3 does not "
                "support them); train without sharding (no min/max_shard_bytes) or use "
                "Keras's own train_step."
            )
        if self.custom_train_step and jit_compile:
            log.warning(
                "runtime.jit_compile: %s has its own train_step, whose optimizer update "
                "cannot run inside XLA; training runs without XLA (validation uses it)",
                type(model).__name__,
            )
        # Keras's step trains the variables that were trainable when it was traced (after
        # each `compile`), which the optimizer was built with: a `trainable` change
        # without a recompile keeps them, as `fit` does (`build_for_training` builds a new
        # optimizer on today's `training_variables`).
        self.variables = optimizer_variables(self.optimizer) or training_variables(model)
        if not self.variables and not self.custom_train_step:
            log.warning("The model does not have any trainable weights.")  # Keras's warning
        if allreduce_dtype != "float32" and isinstance(strategy, tf.distribute.OneDeviceStrategy):
            # The rule `strategy=one_device` gets before TensorFlow starts
            # (`kdist.config.validate.check_allreduce_dtype`), for `strategy=auto` that
            # found one device: there is no all-reduce to compress.
            raise ConfigError(
                "trainer.allreduce_dtype",
                "compresses the all-reduce, and the strategy (OneDeviceStrategy, what "
                "strategy=auto chose on this machine) has none",
                value=allreduce_dtype,
                hint="use strategy=mirrored or multi_worker_mirrored, or allreduce_dtype=float32",
            )
        if allreduce_dtype != "float32":
            # One set per optimizer, carried on by its next runner; the checkpoints hold it.
            if allreduce_error_feedback:
                self.error_feedback = getattr(self.carried_on(previous), "error_feedback", None)
                if self.error_feedback is None:
                    with strategy.scope():
                        self.error_feedback = ErrorFeedback(model.trainable_variables)
            compress_all_reduce(self.optimizer, allreduce_dtype, self.error_feedback)
        self.train_dataset_fn = train_dataset_fn
        self.validation_dataset_fn = validation_dataset_fn
        self.replica_train_step = self._make_replica_train_step(jit_compile)
        self.replica_test_step = self._make_replica_test_step(jit_compile)
        # Resetting Keras metrics eagerly runs one op per variable, and under
        # MirroredStrategy each assign goes to every replica: about 5 ms per reset of a
        # loss and an accuracy on 2 replicas (benchmarks/README.md). One compiled call
        # resets them all in well under a millisecond.
        self.reset_metrics = compiled_reset(model.metrics)

    # -- the step ----------------------------------------------------------------------

    def _make_replica_train_step(self, jit_compile: bool) -> Callable[[Any], Any]:
        model, optimizer, variables = self.model, self.optimizer, self.variables
        if self.custom_train_step:
            return _traced_once_per_compile(model, self.strategy)

        own_metrics = overrides(model, "compute_metrics")
        unscale_loss_for_distribution = unscale_loss_function()

        def gradients_of(data: Any) -> list[Any]:
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True) if call_has_training_arg(model) else model(x)
                loss = compute_loss(
                    model, x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
                )
                batch = tf.shape(first_given(x))[0]
                loss_tracker(model).update_state(unscale_loss_for_distribution(loss), batch)
                loss = optimizer.scale_loss(loss)
            gradients = tape.gradient(loss, variables)
            if own_metrics:
                model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
            elif compile_metrics(model) is not None:
                # Keras's `compute_metrics` is this update followed by reading every
                # metric's result, which the loop does not use: read once per call instead.
                compile_metrics(model).update_state(y, y_pred, sample_weight)
            return gradients

        steps = self.accumulate_steps

        def replica_step(data: Any) -> None:
            # `apply_gradients` all-reduces across replicas (a `merge_call`), which cannot
            # run inside a nested (XLA) tf.function: only forward and backward are compiled.
            compute = _per_replica_xla(gradients_of) if jit_compile else gradients_of
            if steps == 1:
                gradients = compute(data)
            else:
                # `data` holds the update's micro-batches; their losses are each a mean
                # over a micro-batch, so the update applies the mean of their gradients.
                total = compute(data[0])
                for micro_batch in data[1:]:
                    total = _add(total, compute(micro_batch))
                gradients = [None if g is None else _divide(g, steps) for g in total]
            if variables:  # Keras's step applies nothing to a model without any
                optimizer.apply_gradients(zip(gradients, variables, strict=True))

        return replica_step

    def update_args(self, iterator: Any) -> tuple[Any, ...]:
        """`strategy.run` arguments of one update: the next batch, or its micro-batches.

        Call it in cross-replica context, inside the train function.
        """
        if self.accumulate_steps == 1:
            return (next(iterator),)
        return ([next(iterator) for _ in range(self.accumulate_steps)],)

    def run_train_steps(self, iterator: Any, num_steps: tf.Tensor) -> Logs | None:
        """Run `num_steps` updates on `iterator`'s batches, inside the train function.

        Returns:
            A model's own `train_step`'s logs of the last step, flattened, each value the
            replicas' mean (Keras's `train_function` returns them); `None` for kdist's.
        """
        strategy, step = self.strategy, self.replica_train_step
        if not self.custom_train_step:
            for _ in tf.range(num_steps):
                strategy.run(step, args=self.update_args(iterator))
            return None
        for _ in tf.range(num_steps - 1):
            strategy.run(step, args=self.update_args(iterator))
        logs = strategy.run(step, args=self.update_args(iterator))
        if not isinstance(logs, Mapping) or not logs:
            return None
        return {k: _replica_mean(strategy, v) for k, v in flat_logs(logs).items()}

    def _make_replica_test_step(self, jit_compile: bool) -> Callable[[Any], None]:
        model = self.model

        def test_step(data: Any) -> None:
            model.test_step(as_fit_packs(data))

        if not jit_compile:
            return test_step

        def replica_step(data: Any) -> None:
            _per_replica_xla(test_step)(data)

        return replica_step

    # -- metrics -----------------------------------------------------------------------

    def metric_results(self) -> Logs:
        """The model's metrics (`loss`, compiled metrics, per-output losses, the model's
        own trackers), read in cross-replica context."""
        return self.model.get_metrics_result()

    def batch_results(self) -> Logs:
        """The logs a call hands to the batch hooks, as Keras's `fit` makes them.

        Keras's `train_function`/`test_function` return each replica's `train_step`
        result, its metrics read in replica context (a metric's variables are
        sync-on-read: each replica sees its own counts), reduced by
        `reduce_per_replica(..., reduction="auto")`: their mean under `MirroredStrategy`.
        So under several replicas a batch log of a counting metric (`FalseNegatives`) is
        the mean of the replicas' own counts, and a mean over a batch split unevenly is
        the mean of the replicas' means; the epoch's logs are read across replicas
        (`_get_metrics_result_or_logs`), as `metric_results` reads them. Call it in
        cross-replica context, inside a compiled call.
        """
        if not self.replica_batch_logs:
            return self.metric_results()
        strategy, model = self.strategy, self.model

        def replica_results() -> Logs:
            # A metric whose `result()` is its variable itself (keras.io's
            # CategoricalTruePositives) is no per-replica value in Keras's step output:
            # `reduce_per_replica` passes the variable on, read across replicas.
            return tf.nest.map_structure(
                lambda value: tf.constant(0.0) if isinstance(value, keras.Variable) else value,
                model.get_metrics_result(),
            )

        def combine(mine: Any, value: Any) -> Any:
            if isinstance(value, keras.Variable):
                return tf.convert_to_tensor(value)
            return tf.reduce_mean(strategy.experimental_local_results(mine), axis=0)

        return tf.nest.map_structure(
            combine, strategy.run(replica_results), model.get_metrics_result()
        )

    @property
    def replica_batch_logs(self) -> bool:
        """Whether batch logs are the mean of the replicas' own results (`batch_results`):
        under `MirroredStrategy` over several devices, whose replicas read their own
        metric variables without communication (Keras's `fit` there is kdist's judge)."""
        strategy = self.strategy
        return (
            isinstance(strategy, tf.distribute.MirroredStrategy)
            and strategy.num_replicas_in_sync > 1
        )

    @property
    def metric_variables(self) -> list[Any]:
        return [v.value for m in self.model.metrics for v in m.variables]

    @property
    def validates(self) -> bool:
        return self.validation_dataset_fn is not None


# A model's own `train_step` traced as Keras's `fit` traces it: once per `compile`.
_OWN_STEPS: weakref.WeakKeyDictionary[keras.Model, tuple[Any, Callable[[Any], Any]]] = (
    weakref.WeakKeyDictionary()
)


def _traced_once_per_compile(
    model: keras.Model, strategy: tf.distribute.Strategy
) -> Callable[[Any], Any]:
    """The model's own `train_step` as a `tf.function` kept until its next `compile`.

    Keras's `fit` caches its `train_function` until `compile` drops it: a second `fit` on
    new data reuses the trace, and a model's own `train_step` keeps training the
    variables it read when it was traced (`self.trainable_variables` before a
    `trainable` change without a recompile). kdist binds new data to a new runner, whose
    train function is traced again; the model's own step, traced once per compile, makes
    that trace call the same concrete function, as Keras's cached one.

    Under several replicas (or a parameter server) the step stays inline: its
    `apply_gradients` makes a `merge_call`, which a nested `tf.function` in a replica
    context cannot make (kdist's step is then traced for each runner).
    """
    # The step holds the model weakly: the cache's value must not keep its key alive.
    held = weakref.ref(model)

    def own_step(data: Any) -> Any:
        trained = held()
        assert trained is not None  # a runner of it is tracing its step
        return trained.train_step(as_fit_packs(data))

    if strategy.num_replicas_in_sync != 1 or type(strategy) not in (
        tf.distribute.OneDeviceStrategy,
        tf.distribute.MirroredStrategy,
    ):
        return own_step
    compiled = compile_config(model)
    cached = _OWN_STEPS.get(model)
    if cached is not None and cached[0] is compiled:
        return cached[1]
    traced = tf.function(own_step)
    _OWN_STEPS[model] = (compiled, traced)
    return traced


def _replica_mean(strategy: tf.distribute.Strategy, value: Any) -> Any:
    """A per-replica value as Keras's `reduce_per_replica(..., "auto")`: the replicas' mean."""
    local = strategy.experimental_local_results(value)
    parts = [tf.cast(tf.convert_to_tensor(v), tf.float32) for v in local]
    return parts[0] if len(parts) == 1 else tf.reduce_mean(tf.stack(parts), axis=0)


def _add(total: Sequence[Any], more: Sequence[Any]) -> list[Any]:
    """Gradients summed variable by variable (sparse ones stay sparse; `None` stays)."""
    summed = []
    for a, b in zip(total, more, strict=True):
        if a is None or b is None:
            summed.append(a if b is None else b)
            continue
        if isinstance(a, tf.IndexedSlices) and isinstance(b, tf.IndexedSlices):
            # Rows of both micro-batches, kept sparse (a row looked up twice is summed by
            # the optimizer's update, or by the all-reduce).
            summed.append(
                tf.IndexedSlices(
                    tf.concat([a.values, b.values], 0),
                    tf.concat([a.indices, b.indices], 0),
                    a.dense_shape,
                )
            )
            continue
        if isinstance(a, tf.IndexedSlices) or isinstance(b, tf.IndexedSlices):
            a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
        summed.append(a + b)
    return summed


def _divide(gradient: Any, steps: int) -> Any:
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values / steps, gradient.indices, gradient.dense_shape)
    return gradient / steps


def _per_replica_xla(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` compiled with XLA, a new `tf.function` for each replica that traces it.

    Called while the outer step function is traced, once per replica: each replica gets
    its own XLA function, bound to its own copies of the variables. One function shared
    by the replicas can run a trace made for one replica's variables on another's
    device ("Trying to access resource .../replica_1 ... from device CPU:0").
    """
    return tf.function(function, jit_compile=True)


def compiled_reset(metrics: Sequence[keras.metrics.Metric]) -> Callable[[], None]:
    """One traced call that resets every metric in `metrics`.

    Traced at the first call and then called as a concrete function: no argument
    matching per call (0.04 ms a reset instead of 0.13 ms).
    """
    metrics = list(metrics)

    @tf.function
    def reset() -> None:
        for metric in metrics:
            metric.reset_state()

    traced: list[Any] = []

    def call() -> None:
        if not traced:
            traced.append(reset.get_concrete_function())
        traced[0]()

    return call
