"""The run's files per epoch: `curves.png` kept up to date (`Curves`) and `history.csv`.

kdist's run files number the run's epochs, where a later `fit` numbers its own from 0:
Keras's `fit(epochs=N)` called again numbers its epochs `initial_epoch .. N - 1` once
more, and kdist does so for every callback and the `History`. The files kdist writes for
the run go on counting the run's epochs instead: their writers (`RunCSVLogger`,
`RunCurves`) add the controller's `numbers.run_shift`
(`kdist.engine.epoch_clock.EpochNumbers`) to the epoch they are given.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import keras

from kdist.runs.fileio import open_nofollow

__all__ = ["Curves", "RunCSVLogger", "RunCurves", "wait_for_writes"]

log = logging.getLogger(__name__)


# Drawing threads not finished yet, over all `Curves` of the process.
_pending: set[threading.Thread] = set()


_pending_lock = threading.Lock()


# How long a new drawing thread sleeps before it starts. A thread that has just
# started holds the GIL until it blocks or CPython preempts it (every 5 ms), and
# `Thread.start` returns to its caller only then: up to 11 ms measured for the last
# drawing, started as `fit` ends. Sleeping first gives the GIL straight back.
_START_DELAY_SECONDS = 0.01


def wait_for_writes(timeout: float | None = None) -> bool:
    """Wait until every `curves.png` being drawn in the background is written.

    A script need not call it: the drawing threads are not daemons, so the process
    waits for them before it exits. A notebook or a test that reads `curves.png` right
    after `Experiment.fit()` calls it first.

    Args:
        timeout: most seconds to wait in all. Defaults to `None`: as long as it takes.

    Returns:
        `True` when nothing is left to draw.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    with _pending_lock:
        threads = list(_pending)
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    with _pending_lock:
        return not any(t.is_alive() for t in _pending)


