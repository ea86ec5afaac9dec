"""`hydra.utils.instantiate`, with kdist's own errors passed through unwrapped."""

from __future__ import annotations

import re
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate as hydra_instantiate

from kdist.compat import moved
from kdist.config.errors import ConfigError

__all__ = ["instantiate"]


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
