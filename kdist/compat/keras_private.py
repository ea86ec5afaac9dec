"""Keras's private names that kdist uses, each reached in one function.

Each function names the upstream symbol and the kdist code that needs it when an upgrade
moves it (`kdist.compat.upstream.UpstreamMoved`); `PRIVATE_NAMES` says why each is used.

Among them, the private pieces of Keras's `fit` loop that kdist's controller calls as they
are (`should_eval`, `initial_epoch_of`, `batch_op_size`): `kdist.engine.controller`
transcribes `keras/src/backend/tensorflow/trainer.py` `fit`; where Keras keeps a rule in a
private name (when to validate, the epoch a restored `BackupAndRestore` starts at), the
controller calls Keras's own, so that a Keras upgrade that changes the rule changes
kdist's too (or fails here, naming the symbol).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from kdist.compat.upstream import UpstreamMoved, private_attribute, private_import

__all__ = [
    "KERAS_DEFINITION_MODULES",
    "KERAS_UNTRUSTED_DEFINITIONS",
    "all_reduce_sum_gradients",
    "batch_op_size",
    "call_has_training_arg",
    "class_weight_to_sample_weights",
    "close_tensorboard_writers",
    "compile_config",
    "compile_loss",
    "compile_metrics",
    "compute_loss",
    "compute_output_spec",
    "distribute_strategy",
    "flat_metrics",
    "flatten_layers",
    "flatten_metrics_in_order",
    "initial_epoch_of",
    "inputs_struct",
    "learning_rate_variable",
    "loss_tracker",
    "metric_direction",
    "optimizer_variables",
    "outputs_struct",
    "patch_variable_copy_to_cpu",
    "replace_all_reduce",
    "safe_mode_scope",
    "seed_generators",
    "should_eval",
    "symbolic_build",
    "trace_symbolically",
    "unscale_loss_function",
]


# Where Keras defines what `keras.losses`, `keras.metrics`, ... re-export (config/trust.py).
KERAS_DEFINITION_MODULES = (
    "keras.src.losses",
    "keras.src.metrics",
    "keras.src.optimizers",
    "keras.src.layers",
    "keras.src.initializers",
    "keras.src.regularizers",
    "keras.src.activations",
    "keras.src.callbacks",
)


# Callbacks defined there that send metrics to a URL, or write or delete files at a path.
KERAS_UNTRUSTED_DEFINITIONS = (
    "keras.src.callbacks.remote_monitor.RemoteMonitor",
    "keras.src.callbacks.backup_and_restore.BackupAndRestore",
    "keras.src.callbacks.model_checkpoint.ModelCheckpoint",
    "keras.src.callbacks.csv_logger.CSVLogger",
    "keras.src.callbacks.tensorboard.TensorBoard",
)


_BUILD = "kdist.engine.building.build_for_training"


_STEP = "kdist.engine.step.StepRunner"


def compute_output_spec(model: Any, inputs: Any, *, training: bool = False) -> Any:
    """Call `model` on symbolic `inputs` (`keras.src.backend.compute_output_spec`)."""
    compute = private_import(
        "keras.src.backend", "compute_output_spec", f"{_BUILD}, kdist.data.in_hand"
    )
    return compute(model, inputs, training=training)


def class_weight_to_sample_weights(y: Any, class_weight: dict[int, float]) -> Any:
    """`fit`'s `class_weight` as per-example weights of arrays `y` (Keras's
    `data_adapter_utils.class_weight_to_sample_weights`: a class without a weight
    weighs 1)."""
    convert = private_import(
        "keras.src.trainers.data_adapters.data_adapter_utils",
        "class_weight_to_sample_weights",
        "kdist.data.in_hand.arrays.from_arrays",
    )
    return convert(y, class_weight)


def flatten_metrics_in_order(model: Any, logs: dict[str, Any]) -> Any:
    """`logs` as `model.evaluate` returns them without `return_dict`: one value alone,
    else a list in the order of the model's metrics (`Model._flatten_metrics_in_order`)."""
    flatten = private_attribute(
        model,
        "_flatten_metrics_in_order",
        "keras.Model._flatten_metrics_in_order",
        "kdist.experiment.evaluating.keras_return",
    )
    return flatten(logs)


def trace_symbolically(fn: Callable[..., Any], *args: Any) -> Any:
    """Run `fn` on symbolic `args`, statelessly (`keras.src.backend.compute_output_spec`).

    Layers that `fn` calls are built; the variables they create are initialized when it
    returns (or raises), in the scope of the caller; no state is changed.
    """
    compute = private_import("keras.src.backend", "compute_output_spec", _BUILD)
    return compute(fn, *args)


