"""Lines for the run's `train.log` alone: what standard output shows beside the log.

Hydra's job logging sends each record to the console and to `train.log`. A line kdist
prints itself (the per-epoch line of `kdist.callbacks.progress`) is already on standard
output; `to_log_files` writes it to the log files only, so `train.log` holds it once.
"""

from __future__ import annotations

import logging

__all__ = ["to_log_files"]

_LOGGER = "kdist.progress"


def to_log_files(line: str) -> None:
    """Write `line` as an INFO record to the root logger's file handlers, not the console.

    Args:
        line: the text, as it was printed.
    """
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    if not handlers:
        return
    record = logging.LogRecord(_LOGGER, logging.INFO, __file__, 0, line, None, None)
    for handler in handlers:
        if record.levelno >= handler.level:
            handler.handle(record)
