"""Helpers shared by the command-line entry points (`kdist.train`, `kdist.tune`).

Plain Python: they run before anything imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DEFAULT_TF_LOG_LEVEL", "requested_log_level"]

# `runtime.tf_log_level`'s default (conf/runtime/default.yaml): no INFO, no WARNING.
DEFAULT_TF_LOG_LEVEL = 2


def requested_log_level(argv: Sequence[str]) -> int:
    """The `runtime.tf_log_level=N` a command line asks for, read before Hydra composes.

    TensorFlow reads its log level once, on its first log line, so the entry points set
    it from the raw arguments before checking `_target_` keys (which imports the models).

    Args:
        argv: the command-line arguments (without the program name).

    Returns:
        The first valid level (0 to 3) given, else `DEFAULT_TF_LOG_LEVEL`.
    """
    for arg in argv:
        if arg.startswith("runtime.tf_log_level="):
            value = arg.split("=", 1)[1]
            if value in ("0", "1", "2", "3"):
                return int(value)
    return DEFAULT_TF_LOG_LEVEL
