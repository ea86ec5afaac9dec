"""Periodic checkpoints and backups with `tf.train.CheckpointManager`.

What a checkpoint holds and how it is read back is `kdist.engine.state`; this module
writes them, on the schedule the controller (`kdist.engine.controller.Controller`) keeps.

Integrity: TensorFlow writes a checkpoint's files under temporary names and only then
points the `checkpoint` state file at it, so a checkpoint is visible only when complete.

Saving is asynchronous where TensorFlow supports it (one process, eager variables:
no strategy, `OneDeviceStrategy`, `MirroredStrategy`): the variables are copied to host
memory (TensorFlow's async-checkpoint copies) and training goes on; a writer thread
writes the copies with a traced `tf.train.Checkpoint.write` (the object graph is walked
once, when it is traced) and only then updates the state file and removes old
checkpoints (`tf.train.CheckpointManager`), so the guarantee above holds unchanged.
During `fit` the copy is made by the runner's next call, before its first step
(`_HostWriter.defer`): the saved state is the one of the save's step, and the training
thread makes no call of its own for it. Otherwise (the end of training, a preemption,
or while that set of copies is still written) it makes the copy in one traced call.
There is one set of host copies, so at most one asynchronous save is in flight: a save
waits for the write of the one before it (as TensorFlow's own async checkpointing does)
before it copies. Hence the bound on how far saves may lag: when save N starts, every
earlier save is complete, so a crash loses at most the steps since the save before the
newest one started (under `every_n_steps`, fewer than two intervals). A step two savers
save (the last backup and the last checkpoint) is written once and hard-linked, index last.
Under `MultiWorkerMirroredStrategy` every worker makes the host copies at the same step
(reading a multi-worker variable may take a collective) and only the chief writes them;
parameter-server runs save synchronously (see `kdist.engine.checkpoint.host_copies`).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import keras
import tensorflow as tf

from kdist.cluster import chief
from kdist.engine.checkpoint.files import TracedWrites
from kdist.engine.checkpoint.finite import NonFiniteWeightsError, all_finite, non_finite_message
from kdist.engine.checkpoint.host_copies import enable_async_copies, supports_async
from kdist.engine.checkpoint.writer import CheckpointWriteError, HostWriter, writer_for
from kdist.engine.state import (
    TrainingState,
    state_file_readable,
)
from kdist.runs.disk_full import disk_full_message, is_disk_full
from kdist.runs.layout import clean_leftovers

__all__ = ["PeriodicCheckpoint"]

log = logging.getLogger(__name__)


def _set_aside_unreadable_state(directory: Path) -> None:
    """Move `directory/checkpoint` aside when TensorFlow cannot read it.

    The state file only lists the checkpoints (restoring finds them by name, and the
    manager writes a new one at the next save), so an empty, truncated or random one is
    no reason to lose a run's work: it is moved to `checkpoint.unreadable-<time>` with one
    warning naming both, and the save goes on.
    """
    try:
        readable = state_file_readable(directory)
    except (UnicodeDecodeError, ValueError, OSError, tf.errors.OpError):
        readable = False  # random bytes (not UTF-8), an empty file, a folder at the name
    if readable:
        return
    state, aside = directory / "checkpoint", directory / f"checkpoint.unreadable-{time.time_ns()}"
    log.warning(
        "%s is not a readable checkpoint state file; moved to %s (a new one is written "
        "at this save; delete the moved file, or start a new run_dir if you did not expect it)",
        state,
        aside,
    )
    state.rename(aside)


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
        asynchronous: copy to host memory on the training thread and write in a
            background thread (`HostWriter`) where the strategy allows it (see
            `supports_async`). Defaults to `True`.
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
        self.asynchronous = bool(asynchronous) and supports_async(strategy)
        # Where this task writes: the chief, `directory`; another worker saving
        # synchronously, a scratch folder it removes; one saving asynchronously, nowhere
        # (it makes the copies, the chief writes them).
        self._write_dir = self.directory
        self._scratch: Path | None = None
        if not self._is_chief and not self.asynchronous:
            self._scratch = self._write_dir = chief.scratch_dir(
                self.directory.parent, strategy, f"ckpt-{self.directory.name}"
            )
        self._writer: HostWriter | None = None
        if self.asynchronous:
            enable_async_copies()
            lockstep = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            self._writer = writer_for(checkpoint, state.record, lockstep=lockstep)
            self._writer.attach(self)
        self._target: TracedWrites | None = None
        self._manager: tf.train.CheckpointManager | None = None
        self._last_saved = -1
        self._runner: Any = None

    def _ensure_manager(self) -> tf.train.CheckpointManager:
        if self._manager is None:
            self._write_dir.mkdir(parents=True, exist_ok=True)
            if self._is_chief:
                clean_leftovers(self._write_dir)
                _set_aside_unreadable_state(self._write_dir)
            # Asynchronous: the manager runs on the writer thread and writes the host
            # copies (its bookkeeping after the files are complete, as before).
            target: Any = self.checkpoint
            if self._writer is not None:
                target = self._target = TracedWrites(self.checkpoint, self._writer)
            self._manager = tf.train.CheckpointManager(
                target, str(self._write_dir), max_to_keep=self.keep
            )
        return self._manager

    def save(self, steps: int, *, wait: bool = True) -> str | None:
        """Save now (unless this step is already saved); returns the path written.

        Args:
            steps: the global step to record.
            wait: return only when the files are complete and the state file names
                them (a preemption save, the end of training). Defaults to `True`;
                `False` lets an asynchronous save finish in the background.

        Raises:
            NonFiniteWeightsError: when the weights are not finite (nothing is saved).
        """
        if steps == self._last_saved:
            if wait:
                self.sync()
            return None
        if self._runner is not None:
            # Under a parameter server, steps scheduled before this save may still be
            # running: the save records `steps` steps, so they must all be applied. Local
            # SGD gathers each replica's own state (`LocalSGDRunner.settle`).
            self._runner.settle()
        if self._writer is not None:
            path = self._save_async(steps, defer=not wait)
        else:
            path = self._save_now(steps)
        self._last_saved = steps
        if wait:
            self.sync()
        return path

    def _refuse_non_finite(self, steps: int) -> NoReturn:
        raise NonFiniteWeightsError(non_finite_message(steps))

    def _save_now(self, steps: int) -> str:
        """A synchronous save (multi-worker strategies): every worker takes part."""
        # Recorded first: the training state is one of the variables saved.
        self.state.advance_to(steps)
        if not all_finite(list(self.model.weights)):
            self._refuse_non_finite(steps)
        manager = self._ensure_manager()
        try:
            return str(manager.save(checkpoint_number=steps))
        except (tf.errors.OpError, OSError) as error:
            if not is_disk_full(error):
                raise
            needed = sum(
                int(w.shape.num_elements() or 0) * tf.as_dtype(w.dtype).size
                for w in self.model.weights
            )
            message = disk_full_message(error, self._write_dir, needed=needed)
            raise CheckpointWriteError(message) from error

    def _save_async(self, steps: int, *, defer: bool) -> str:
        """Copy to host memory; write, record and sweep on the writer thread.

        With `defer`, the runner's next call makes the copy before its first step
        (`HostWriter.defer`), where the writer has a runner that can; otherwise it is
        made here. A step another saver of the checkpoint has just saved is not copied
        again: the job links its files once they are complete (the writer runs jobs in
        order).
        """
        writer = self._writer
        assert writer is not None
        # The name CheckpointManager gives it (`<directory>/ckpt-<steps>`).
        path = str(self._write_dir / f"ckpt-{steps}")
        newest = writer.newest
        linked = newest is not None and newest[0] == steps and newest[1] != path
        # Every worker makes the same copies (reading a multi-worker variable may take a
        # collective); only the chief writes them: another worker's job only frees them.
        write = self._write_job(steps, link_from=newest[1] if linked and newest else None)
        if linked:
            writer.submit(write, copies=False)
            return path
        if not (defer and writer.defer(steps)) and not writer.snapshot(
            list(self.model.weights), steps
        ):
            self._refuse_non_finite(steps)
        writer.submit(write)
        writer.newest = (steps, path)
        return path

    def _write_job(self, steps: int, *, link_from: str | None) -> Callable[[], None]:
        """The writer thread's job for the save of `steps`: write the host copies (or
        hard-link the files of `link_from`, a save of the same step), on the chief."""
        if not self._is_chief:
            return lambda: None
        manager = self._ensure_manager()
        target = self._target
        assert target is not None

        def write() -> None:
            target.link_from = link_from
            try:
                manager.save(checkpoint_number=steps)
            finally:
                target.link_from = None

        return write

    def sync(self) -> None:
        """Wait until an asynchronous save in progress is complete.

        Raises:
            CheckpointError: when an asynchronous save failed.
        """
        if self._writer is not None:
            self._writer.sync()

    def bind(self, runner: Any) -> None:
        """A `fit` with `runner` starts: its calls make the host copies of this saver's
        asynchronous saves (`HostWriter.use_runner`), and a synchronous save first waits
        for the steps it was given (`Runner.settle`)."""
        self._runner = runner
        if self._writer is not None:
            self._writer.use_runner(runner, list(self.model.weights))

    def after_steps(self, steps: int) -> None:
        """A call of the runner ended at global step `steps`: save on multiples of N.

        First, a save deferred to this call is queued for writing (`HostWriter.resolve`).
        """
        if self._writer is not None:
            self._writer.resolve()
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
        self.release()

    def release(self) -> None:
        """Leave the writer thread (after `finish`, or after a failure stopped training).

        A tuner runs many trials in one process: no thread holds a finished or failed
        run's model (the last saver to leave stops it; a later `fit` starts it again).
        """
        if self._writer is not None:
            self._writer.detach(self)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
