"""keras-tuner hypermodels as kdist models: a `build_model(hp)` function or a `HyperModel`.

`model._target_` names a hypermodel when it is a `keras_tuner.HyperModel` (class or
instance) or a callable whose first parameter is named `hp`, keras-tuner's habit:

```python
def build_model(hp):
    model = keras.Sequential([
        keras.layers.Dense(hp.Int("units", 32, 128, step=32), activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
```

The values of its hyperparameters come from the config node `model.hp` (e.g.
`++model.hp.units=64`); every hyperparameter it declares without a value there takes
keras-tuner's default, so `python -m kdist.train model=custom model._target_=my.build_model`
trains the default model. `kdist.tune` finds the space with `search_space`, as keras-tuner's
tuner does (build with the defaults, then once more for every conditional scope not yet
active), and sets each trial's values in `model.hp`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import keras
from omegaconf import DictConfig, OmegaConf

from kdist.config.constants import HYDRA_KEYS, MODEL_INJECTED_KEYS
from kdist.config.errors import ConfigError

__all__ = [
    "HP_KEY",
    "SpaceFound",
    "build",
    "given_in_notebook",
    "hp_values",
    "is_hypermodel",
    "locate",
    "search_space",
]

# The key of the model node that holds the hyperparameters' values.
HP_KEY = "hp"
# A hyperparameter name must be a config key under `model.hp` (Hydra's override grammar).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*")
# keras-tuner builds once per conditional scope; a space that keeps growing is a bug.
_MAX_BUILDS = 100


def _is_hypermodel_class(target: Any) -> bool:
    import keras_tuner

    return isinstance(target, type) and issubclass(target, keras_tuner.HyperModel)


def is_hypermodel(target: Any) -> bool:
    """Whether `target` is a keras-tuner hypermodel.

    That is a `keras_tuner.HyperModel` subclass or instance, or a callable whose first
    parameter is named `hp` (`def build_model(hp)`).
    """
    import keras_tuner

    if isinstance(target, keras_tuner.HyperModel) or _is_hypermodel_class(target):
        return True
    if not callable(target):
        return False
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return bool(params) and params[0].name == HP_KEY and params[0].kind in positional


def locate(model_cfg: Any) -> Any | None:
    """The object `model._target_` names, or `None` when it names none (yet)."""
    from hydra._internal.utils import _locate

    target = model_cfg.get("_target_") if isinstance(model_cfg, (DictConfig, dict)) else None
    if not isinstance(target, str) or not target or target == "???":
        return None
    try:
        return _locate(target)
    except Exception:  # Hydra wraps ImportError/AttributeError; the config checks say it
        return None


def _flatten(node: Any, prefix: str, out: dict[str, Any]) -> None:
    for name, value in node.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, Mapping):
            _flatten(value, key, out)
        else:
            out[key] = value


def hp_values(model_cfg: Any, *, key: str = "model") -> dict[str, Any]:
    """The hyperparameter values in `model.hp`, by name (nested keys joined with dots).

    Raises:
        ConfigError: naming `model.hp` when it is not a mapping.
    """
    node = model_cfg.get(HP_KEY) if isinstance(model_cfg, (DictConfig, dict)) else None
    if node is None:
        return {}
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    if not isinstance(node, Mapping):
        raise ConfigError(
            f"{key}.{HP_KEY}",
            "must map hyperparameter names to values",
            value=node,
            hint=f"e.g. ++{key}.{HP_KEY}.units=64",
        )
    out: dict[str, Any] = {}
    _flatten(node, "", out)
    return out


def _name(target: Any) -> str:
    if isinstance(target, type) or (callable(target) and hasattr(target, "__qualname__")):
        return f"{target.__module__}.{target.__qualname__}"
    return f"{type(target).__module__}.{type(target).__qualname__} instance"


def _accepts(target: Any) -> set[str] | None:
    """The keyword arguments `target` takes (`None`: any)."""
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return {
        name
        for name, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }


def _builder(
    target: Any,
    model_cfg: Any,
    *,
    key: str,
    shapes: Callable[[], tuple[Sequence[int], int]] | None,
) -> Callable[[Any], Any]:
    """A function of `hp` that builds the model, with the node's other keys as arguments."""
    import keras_tuner

    node = model_cfg
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    kwargs = {k: v for k, v in dict(node).items() if k not in HYDRA_KEYS and k != HP_KEY}
    if isinstance(target, keras_tuner.HyperModel):
        if kwargs:
            raise ConfigError(
                f"{key}.{next(iter(kwargs))}",
                f"is not taken by {_name(target)}, a HyperModel instance",
                hint=f"set its hyperparameters in {key}.{HP_KEY}, or make the instance with them",
            )
        return target.build
    accepts = _accepts(target)
    is_class = _is_hypermodel_class(target)
    if accepts is not None:
        valid = accepts - {HP_KEY} - set(MODEL_INJECTED_KEYS)
        for name in kwargs:
            if name in MODEL_INJECTED_KEYS:
                raise ConfigError(f"{key}.{name}", "is set by kdist from the data; remove it")
            if name not in valid:
                raise ConfigError(
                    f"{key}.{name}",
                    f"unknown key for {_name(target)}",
                    hint=f"valid keys: {', '.join(sorted(valid)) or 'none'}; "
                    f"hyperparameter values go in {key}.{HP_KEY}.<name>",
                )
    if accepts is None and is_class:
        accepts = set()  # a HyperModel's `**kwargs` are keras-tuner's (name, tunable)
    wanted = [k for k in MODEL_INJECTED_KEYS if accepts is None or k in accepts]
    if wanted and shapes is not None:
        input_shape, num_classes = shapes()
        given = {"input_shape": tuple(input_shape), "num_classes": int(num_classes)}
        kwargs.update({k: given[k] for k in wanted})
    if is_class:
        try:
            instance = target(**kwargs)
        except Exception as error:
            text = " ".join(str(error).split()) or "no message"
            raise ConfigError(
                f"{key}._target_",
                f"{_name(target)}(...) raised {type(error).__name__}: {text}",
                value=model_target_text(target),
            ) from error
        return instance.build
    return lambda hp: target(hp, **kwargs)


