"""Stop training when the loss stops being finite, before a bad state is saved."""

from __future__ import annotations

import math
from typing import Any

import keras

from kdist.engine.checkpoint.finite import NonFiniteLossError, NonFiniteWeightsError
from kdist.process.exit_codes import EXIT_NON_FINITE

__all__ = ["EXIT_NON_FINITE", "NonFiniteGuard", "NonFiniteLossError", "NonFiniteWeightsError"]


class NonFiniteGuard(keras.callbacks.Callback):
    """Raise `NonFiniteLossError` as soon as the running training loss is not finite.

    Keras's `TerminateOnNaN` lets training end normally with NaN weights; this guard ends
    it with an error (the train command exits with status 3). It runs before the
    checkpoint callbacks in the same hook, so the last backup keeps finite weights.

    Placed after a user's `TerminateOnNaN` (`after_terminate_on_nan`), it lets that
    callback act first, as in Keras's `fit`: one that stops training gracefully
    (`raise_error=False`) ends the run without this error (the controller saves nothing
    of that state).

    Args:
        monitor: the logged value to check. Defaults to `"loss"`.
        after_terminate_on_nan: a user's `TerminateOnNaN` runs before this guard.
            Defaults to `False`.
    """

    def __init__(self, *, monitor: str = "loss", after_terminate_on_nan: bool = False):
        super().__init__()
        self.monitor = monitor
        self.after_terminate_on_nan = after_terminate_on_nan
        self.steps = 0
        self._epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def _check(self, logs: dict[str, Any] | None) -> None:
        if not logs or self.monitor not in logs:
            return
        value = float(logs[self.monitor])
        if not math.isfinite(value):
            if self.after_terminate_on_nan and self.model.stop_training:
                return  # the user's TerminateOnNaN stopped training, as in Keras's fit
            raise NonFiniteLossError(
                f"training {self.monitor} is {value} after step {self.steps}; stopped without "
                "saving this state"
            )

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        # `batch` is the last step of the call inside the epoch (0-based), as in `fit`.
        self.steps = self._epoch * int(self.params.get("steps") or 0) + batch + 1
        self._check(logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._check(logs)
