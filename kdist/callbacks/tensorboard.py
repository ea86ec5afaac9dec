"""TensorBoard scalars per epoch without per-batch work on the training thread."""

from __future__ import annotations

from typing import Any

import keras

__all__ = ["EpochTensorBoard"]


class EpochTensorBoard(keras.callbacks.TensorBoard):
    """`keras.callbacks.TensorBoard` without per-batch work when it writes per epoch.

    With `update_freq="epoch"` Keras still calls `tf.summary.scalar` for every batch log
    at every train call, with no writer set: nothing is written, and each call costs
    about a millisecond on the training thread. kdist profiles with `ProfileSteps` and
    writes no graph, so the batch hooks have nothing left to do in that mode.
    """

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.update_freq == "epoch":
            self._global_train_batch += 1
            return
        super().on_train_batch_begin(batch, logs)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.update_freq == "epoch":
            return
        super().on_train_batch_end(batch, logs)
