"""Ctrl-C ends a command with status 130 and one line, not a `KeyboardInterrupt` traceback."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from kdist.process.exit_codes import EXIT_INTERRUPTED

__all__ = ["exit_on_ctrl_c"]

log = logging.getLogger(__name__)


@contextmanager
def exit_on_ctrl_c(message: str) -> Iterator[None]:
    """Turn a `KeyboardInterrupt` raised inside into `message` on stderr and status 130.

    The `finally` blocks and context managers between the interrupted line and this one
    run first (locks released, files closed), as for any exception.

    Args:
        message: the one line to print, e.g. `"kdist.tune: interrupted (Ctrl-C); ..."`.

    Raises:
        SystemExit: with `EXIT_INTERRUPTED` (130, 128 + SIGINT) after a Ctrl-C.
    """
    try:
        yield
    except KeyboardInterrupt:
        log.warning("%s", message)
        print(message, file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