def symbolic_build(model: Any, data_batch: Any) -> None:
    """Build compiled losses and metrics from a symbolic batch (`Model._symbolic_build`)."""
    build = private_attribute(model, "_symbolic_build", "keras.Model._symbolic_build", _BUILD)
    build(data_batch=data_batch)


def flatten_layers(model: Any, *, include_self: bool = True) -> list[Any]:
    """Every layer of `model`, nested ones included (`Layer._flatten_layers`)."""
    flatten = private_attribute(
        model, "_flatten_layers", "keras.Layer._flatten_layers", "kdist (layer walks)"
    )
    return list(flatten(include_self=include_self))


def seed_generators(layer: Any) -> list[Any]:
    """The `SeedGenerator`s a layer holds (`Layer._seed_generators`)."""
    found = private_attribute(
        layer, "_seed_generators", "keras.Layer._seed_generators", "kdist.engine.state"
    )
    return list(found or [])


def inputs_struct(model: Any) -> Any:
    """A functional model's input structure, or `None` for a subclassed model."""
    return getattr(model, "_inputs_struct", None)


def outputs_struct(model: Any) -> Any:
    """A functional model's output structure, or `None` for a subclassed model."""
    return getattr(model, "_outputs_struct", None)


def compile_config(model: Any) -> Any:
    """The object Keras's `compile` makes anew at every call (`Trainer._compile_config`),
    or `None` before the first: kdist tells a recompile by it, as Keras's `compile`
    drops its `train_function`."""
    return getattr(model, "_compile_config", None)


def compile_loss(model: Any) -> Any:
    """The model's compiled loss (`Model._compile_loss`), `None` when compiled without."""
    return private_attribute(
        model, "_compile_loss", "keras.Model._compile_loss", "kdist.data.in_hand.check_inputs"
    )


def compile_metrics(model: Any) -> Any:
    """The model's compiled metrics (`Model._compile_metrics`), or `None`."""
    return private_attribute(model, "_compile_metrics", "keras.Model._compile_metrics", _STEP)


def compute_loss(model: Any, **arguments: Any) -> Any:
    """The compiled loss of a batch, as Keras's `train_step` computes it."""
    compute = private_attribute(model, "_compute_loss", "keras.Model._compute_loss", _STEP)
    return compute(**arguments)


def loss_tracker(model: Any) -> Any:
    """The `loss` metric Keras's `train_step` updates (`Model._loss_tracker`)."""
    return private_attribute(model, "_loss_tracker", "keras.Model._loss_tracker", _STEP)


def call_has_training_arg(model: Any) -> bool:
    """Whether `model.call` takes `training` (`Layer._call_has_training_arg`)."""
    return bool(
        private_attribute(
            model, "_call_has_training_arg", "keras.Model._call_has_training_arg", _STEP
        )
    )


def unscale_loss_function() -> Callable[[Any], Any]:
    """Keras's `unscale_loss_for_distribution`: the loss as `train_step` logs it.

    Resolved once, before a step function is traced: an import inside the traced
    step would be run through AutoGraph.
    """
    return private_import("keras.src.losses.loss", "unscale_loss_for_distribution", _STEP)


def distribute_strategy(model: Any) -> Any:
    """The strategy `model` was created under (`Model._distribute_strategy`), or `None`."""
    return getattr(model, "_distribute_strategy", None)


def optimizer_variables(optimizer: Any) -> list[Any] | None:
    """The variables a built `optimizer` updates (`BaseOptimizer._trainable_variables`),
    or `None` before it is built (or where Keras no longer keeps them).

    Keras's step keeps the trainable variables it was traced with until `compile`
    drops it; the optimizer was built with the same list (`kdist.engine.step`).
    """
    if not getattr(optimizer, "built", False):
        return None
    variables = getattr(optimizer, "_trainable_variables", None)
    return list(variables) if variables else None


def flat_metrics(metric: Any) -> list[Any]:
    """The metrics inside Keras's `CompileMetrics` (`_flat_metrics`); `[]` for others."""
    return list(getattr(metric, "_flat_metrics", None) or [])


def metric_direction(metric: Any) -> str | None:
    """`"up"` or `"down"`: which way `metric` gets better (`Metric._direction`)."""
    direction = getattr(metric, "_direction", None)
    return direction if direction in ("up", "down") else None


def learning_rate_variable(optimizer: Any) -> Any:
    """The variable or schedule behind `optimizer.learning_rate` (`_learning_rate`), or `None`.

    `optimizer.learning_rate` reads a schedule's current value; the attribute tells a
    constant rate (a variable a checkpoint restores) from a schedule.
    """
    return getattr(optimizer, "_learning_rate", None)


