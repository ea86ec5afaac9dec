"""Build the run's Keras callbacks from the `callbacks` node."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import keras

from kdist.callbacks.speed import TrainingSpeed
from kdist.cluster import chief
from kdist.config.build import instantiate
from kdist.config.errors import ConfigError
from kdist.config.validate import parse_update_freq

__all__ = ["EpochTensorBoard", "ProfileSteps", "build", "monitor_mode", "profile_range"]

log = logging.getLogger(__name__)


def monitor_mode(monitor: str, mode: str, directions: Mapping[str, str]) -> str:
    """`mode` for a monitored metric: as configured, or `min`/`max` from the metric itself.

    Keras infers it from compiled metrics, which kdist's engine does not use.
    """
    if mode != "auto":
        return mode
    from kdist.compiling import direction_of

    name = monitor.removeprefix("val_")
    if name in directions:
        return directions[name]
    return direction_of(name)


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


def build(
    callbacks_cfg: Any,
    *,
    output_dir: Path,
    directions: Mapping[str, str] | None = None,
    resuming: bool = False,
    examples_per_step: int = 0,
) -> list[keras.callbacks.Callback]:
    """The callbacks a `callbacks` node asks for, writing under `output_dir`.

    Args:
        callbacks_cfg: the `callbacks` config node.
        output_dir: where files go: the run directory on the chief, a temporary folder on
            other workers (see `kdist.chief.writable_dir`).
        directions: metric name -> `min` or `max`, for monitored metrics. Defaults to
            `None`: losses are minimised, everything else maximised.
        resuming: the run continues from a backup: `history.csv` is appended to.
            Defaults to `False`.
        examples_per_step: the global batch, for the `examples_per_second` scalar
            (`TrainingSpeed`, with the TensorBoard scalars). Defaults to `0`: no speed
            scalars.

    Returns:
        Keras callbacks, in the order they run.
    """
    callbacks: list[keras.callbacks.Callback] = []
    if callbacks_cfg.tensorboard.enabled:
        update_freq = parse_update_freq(callbacks_cfg.tensorboard.update_freq)
        callbacks.append(
            EpochTensorBoard(
                log_dir=str(output_dir / "tensorboard"),
                update_freq=update_freq,
                write_graph=False,
            )
        )
        if examples_per_step:
            callbacks.append(
                TrainingSpeed(
                    log_dir=output_dir / "tensorboard" / "train",
                    examples_per_step=examples_per_step,
                    every_n_steps=update_freq if isinstance(update_freq, int) else None,
                )
            )
    profile = profile_range(callbacks_cfg.tensorboard.get("profile_steps"))
    if profile is not None:
        # Also without the TensorBoard scalars (tensorboard.enabled=false).
        callbacks.append(
            ProfileSteps(
                log_dir=output_dir / "tensorboard" / "train", first=profile[0], last=profile[1]
            )
        )
    if callbacks_cfg.csv.enabled:
        callbacks.append(
            keras.callbacks.CSVLogger(str(output_dir / "history.csv"), append=resuming)
        )
    stopping = callbacks_cfg.early_stopping
    if stopping.enabled:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor=stopping.monitor,
                patience=int(stopping.patience),
                mode=monitor_mode(stopping.monitor, stopping.mode, directions or {}),
                restore_best_weights=bool(stopping.restore_best_weights),
            )
        )
    for i, node in enumerate(callbacks_cfg.extra or []):
        callback = instantiate(node, _convert_="all")
        if not isinstance(callback, keras.callbacks.Callback):
            raise ConfigError(
                f"callbacks.extra[{i}]._target_",
                f"returned {type(callback).__name__}, not a keras.callbacks.Callback",
                value=node.get("_target_"),
                hint="name a class that subclasses keras.callbacks.Callback",
            )
        callbacks.append(callback)
    return callbacks
