"""The hyperparameters a hypermodel declares, found the way keras-tuner's tuner finds them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import keras

from kdist.compat.tools_private import space_has
from kdist.config.errors import ConfigError
from kdist.models.hypermodel.build import builder, call_build
from kdist.models.hypermodel.target import HP_KEY, locate, model_target_text
from kdist.models.hypermodel.values import check_values, hp_values

__all__ = ["SpaceFound", "search_space"]

# A hyperparameter name must be a config key under `model.hp` (Hydra's override grammar).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*")


# keras-tuner builds once per conditional scope; a space that keeps growing is a bug.
_MAX_BUILDS = 100


@dataclass(frozen=True)
class SpaceFound:
    """What `search_space` found.

    Attributes:
        hyperparameters: the declared space (`keras_tuner.HyperParameters`); the values
            fixed in `model.hp` are `Fixed` hyperparameters.
        compiled: whether the hypermodel compiles the model itself (its optimizer, loss
            and metrics are then kept, and the config's have no effect).
        target: `model._target_`, as written.
        metrics: the metric names the compiled model logs besides its loss (`accuracy`
            for `"accuracy"`/`"acc"`, else a metric's name); empty when not compiled.
    """

    hyperparameters: Any
    compiled: bool
    target: str
    metrics: tuple[str, ...] = ()


def _metric_names(model: keras.Model) -> tuple[str, ...]:
    """The names a compiled model's metrics log under (from its compile config)."""
    config = model.get_compile_config() or {}
    found: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, (list, tuple)):
            for item in node:
                walk(item)
        elif isinstance(node, Mapping) and "class_name" not in node:
            for item in node.values():  # keyed by output
                walk(item)
        elif node is not None:
            found.append(node)

    walk(config.get("metrics"))
    walk(config.get("weighted_metrics"))
    names = []
    for item in found:
        if isinstance(item, str):
            names.append("accuracy" if item in ("accuracy", "acc") else item)
        elif isinstance(item, Mapping):
            names.append(str((item.get("config") or {}).get("name", item.get("class_name"))))
    return tuple(dict.fromkeys(names))


def search_space(
    model_cfg: Any,
    *,
    shapes: Callable[[], tuple[Sequence[int], int]] | None = None,
    key: str = "model",
    target: Any = None,
) -> SpaceFound:
    """The hyperparameters a hypermodel declares, found the way keras-tuner finds them.

    Builds the model with every default, then again with values that activate each
    conditional scope not yet active (keras-tuner's `Tuner._activate_all_conditions`).
    Values set in `model.hp` are fixed: the search does not tune them.

    Args:
        model_cfg: the `model` node.
        shapes: returns `(input_shape, num_classes)` of the data, called only when the
            hypermodel takes them. Defaults to `None`.
        key: the node's config path, for messages. Defaults to `"model"`.
        target: the hypermodel itself, instead of the node's `_target_`.
            Defaults to `None`.

    Returns:
        A `SpaceFound`.

    Raises:
        ConfigError: as `build` does, and naming `model._target_` for a hyperparameter
            name that cannot be a config key under `model.hp`.
    """
    import copy

    import keras_tuner

    target = locate(model_cfg) if target is None else target
    given = hp_values(model_cfg, key=key)
    build_fn = builder(target, model_cfg, key=key, shapes=shapes)
    space = keras_tuner.HyperParameters()
    for name, value in given.items():
        space.Fixed(name, value)
    never_active: list[Any] = []
    once_active: list[Any] = []
    compiled = False
    metrics: tuple[str, ...] = ()
    hp = space.copy()
    for _ in range(_MAX_BUILDS):
        model = call_build(build_fn, hp, target=target, key=key)
        if not compiled and model.compiled and model.optimizer is not None:
            compiled, metrics = True, _metric_names(model)
        del model
        space.merge([p for p in hp.space if not space_has(space, p.name, p.conditions)])
        for conditions in hp.active_scopes:
            if conditions not in once_active:
                once_active.append(copy.deepcopy(conditions))
            if conditions in never_active:
                never_active.remove(conditions)
        for conditions in hp.inactive_scopes:
            if conditions not in once_active:
                never_active.append(copy.deepcopy(conditions))
        if not never_active:
            break
        hp = space.copy()
        for condition in never_active[0]:
            hp.values[condition.name] = condition.values[0]
        hp.ensure_active_values()
    keras.backend.clear_session(free_memory=False)
    check_values(space, given, target=target, key=key)
    for p in space.space:
        if not _NAME.fullmatch(p.name):
            raise ConfigError(
                f"{key}._target_",
                f"declares the hyperparameter {p.name!r}, whose name cannot be a config key "
                f"under {key}.{HP_KEY}",
                value=model_target_text(target),
                hint="name hyperparameters with letters, digits, _ and - (dots nest), "
                "without hp.name_scope",
            )
    return SpaceFound(space, compiled, model_target_text(target), metrics)