def safe_mode_scope() -> contextlib.AbstractContextManager[Any]:
    """Keras's safe mode, on for the `with` block whatever the global setting.

    A Keras without `SafeModeScope` gives a no-op scope: the config scan of
    `kdist.evaluation.export.load_model` still applies (`tests/test_compat.py` fails instead).
    """
    try:
        scope = private_import(
            "keras.src.saving.serialization_lib",
            "SafeModeScope",
            "kdist.evaluation.export.load_model",
        )
    except UpstreamMoved:
        return contextlib.nullcontext()
    return scope(True)


def patch_variable_copy_to_cpu(copy: Callable[[Any, dict[Any, Any]], None]) -> None:
    """Make `copy` the `_copy_trackable_to_cpu` of Keras's TensorFlow `Variable`.

    A global patch of Keras's class, made once per process (idempotent): TensorFlow's
    asynchronous checkpoint calls it on every Keras variable of the checkpoint.
    """
    variable = private_import(
        "keras.src.backend.tensorflow.core", "Variable", "kdist.engine.checkpoint"
    )
    private_attribute(
        variable,
        "_copy_trackable_to_cpu",
        "keras.src.backend.tensorflow.core.Variable._copy_trackable_to_cpu",
        "kdist.engine.checkpoint",
    )
    if variable._copy_trackable_to_cpu is not copy:
        variable._copy_trackable_to_cpu = copy


def all_reduce_sum_gradients(optimizer: Any) -> Callable[..., Any]:
    """This optimizer's cross-replica gradient sum (`_all_reduce_sum_gradients`: Keras's,
    or one `replace_all_reduce` set)."""
    found: Callable[..., Any] = private_attribute(
        optimizer,
        "_all_reduce_sum_gradients",
        "keras.optimizers.Optimizer._all_reduce_sum_gradients",
        "kdist.engine.sync.local_updates.install_local_updates",
    )
    return found


def replace_all_reduce(optimizer: Any, all_reduce: Callable[..., Any]) -> None:
    """Make `all_reduce` this optimizer's cross-replica gradient sum.

    Keras's TensorFlow optimizer sums the replicas' gradients in its private
    `_all_reduce_sum_gradients`, called by `_backend_update_step`; set on the instance,
    it replaces the class's for this optimizer only.
    """
    private_attribute(
        optimizer,
        "_all_reduce_sum_gradients",
        "keras.optimizers.Optimizer._all_reduce_sum_gradients",
        "kdist.strategies.compression.compress_all_reduce",
    )
    optimizer._all_reduce_sum_gradients = all_reduce


def close_tensorboard_writers(callback: Any) -> None:
    """Close a Keras `TensorBoard` callback's summary writers (`_close_writers`)."""
    close = private_attribute(
        callback,
        "_close_writers",
        "keras.callbacks.TensorBoard._close_writers",
        "kdist.engine.after_failure.close_files",
    )
    close()


_CONTROLLER = "kdist.engine.controller.Controller"


_DATASETS = "kdist.data.in_hand.datasets.from_dataset"


def should_eval(epoch: int, validation_freq: Any) -> bool:
    """Whether `fit` validates after `epoch` (0-based), by Keras's `Trainer._should_eval`:
    `(epoch + 1) % freq == 0` for an integer, membership for a list (1-based epochs)."""
    trainer = private_import("keras.src.trainers.trainer", "Trainer", _CONTROLLER)
    rule = private_attribute(
        trainer, "_should_eval", "keras.src.trainers.trainer.Trainer._should_eval", _CONTROLLER
    )
    # The rule reads nothing of the model (`self` is unused), so it is called unbound.
    return bool(rule(None, epoch, validation_freq))


def batch_op_size(ds: Any) -> int | None:
    """The batch size of the nearest `batch`/`padded_batch` op up `ds`'s first inputs (the
    op's `_batch_size` tensor), or `None` when an `unbatch`/`rebatch` or no batch op comes
    first. Read from the dataset's graph: no iterator is made, so a seeded shuffle keeps
    the order `fit` would draw (`kdist.data.in_hand.datasets.from_dataset`)."""
    node = ds
    while node is not None:
        name = type(node).__name__
        if "Unbatch" in name or "Rebatch" in name:
            return None
        if name in ("_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset"):
            size = private_attribute(
                node, "_batch_size", "tf.data.Dataset.batch's _batch_size", _DATASETS
            )
            try:
                return int(size)
            except (TypeError, ValueError):  # not a constant (a symbolic tensor)
                return None
        inputs = [getattr(node, "_input_dataset", None)]
        inputs += list(getattr(node, "_input_datasets", None) or [])
        node = next((i for i in inputs if i is not None), None)
    return None


def initial_epoch_of(model: Any) -> int | None:
    """The epoch a Keras `BackupAndRestore` restored in `on_train_begin` (the model's
    `_initial_epoch`, which `fit` prefers to its `initial_epoch`), or `None`."""
    value = private_attribute(model, "_initial_epoch", "keras.Model._initial_epoch", _CONTROLLER)
    return None if value is None else int(value)
