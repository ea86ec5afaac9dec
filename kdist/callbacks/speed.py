"""`TrainingSpeed`: steps/s, examples/s and the learning rate as TensorBoard scalars."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from kdist.callbacks.tensorboard import learning_rate, write_scalars

__all__ = ["TrainingSpeed"]


class TrainingSpeed(keras.callbacks.Callback):
    """Write `steps_per_second`, `examples_per_second` and `learning_rate` to TensorBoard.

    The scalars go to `log_dir` (the run's `tensorboard/train`) at the end of every
    epoch and, with `every_n_steps`, whenever that many optimizer steps have passed
    since the last write (checked after each train-function call). Steps are read from
    `optimizer.iterations`, so the parameter-server chief, whose workers run the steps,
    logs the same; the speed is measured between two writes.

    Args:
        log_dir: the folder of the event files.
        examples_per_step: the global batch size.
        every_n_steps: also write every this many steps. Defaults to `None`: per epoch.
    """

    def __init__(
        self, *, log_dir: str | Path, examples_per_step: int, every_n_steps: int | None = None
    ):
        super().__init__()
        if examples_per_step < 1:
            raise ValueError(
                f"`examples_per_step` ({examples_per_step}) must be a positive integer."
            )
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"`every_n_steps` ({every_n_steps}) must be a positive integer.")
        self.log_dir = str(log_dir)
        self.examples_per_step = examples_per_step
        self.every_n_steps = every_n_steps
        self._writer: Any = None
        self._last: tuple[float, int] = (0.0, 0)

    def _steps(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._writer = tf.summary.create_file_writer(self.log_dir)
        self._last = (time.perf_counter(), self._steps())

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.every_n_steps is None:
            return
        steps = self._steps()
        if steps - self._last[1] >= self.every_n_steps:
            self._write(steps)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._write(self._steps())

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _write(self, steps: int) -> None:
        now = time.perf_counter()
        then, before = self._last
        self._last = (now, steps)
        if steps <= before or self._writer is None:
            return
        rate = (steps - before) / max(now - then, 1e-9)
        # Keras's TensorBoard callback pushes its own `record_if` condition (every
        # `update_freq` train-function calls) around the batch hooks: these scalars keep
        # their own schedule.
        scalars = {
            "steps_per_second": rate,
            "examples_per_second": rate * self.examples_per_step,
            "learning_rate": learning_rate(self.model.optimizer),
        }
        with tf.summary.record_if(True):
            write_scalars(self._writer, scalars, steps)
        self._writer.flush()
