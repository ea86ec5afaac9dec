"""The one exception type for bad input, and how it reaches the user."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from kdist.process.exit_codes import EXIT_CONFIG_ERROR

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
    """Print `error` as one line on stderr and exit with status 2."""
    print(f"kdist: config error: {error}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_CONFIG_ERROR)
