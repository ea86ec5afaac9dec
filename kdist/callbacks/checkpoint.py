"""Periodic checkpoints and backups with `tf.train.CheckpointManager`.

What a checkpoint holds and how it is read back is `kdist.engine.state`; this module
writes them, on the schedule the controller (`kdist.engine.controller.Controller`) keeps.

Integrity: TensorFlow writes a checkpoint's files under temporary names and only then
points the `checkpoint` state file at it, so a checkpoint is visible only when complete.

Saving is asynchronous where TensorFlow supports it (one process, eager variables:
no strategy, `OneDeviceStrategy`, `MirroredStrategy`): the training thread copies the
variables to host memory and goes on, a TensorFlow thread writes the files, and the
state file is updated by that thread only once the files are complete
(`CheckpointOptions(experimental_enable_async_checkpoint=True)`), so the guarantee above
holds unchanged. Multi-worker runs save synchronously (see `_supports_async`).
"""

from __future__ import annotations

import atexit
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from kdist.callbacks.guards import NonFiniteWeightsError
from kdist.cluster import chief
from kdist.engine.state import TrainingState, clean_leftovers, state_file_readable

__all__ = ["PeriodicCheckpoint"]

log = logging.getLogger(__name__)


def _all_finite(variables: list[tf.Variable]) -> bool:
    floating = [v for v in variables if tf.as_dtype(v.dtype).is_floating]
    if not floating:
        return True
    return bool(_finite_fn(tuple(floating))().numpy())


_FINITE_FNS: dict[tuple[int, ...], Any] = {}


def _finite_fn(variables: tuple[tf.Variable, ...]) -> Any:
    """One traced check of all `variables` (one call instead of a host copy of each)."""
    key = tuple(id(v) for v in variables)
    if key not in _FINITE_FNS:

        @tf.function
        def finite() -> tf.Tensor:
            checks = [tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))) for v in variables]
            return tf.reduce_all(tf.stack(checks))

        _FINITE_FNS.clear()  # one model at a time: do not hold on to old variables
        _FINITE_FNS[key] = finite
    return _FINITE_FNS[key]


def _copy_keras_variable_to_cpu(self: Any, object_map: dict[Any, Any]) -> None:
    """`_copy_trackable_to_cpu` for a Keras 3 TensorFlow variable that can run twice.

    Keras 3.15.1 (`keras/src/backend/tensorflow/core.py`) makes a new `tf.Variable` for
    the host copy at every call; TensorFlow's async checkpoint helper calls it inside a
    `tf.function` at every save after the first, which fails ("tf.function only supports
    singleton tf.Variables created on the first call"). This one creates the copy once
    and assigns to it afterwards, as `ResourceVariable._copy_trackable_to_cpu` does.
    """
    self.value._copy_trackable_to_cpu(object_map)
    if self in object_map:
        object_map[self].assign(object_map[self.value])
    else:
        object_map[self] = tf.Variable(object_map[self.value])


def _enable_async_copies() -> None:
    """Let Keras variables take part in TensorFlow's asynchronous checkpoints."""
    from keras.src.backend.tensorflow.core import Variable

    if Variable._copy_trackable_to_cpu is not _copy_keras_variable_to_cpu:
        Variable._copy_trackable_to_cpu = _copy_keras_variable_to_cpu


def _supports_async(strategy: Any) -> bool:
    """Whether `strategy`'s variables can be saved by TensorFlow's async checkpoint thread.

    Not under ParameterServerStrategy: the variables live on the ps tasks, and the async
    helper's host copies would be made on the coordinator (unsupported there). Not under
    MultiWorkerMirroredStrategy either: every worker takes part in a save and the
    non-chief ones write to a scratch folder that is removed at the end, a protocol
    verified with synchronous saves only. Both save synchronously, as before.
    """
    if strategy is None:
        return True
    return not isinstance(
        strategy,
        (
            tf.distribute.experimental.ParameterServerStrategy,
            tf.distribute.MultiWorkerMirroredStrategy,
        ),
    )