class Curves(keras.callbacks.Callback):
    """Write the training and validation curves to a PNG file, off the training thread.

    The values of each epoch are recorded at `on_epoch_end` (a few dict operations), so
    an epoch without validation (`trainer.validation_freq` > 1) leaves a gap rather than
    shifting the validation curve. Drawing with matplotlib takes a few hundred
    milliseconds, so it never runs on the training thread: a background thread draws
    the file at most every `min_interval` seconds during training (skipped while the
    previous drawing is still running), and once more when training ends with every
    epoch. `fit` does not wait for that last drawing; the process waits for it before
    exiting, and `wait_for_writes()` (or `wait()`) waits for it in a notebook.

    Add it on the chief only: other workers of a multi-worker run would draw the same
    picture for nothing.

    Args:
        path: the PNG file, e.g. `<run dir>/curves.png`.
        min_interval: least seconds between two drawings before the end of training.
            Defaults to `60.0`; `0` draws after every epoch.
        title: a title over the panels. Defaults to `None`.
        history: epochs recorded before this training started (a resumed run's earlier
            epochs, e.g. read from `history.csv`). Defaults to `()`.
        draw_at_end: start the last drawing in `on_train_end`. Defaults to `True`;
            `False` leaves it to the owner of the run, who calls `draw_final` once its
            own end-of-training work is done (so the drawing does not compete with it).

    Raises:
        ValueError: for a negative `min_interval`.
    """

    def __init__(
        self,
        *,
        path: str | Path,
        min_interval: float = 60.0,
        title: str | None = None,
        history: Sequence[Mapping[str, float]] = (),
        draw_at_end: bool = True,
    ):
        super().__init__()
        self.draw_at_end = draw_at_end
        self._earlier = [dict(r) for r in history]
        if min_interval < 0:
            raise ValueError(f"`min_interval` ({min_interval}) must be >= 0.")
        self.path = Path(path)
        self.min_interval = float(min_interval)
        self.title = title
        self.records: list[dict[str, float]] = []
        self._last_write = 0.0
        self._thread: threading.Thread | None = None

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.records = list(self._earlier)
        self._last_write = time.monotonic()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        record = {"epoch": float(epoch)}
        for key, value in (logs or {}).items():
            try:
                record[key] = float(value)
            except (TypeError, ValueError):
                continue  # not a scalar (e.g. a learning-rate schedule object)
        self.records.append(record)
        busy = self._thread is not None and self._thread.is_alive()
        if not busy and time.monotonic() - self._last_write >= self.min_interval:
            self._draw_in_background()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self.draw_at_end:
            self.draw_final()

    def draw_final(self) -> None:
        """Draw every recorded epoch in the background (`fit` does not wait for it)."""
        if self.records:
            self._draw_in_background()

    def wait(self, timeout: float | None = None) -> None:
        """Wait until this callback's drawing in progress, if any, is written."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _draw_in_background(self) -> None:
        self._last_write = time.monotonic()
        records = [dict(r) for r in self.records]  # the training thread appends on
        previous = self._thread

        def draw() -> None:
            try:
                time.sleep(_START_DELAY_SECONDS)  # let `start` return to the caller first
                if previous is not None:
                    previous.join()  # the newest picture is written last
                self._write(records)
            finally:
                with _pending_lock:
                    _pending.discard(threading.current_thread())

        # Not a daemon: a script's process waits for the last picture before exiting.
        thread = threading.Thread(target=draw, name=f"kdist-curves-{self.path.name}")
        with _pending_lock:
            _pending.add(thread)
        self._thread = thread
        thread.start()

    def write(self) -> Path | None:
        """Draw the recorded epochs to `path` now; `None` when nothing could be drawn."""
        self.wait()
        self._last_write = time.monotonic()
        return self._write(self.records)

    def _write(self, records: list[dict[str, float]]) -> Path | None:
        from kdist.runs.plots import write_curves

        if not any(not math.isnan(v) for r in records for k, v in r.items() if k != "epoch"):
            return None
        try:
            return write_curves(records, self.path, title=self.title)
        except (OSError, ValueError, RuntimeError) as error:
            # A plot is a convenience: failing to draw it must not end a long run or
            # keep metrics.json and the model from being written after it.
            log.warning("could not write %s: %s", self.path, error)
            return None


class RunCSVLogger(keras.callbacks.CSVLogger):
    """Keras's `CSVLogger` writing the run's epoch numbers (`history.csv`).

    Args:
        filename: the CSV file.
        append: append to an existing file (a resumed run or a later `fit`).
        epoch_shift: added to each epoch number `fit` gives. Defaults to `0`.
    """

    def __init__(self, filename: str, *, append: bool = False, epoch_shift: int = 0):
        super().__init__(filename, append=append)
        self.epoch_shift = int(epoch_shift)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        try:
            super().on_train_begin(logs)
        except UnicodeDecodeError:
            # Keras reads the file's first line as text to know whether it holds a
            # header: a byte that is not UTF-8 (a damaged or planted history) stopped the
            # run. The history is informational: append to it as it is, as Keras would.
            log.warning(
                "%s holds bytes that are not UTF-8; appending to it as it is (they read as U+FFFD)",
                self.filename,
            )
            self.append_header = os.path.getsize(self.filename) == 0
            self.csv_file = open_nofollow(self.filename, "a")  # closed by on_train_end
            self.writer = None
            self.keys = None

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        super().on_epoch_end(epoch + self.epoch_shift, logs)


class RunCurves(Curves):
    """`Curves` drawing the run's epoch numbers (`curves.png`).

    Args:
        epoch_shift: added to each epoch number `fit` gives. Defaults to `0`.
        **kwargs: `Curves`'s arguments.
    """

    def __init__(self, *, epoch_shift: int = 0, **kwargs: Any):
        super().__init__(**kwargs)
        self.epoch_shift = int(epoch_shift)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        super().on_epoch_end(epoch + self.epoch_shift, logs)
