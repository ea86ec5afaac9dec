"""Building the model of a hypermodel node with the values in `model.hp`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import keras
from omegaconf import DictConfig, OmegaConf

from kdist.config.constants import HYDRA_KEYS, MODEL_INJECTED_KEYS
from kdist.config.errors import ConfigError
from kdist.models.hypermodel.target import (
    HP_KEY,
    is_hypermodel_class,
    locate,
    model_target_text,
    target_name,
)
from kdist.models.hypermodel.values import check_values, hp_values

__all__ = ["build", "builder", "call_build"]


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


def builder(
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
                f"is not taken by {target_name(target)}, a HyperModel instance",
                hint=f"set its hyperparameters in {key}.{HP_KEY}, or make the instance with them",
            )
        return target.build
    accepts = _accepts(target)
    is_class = is_hypermodel_class(target)
    if accepts is not None:
        valid = accepts - {HP_KEY} - set(MODEL_INJECTED_KEYS)
        for name in kwargs:
            if name in MODEL_INJECTED_KEYS:
                raise ConfigError(f"{key}.{name}", "is set by kdist from the data; remove it")
            if name not in valid:
                raise ConfigError(
                    f"{key}.{name}",
                    f"unknown key for {target_name(target)}",
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
                f"{target_name(target)}(...) raised {type(error).__name__}: {text}",
                value=model_target_text(target),
            ) from error
        return instance.build
    return lambda hp: target(hp, **kwargs)


def call_build(build_fn: Callable[[Any], Any], hp: Any, *, target: Any, key: str) -> keras.Model:
    try:
        model = build_fn(hp)
    except ConfigError:
        raise
    except Exception as error:
        text = " ".join(str(error).split()) or "no message"
        raise ConfigError(
            f"{key}.{HP_KEY}",
            f"{target_name(target)}(hp) raised {type(error).__name__}: {text}",
            value=dict(hp.values),  # the values it had read (defaults included)
        ) from error
    if not isinstance(model, keras.Model):
        raise ConfigError(
            f"{key}._target_",
            f"{target_name(target)}(hp) returned {type(model).__name__}, not a keras.Model",
            value=model_target_text(target),
        )
    return model


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
    compile (`kdist.experiment.build.compiled_model`).

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
    build_fn = builder(
        target, model_cfg, key=key, shapes=lambda: (tuple(input_shape), int(num_classes))
    )
    hp = keras_tuner.HyperParameters()
    hp.values.update(given)
    model = call_build(build_fn, hp, target=target, key=key)
    check_values(hp, given, target=target, key=key)
    return model