class PeriodicCheckpoint:
    """Save a checkpoint every `every_n_steps` optimizer steps, keeping the `keep` newest.

    The controller calls `after_steps`, `after_epoch` and `finish` with its global step;
    the save schedule is this class's, the step count the controller's.

    Every process takes part in a save (multi-worker variables may need collectives to be
    read); only the chief writes to `directory`, other workers write to a temporary
    folder that is removed. A save is refused while the weights are not finite, so the
    newest checkpoint always holds finite weights: it raises `NonFiniteWeightsError`,
    which stops the run like the NaN guard (exit status 3).

    Args:
        model: the model whose weights must be finite to be saved.
        checkpoint: the `tf.train.Checkpoint` to save (model, optimizer, state, ...).
        state: the run's `TrainingState`, advanced before each save.
        directory: the checkpoint folder in the run directory.
        every_n_steps: steps between saves; `0` saves at the end of every epoch.
        keep: how many checkpoints to keep.
        strategy: the run's strategy (for the chief-only rule). Defaults to `None`.
        save_at_end: also save when training ends. Defaults to `True`.
        asynchronous: write periodic saves in TensorFlow's background thread where the
            strategy allows it (see `_supports_async`). Defaults to `True`.
    """

    def __init__(
        self,
        *,
        model: keras.Model,
        checkpoint: tf.train.Checkpoint,
        state: TrainingState,
        directory: Path,
        every_n_steps: int,
        keep: int,
        strategy: Any = None,
        save_at_end: bool = True,
        asynchronous: bool = True,
    ):
        if every_n_steps < 0:
            raise ValueError(f"`every_n_steps` ({every_n_steps}) must be >= 0.")
        if keep < 1:
            raise ValueError(f"`keep` ({keep}) must be a positive integer.")
        self.model = model
        self.checkpoint = checkpoint
        self.state = state
        self.directory = Path(directory)
        self.every_n_steps = every_n_steps
        self.keep = keep
        self.save_at_end = save_at_end
        self._strategy = strategy
        self._is_chief = chief.is_chief(strategy)
        if self._is_chief:
            self._write_dir = self.directory
        else:
            self._write_dir = chief.scratch_dir(
                self.directory.parent, strategy, f"ckpt-{self.directory.name}"
            )
        self.asynchronous = bool(asynchronous) and _supports_async(strategy)
        self._options = (
            tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
            if self.asynchronous
            else None
        )
        if self.asynchronous:
            _enable_async_copies()
        self._manager: tf.train.CheckpointManager | None = None
        self._last_saved = -1

    def _ensure_manager(self) -> tf.train.CheckpointManager:
        if self._manager is None:
            self._write_dir.mkdir(parents=True, exist_ok=True)
            if self._is_chief:
                clean_leftovers(self._write_dir)
                if not state_file_readable(self._write_dir):
                    aside = self._write_dir / f"checkpoint.unreadable-{int(time.time())}"
                    log.warning("moving the unreadable checkpoint state file to %s", aside)
                    (self._write_dir / "checkpoint").rename(aside)
            self._manager = tf.train.CheckpointManager(
                self.checkpoint, str(self._write_dir), max_to_keep=self.keep
            )
        return self._manager

    def save(self, steps: int, *, wait: bool = True) -> str | None:
        """Save now (unless this step is already saved); returns the path written.

        Args:
            steps: the global step to record.
            wait: return only when the files are complete and the state file names
                them (a preemption save, the end of training). Defaults to `True`;
                `False` lets an asynchronous save finish in the background.
        """
        if steps == self._last_saved:
            if wait:
                self.sync()
            return None
        if not _all_finite(list(self.model.weights)):
            raise NonFiniteWeightsError(
                f"the weights are not finite after step {steps} (the training loss did "
                "not show it); stopped without saving this state (the last backup holds "
                "finite weights)"
            )
        self.state.advance_to(steps)
        # A save that is waited for is written on this thread: handing it to the async
        # thread would only add the host copy.
        options = None if wait else self._options
        if options is None:
            self.sync()  # the async thread must not write while this thread does
        else:
            self._start_async_thread()
        path = self._ensure_manager().save(checkpoint_number=steps, options=options)
        self._last_saved = steps
        if wait:
            self.sync()
        return path

    def _helper(self) -> Any:
        # TensorFlow keeps its async checkpoint helper on the `tf.train.Checkpoint`
        # (private attributes of TensorFlow 2.21's `Checkpoint` and
        # `AsyncCheckpointHelper`, used by `_stop_async_thread` and `_start_async_thread`).
        return getattr(self.checkpoint, "_async_checkpointer_impl", None)

    def _stop_async_thread(self) -> None:
        """Stop TensorFlow's async checkpoint thread when training ends.

        TensorFlow starts the thread once per `tf.train.Checkpoint` and registers it with
        `atexit`, which would hold the model, the optimizer and their host copies for
        the rest of the process (every trial of a tuner). Stopped, the helper lives only
        as long as the checkpoint; a later `fit` restarts its thread and keeps its host
        copies and traced copy function.
        """
        helper = self._helper()
        thread = getattr(helper, "_async_save_thread", None)
        if thread is None or not thread.is_alive():
            return
        helper._join_async_save_thread()
        helper._queue.task_done()  # the stop item: a later `sync` must not wait for it
        atexit.unregister(helper._join_async_save_thread)

    def _start_async_thread(self) -> None:
        """Restart the thread `_stop_async_thread` stopped (a second `fit`)."""
        helper = self._helper()
        thread = getattr(helper, "_async_save_thread", None)
        if thread is None or thread.is_alive():
            return
        helper._async_save_thread = threading.Thread(target=helper._async_save, daemon=True)
        helper._async_save_thread.start()
        atexit.register(helper._join_async_save_thread)

    def sync(self) -> None:
        """Wait until an asynchronous save in progress is complete."""
        if self.asynchronous:
            self.checkpoint.sync()

    def after_steps(self, steps: int) -> None:
        """A call of the runner ended at global step `steps`: save on multiples of N."""
        if self.every_n_steps and steps and steps % self.every_n_steps == 0:
            self.save(steps, wait=False)

    def after_epoch(self, steps: int) -> None:
        """An epoch ended at global step `steps`: save when saving every epoch."""
        if self.every_n_steps == 0 and steps:
            self.save(steps, wait=False)

    def finish(self, steps: int) -> None:
        """Training ended at global step `steps`: the last save, complete on return."""
        if self.save_at_end and steps:
            self.save(steps)
        self.sync()
        self._stop_async_thread()
        if not self._is_chief:
            shutil.rmtree(self._write_dir, ignore_errors=True)

    @property
    def latest(self) -> str | None:
        """The newest checkpoint written here (chief: in `directory`)."""
        return self._manager.latest_checkpoint if self._manager else None
