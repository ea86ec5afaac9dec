"""`Curves`: keep a run's `curves.png` (loss and metrics per epoch) up to date."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import keras

__all__ = ["Curves"]

log = logging.getLogger(__name__)


class Curves(keras.callbacks.Callback):
    """Write the training and validation curves to a PNG file during and after training.

    The values of each epoch are recorded at `on_epoch_end`, so an epoch without
    validation (`trainer.validation_freq` > 1) leaves a gap rather than shifting the
    validation curve. The file is rewritten at most every `min_interval` seconds during
    training, so it can be watched, and always at the end.

    Add it on the chief only: other workers of a multi-worker run would draw the same
    picture for nothing.

    Args:
        path: the PNG file, e.g. `<run dir>/curves.png`.
        min_interval: least seconds between two writes before the end of training.
            Defaults to `60.0`; `0` writes after every epoch.
        title: a title over the panels. Defaults to `None`.
        history: epochs recorded before this training started (a resumed run's earlier
            epochs, e.g. read from `history.csv`). Defaults to `()`.

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
    ):
        super().__init__()
        self._earlier = [dict(r) for r in history]
        if min_interval < 0:
            raise ValueError(f"`min_interval` ({min_interval}) must be >= 0.")
        self.path = Path(path)
        self.min_interval = float(min_interval)
        self.title = title
        self.records: list[dict[str, float]] = []
        self._last_write = 0.0

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
        if time.monotonic() - self._last_write >= self.min_interval:
            self.write()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self.records:
            self.write()

    def write(self) -> Path | None:
        """Draw the recorded epochs to `path` now; `None` when nothing could be drawn."""
        from kdist.plots import write_curves

        self._last_write = time.monotonic()
        if not any(not math.isnan(v) for r in self.records for k, v in r.items() if k != "epoch"):
            return None
        try:
            return write_curves(self.records, self.path, title=self.title)
        except (OSError, ValueError, RuntimeError) as error:
            # A plot is a convenience: failing to draw it must not end a long run or
            # keep metrics.json and the model from being written after it.
            log.warning("could not write %s: %s", self.path, error)
            return None
