"""`evaluate` on data in hand under the run's strategy, as `model.evaluate` computes it."""

from __future__ import annotations

import functools
from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import flatten_metrics_in_order
from kdist.data.pipeline import replica_parts
from kdist.engine.building import build_for_evaluation, building_scope
from kdist.engine.left_out import NonesLeftOut, holds_nones
from kdist.engine.runner import Runner, flat_logs, to_floats
from kdist.engine.step import as_fit_packs, overrides

__all__ = ["evaluate_batches", "keras_return"]


def evaluate_batches(
    strategy: tf.distribute.Strategy,
    runner: Runner | None,
    batches: tf.data.Dataset,
    *,
    model: keras.Model | None = None,
    callbacks: Any = None,
    steps_per_call: int = 1,
) -> dict[str, float]:
    """The model's metrics over `batches` (global batches), from reset metrics.

    Each global batch is cut over the replicas as `tf.distribute` cuts it for Keras's
    `evaluate` (`kdist.data.pipeline.replica_parts`); each replica runs the model's
    `test_step` and the metrics are read in cross-replica context. Under parameter
    servers the coordinator runs the steps, as kdist's own validation does there.

    Args:
        strategy: the run's strategy.
        runner: the run's runner (its `replica_test_step` and the model's metrics), or
            `None` for a model no `fit` has bound to data (its own `test_step`, as
            `model.evaluate` runs it; its compiled metrics are built here).
        batches: the global batches, `(x, y[, sample_weight])`.
        model: the model, when `runner` is `None`. Defaults to `None`.
        callbacks: a `keras.callbacks.CallbackList` whose test-batch hooks run around
            each group of `steps_per_call` batches, as in `model.evaluate`: the
            batches are then run one compiled call each. Defaults to `None`.
        steps_per_call: batches between two hooks (the model's `steps_per_execution`).
            Defaults to `1`.

    Returns:
        `{metric name: value}`, as `model.evaluate(..., return_dict=True)`.
    """
    if runner is not None:
        test_step = runner.replica_test_step  # type: ignore[attr-defined]
        model = runner.model  # type: ignore[attr-defined]
    else:
        assert model is not None
        with building_scope(model, strategy):
            build_for_evaluation(model, batches.element_spec)
        test_step = functools.partial(_own_test_step, model)
        if bool(getattr(model, "jit_compile", False)) and not isinstance(
            strategy, tf.distribute.ParameterServerStrategy
        ):
            # As Keras's `evaluate` runs a model compiled with `jit_compile=True`: the
            # step through XLA (whose float order differs), one function per replica.
            own = test_step
            test_step = lambda data: tf.function(own, jit_compile=True)(data)  # noqa: E731
    for metric in model.metrics:
        metric.reset_state()
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):

        @tf.function
        def on_coordinator(iterator: Any) -> Any:
            for batch in iterator:
                test_step(batch)
            return model.get_metrics_result()

        return to_floats(on_coordinator(iter(batches)))

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return replica_parts(batches, context).with_options(options)

    restore: Any = lambda batch: batch  # noqa: E731
    if holds_nones(batches.element_spec):  # an optional input left out as `None`
        left_out = NonesLeftOut(dataset_fn)
        distributed = strategy.distribute_datasets_from_function(left_out)
        restore = left_out.restore
    else:
        distributed = strategy.distribute_datasets_from_function(dataset_fn)
    if overrides(model, "test_step") or callbacks is not None:
        return _batch_by_batch(strategy, model, distributed, restore, callbacks, steps_per_call)

    def step(batch: Any) -> None:
        test_step(restore(batch))

    @tf.function
    def run() -> Any:
        for batch in distributed:
            strategy.run(step, args=(batch,))
        return model.get_metrics_result()

    return to_floats(run())


def _batch_by_batch(
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    distributed: Any,
    restore: Any,
    callbacks: Any,
    steps_per_call: int,
) -> dict[str, Any]:
    """`evaluate` one compiled call per batch, as Keras's for what needs each call:

    - a model with its own `test_step`: the last batch's logs that it returned (their
      mean over the replicas), or the metrics' results where those logs name the
      metrics (`Trainer._get_metrics_result_or_logs`);
    - test-batch hooks: `on_test_batch_begin(first)` and `on_test_batch_end(last, logs)`
      around each group of `steps_per_call` batches (Keras's `steps_per_execution`).
    """

    def run_one(data: Any) -> Any:
        return model.test_step(as_fit_packs(restore(data)))

    @tf.function
    def one(batch: Any) -> Any:
        logs = strategy.run(run_one, args=(batch,))
        return tf.nest.map_structure(
            lambda v: tf.reduce_mean(tf.stack(strategy.experimental_local_results(v)), axis=0),
            logs,
        )

    last: Any = None
    index = -1
    model.stop_evaluating = False
    for index, batch in enumerate(distributed):
        if callbacks is not None and index % steps_per_call == 0:
            callbacks.on_test_batch_begin(index)
        last = one(batch)
        if callbacks is not None and index % steps_per_call == steps_per_call - 1:
            callbacks.on_test_batch_end(index, to_floats(last))
            if model.stop_evaluating:  # a callback stopped it, as in Keras
                break
    if callbacks is not None and index >= 0 and index % steps_per_call != steps_per_call - 1:
        # Keras's last, partial group ends at its nominal last step.
        callbacks.on_test_batch_end(
            index - index % steps_per_call + steps_per_call - 1, to_floats(last)
        )
    metrics = model.get_metrics_result()
    if not isinstance(last, dict) or set(last) == set(metrics):
        return to_floats(metrics)
    return to_floats(flat_logs(last))  # Keras's `pythonify_logs` flattens nested logs


def _own_test_step(model: keras.Model, data: Any) -> None:
    model.test_step(as_fit_packs(data))


def keras_return(model: keras.Model, logs: dict[str, float], *, return_dict: bool) -> Any:
    """`logs` as `model.evaluate` returns them: the dict with `return_dict`, else one
    value alone or a list in the order of the model's metrics."""
    return dict(logs) if return_dict else flatten_metrics_in_order(model, logs)
