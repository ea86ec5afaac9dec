"""Batched inference under a strategy: the model's `predict_step` over a dataset, in order."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.source import Source
from kdist.engine.building import build_for_prediction

__all__ = ["predict_dataset", "predict_split"]


def predict_dataset(
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    dataset: tf.data.Dataset,
    callbacks: Any = None,
    *,
    steps_per_call: int = 1,
) -> Any:
    """Run `model.predict_step` on every batch of `dataset` and return the outputs in order.

    Under a single-host strategy with several replicas (mirrored), each global batch is
    split over the replicas (`experimental_distribute_dataset`) and the outputs are
    gathered back in order, as Keras's `predict` does. Under multi-worker and
    parameter-server strategies every process predicts on its own (the chief's result is
    the one written); one-device runs call the step directly.

    Args:
        strategy: the run's strategy (the model was built in its scope).
        model: the model.
        dataset: batched examples, `x` or `(x, ...)`; targets and weights are ignored.
        callbacks: a `keras.callbacks.CallbackList` whose predict-batch hooks run around
            each batch, with `{"outputs": ...}`, as in `model.predict`. Defaults to `None`.
        steps_per_call: batches between two hooks (the model's `steps_per_execution`).
            Defaults to `1`.

    Returns:
        NumPy arrays with the structure of the model's outputs, one row per example.
    """
    local = isinstance(strategy, tf.distribute.MirroredStrategy) and not isinstance(
        strategy, tf.distribute.MultiWorkerMirroredStrategy
    )
    if local and strategy.num_replicas_in_sync > 1:
        # Each global batch is split over the replicas, in order (one host: no sharding).
        distributed = strategy.experimental_distribute_dataset(dataset)
        with strategy.scope():  # the layers' variables, before the replicas' step
            build_for_prediction(model, dataset.element_spec)

        @tf.function
        def step(batch: Any) -> Any:
            outputs = strategy.run(model.predict_step, args=(batch,))
            return tf.nest.map_structure(lambda v: strategy.gather(v, axis=0), outputs)

        batches = _hooked(step, distributed, callbacks, steps_per_call, model)
    else:
        batches = _hooked(
            tf.function(model.predict_step), dataset, callbacks, steps_per_call, model
        )
    if not batches:
        raise ValueError("`dataset` has no examples to predict on.")
    return tf.nest.map_structure(_concatenate, *batches)


def _hooked(
    step: Any, batches: Any, callbacks: Any, per_call: int = 1, model: Any = None
) -> list[Any]:
    """`step` of each batch, between the callbacks' predict-batch hooks (if any): as
    Keras's `predict`, `on_predict_batch_begin(first)` and `on_predict_batch_end(last,
    {"outputs": ...})` around each group of `per_call` batches (the model's
    `steps_per_execution`; a last, partial group ends at its nominal last step), the
    group's outputs concatenated."""
    outputs: list[Any] = []
    first = 0
    if model is not None:
        model.stop_predicting = False
    for index, batch in enumerate(batches):
        if callbacks is not None and index % per_call == 0:
            callbacks.on_predict_batch_begin(index)
            first = index
        outputs.append(step(batch))
        if callbacks is not None and index % per_call == per_call - 1:
            callbacks.on_predict_batch_end(index, {"outputs": _group(outputs[first:])})
            if getattr(model, "stop_predicting", False):  # a callback stopped it
                break
    if callbacks is not None and outputs and len(outputs) % per_call:
        callbacks.on_predict_batch_end(first + per_call - 1, {"outputs": _group(outputs[first:])})
    return outputs


def _group(outputs: list[Any]) -> Any:
    """One call's outputs: the batch's, or several batches' concatenated."""
    if len(outputs) == 1:
        return outputs[0]
    return tf.nest.map_structure(_concatenate, *outputs)


def predict_split(
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    source: Source,
    *,
    batch_size: int,
    split: str = "validation",
    x: Any = None,
) -> Any:
    """Predict on a split of `source` (read once, in order), or on the features `x`.

    Args:
        strategy: the run's strategy.
        model: the model.
        source: the run's data.
        batch_size: the global batch.
        split: `"validation"` or `"train"`. Defaults to `"validation"`.
        x: features to predict on instead of a split (NumPy arrays, or a dict of them
            for several inputs). Defaults to `None`.

    Raises:
        ConfigError: naming `split` or `data.source` for a split that cannot be read.
    """
    if x is not None:
        dataset = tf.data.Dataset.from_tensor_slices(x).batch(batch_size)
    else:
        if split not in ("train", "validation"):
            raise ConfigError("split", "must be train or validation", value=split)
        if source.size(split) < 1:
            raise ConfigError("data.source", f"has no {split} examples to predict on")
        dataset = source.dataset(split).batch(batch_size)
    return predict_dataset(strategy, model, dataset)


def _concatenate(*parts: Any) -> Any:
    """Batches' outputs in one: NumPy arrays, or a ragged or sparse tensor as Keras's
    `predict` returns it for a model whose outputs are."""
    if isinstance(parts[0], tf.RaggedTensor):
        return tf.concat(parts, axis=0)
    if isinstance(parts[0], tf.SparseTensor):
        return tf.sparse.concat(0, list(parts))
    return np.concatenate([np.asarray(p) for p in parts])
