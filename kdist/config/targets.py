"""`_target_` nodes: the callable one names, its keys checked against its signature, and
the object built (`instantiate`: `hydra.utils.instantiate`, with kdist's own errors
passed through unwrapped).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_method
from hydra.utils import instantiate as hydra_instantiate
from omegaconf import DictConfig

from kdist.compat import UpstreamMoved, moved
from kdist.compat.tools_private import hydra_locate
from kdist.config.constants import HYDRA_KEYS
from kdist.config.errors import ConfigError
from kdist.process.interrupt import caused_by_ctrl_c

__all__ = ["check_target_keys", "instantiate"]

_HYDRA_LOG = logging.getLogger("hydra.utils")


def _hypermodel_instance(target: str) -> Any | None:
    """A `keras_tuner.HyperModel` instance `target` names (not callable, but a model)."""
    try:
        obj = hydra_locate(target)
    except UpstreamMoved:
        raise
    except Exception:  # as in `_locate`: not importable
        return None
    kinds = type(obj).__mro__
    if any(c.__name__ == "HyperModel" and c.__module__.startswith("keras_tuner") for c in kinds):
        return obj
    return None


def _locate(key: str, target: Any) -> Callable[..., Any]:
    if not isinstance(target, str) or not target or target == "???":
        raise ConfigError(
            f"{key}._target_",
            "must name a callable, e.g. mypkg.models.build",
            value=target,
        )
    # Hydra's `get_method` logs a failure in three lines of its own; kdist's one says it.
    level = _HYDRA_LOG.level
    _HYDRA_LOG.setLevel(logging.CRITICAL)
    try:
        return get_method(target)
    except Exception as error:  # Hydra wraps ImportError/AttributeError in its own types
        if caused_by_ctrl_c(error):  # a Ctrl-C in the import: not a missing target
            raise KeyboardInterrupt from error
        instance = _hypermodel_instance(target)
        if instance is not None:
            return instance
        raise ConfigError(
            f"{key}._target_",
            f"cannot be imported ({type(error).__name__})",
            value=target,
            hint="give the full dotted path of a function or class that is installed",
        ) from None
    finally:
        _HYDRA_LOG.setLevel(level)


def check_target_keys(
    key: str, node: Any, *, injected: Iterable[str] = (), ignore: Iterable[str] = ()
) -> Callable[..., Any]:
    """Check that every key of a `_target_` node is a parameter of its callable.

    Args:
        key: the dotted config path of the node, used in messages.
        node: the config node, with `_target_`.
        injected: parameters kdist passes itself (e.g. `input_shape`); they may be absent
            from the node but must not be set in it. Defaults to `()`.
        ignore: kdist's own keys in the node, removed before the call. Defaults to `()`.

    Returns:
        The callable the node names.

    Raises:
        ConfigError: naming the first unknown key and the valid ones.
    """
    if not isinstance(node, (DictConfig, dict)):
        raise ConfigError(key, "must be a mapping with a _target_ key", value=node)
    target = _locate(key, node.get("_target_"))
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return target  # builtins without a signature: let the call itself complain
    params = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return target
    valid = [
        name
        for name, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    injected = set(injected)
    for name in node:
        name = str(name)
        if name in HYDRA_KEYS or name in ignore:
            continue
        if name in injected:
            raise ConfigError(f"{key}.{name}", "is set by kdist from the data; remove it")
        if name not in valid:
            shown = ", ".join(v for v in valid if v not in injected) or "none"
            raise ConfigError(
                f"{key}.{name}",
                f"unknown key for {node.get('_target_')}",
                hint=f"valid keys: {shown}",
            )
    return target


def instantiate(node: Any, /, **kwargs: Any) -> Any:
    """Build the object a `_target_` node describes.

    Hydra wraps every exception the target raises; a `ConfigError` from a kdist factory
    is re-raised as it is so the user sees the key to change.

    Args:
        node: the config node.
        **kwargs: extra arguments for the target, as in `hydra.utils.instantiate`.

    Returns:
        What the target returned.
    """
    moved.install()  # a saved config may name a module path that moved (kdist.compat.moved)
    try:
        return hydra_instantiate(node, **kwargs)
    except InstantiationException as error:
        cause: BaseException | None = error.__cause__
        while cause is not None:
            if isinstance(cause, ConfigError):
                raise cause from None
            cause = cause.__cause__
        refused = _keras_refusal(error)
        if refused is not None:
            raise refused from None
        raise


def _keras_refusal(error: InstantiationException) -> ConfigError | None:
    """A Keras callable that refused the config's arguments (`keras.layers.deserialize`
    of a bogus config, a layer given an unknown argument): bad input, one line naming the
    key. Errors of a user's own callable stay tracebacks (they are bugs to see whole)."""
    text = str(error)
    target = re.search(r"Error in call to target '([^']+)'", text)
    cause = error.__cause__
    if target is None or not target.group(1).startswith("keras."):
        return None
    if not isinstance(cause, (TypeError, ValueError, KeyError)):
        return None
    key = re.search(r"full_key: (\S+)", text)
    reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return ConfigError(
        f"{key.group(1)}._target_" if key else "_target_",
        f"{target.group(1)} refused its arguments: {reason[:300]}",
    )
