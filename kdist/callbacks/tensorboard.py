"""TensorBoard in a run: epoch scalars without per-batch work on the training thread, the
speed scalars (`TrainingSpeed`) and a profile of chosen steps (`ProfileSteps`,
`callbacks.tensorboard.profile_steps`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2, types_pb2
from tensorboard.plugins.scalar import metadata as scalar_metadata

from kdist.cluster import chief
from kdist.config.errors import ConfigError

__all__ = [
    "EpochTensorBoard",
    "ProfileSteps",
    "TrainingSpeed",
    "learning_rate",
    "profile_range",
    "write_scalars",
]

log = logging.getLogger(__name__)


_SCALAR = scalar_metadata.create_summary_metadata(display_name=None, description=None)


def write_scalars(writer: Any, values: Mapping[str, Any], step: int) -> None:
    """Write `values` (tag to number) at `step` to `writer` in one summary event.

    The same records as one `tf.summary.scalar` per value (float32 tensors with the
    scalars plugin's metadata), built as one `Summary` protocol buffer and written with
    one op: about 0.03 ms a scalar instead of 0.15. Values that are not numbers are
    skipped.

    Args:
        writer: a `tf.summary` file writer.
        values: the scalars by tag.
        step: the step to record.
    """
    summary = summary_pb2.Summary()
    for tag, value in values.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue  # e.g. a learning-rate schedule object
        entry = summary.value.add(tag=tag, metadata=_SCALAR)
        entry.tensor.dtype = types_pb2.DT_FLOAT
        entry.tensor.float_val.append(number)
    if summary.value:
        with writer.as_default():
            tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=step)


def learning_rate(optimizer: keras.optimizers.Optimizer) -> float:
    """The optimizer's current learning rate as a Python float.

    A variable (a float learning rate) is read with its own `numpy()`: at an epoch's
    end, right after a train call, `keras.ops.convert_to_numpy` (what Keras's callbacks
    use) took about 0.5 ms of the training thread on the benchmark job, most of the
    TensorBoard callback's epoch end. A schedule is evaluated at the current step, as
    Keras does.
    """
    value = optimizer.learning_rate
    numpy = getattr(value, "numpy", None)
    return float(numpy() if numpy is not None else value)


class EpochTensorBoard(keras.callbacks.TensorBoard):
    """`keras.callbacks.TensorBoard` without per-batch work when it writes per epoch.

    With `update_freq="epoch"` Keras still calls `tf.summary.scalar` for every batch log
    at every train call, with no writer set: nothing is written, and each call costs
    about a millisecond on the training thread. kdist profiles with `ProfileSteps` and
    writes no graph, so the batch hooks have nothing left to do in that mode.
    """

    def _log_epoch_metrics(self, epoch: int, logs: dict[str, Any] | None) -> None:
        # Keras's own, with one event per writer (`write_scalars`) instead of one
        # `tf.summary.scalar` per value.
        if not logs:
            return
        train_logs = {k: v for k, v in logs.items() if not k.startswith("val_")}
        val_logs = {k[len("val_") :]: v for k, v in logs.items() if k.startswith("val_")}
        train_logs = self._collect_learning_rate(train_logs)
        if self.write_steps_per_second:
            train_logs["steps_per_second"] = self._compute_steps_per_second()
        for writer, values in ((self._train_writer, train_logs), (self._val_writer, val_logs)):
            if values:
                write_scalars(writer, {f"epoch_{k}": v for k, v in values.items()}, epoch)

    def _collect_learning_rate(self, logs: dict[str, Any]) -> dict[str, Any]:
        # Keras's own, with the faster read (`learning_rate`) for one optimizer.
        optimizer = self.model.optimizer
        inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
        if hasattr(inner, "optimizers") or not isinstance(inner, keras.optimizers.Optimizer):
            return dict(super()._collect_learning_rate(logs))
        logs["learning_rate"] = learning_rate(inner)
        return logs

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        # Keras's own records (`evaluation_<name>_vs_iterations` at the optimizer's step),
        # in one event (`write_scalars`) instead of one `tf.summary.scalar` op per value:
        # 3 ms of every epoch's validation on the default job, now under 1.
        optimizer = self.model.optimizer
        if logs and optimizer is not None and hasattr(optimizer, "iterations"):
            step = int(optimizer.iterations.numpy())
            values = {f"evaluation_{name}_vs_iterations": v for name, v in logs.items()}
            write_scalars(self._val_writer, values, step)
        self._pop_writer()

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.update_freq == "epoch":
            self._global_train_batch += 1
            return
        super().on_train_batch_begin(batch, logs)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.update_freq == "epoch":
            return
        super().on_train_batch_end(batch, logs)


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
        self._active = False
        self._done = True
        try:
            tf.profiler.experimental.stop()
        except Exception as error:  # a profile that cannot be written must not stop training
            log.warning("profile_steps: the profile was not written: %s", error)
            return
        log.info("profile of steps %d-%d written under %s", self.first, self.last, self.log_dir)
