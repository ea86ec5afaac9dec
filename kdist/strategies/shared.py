"""Rules more than one strategy module keeps: NCCL needs GPUs; one cluster per process."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import tensorflow as tf

from kdist.config.errors import ConfigError

__all__ = ["check_nccl", "reuse"]


def check_nccl(key: str, value: str, list_devices: Callable[[str], list[Any]], hint: str) -> None:
    """Refuse NCCL, which all-reduces between GPUs, on a machine without any.

    Args:
        key: the config key that chose `value`, for the message.
        value: the chosen implementation; only `"nccl"` is checked.
        list_devices: `tf.config.list_physical_devices` or `list_logical_devices`, called
            only for NCCL (the logical list starts TensorFlow's runtime).
        hint: what to choose instead.

    Raises:
        ConfigError: naming `key`, when `value` is `"nccl"` and there is no GPU.
    """
    if value == "nccl" and not list_devices("GPU"):
        raise ConfigError(key, "NCCL needs GPUs and this machine has none", value=value, hint=hint)


def reuse(
    built: dict[Any, tf.distribute.Strategy], key: Hashable, *, conflict: str, hint: str
) -> tf.distribute.Strategy | None:
    """The strategy this process already built for `key`, or `None` when it built none.

    TensorFlow lets a process join one cluster, so a later experiment (a Hydra multirun, a
    notebook) reuses the strategy built for the same settings and cannot build another.

    Args:
        built: the module's strategies by key (at most one).
        key: the settings the strategy is built from.
        conflict: what the process already runs, for the message.
        hint: what to do instead.

    Raises:
        ConfigError: naming `strategy`, when the process built one for another `key`.
    """
    if key in built:
        return built[key]
    if built:
        raise ConfigError("strategy", conflict, hint=hint)
    return None
