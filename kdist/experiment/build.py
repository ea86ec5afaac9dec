"""The run's model: built from `cfg.model` (or the user's), in the strategy's scope, compiled."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kdist import models
from kdist.compat.keras_private import (
    distribute_strategy,
    flatten_layers,
    outputs_struct,
)
from kdist.config import compile_rules
from kdist.config.errors import ConfigError
from kdist.config.sync import sync_settings
from kdist.data.checks import check_class_ids, check_label_range
from kdist.data.source import ArraySource, Source
from kdist.engine import Runner, Schedule, StandardRunner, build_for_training
from kdist.engine.building import (
    UnbuildableModel,
    building_scope,
    distributed,
    rebuild_in_scope,
    synchronize_batchnorm,
)
from kdist.engine.ps_runner import ParameterServerRunner
from kdist.engine.sync.runner import LocalSGDRunner
from kdist.experiment.run_data import DataPlan, run_dataset_fn
from kdist.modeling import compiling, optimizers

__all__ = [
    "check_is_model",
    "check_lookup_tables",
    "check_parameter_server",
    "check_targets",
    "compiled_losses",
    "compiled_model",
    "default_metrics",
    "output_classes",
    "runner_for",
    "strategy_for",
    "synchronize",
]

log = logging.getLogger(__name__)


def check_is_model(model: Any, strategy: tf.distribute.Strategy) -> None:
    """Refuse, under a distributed strategy, what is not a `keras.Model` (a `keras.Layer`
    mixed with Keras's `Trainer`, as Keras's own tests train) made outside its scope:
    the rebuild in the strategy's scope needs its config. On one device it trains as it is, as `fit`
    trains it, and the run folder has no `model.keras` (`save_model_files` says so).

    Raises:
        ConfigError: naming `model`.
    """
    if (
        model is not None
        and not isinstance(model, keras.Model)
        and distributed(strategy)
        and distribute_strategy(model) is not strategy
    ):
        raise ConfigError(
            "model",
            f"is a keras.Layer with Keras's Trainer, not a keras.Model "
            f"({type(model).__name__}): under a distributed strategy kdist rebuilds it "
            "in the strategy's scope from its config",
            hint="wrap the layer in a keras.Model (keras.Sequential([...])), or make it "
            "inside exp.strategy.scope(), or use strategy=one_device",
        )


def strategy_for(model: Any, strategy: tf.distribute.Strategy) -> tf.distribute.Strategy:
    """The strategy to train `model` under: the one it was made in, where both that one
    and the config's are single-host strategies (`MirroredStrategy`,
    `OneDeviceStrategy`), as Keras's `fit` trains a model under the strategy it was made
    in; else `strategy`.

    A notebook (or a test) that made its model in its own `MirroredStrategy` scope
    trains it as it is, with no rebuild from its config; a warning says so where that
    strategy is not the config's kind or devices.
    """
    own = distribute_strategy(model)
    if own is None and tf.distribute.has_strategy():
        # A model made outside any scope, handed over inside one: Keras's `fit` trains
        # it under the strategy in scope (`Trainer.distribute_strategy`).
        own = tf.distribute.get_strategy()
    local = (tf.distribute.MirroredStrategy, tf.distribute.OneDeviceStrategy)
    if own is None or own is strategy or type(own) not in local or type(strategy) not in local:
        return strategy  # a cluster's strategy holds its own cluster's connections
    name = getattr(model, "name", type(model).__name__)
    devices = tuple(own.extended.worker_devices)
    if type(own) is type(strategy) and devices == tuple(strategy.extended.worker_devices):
        log.info(
            "%s was made in the scope of a %s on the same devices: trained under it",
            name,
            type(own).__name__,
        )
    else:
        log.warning(
            "%s was made in the scope of a %s over %d device(s): trained under it, as "
            "Keras's fit trains it, not under the config's %s (make it outside any scope, "
            "or in exp.strategy.scope(), to train under the config's)",
            name,
            type(own).__name__,
            len(devices),
            type(strategy).__name__,
        )
    return own


def check_targets(
    loss: Any,
    source: Source,
    *,
    key: str = "trainer.loss",
    data_key: str = "data.source",
    num_classes: int | None = None,
) -> None:
    """Classification losses need class ids (or one-hot rows): say so before training.

    Args:
        loss: the loss the model trains with, in `trainer.loss`'s forms (names or
            `_target_` nodes): the config's for a model kdist compiles, or the names of
            the model's own compile (`compiled_losses`).
        source: the training data.
        key: what to name for the loss. Defaults to `"trainer.loss"`.
        data_key: what to name for the targets. Defaults to `"data.source"`.
        num_classes: the model's classes (its outputs' last dimension), when known.
            Defaults to `None`: the data's.

    Raises:
        ConfigError: naming `key` for float targets, or `data_key` for class ids the
            model has no output for (stating the model's class count).
    """
    if not compile_rules.is_sparse_classification_loss(loss) or not isinstance(source, ArraySource):
        return
    arrays = source.arrays("train")
    if len(arrays) < 2 or not isinstance(arrays[1], np.ndarray):
        return  # no targets (a model with its own train_step), or one per output
    name = compile_rules.loss_names(loss)[0]
    check_class_ids(key, arrays[1], loss=name, from_logits=compiling.takes_logits(loss))
    # Class ids the model has no output for fail late, inside TensorFlow.
    classes = num_classes or source.num_classes
    for split in ("train", "validation"):
        labels = source.arrays(split)
        if len(labels) > 1 and isinstance(labels[1], np.ndarray):
            check_label_range(data_key, labels[1], classes)


def compiled_losses(model: keras.Model) -> Any:
    """The losses of the model's own `compile(loss=...)`, as names (for `check_targets`).

    A name for each loss, in the compile's structure (a dict keyed by output, a list);
    outputs without a loss are left out, and a model compiled without a loss gives `[]`.
    """

    def name(loss: Any) -> str:
        if isinstance(loss, str):
            return loss
        if isinstance(loss, keras.losses.Loss) or not callable(loss):
            return type(loss).__name__
        return str(getattr(loss, "__name__", type(loss).__name__))

    loss = getattr(model, "loss", None)
    if loss is None:
        return []
    if isinstance(loss, dict):
        return {str(k): name(v) for k, v in loss.items() if v is not None}
    if isinstance(loss, (list, tuple)):
        return [name(v) for v in loss if v is not None]
    return name(loss)


def output_classes(model: keras.Model) -> int | None:
    """The last dimension of a functional (or built Sequential) model's one output (its
    classes), else `None`."""
    structure = outputs_struct(model)
    if structure is None and isinstance(model, keras.Sequential) and model.built:
        structure = model.outputs  # a Sequential keeps its graph in an inner Functional
    outputs = [] if structure is None else tf.nest.flatten(structure)
    if len(outputs) != 1:
        return None
    last = tuple(outputs[0].shape)[-1:] or (None,)
    return int(last[0]) if last[0] else None


def synchronize(model: keras.Model, strategy: tf.distribute.Strategy) -> None:
    """`trainer.sync_batchnorm`: every `BatchNormalization` layer uses global statistics.

    Raises:
        ConfigError: naming the key under parameter servers, which have no global batch.
    """
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        raise ConfigError(
            "trainer.sync_batchnorm",
            "cannot work under parameter_server: workers train on their own batches, "
            "asynchronously, with no global batch to share statistics over",
            value=True,
            hint="set trainer.sync_batchnorm=false, or use mirrored or multi_worker_mirrored",
        )
    count = synchronize_batchnorm(model)
    log.info(
        "trainer.sync_batchnorm: %d BatchNormalization layer(s) use the statistics of "
        "the global batch over %d replica(s)",
        count,
        strategy.num_replicas_in_sync,
    )


def check_lookup_tables(model: keras.Model, *, parameter_server: bool, validates: bool) -> None:
    """Refuse validation under parameter servers for a model with lookup tables.

    `StringLookup`, `IntegerLookup` and `TextVectorization` keep their vocabulary in a
    lookup table, which a parameter-server run creates on each worker; training runs
    there, but validation runs in the chief, where TensorFlow has no table to feed
    ("You must feed a value for placeholder tensor ... Lookup").

    Raises:
        ConfigError: naming `trainer.validation`.
    """
    if not (parameter_server and validates):
        return
    kinds = (keras.layers.StringLookup, keras.layers.IntegerLookup, keras.layers.TextVectorization)
    tables = [layer.name for layer in flatten_layers(model) if isinstance(layer, kinds)]
    if tables:
        raise ConfigError(
            "trainer.validation",
            f"cannot run under parameter_server for a model with lookup tables "
            f"({', '.join(tables)}): the workers train with their own tables, and the "
            "chief, which validates, has none",
            value=True,
            hint="set trainer.validation=false (then kdist.evaluate the run), or use "
            "mirrored or multi_worker_mirrored",
        )


def check_parameter_server(cfg: Any) -> None:
    """Refuse the options a parameter-server run cannot honour, naming their keys.

    Raises:
        ConfigError: for `runtime.jit_compile` (TensorFlow fails at the first step,
            naming a variable on a ps task), for `data.shard_policy` `file` or `data`
            (every worker runs the same input pipeline, from its own random batch) and
            for `runtime.intra_op_threads` and `runtime.inter_op_threads` (the workers'
            and parameter servers' `kdist.server` processes do not read the config).
    """
    if cfg.runtime.jit_compile:
        raise ConfigError(
            "runtime.jit_compile",
            "cannot work under parameter_server: XLA compiles a step only with its "
            "variables on the device that runs it, and the parameter servers hold them",
            value=True,
            hint="set runtime.jit_compile=false, or use mirrored or multi_worker_mirrored",
        )
    policy = str(cfg.data.shard_policy)
    if policy in ("file", "data"):
        raise ConfigError(
            "data.shard_policy",
            "cannot divide the data under parameter_server: TensorFlow gives every worker "
            "the same input pipeline, and each reads the whole training split from its own "
            "random starting batch",
            value=policy,
            hint="use auto or off (they do that), or multi_worker_mirrored to give each "
            "worker its own files or examples",
        )
    for key in ("intra_op_threads", "inter_op_threads"):
        if cfg.runtime.get(key) is not None:
            raise ConfigError(
                f"runtime.{key}",
                "cannot be applied under parameter_server: the steps run on the worker and "
                "ps tasks, whose kdist.server processes keep TensorFlow's thread pools",
                value=cfg.runtime.get(key),
                hint="leave it null, or use mirrored or multi_worker_mirrored",
            )


def compiled_model(
    cfg: Any,
    strategy: tf.distribute.Strategy,
    source: Source | None,
    *,
    total_steps: int | None,
    model: keras.Model | None = None,
) -> keras.Model:
    """The model to train, made and compiled inside `strategy.scope()`.

    Args:
        cfg: the train config.
        strategy: the run's strategy.
        source: the data (input shape and classes for a model built from `cfg.model`);
            `None` with `model`.
        total_steps: optimizer steps of the whole run (for learning-rate schedules), or
            `None` where no schedule needs them (`kdist.experiment.run_data`).
        model: the user's model instead of `cfg.model`. Defaults to `None`. Its compile
            is kept when it has one; made outside the scope of a distributed strategy,
            it is rebuilt in the scope with its weights.

    Returns:
        The compiled model (not yet built for an unbuilt subclassed model).

    Raises:
        ConfigError: naming the key, for a loss or metric Keras does not know, loss keys
            that are not the model's outputs, sync batch norm it cannot apply, or what a
            parameter server cannot honour (`check_parameter_server`).
    """
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        check_parameter_server(cfg)
    spread = distributed(strategy)
    made_outside = model is not None and distribute_strategy(model) is not strategy
    # On one device a model made outside the scope trains as it is, as `model.fit`
    # trains it; compiled (when it is not) outside the scope too, as the user would,
    # and built outside it (`runner_for`).
    as_it_is = made_outside and not spread
    with contextlib.nullcontext() if as_it_is else strategy.scope():
        if model is None:
            assert source is not None
            model = models.from_config(
                cfg.model, input_shape=source.input_shape, num_classes=source.num_classes
            )
        elif made_outside and spread:
            model = rebuild_in_scope(model)
        if cfg.trainer.get("sync_batchnorm"):
            synchronize(model, strategy)
        if model.compiled and model.optimizer is not None:
            log.info("keeping %s's own compile (loss, metrics, optimizer)", model.name)
        else:
            compile_rules.check_output_names(model, cfg.trainer)
            compiling.check_logits(model, cfg.trainer.get("loss"))
            model.compile(
                optimizer=optimizers.build(
                    cfg.optimizer,
                    num_replicas=int(strategy.num_replicas_in_sync),
                    mixed_precision=cfg.runtime.mixed_precision,
                    total_steps=total_steps,
                ),
                loss=compiling.build_loss(cfg.trainer.get("loss")),
                loss_weights=compiling.build_loss_weights(cfg.trainer.get("loss_weights")),
                metrics=default_metrics(model, cfg.trainer),
            )
    return model


def default_metrics(model: keras.Model, trainer: Any) -> Any:
    """What `model.compile(metrics=...)` gets from `trainer.metrics` for `model`.

    The config's metrics as written; when `trainer.metrics` is null, kdist's default
    (accuracy with a classification loss) where it can apply, as Keras takes it: keyed
    by output (`{cls: [accuracy]}`) when `trainer.loss` is keyed and gives every output
    a loss; left out, with one log line, for a model with several outputs otherwise
    (Keras refuses a list for them, and computes no metric without a target for every
    output).
    """
    metrics, loss = trainer.get("metrics"), trainer.get("loss")
    if metrics is not None:
        return compiling.build_metrics(metrics, loss)
    keyed = compile_rules.plain(loss)
    keyed = keyed if isinstance(keyed, Mapping) and "_target_" not in keyed else None
    structure = outputs_struct(model)
    several = structure is not None and len(tf.nest.flatten(structure)) > 1
    if keyed is None and not several:
        return compiling.build_metrics(None, loss)
    outputs = compile_rules.output_keys(model)
    if keyed is not None and None not in keyed.values() and set(map(str, keyed)) >= set(outputs):
        per_output = {str(k): compiling.build_metrics(None, v) for k, v in keyed.items()}
        return {k: v for k, v in per_output.items() if v is not None} or None
    if compiling.build_metrics(None, loss) is None:
        return None  # no default to leave out (a regression loss)
    log.info(
        "trainer.metrics: kdist's default (accuracy) is left out: %s has several outputs "
        "and trainer.loss does not give each a loss; set trainer.metrics={<output>: "
        "[accuracy]} to log it",
        model.name,
    )
    return None


def runner_for(
    cfg: Any,
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    source: Source,
    plan: DataPlan,
    schedule: Schedule,
    *,
    validates: bool,
    jit_compile: bool | None = None,
    previous: Runner | None = None,
) -> Runner:
    """Build `model` from the data's element spec (if unbuilt) and make its runner, which
    reads `source` as the run's data `plan` says (`kdist.experiment.run_data.run_dataset_fn`).

    Models that create their variables on the first call (subclassed models, layers
    without an input shape) are built before the optimizer, as `fit` does. The runner is
    the strategy's: a `ParameterServerRunner`, a `LocalSGDRunner` for a local
    `strategy.sync` mode, else a `StandardRunner`. `jit_compile` overrides
    `runtime.jit_compile` (a model's own compile); the steps per call are
    `schedule.steps_per_execution`. `previous`: the runner of the model's earlier `fit`,
    whose all-reduce residuals and averager the new one carries on.

    Raises:
        ConfigError: naming `model` when the runner cannot train it.
    """
    train_fn = run_dataset_fn(cfg, plan, source, "train")
    parameter_server = isinstance(strategy, tf.distribute.ParameterServerStrategy)
    check_lookup_tables(model, parameter_server=parameter_server, validates=validates)
    with building_scope(model, strategy):
        try:
            build_for_training(model, train_fn(tf.distribute.InputContext()).element_spec)
        except UnbuildableModel as error:
            raise ConfigError("model", str(error), value=type(model).__name__) from None
    sync = sync_settings(cfg.strategy)
    with strategy.scope():
        try:
            runner: type[StandardRunner] | type[ParameterServerRunner]
            chosen: dict[str, Any]
            if parameter_server:
                runner = ParameterServerRunner
                chosen = {"steps_per_schedule": int(cfg.strategy.get("steps_per_schedule", 1))}
            elif sync.local:
                runner, chosen = LocalSGDRunner, {"sync": sync}
            else:
                runner, chosen = StandardRunner, {}
            return runner(
                strategy=strategy,
                **chosen,
                model=model,
                train_dataset_fn=train_fn,
                validation_dataset_fn=(
                    run_dataset_fn(cfg, plan, source, "validation") if validates else None
                ),
                global_batch_size=schedule.global_batch_size,
                steps_per_execution=schedule.steps_per_execution,
                jit_compile=bool(cfg.runtime.jit_compile if jit_compile is None else jit_compile),
                accumulate_steps=int(cfg.trainer.get("accumulate_steps", 1)),
                allreduce_dtype=str(cfg.trainer.get("allreduce_dtype", "float32")),
                allreduce_error_feedback=bool(cfg.trainer.get("allreduce_error_feedback", True)),
                previous=previous,
            )
        except ConfigError:
            raise  # already names its key (e.g. trainer.allreduce_dtype on one device)
        except ValueError as error:
            raise ConfigError("model", str(error), value=type(model).__name__) from None
