"""A TensorBoard profile of chosen optimizer steps (`callbacks.tensorboard.profile_steps`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras

from kdist.cluster import chief
from kdist.config.errors import ConfigError

__all__ = ["ProfileSteps", "profile_range"]

log = logging.getLogger(__name__)


def profile_range(value: Sequence[int] | None) -> tuple[int, int] | None:
    """`callbacks.tensorboard.profile_steps` checked: `(first, last)`, or `None` for off.

    Raises:
        ConfigError: naming the key unless it is two steps `1 <= first <= last`.
    """
    if value is None:
        return None
    steps = list(value)
    if len(steps) != 2 or any(isinstance(s, bool) or not isinstance(s, int) for s in steps):
        raise ConfigError(
            "callbacks.tensorboard.profile_steps",
            "must be two optimizer steps [first, last]",
            value=steps,
            hint="e.g. [10, 20], or null for no profile",
        )
    first, last = steps
    if not 1 <= first <= last:
        raise ConfigError(
            "callbacks.tensorboard.profile_steps",
            "needs 1 <= first <= last (steps count from 1)",
            value=steps,
            hint=f"e.g. [{max(first, 1)}, {max(first, last, 1)}]",
        )
    return first, last


class ProfileSteps(keras.callbacks.Callback):
    """Write a TensorBoard profile (`tf.profiler`) of optimizer steps `first` to `last`.

    The profiler starts before the train-function call that runs step `first` and stops
    after the call that completes step `last`, so whole calls of
    `trainer.steps_per_execution` steps are profiled (and the very first call is only
    predicted right when it starts at `first`: a call is assumed to run as many steps
    as the previous one). Steps are read from `optimizer.iterations`, so a resumed run
    counts from where it resumed. The profile covers this process, and only the chief
    profiles: other tasks' files would be thrown away, and a second process profiling
    on the same machine crashed a worker (`munmap_chunk(): invalid pointer`, TF 2.21,
    two local multi_worker_mirrored workers). Open it in TensorBoard's Profile tab.
    Create it inside the strategy's scope (as `build` is called).

    Args:
        log_dir: the run's folder (`tensorboard/train`): the profile goes to its
            `plugins/profile/<time>/`.
        first: the first step to profile (1-based).
        last: the last step to profile.
    """

    def __init__(self, *, log_dir: str | Path, first: int, last: int):
        super().__init__()
        if not 1 <= first <= last:
            raise ValueError(f"`first` ({first}) and `last` ({last}) need 1 <= first <= last.")
        self.log_dir = str(log_dir)
        self.first = first
        self.last = last
        self._active = False
        self._done = False
        self._previous = 0
        self._steps_per_call = 1
        import tensorflow as tf

        # Inside the scope this is the run's strategy (the default one outside).
        self._done = not chief.is_chief(tf.distribute.get_strategy())

    def _steps_done(self) -> int:
        # `.numpy()`: `int()` of a Keras variable fails when it wraps a MirroredVariable.
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._previous = self._steps_done()

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._done or self._active:
            return
        done = self._steps_done()
        if done >= self.last:
            self._done = True
        elif done + self._steps_per_call >= self.first:
            import tensorflow as tf

            try:
                tf.profiler.experimental.start(self.log_dir)
                self._active = True
            except Exception as error:  # e.g. another profiler is running: not fatal
                log.warning("profile_steps: the profiler did not start: %s", error)
                self._done = True

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._done:
            return
        done = self._steps_done()
        self._steps_per_call = max(1, done - self._previous)
        self._previous = done
        if self._active and done >= self.last:
            self._stop()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._active:
            self._stop()

    def _stop(self) -> None:
        import tensorflow as tf

        self._active = False
        self._done = True
        try:
            tf.profiler.experimental.stop()
        except Exception as error:  # a profile that cannot be written must not stop training
            log.warning("profile_steps: the profile was not written: %s", error)
            return
        log.info("profile of steps %d-%d written under %s", self.first, self.last, self.log_dir)
