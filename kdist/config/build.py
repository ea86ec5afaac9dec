"""`hydra.utils.instantiate`, with kdist's own errors passed through unwrapped."""

from __future__ import annotations

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
        raise
