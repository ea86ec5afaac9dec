"""Helpers shared by the command-line entry points (`kdist.train`, `kdist.tune`).

Plain Python: they run before anything imports TensorFlow.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

__all__ = ["DEFAULT_TF_LOG_LEVEL", "requested_log_level", "stop_file_logging"]

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


def stop_file_logging(run_dir: str) -> None:
    """A non-chief task writes nothing in the run folder, its `train.log` included.

    `kdist.train.main` keeps Hydra from opening the file in a task it starts; a task of a
    multi-task job that Hydra's submitit launcher started (`tasks_per_node` > 1) had its
    logging set up by Hydra in that task, so its file handlers are closed here.
    """
    folder = Path(run_dir).resolve()
    root = logging.getLogger()
    for handler in list(root.handlers):
        name = getattr(handler, "baseFilename", None)
        if name is not None and Path(name).resolve().parent == folder:
            root.removeHandler(handler)
            handler.close()
