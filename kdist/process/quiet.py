"""Quiet TensorFlow's start-up: `TF_CPP_MIN_LOG_LEVEL`, and the lines it cannot silence.

TensorFlow's C++ libraries print a few lines to stderr while `import tensorflow` runs and
on the first use of a device, before TensorFlow's own logging is set up, so
`TF_CPP_MIN_LOG_LEVEL` does not apply to them: absl's banner ("All log messages before
absl::InitializeLog() ..."), INFO lines in absl's format (TensorFlow 2.21 prints oneDNN's
note that its custom operations are on, twice; the CUDA stub's note that the machine has
no NVIDIA driver), and then an ERROR line that `cuInit` failed. On a machine without a
driver that is no error: training runs on the CPU. At level 1 or more (no INFO) kdist
drops exactly these lines and passes every other line through.

This module uses only the standard library, so `import kdist` installs it before
anything imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["enabled", "filtered_stderr", "install", "set_level", "stderr_noise"]

_ENV = "TF_CPP_MIN_LOG_LEVEL"
_ABSL_BANNER = re.compile(r"All log messages before absl::InitializeLog\(\) is called")
# An INFO line in absl's format, e.g. "I0000 00:00:1795607884.489335   23610 port.cc:153] ".
_INFO_LINE = re.compile(r"^I\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] ")
_NO_DRIVER = re.compile(r"cudart_stub\.cc.*Could not find cuda drivers")
_CUINIT = re.compile(r"failed call to cuInit")

_level_set_by_kdist = False
_seen_no_driver = False


def set_level(level: int) -> None:
    """Set `TF_CPP_MIN_LOG_LEVEL` unless the user set it (an explicit variable wins).

    kdist may change a level it set itself (`import kdist` sets the default 2, a run's
    `runtime.tf_log_level` replaces it); TensorFlow reads it once, on its first log line.

    Args:
        level: 0 all, 1 no INFO, 2 no WARNING, 3 no ERROR.
    """
    global _level_set_by_kdist
    if _ENV not in os.environ or _level_set_by_kdist:
        os.environ[_ENV] = str(int(level))
        _level_set_by_kdist = True


def enabled() -> bool:
    """Whether the lines are dropped: `TF_CPP_MIN_LOG_LEVEL` is 1 or more."""
    value = os.environ.get(_ENV, "0")
    return value.isdigit() and int(value) >= 1


def stderr_noise() -> list[re.Pattern[str]]:
    """The patterns of the lines dropped; `cuInit` only once the stub found no driver."""
    patterns = [_ABSL_BANNER, _INFO_LINE, _NO_DRIVER]
    return [*patterns, _CUINIT] if _seen_no_driver else patterns


@contextlib.contextmanager
def filtered_stderr(patterns: Sequence[re.Pattern[str]]) -> Iterator[None]:
    """Hold back the process's stderr (file descriptor 2, so C++ output too) while the
    block runs, then write every line that matches none of `patterns`.

    Args:
        patterns: compiled regular expressions of the lines to drop.
    """
    global _seen_no_driver
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        # No usable stderr (a closed descriptor, an embedding host): nothing to filter.
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines(keepends=True)
            _seen_no_driver = _seen_no_driver or any(_NO_DRIVER.search(x) for x in lines)
            kept = [line for line in lines if not any(p.search(line) for p in patterns)]
            if kept:
                os.write(2, "".join(kept).encode())


class _QuietImport(importlib.abc.MetaPathFinder):
    """Runs the process's first `import tensorflow` inside `filtered_stderr`.

    It finds TensorFlow as the standard path finder does and wraps only that module's
    `exec_module`; it removes itself on first use.
    """

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)
        if not enabled():
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None  # another finder's business; TensorFlow imports unfiltered
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            try:
                with filtered_stderr(stderr_noise()):
                    execute(module)
            except BaseException:
                _add_finder()  # an import a Ctrl-C stopped is filtered again when retried
                raise

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Filter the first `import tensorflow` (no-op once TensorFlow is imported)."""
    if "tensorflow" in sys.modules:
        return
    _add_finder()


def _add_finder() -> None:
    if not any(isinstance(finder, _QuietImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())
