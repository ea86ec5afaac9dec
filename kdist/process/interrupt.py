"""Ctrl-C ends a command with status 130 and one line, not a `KeyboardInterrupt` traceback."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kdist.process.exit_codes import EXIT_INTERRUPTED

__all__ = [
    "caused_by_ctrl_c",
    "ctrl_c_kept",
    "exit_on_ctrl_c",
    "one_line_on_ctrl_c_while_starting",
]

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
        if not caused_by_ctrl_c(error):
            raise
        if log.hasHandlers():  # else logging's last resort would print the line twice
            log.warning("%s", message)
        print(message, file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None


@contextmanager
def ctrl_c_kept() -> Iterator[None]:
    """Raise an error that a Ctrl-C caused inside the block as the `KeyboardInterrupt`.

    Hydra's config source closes its file in a `finally` that fails when the interrupt
    lands in `open` (an `UnboundLocalError` over the interrupt); Hydra's error report
    (around a job, `run_and_report`) and a trial's error handling catch `Exception`, so
    that error would end the command with status 1 and a traceback, or fail one trial.
    A `KeyboardInterrupt` passes them, to `exit_on_ctrl_c`.

    Raises:
        KeyboardInterrupt: for an error whose cause or context is one.
    """
    try:
        yield
    except Exception as error:
        if caused_by_ctrl_c(error):
            raise KeyboardInterrupt from error
        raise


def one_line_on_ctrl_c_while_starting() -> None:
    """`python -m kdist.<command>`: a Ctrl-C before the command's `main` catches it (while
    Python imports the command's module, before `exit_on_ctrl_c` is entered) prints one line
    instead of a `KeyboardInterrupt` traceback.

    Only an interrupt nothing caught reaches `sys.excepthook`, so this changes nothing for
    the commands' own handling; other errors go to the hook that was there. CPython then
    ends the process by SIGINT, which a shell reports as status 130.
    """
    previous = sys.excepthook
    argv = list(getattr(sys, "orig_argv", []))
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else "kdist"

    def excepthook(kind: Any, value: BaseException, traceback: Any) -> None:
        if not caused_by_ctrl_c(value):
            previous(kind, value, traceback)
            return
        print(f"{module}: interrupted (Ctrl-C) while starting", file=sys.stderr, flush=True)

    sys.excepthook = excepthook


def caused_by_ctrl_c(error: BaseException | None) -> bool:
    """A `KeyboardInterrupt`, or an error it caused: Ctrl-C inside an import can surface as
    another error whose cause is the interrupt (a `RuntimeError` from a dataclass's
    `__set_name__`), and inside Hydra's file reading as an `UnboundLocalError`."""
    seen = 0
    while error is not None and seen < 20:
        if isinstance(error, KeyboardInterrupt):
            return True
        if isinstance(error, SystemExit):
            return False
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False
