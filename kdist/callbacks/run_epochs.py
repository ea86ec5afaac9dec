"""kdist's run files number the run's epochs, where a later `fit` numbers its own from 0.

Keras's `fit(epochs=N)` called again numbers its epochs `initial_epoch .. N - 1` once
more, and kdist does so for every callback and the `History`. The files kdist writes for
the run (`history.csv`, `curves.png`) go on counting the run's epochs instead: their
writers add the controller's `numbers.run_shift` (`kdist.engine.epoch_clock.EpochNumbers`)
to the epoch they are given.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import keras

from kdist.callbacks.curves import Curves
from kdist.runs.fileio import open_nofollow

__all__ = ["RunCSVLogger", "RunCurves"]

log = logging.getLogger(__name__)


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
