"""The model factory: build a model from a `model` config node or by option name."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import keras

from kdist.config.constants import MODEL_INJECTED_KEYS
from kdist.config.errors import ConfigError
from kdist.config.targets import instantiate
from kdist.config.validate import check_target_keys
from kdist.models import hypermodel

__all__ = ["build", "from_config"]


def from_config(
    model_cfg: Any, *, input_shape: Sequence[int], num_classes: int, key: str = "model"
) -> keras.Model:
    """Build the model a `model` node describes, passing the data's shape and classes.

    Call it inside `strategy.scope()`.

    Args:
        model_cfg: the `model` config node (with `_target_`).
        input_shape: shape of one example, from the data source.
        num_classes: number of classes, from the data source.
        key: the node's config path, for messages. Defaults to `"model"`.

    Returns:
        The `keras.Model`.

    A keras-tuner hypermodel (`build_model(hp)`, a `keras_tuner.HyperModel`) is built
    with the values in `model.hp`, the others at their defaults (`kdist.models.hypermodel`).

    Raises:
        ConfigError: when a key is unknown or the callable does not return a keras.Model.
    """
    if hypermodel.is_hypermodel(hypermodel.locate(model_cfg)):
        return hypermodel.build(
            model_cfg, input_shape=input_shape, num_classes=num_classes, key=key
        )
    if model_cfg.get(hypermodel.HP_KEY) is not None:
        raise ConfigError(
            f"{key}.{hypermodel.HP_KEY}",
            f"sets hyperparameters, but {model_cfg.get('_target_')} is not a keras-tuner "
            "hypermodel (a keras_tuner.HyperModel, or a callable whose first parameter is hp)",
        )
    target = check_target_keys(key, model_cfg, injected=MODEL_INJECTED_KEYS)
    given = {"input_shape": tuple(input_shape), "num_classes": int(num_classes)}
    try:
        params = inspect.signature(target).parameters
        accepts_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        kwargs = {k: v for k, v in given.items() if accepts_all or k in params}
    except (TypeError, ValueError):
        kwargs = given
    model = instantiate(model_cfg, _convert_="all", **kwargs)
    if not isinstance(model, keras.Model):
        raise ConfigError(
            f"{key}._target_",
            f"returned {type(model).__name__}, not a keras.Model",
            value=model_cfg.get("_target_"),
        )
    return model


def build(name: str, /, **kwargs: Any) -> keras.Model:
    """Build a model by its `conf/model/` option name, outside any experiment.

    Args:
        name: a `model` option, e.g. `"mlp"` or `"cnn"`.
        **kwargs: `input_shape` and `num_classes` (required), and any of the option's keys.

    Returns:
        The `keras.Model` (built in the current strategy scope, if any).

    Example:

    ```python
    model = kdist.models.build("cnn", input_shape=(28, 28, 1), num_classes=10)
    ```
    """
    from kdist.config.compose import compose

    missing = [k for k in MODEL_INJECTED_KEYS if k not in kwargs]
    if missing:
        raise TypeError(f"build() missing keyword arguments: {', '.join(missing)}")
    input_shape = kwargs.pop("input_shape")
    num_classes = kwargs.pop("num_classes")
    overrides = [f"model={name}"]
    cfg = compose(overrides).model
    for k, v in kwargs.items():
        cfg[k] = v
    return from_config(cfg, input_shape=input_shape, num_classes=num_classes)
