"""Create every variable a training run needs before the first step is traced."""

from __future__ import annotations

from typing import Any

import keras

from kdist.engine.sharded import training_variables

__all__ = ["build_for_training"]


def build_for_training(model: keras.Model, element_spec: Any) -> None:
    """Build the model, its compiled losses and metrics, and its optimizer from a spec.

    A subclassed model, or layers without an input shape, create their variables on
    the first call; Keras's optimizer, metrics and compiled losses create theirs lazily
    too. Under a strategy all of them must exist before the step function is traced
    (and an optimizer built on a model without variables is built on nothing: "Unknown
    variable ... This optimizer can only be called for the variables it was originally
    built with"). This does what `fit` does before its first step (Keras's
    `Trainer._symbolic_build`), from the data's element spec instead of a batch, and
    builds the optimizer on `training_variables(model)`, so that parameter-server shards
    get optimizer slots on their own servers. Call it inside `strategy.scope()`.

    Args:
        model: a compiled `keras.Model`.
        element_spec: the training dataset's `element_spec`, `(x, y)` or
            `(x, y, sample_weight)` with a batch dimension.
    """
    model_unbuilt = not all(layer.built for layer in model._flatten_layers())
    if model_unbuilt:
        x, _, _ = keras.utils.unpack_x_y_sample_weight(_symbolic(element_spec))
        from keras.src import backend

        backend.compute_output_spec(model, x, training=False)
    optimizer = model.optimizer
    if optimizer is not None and not optimizer.built:
        optimizer.build(training_variables(model))
    model._symbolic_build(data_batch=_symbolic(element_spec))


def _symbolic(element_spec: Any) -> Any:
    import tensorflow as tf

    def to_keras(spec: Any) -> Any:
        if spec is None:
            return None
        return keras.KerasTensor(tuple(spec.shape), dtype=tf.as_dtype(spec.dtype).name)

    return tf.nest.map_structure(to_keras, element_spec)


def rebuild_in_scope(model: keras.Model) -> keras.Model:
    """A copy of `model` made in the current `strategy.scope()`, with its weights and compile.

    Keras binds a model to the strategy it was created under; a model made in a
    notebook before the strategy existed has plain variables, which a distributed step
    cannot update. The copy is made from the model's config (`clone_model`), built like
    the original, given its weights, and compiled from its compile config (the optimizer
    from its configuration, without slots: it has not been applied under this strategy).

    Args:
        model: a Keras model, compiled or not.

    Returns:
        The copy.
    """
    copy = keras.models.clone_model(model)
    weights = model.get_weights()
    if weights and not copy.weights:
        build_config = model.get_build_config()
        if build_config:
            copy.build_from_config(build_config)
    if weights:
        copy.set_weights(weights)
    config = model.get_compile_config() if model.compiled else None
    if config:
        copy.compile_from_config(config)
    return copy


def synchronize_batchnorm(model: keras.Model) -> int:
    """Make every `BatchNormalization` layer of `model` use global-batch statistics.

    Keras's `synchronized=True` (TensorFlow backend) all-reduces each batch's moments
    across the replicas, so that mean and variance, and the moving statistics, are
    those of the global batch, as on one device; the layer reads the flag when it is
    called, so this works for any model, the user's included, before its first step.

    Args:
        model: the model.

    Returns:
        How many layers were switched.
    """
    count = 0
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.synchronized = True
            count += 1
    return count
