"""Create every variable a training run needs before the first step is traced."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras

from kdist.compat.keras_private import (
    compute_output_spec,
    distribute_strategy,
    flatten_layers,
    symbolic_build,
    trace_symbolically,
)
from kdist.engine.sharded import training_variables
from kdist.modeling.lazy_optimizers import is_lazy, sparse_lookups

__all__ = [
    "UnbuildableModel",
    "build_for_evaluation",
    "build_for_prediction",
    "build_for_training",
    "building_scope",
    "distributed",
    "optimizer_steps",
    "own_optimizers",
]


def distributed(strategy: Any) -> bool:
    """Whether `strategy` spreads a step over several replicas or processes."""
    import tensorflow as tf

    return int(strategy.num_replicas_in_sync) > 1 or isinstance(
        strategy,
        (tf.distribute.MultiWorkerMirroredStrategy, tf.distribute.ParameterServerStrategy),
    )


def building_scope(model: keras.Model, strategy: Any) -> contextlib.AbstractContextManager[Any]:
    """Where `model`'s layers, optimizer and metrics are built: in `strategy.scope()`, or
    outside any scope for a model made outside it that trains as it is on one device,
    as `model.fit` builds it (an optimizer made outside cannot make its slots in the
    scope, nor beside variables made outside it: "colocate_vars_with must only be passed
    a variable created in this tf.distribute.Strategy.scope()")."""
    if not distributed(strategy) and distribute_strategy(model) is not strategy:
        return contextlib.nullcontext()
    return strategy.scope()


class UnbuildableModel(ValueError):
    """A model kdist cannot build before its first step (see `build_for_training`)."""


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
    has_call = _build_model(model, element_spec)
    for other in own_optimizers(model):
        # A GAN's `compile(d_optimizer, g_optimizer, ...)`: the model does not say which
        # variables each updates, so each gets slots for all (it updates some). Built
        # lazily, inside the replicas' step, their variables would be made in a branch of
        # the train function, which a distributed strategy cannot run.
        if not other.built:
            other.build(training_variables(model))
    optimizer = model.optimizer
    if optimizer is not None and not optimizer.built:
        optimizer.build(training_variables(model))
    if optimizer is not None and is_lazy(optimizer):
        sparse_lookups(model)
    if has_call:
        # Keras builds the compiled losses and metrics on the model's output; a model
        # with no `call` (keras.io's diffusion model) uses its compiled loss, if at all,
        # inside its own `train_step`, as `fit` on one device lets it.
        symbolic_build(model, _symbolic(element_spec))


def build_for_evaluation(model: keras.Model, element_spec: Any) -> None:
    """Build the model and its compiled losses and metrics from a spec, not its optimizer.

    What Keras's `evaluate` does before its first batch (`Trainer._symbolic_build`) on a
    model `fit` has not built: `evaluate` on data in hand needs no training data.
    Call it inside `strategy.scope()`.

    Args:
        model: a compiled `keras.Model`.
        element_spec: the batches' `element_spec`, `(x, y)` or `(x, y, sample_weight)`.
    """
    if _build_model(model, element_spec):
        symbolic_build(model, _symbolic(element_spec))


def build_for_prediction(model: keras.Model, element_spec: Any) -> None:
    """Build the model's layers from the spec of `predict`'s batches (`x` or `(x,)`),
    before a step that runs on several replicas: variables made inside it, in a replica
    context, fail ("cond/Placeholder" graph errors). Call it inside `strategy.scope()`."""
    _build_model(model, element_spec)


def _build_model(model: keras.Model, element_spec: Any) -> bool:
    """Build `model`'s layers from the spec (if unbuilt); whether it has its own `call`."""
    from kdist.engine.step import overrides

    has_call = overrides(model, "call")
    model_unbuilt = not all(layer.built for layer in flatten_layers(model))
    if model_unbuilt:
        if has_call:
            x, _, _ = keras.utils.unpack_x_y_sample_weight(_symbolic(element_spec))
            compute_output_spec(model, x, training=False)
        else:  # keras.io's VAE, GAN, SimSiam: their own train_step calls their parts
            _build_without_call(model, _symbolic(element_spec))
    return has_call


def own_optimizers(model: keras.Model) -> list[keras.optimizers.Optimizer]:
    """The optimizers `model` holds besides `model.optimizer` (a GAN's two), in order."""
    found: list[keras.optimizers.Optimizer] = []
    for value in vars(model).values():
        if (
            isinstance(value, keras.optimizers.Optimizer)
            and value is not model.optimizer
            and all(value is not seen for seen in found)
        ):
            found.append(value)
    return found


def optimizer_steps(model: keras.Model) -> int:
    """Updates applied: the most `iterations` of the model's optimizers (a GAN's two)."""
    optimizers = [model.optimizer, *own_optimizers(model)]
    return max(int(o.iterations.numpy()) for o in optimizers if o is not None)


def _build_without_call(model: keras.Model, data: Any) -> None:
    """Build a model with no `call` through its own `train_step` (keras.io's VAE, SimSiam).

    Such a model trains through its `train_step`, which calls its parts; `fit` without a
    strategy builds them by tracing that step on the first batch. Here the step runs on
    a symbolic batch, statelessly (nothing is applied), inside the caller's
    `strategy.scope()`: the layers it calls are built, and their variables are made in
    the scope when the trace ends. The trace may stop after the forward pass (reading
    the gradients of variables not yet made): what matters is that the parts are built.

    Raises:
        UnbuildableModel: when it has no `train_step` either, or its parts are still
            not built after the traced step (with the step's first error line).
    """
    from kdist.engine.step import as_fit_packs, overrides

    name = type(model).__name__
    if not overrides(model, "train_step"):
        raise UnbuildableModel(
            f"{name} has neither a `call` nor its own `train_step`: give it one of them"
        )
    failure = ""
    if _unbuilt_parts(model):
        try:
            with _updates_skipped(model):
                trace_symbolically(model.train_step, as_fit_packs(data))
        except Exception as error:  # the parts tell (below)
            failure = (str(error).strip().splitlines() or [type(error).__name__])[0]
    unbuilt = _unbuilt_parts(model)
    if unbuilt:
        raise UnbuildableModel(
            f"{name} has no `call`, and its `train_step` on the first batch left "
            f"{', '.join(unbuilt)} unbuilt" + (f" ({failure})" if failure else "")
        )
    model.built = True


@contextlib.contextmanager
def _updates_skipped(model: keras.Model) -> Iterator[None]:
    """Make the model's optimizers skip their updates while its step is traced to build it.

    An update is a cross-replica `merge_call`, which the symbolic trace (outside any replica
    context) cannot make; nothing is applied by the trace anyway, and the layers the step
    calls after its first update (keras.io's SimCLR: a linear probe after the contrastive
    update) are built only if the trace gets past it.
    """
    optimizers = [o for o in (model.optimizer, *own_optimizers(model)) if o is not None]

    def skip(*args: Any, **kwargs: Any) -> None:
        return None

    for optimizer in optimizers:
        optimizer.apply_gradients = skip
        optimizer.apply = skip
    try:
        yield
    finally:
        for optimizer in optimizers:
            del optimizer.apply_gradients, optimizer.apply


def _unbuilt_parts(model: keras.Model) -> list[str]:
    return [layer.name for layer in flatten_layers(model, include_self=False) if not layer.built]


def _symbolic(element_spec: Any) -> Any:
    import tensorflow as tf

    def to_keras(spec: Any) -> Any:
        if spec is None or not hasattr(spec, "shape"):  # tf.data's spec of a `None`
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
    if type(copy) is not type(model):
        # `clone_model` makes a plain `Sequential` of a subclass of it (its own
        # `train_step` lost); the class's `from_config` keeps the class.
        copy = type(model).from_config(model.get_config())
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
    for layer in flatten_layers(model):
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.synchronized = True
            count += 1
    return count
