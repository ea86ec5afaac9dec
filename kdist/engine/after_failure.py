"""What `Controller.fit` does after a failure has stopped training, before it re-raises."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import keras

from kdist.compat.keras_private import close_tensorboard_writers

__all__ = ["close_files", "finish_writes"]

log = logging.getLogger(__name__)


def close_files(callbacks: Sequence[keras.callbacks.Callback]) -> None:
    """Close the files Keras callbacks keep open until `on_train_end`, after a failure
    (which skips that hook) has stopped training."""
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.CSVLogger) and callback.csv_file is not None:
            callback.csv_file.close()
        if isinstance(callback, keras.callbacks.TensorBoard):
            close_tensorboard_writers(callback)


def finish_writes(savers: Sequence[Any]) -> None:
    """After a failure, wait for the saves made before it: a backup the failure did not
    stop is complete on disk when `fit` raises (a notebook that resumes at once finds
    it), and each saver leaves its writer thread, which ends with the last one. A save
    that fails here is logged; the first failure is the one raised."""
    for saver in savers:
        try:
            saver.sync()
        except Exception as error:  # the failure being raised comes first
            log.warning("a save before the failure did not complete: %s", error)
        finally:
            saver.release()
