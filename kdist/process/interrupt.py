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
    except BaseException as error:
        if not _is_ctrl_c(error):
            raise
        if log.hasHandlers():  # else logging's last resort would print the line twice
            log.warning("%s", message)
        print(message, file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None


def _is_ctrl_c(error: BaseException | None) -> bool:
    """A `KeyboardInterrupt`, or an error it caused: Ctrl-C inside an import can surface as
    another error whose cause is the interrupt (a `RuntimeError` from a dataclass's
    `__set_name__`)."""
    seen = 0
    while error is not None and seen < 20:
        if isinstance(error, KeyboardInterrupt):
            return True
        if isinstance(error, SystemExit):
            return False
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False
