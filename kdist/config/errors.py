"""The one exception type for bad input, and how it reaches the user."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from kdist.process.exit_codes import EXIT_CONFIG_ERROR
from kdist.process.interrupt import caused_by_ctrl_c

__all__ = ["EXIT_CONFIG_ERROR", "ConfigError", "exit_with"]


class ConfigError(ValueError):
    """Bad user input, reported as one line that names the key, the value and the fix.

    Args:
        key: the dotted config key (or file, or environment variable) at fault.
        problem: what is wrong with it.
        value: the offending value. Defaults to no value shown.
        hint: what would be valid. Defaults to `None`.
    """

    _NO_VALUE: Any = object()

    def __init__(self, key: str, problem: str, *, value: Any = _NO_VALUE, hint: str | None = None):
        self.key = key
        self.value = value
        self.problem = problem
        self.hint = hint
        shown = key if value is ConfigError._NO_VALUE else f"{key}={value!r}"
        message = f"{shown}: {problem}"
        if hint:
            message += f"; {hint}"
        super().__init__(message)


def exit_with(error: BaseException | str) -> NoReturn:
    """Print `error` as one line on stderr and exit with status 2.

    An error that a Ctrl-C caused is no bad input: Hydra's config source turns an
    interrupt in its `open` into an `UnboundLocalError`, which the commands' `except
    Exception` around a composition would report as a config error. Such an error (or
    the error being handled) is raised as the `KeyboardInterrupt`, for the
    command's one line and status 130 (`kdist.process.interrupt.exit_on_ctrl_c`).

    Raises:
        SystemExit: with `EXIT_CONFIG_ERROR` (2).
        KeyboardInterrupt: for an error a Ctrl-C caused.
    """
    for handled in (error, sys.exc_info()[1]):  # sys.exception() is 3.11 and later
        if isinstance(handled, BaseException) and caused_by_ctrl_c(handled):
            raise KeyboardInterrupt from handled
    print(f"kdist: config error: {error}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_CONFIG_ERROR)
