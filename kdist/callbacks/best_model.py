"""Export the best model by a monitored metric: `model.keras` and `saved_model/`."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import keras

from kdist.runs import layout
from kdist.runs.fileio import atomic_directory, atomic_path

__all__ = ["BestModelExport", "save_model_files"]

log = logging.getLogger(__name__)


def save_model_files(model: keras.Model, directory: Path, *, saved_model: bool = True) -> None:
    """Write `model.keras` (and `saved_model/` for serving) into `directory`, atomically.

    Each file is written under a temporary name and renamed into place, so a reader
    never sees a half-written model. A model Keras cannot save whole (a subclassed
    model without `get_config`, such as keras.io's VAE and GAN) leaves its weights in
    `model.weights.h5` instead, with a warning; one without a `call` has no
    `saved_model/` to serve.
    """
    if not isinstance(model, keras.Model):
        # Keras's `Trainer` mixed into a `keras.Layer` (Keras's own tests train such
        # models with `fit`): no `save` to call; its weights are in the checkpoints.
        log.warning(
            "%s is a keras.Layer with Keras's Trainer, not a keras.Model: no %s written "
            "(wrap it in a keras.Model to have one)",
            type(model).__name__,
            layout.MODEL,
        )
        return
    try:
        with atomic_path(directory / layout.MODEL) as partial:
            model.save(partial)
    except NotImplementedError as error:  # Keras: "... must override `get_config()`"
        log.warning(
            "%s cannot be saved whole (%s); its weights are in model.weights.h5",
            model.name,
            str(error).strip().splitlines()[0][:120],
        )
        # Keras wants the `.weights.h5` ending, which `atomic_path` does not keep.
        partial = directory / f".partial-{os.getpid()}.weights.h5"
        try:
            model.save_weights(partial)
            os.replace(partial, directory / "model.weights.h5")
        finally:
            partial.unlink(missing_ok=True)
        return
    if saved_model and type(model).call is not keras.Model.call:
        with atomic_directory(directory / layout.SAVED_MODEL) as staging:
            model.export(str(staging), format="tf_saved_model", verbose=False)


class BestModelExport(keras.callbacks.Callback):
    """After each epoch whose `monitor` improves, export the model to `directory`.

    Args:
        directory: the run directory (a temporary folder on workers other than the chief).
        monitor: the epoch log to watch, e.g. `"val_accuracy"`.
        mode: `"min"` or `"max"`.
        saved_model: also export `saved_model/` (`callbacks.saved_model`). Defaults to
            `True`.
    """

    def __init__(self, *, directory: Path, monitor: str, mode: str, saved_model: bool = True):
        super().__init__()
        if mode not in ("min", "max"):
            raise ValueError(f"`mode` ({mode!r}) must be 'min' or 'max'.")
        self.directory = Path(directory)
        self.monitor = monitor
        self.mode = mode
        self.saved_model = saved_model
        self.best: float | None = None
        self.best_epoch: int | None = None

    def _better(self, value: float) -> bool:
        if self.best is None:
            return True
        return value < self.best if self.mode == "min" else value > self.best

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if not logs or self.monitor not in logs:
            return
        value = float(logs[self.monitor])
        if math.isfinite(value) and self._better(value):
            log.info(
                "epoch %d: %s improved to %.6g; exporting the model", epoch + 1, self.monitor, value
            )
            self.best, self.best_epoch = value, epoch
            save_model_files(self.model, self.directory, saved_model=self.saved_model)