def _call(build_fn: Callable[[Any], Any], hp: Any, *, target: Any, key: str) -> keras.Model:
    try:
        model = build_fn(hp)
    except ConfigError:
        raise
    except Exception as error:
        text = " ".join(str(error).split()) or "no message"
        raise ConfigError(
            f"{key}.{HP_KEY}",
            f"{_name(target)}(hp) raised {type(error).__name__}: {text}",
            value=dict(hp.values),  # the values it had read (defaults included)
        ) from error
    if not isinstance(model, keras.Model):
        raise ConfigError(
            f"{key}._target_",
            f"{_name(target)}(hp) returned {type(model).__name__}, not a keras.Model",
            value=model_target_text(target),
        )
    return model


def given_in_notebook(hp: Any) -> keras.Model:
    """`model._target_` of a search over a hypermodel that has no importable name (a
    closure or lambda given to `kdist.tune.search`): that search builds the object it
    was given; anything else that reads this config cannot.

    Raises:
        ConfigError: always, naming `model._target_`.
    """
    raise ConfigError(
        "model._target_",
        "names a hypermodel that was given to kdist.tune.search as a Python object "
        "without an importable name",
        value="kdist.models.hypermodel.given_in_notebook",
        hint="define build_model at the top level of a module or notebook, or rerun the "
        "trial in that notebook with build_model(best_hp)",
    )


def model_target_text(target: Any) -> str:
    """How `model._target_` spells `target`."""
    return _name(target).removesuffix(" instance")


