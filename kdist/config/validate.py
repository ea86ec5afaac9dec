"""Semantic checks on a composed config, run before TensorFlow does any work.

Types and unknown keys of the typed groups are checked by the schemas while Hydra
composes; this module checks ranges and choices, and the keys of open-ended `_target_`
nodes against the signature of the callable they name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from kdist.config.compile_rules import check_compile
from kdist.config.constants import (
    ALLREDUCE_DTYPES,
    FLIP_MODES,
    LAZY_OPTIMIZERS,
    LR_SCHEDULES,
    MODEL_INJECTED_KEYS,
    OPTIMIZER_KDIST_KEYS,
    RESNET_VARIANTS,
)
from kdist.config.errors import ConfigError
from kdist.config.groups import TRAIN_GROUPS
from kdist.config.sync import check_sync
from kdist.config.targets import check_target_keys

__all__ = [
    "check_allreduce_dtype",
    "check_batch_size",
    "check_choice",
    "check_positive",
    "check_safe_loading",
    "check_target_keys",
    "parse_update_freq",
    "validate",
]

CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduction_to_one_device")
SHARD_POLICIES = ("auto", "file", "data", "off")
LR_SCALING = ("none", "linear", "sqrt")
MIXED_PRECISION = (None, "mixed_float16", "mixed_bfloat16")
TENSORBOARD_UPDATE_FREQ = ("epoch", "batch")
# Callables that would deserialize a model without Keras safe mode (or turn it off).
UNSAFE_LOADERS = ("load_model", "load_model_from_hdf5", "enable_unsafe_deserialization")
# More logical devices than this is a typo, not a plan: TensorFlow creates each one (and
# logs it) before the first step, which takes minutes at 1000. 64 covers any real GPU split.
MAX_LOGICAL_DEVICES = 64


def parse_update_freq(value: Any) -> str | int:
    """`callbacks.tensorboard.update_freq` as Keras takes it: `epoch`, `batch`, or steps.

    Raises:
        ValueError: unless it is `epoch`, `batch` or a positive whole number.
    """
    text = str(value).strip()
    if text in ("epoch", "batch"):
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ValueError(f"`update_freq` ({value!r}) must be epoch, batch or a positive integer.")


def check_positive(key: str, value: Any, *, allow_none: bool = False, strict: bool = True) -> None:
    """Raise `ConfigError` unless `value` is a positive number (or None when allowed)."""
    if value is None and allow_none:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and not math.isfinite(value):
        # inf or nan: refused here (status 2) rather than by the NaN guard after steps.
        raise ConfigError(key, "must be a finite number", value=value)
    ok = ok and (value > 0 if strict else value >= 0)
    if not ok:
        what = "a positive number" if strict else "a number >= 0"
        if allow_none:
            what += " or null"
        raise ConfigError(key, f"must be {what}", value=value)


def check_batch_size(trainer: Any) -> None:
    """Exactly one of `global_batch_size` and `per_replica_batch_size`, a positive number.

    Raises:
        ConfigError: naming both keys when both or neither are set, or the one set when
            it is not a positive number.
    """
    per_replica = trainer.get("per_replica_batch_size")
    if per_replica is not None and trainer.global_batch_size is not None:
        raise ConfigError(
            "trainer.per_replica_batch_size",
            f"is set together with trainer.global_batch_size={trainer.global_batch_size!r}: "
            "give one batch size",
            value=per_replica,
            hint="to scale the batch with the replicas add trainer.global_batch_size=null; "
            "to keep it fixed drop trainer.per_replica_batch_size",
        )
    if per_replica is None and trainer.global_batch_size is None:
        raise ConfigError(
            "trainer.global_batch_size",
            "is null and so is trainer.per_replica_batch_size: give one batch size",
            hint="e.g. trainer.global_batch_size=64 or trainer.per_replica_batch_size=32",
        )
    if per_replica is not None:
        check_positive("trainer.per_replica_batch_size", per_replica)
    else:
        check_positive("trainer.global_batch_size", trainer.global_batch_size)


def check_choice(key: str, value: Any, choices: Iterable[Any]) -> None:
    """Raise `ConfigError` unless `value` is one of `choices`."""
    choices = tuple(choices)
    if value not in choices:
        shown = ", ".join("null" if c is None else str(c) for c in choices)
        raise ConfigError(key, "is not a valid choice", value=value, hint=f"use one of: {shown}")


def check_safe_loading(node: Any, key: str = "") -> None:
    """Refuse any config that would load a model without Keras safe mode.

    A `safe_mode: false` key anywhere, or a `_target_` to a model loader other than
    `kdist.evaluation.export.load_model` (which always uses safe mode), or to
    `keras.config.enable_unsafe_deserialization`, is an error.

    Raises:
        ConfigError: naming the key.
    """
    if isinstance(node, (DictConfig, ListConfig)):
        node = OmegaConf.to_container(node, resolve=False)
    if isinstance(node, dict):
        for name, value in node.items():
            path = f"{key}.{name}" if key else str(name)
            if name == "safe_mode" and value is not True:
                raise ConfigError(path, "Keras safe mode cannot be turned off", value=value)
            if name == "_target_" and isinstance(value, str):
                last = value.rsplit(".", 1)[-1]
                if last in UNSAFE_LOADERS and not value.startswith("kdist."):
                    raise ConfigError(
                        path,
                        "loads models outside Keras safe mode",
                        value=value,
                        hint="use kdist.evaluation.export.load_model (always safe mode, no .h5)",
                    )
            check_safe_loading(value, path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            check_safe_loading(value, f"{key}[{i}]")


def _check_target_list(key: str, nodes: Any, *, base: type | None = None) -> None:
    if nodes is None:
        return
    if not isinstance(nodes, (ListConfig, list)):
        raise ConfigError(key, "must be a list of _target_ nodes", value=nodes)
    for i, node in enumerate(nodes):
        target = check_target_keys(f"{key}[{i}]", node)
        if base is None or not isinstance(target, type):
            continue
        # A class with its own `__new__` may build anything: the built object is checked.
        if target.__new__ is object.__new__ and not issubclass(target, base):
            raise ConfigError(
                f"{key}[{i}]._target_",
                f"is not a {base.__qualname__} class",
                value=node.get("_target_"),
                hint=f"name a subclass of keras.callbacks.{base.__qualname__}",
            )


# Strategies that all-reduce nothing (`trainer.allreduce_dtype` must stay float32).
NO_ALLREDUCE = ("kdist.strategies.one_device", "kdist.strategies.parameter_server")


def check_allreduce_dtype(cfg: DictConfig) -> None:
    """`trainer.allreduce_dtype`: a known type, and 16 bits only where gradients are all-reduced."""
    dtype = cfg.trainer.get("allreduce_dtype", "float32")
    check_choice("trainer.allreduce_dtype", dtype, ALLREDUCE_DTYPES)
    target = str(cfg.strategy.get("_target_"))
    if dtype != "float32" and target in NO_ALLREDUCE:
        raise ConfigError(
            "trainer.allreduce_dtype",
            f"compresses the all-reduce, and strategy {target.rsplit('.', 1)[-1]} has none",
            value=dtype,
            hint="use strategy=mirrored or multi_worker_mirrored, or allreduce_dtype=float32",
        )


# Groups whose schema lists every key: a key added to them (`+trainer.epoch=3`) is a typo.
CLOSED_GROUPS = ("trainer", "runtime")
# What numpy's and Keras's seeding accepts.
SEED_RANGE = (0, 2**32 - 1)


def check_closed_keys(cfg: DictConfig) -> None:
    """Refuse a key added with `+` to a group whose schema has no such key, naming the
    closest key (`+trainer.epoch=3`: did you mean `trainer.epochs`)."""
    import difflib
    from dataclasses import fields, is_dataclass

    for group in CLOSED_GROUPS:
        node = cfg.get(group)
        schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
        if not (isinstance(schema, type) and is_dataclass(schema)):
            continue
        known = [f.name for f in fields(schema)]
        for name in node:
            if str(name) in known:
                continue
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = (
                f"did you mean {group}.{close[0]}?"
                if close
                else f"{group} keys: {', '.join(known)}"
            )
            raise ConfigError(
                f"{group}.{name}",
                f"is not a key of {group} (added with +?); kdist would ignore it",
                hint=hint,
            )


def check_seed(value: Any) -> None:
    """`runtime.seed`: an integer numpy and Keras can seed with."""
    low, high = SEED_RANGE
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError("runtime.seed", f"must be an integer from {low} to {high}", value=value)


def validate(cfg: DictConfig) -> None:
    """Check ranges, choices and `_target_` keys of a composed train config.

    Args:
        cfg: the composed config (`kdist.compose` or a Hydra app's).

    Raises:
        ConfigError: for the first problem found, naming the key.
    """
    for group in TRAIN_GROUPS:
        if OmegaConf.select(cfg, group) is None:
            raise ConfigError(group, "is missing", hint=f"select an option, e.g. {group}=...")

    missing = OmegaConf.missing_keys(cfg)
    if missing:
        key = sorted(missing)[0]
        raise ConfigError(key, "has no value (???)", hint=f"set it, e.g. {key}=...")

    # First, so that no other message hides a request to load models unsafely.
    check_safe_loading(cfg)
    check_closed_keys(cfg)
    check_seed(cfg.runtime.get("seed"))

    trainer = cfg.trainer
    check_positive("trainer.epochs", trainer.epochs)
    check_batch_size(trainer)
    check_positive("trainer.steps_per_epoch", trainer.steps_per_epoch, allow_none=True)
    check_positive("trainer.steps_per_execution", trainer.steps_per_execution)
    check_positive("trainer.validation_freq", trainer.validation_freq)
    check_positive("trainer.validation_steps", trainer.get("validation_steps"), allow_none=True)
    check_positive(
        "trainer.validation_batch_size", trainer.get("validation_batch_size"), allow_none=True
    )
    check_positive("trainer.accumulate_steps", trainer.get("accumulate_steps", 1))
    check_allreduce_dtype(cfg)
    check_sync(cfg)
    check_compile(trainer)

    optimizer = cfg.optimizer
    check_positive("optimizer.learning_rate", optimizer.learning_rate)
    check_choice("optimizer.lr_scaling", optimizer.lr_scaling, LR_SCALING)
    check_choice("optimizer.schedule", optimizer.get("schedule"), LR_SCHEDULES)
    check_positive("optimizer.warmup_steps", optimizer.get("warmup_steps", 0), strict=False)
    check_positive("optimizer.decay_steps", optimizer.get("decay_steps"), allow_none=True)
    alpha = optimizer.get("alpha", 0.0)
    if not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise ConfigError("optimizer.alpha", "must be in [0, 1]", value=alpha)
    check_target_keys("optimizer", optimizer, ignore=OPTIMIZER_KDIST_KEYS)
    if optimizer.get("sparse_updates") and str(optimizer._target_) not in LAZY_OPTIMIZERS:
        raise ConfigError(
            "optimizer.sparse_updates",
            f"has no row-sparse form for {optimizer._target_}",
            value=True,
            hint="use optimizer=adam or optimizer=adagrad, or sparse_updates=false",
        )

    runtime = cfg.runtime
    check_positive("runtime.logical_devices", runtime.logical_devices, allow_none=True)
    if runtime.logical_devices is not None and runtime.logical_devices > MAX_LOGICAL_DEVICES:
        raise ConfigError(
            "runtime.logical_devices",
            f"is more than {MAX_LOGICAL_DEVICES}",
            value=runtime.logical_devices,
            hint=f"use 1 to {MAX_LOGICAL_DEVICES} (or null: the physical devices)",
        )
    for key in ("intra_op_threads", "inter_op_threads"):
        check_positive(f"runtime.{key}", runtime.get(key), allow_none=True)
    check_choice("runtime.mixed_precision", runtime.mixed_precision, MIXED_PRECISION)
    check_choice("runtime.tf_log_level", runtime.tf_log_level, (0, 1, 2, 3))
    check_positive("runtime.seed", runtime.seed, strict=False)

    strategy = cfg.strategy
    check_target_keys("strategy", strategy, ignore=("sync",))  # kdist.config.sync
    if "cross_device_ops" in strategy:
        check_choice("strategy.cross_device_ops", strategy.cross_device_ops, CROSS_DEVICE_OPS)

    # `model.hp`: a keras-tuner hypermodel's values (checked when it is built).
    check_target_keys("model", cfg.model, injected=MODEL_INJECTED_KEYS, ignore=("hp",))
    if str(cfg.model.get("_target_")) == "kdist.models.resnet":
        check_choice("model.variant", cfg.model.get("variant"), RESNET_VARIANTS)

    data = cfg.data
    check_target_keys("data.source", data.source)
    fraction = data.source.get("validation_fraction")
    if fraction is not None:
        number = isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
        if not number or not 0.0 <= fraction < 1.0:
            raise ConfigError(
                "data.source.validation_fraction",
                "must be in [0, 1)",
                value=fraction,
                hint="the share of examples held out for validation, e.g. 0.2",
            )
    check_positive("data.shuffle_buffer", data.shuffle_buffer)
    check_choice("data.shard_policy", data.shard_policy, SHARD_POLICIES)
    augment = data.get("augment")
    if augment is not None:
        check_choice("data.augment.random_flip", augment.get("random_flip"), FLIP_MODES)
        check_positive(
            "data.augment.random_crop_padding", augment.get("random_crop_padding", 0), strict=False
        )

    callbacks = cfg.callbacks
    try:
        parse_update_freq(callbacks.tensorboard.update_freq)
    except ValueError:
        raise ConfigError(
            "callbacks.tensorboard.update_freq",
            "is not a valid choice",
            value=callbacks.tensorboard.update_freq,
            hint=f"use one of: {', '.join(TENSORBOARD_UPDATE_FREQ)}, or a number of steps",
        ) from None
    check_positive(
        "callbacks.early_stopping.patience", callbacks.early_stopping.patience, strict=False
    )
    for key in ("checkpoint", "backup"):
        node = callbacks[key]
        if not isinstance(node.keep, int) or node.keep < 1:
            raise ConfigError(
                f"callbacks.{key}.keep",
                "must be a positive integer",
                value=node.keep,
                hint=f"the number of newest checkpoints kept, e.g. 2 (callbacks.{key}.enabled="
                "false turns them off)",
            )
        if not isinstance(node.every_n_steps, int) or node.every_n_steps < 0:
            raise ConfigError(
                f"callbacks.{key}.every_n_steps",
                "must be an integer >= 0",
                value=node.every_n_steps,
                hint="0 saves at the end of every epoch",
            )
    if callbacks.extra:
        import keras  # only when needed: the other checks run without it

        _check_target_list("callbacks.extra", callbacks.extra, base=keras.callbacks.Callback)

    objective = cfg.get("objective")
    if objective is not None:
        # `auto` is resolved by `kdist.config.objective.resolve_objective` (the callers'
        # step, not a check), and the name against the run's metrics by `Experiment`.
        check_choice("objective.direction", objective.direction, ("min", "max", "auto"))
