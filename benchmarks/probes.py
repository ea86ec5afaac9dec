"""Keras callbacks that benchmarked subprocesses load through `callbacks.extra`.

They print one marked line to stdout (never a file, so any task of a cluster may use
them); the benchmark parses the lines of the task it cares about.
"""

from __future__ import annotations

import re
import time
from typing import Any

import keras

__all__ = ["MARK", "EpochTimer", "FirstStepMarker", "parse"]

MARK = "kdist-bench"
_LINE = re.compile(rf"{MARK} (\w+) (.*)$")


def _emit(kind: str, **values: Any) -> None:
    fields = " ".join(f"{key}={value}" for key, value in values.items())
    print(f"{MARK} {kind} {fields}", flush=True)


class FirstStepMarker(keras.callbacks.Callback):
    """Prints the wall-clock time (`time.time()`) when the first train-function call ends."""

    def __init__(self) -> None:
        super().__init__()
        self._done = False

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if not self._done:
            self._done = True
            _emit("first_step", time=f"{time.time():.6f}")


class EpochTimer(keras.callbacks.Callback):
    """Prints each epoch's wall seconds (from `on_epoch_begin` to `on_epoch_end`).

    Args:
        steps_per_epoch: printed with each epoch, to compute examples per second.
        global_batch_size: printed too.
    """

    def __init__(self, *, steps_per_epoch: int, global_batch_size: int):
        super().__init__()
        self.steps_per_epoch = int(steps_per_epoch)
        self.global_batch_size = int(global_batch_size)
        self._started = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        seconds = time.perf_counter() - self._started
        _emit(
            "epoch",
            index=epoch,
            seconds=f"{seconds:.6f}",
            steps=self.steps_per_epoch,
            batch=self.global_batch_size,
        )


def parse(text: str, *, prefix: str = "") -> list[tuple[str, dict[str, str]]]:
    """The marked lines in `text` (of lines starting with `prefix`), as (kind, fields)."""
    found = []
    for line in text.splitlines():
        if prefix and not line.startswith(prefix):
            continue
        match = _LINE.search(line)
        if match:
            kind, rest = match.groups()
            fields = dict(item.split("=", 1) for item in rest.split() if "=" in item)
            found.append((kind, fields))
    return found