def _in_domain(hp: Any, value: Any) -> bool:
    from keras_tuner.src.engine.hyperparameters import hp_types

    if isinstance(hp, hp_types.Choice):
        return value in list(hp.values)
    if isinstance(hp, hp_types.Boolean):
        return isinstance(value, bool)
    if isinstance(hp, hp_types.Fixed):
        return bool(value == hp.value)
    if isinstance(hp, (hp_types.Int, hp_types.Float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(hp, hp_types.Int) and value != int(value):
            return False
        return bool(hp.min_value <= value <= hp.max_value)
    return True


def _describe(hp: Any) -> str:
    config = {k: v for k, v in hp.get_config().items() if k not in ("name", "conditions")}
    return f"{type(hp).__name__}({', '.join(f'{k}={v!r}' for k, v in config.items())})"


def _check_values(hps: Any, given: Mapping[str, Any], *, target: Any, key: str) -> None:
    """Every given value names a declared hyperparameter and lies in its domain."""
    declared: dict[str, list[Any]] = {}
    for hp in hps.space:
        declared.setdefault(hp.name, []).append(hp)
    for name, value in given.items():
        if name not in declared:
            shown = ", ".join(declared) or "none"
            raise ConfigError(
                f"{key}.{HP_KEY}.{name}",
                f"is not a hyperparameter that {_name(target)} declares",
                value=value,
                hint=f"it declares: {shown}",
            )
        if not any(_in_domain(hp, value) for hp in declared[name]):
            raise ConfigError(
                f"{key}.{HP_KEY}.{name}",
                "is outside the hyperparameter's domain",
                value=value,
                hint=f"{_name(target)} declares {_describe(declared[name][0])}",
            )


def build(
    model_cfg: Any,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    key: str = "model",
    target: Any = None,
) -> keras.Model:
    """Build the model of a hypermodel node with the values in `model.hp`.

    Call it inside `strategy.scope()`. Hyperparameters without a value in `model.hp`
    take their default, as in keras-tuner. A model the hypermodel compiles keeps its
    compile (`kdist.modeling.compiled_model`).

    Args:
        model_cfg: the `model` node: `_target_`, `hp` and the callable's other arguments.
        input_shape: shape of one example, passed when the callable takes `input_shape`.
        num_classes: number of classes, passed when it takes `num_classes`.
        key: the node's config path, for messages. Defaults to `"model"`.
        target: the hypermodel itself (a notebook's `build_model`), instead of the
            node's `_target_`. Defaults to `None`.

    Returns:
        The `keras.Model`.

    Raises:
        ConfigError: naming `model.hp` when the hypermodel raises for these values,
            `model.hp.<name>` for a value it does not declare or outside its domain,
            `model._target_` when it returns something that is not a `keras.Model`.
    """
    import keras_tuner

    target = locate(model_cfg) if target is None else target
    given = hp_values(model_cfg, key=key)
    build_fn = _builder(
        target, model_cfg, key=key, shapes=lambda: (tuple(input_shape), int(num_classes))
    )
    hp = keras_tuner.HyperParameters()
    hp.values.update(given)
    model = _call(build_fn, hp, target=target, key=key)
    _check_values(hp, given, target=target, key=key)
    return model


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
    build_fn = _builder(target, model_cfg, key=key, shapes=shapes)
    space = keras_tuner.HyperParameters()
    for name, value in given.items():
        space.Fixed(name, value)
    never_active: list[Any] = []
    once_active: list[Any] = []
    compiled = False
    metrics: tuple[str, ...] = ()
    hp = space.copy()
    for _ in range(_MAX_BUILDS):
        model = _call(build_fn, hp, target=target, key=key)
        if not compiled and model.compiled and model.optimizer is not None:
            compiled, metrics = True, _metric_names(model)
        del model
        space.merge([p for p in hp.space if not space._exists(p.name, p.conditions)])
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
    _check_values(space, given, target=target, key=key)
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
