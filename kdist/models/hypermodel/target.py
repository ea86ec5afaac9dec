"""Which `model._target_` is a keras-tuner hypermodel, and how a config spells one."""

from __future__ import annotations

import inspect
from typing import Any

import keras
from omegaconf import DictConfig

from kdist.compat import UpstreamMoved
from kdist.compat.tools_private import hydra_locate
from kdist.config.errors import ConfigError

__all__ = [
    "HP_KEY",
    "given_in_notebook",
    "is_hypermodel",
    "is_hypermodel_class",
    "locate",
    "model_target_text",
    "target_name",
]

# The key of the model node that holds the hyperparameters' values.
HP_KEY = "hp"


def is_hypermodel_class(target: Any) -> bool:
    import keras_tuner

    return isinstance(target, type) and issubclass(target, keras_tuner.HyperModel)


def is_hypermodel(target: Any) -> bool:
    """Whether `target` is a keras-tuner hypermodel.

    That is a `keras_tuner.HyperModel` subclass or instance, or a callable whose first
    parameter is named `hp` (`def build_model(hp)`).
    """
    import keras_tuner

    if isinstance(target, keras_tuner.HyperModel) or is_hypermodel_class(target):
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
    target = model_cfg.get("_target_") if isinstance(model_cfg, (DictConfig, dict)) else None
    if not isinstance(target, str) or not target or target == "???":
        return None
    try:
        return hydra_locate(target)
    except UpstreamMoved:
        raise
    except Exception:  # Hydra wraps ImportError/AttributeError; the config checks say it
        return None


def target_name(target: Any) -> str:
    if isinstance(target, type) or (callable(target) and hasattr(target, "__qualname__")):
        return f"{target.__module__}.{target.__qualname__}"
    return f"{type(target).__module__}.{type(target).__qualname__} instance"


def model_target_text(target: Any) -> str:
    """How `model._target_` spells `target`."""
    return target_name(target).removesuffix(" instance")


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
