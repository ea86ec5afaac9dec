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
Multi-worker runs save synchronously (see `_supports_async`).

It stays one file (over 400 lines): the saver and its writer thread share one protocol
over the sets of host copies (a snapshot takes a set no queued write still reads; the job
queued after it writes that set and frees it), which must change on both sides at once.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import queue
import shutil
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import keras
import tensorflow as tf

from kdist.callbacks.guards import NonFiniteWeightsError
from kdist.cluster import chief
from kdist.engine.runner import TRAIN_CALLS
from kdist.engine.state import (
    CheckpointError,
    TrainingState,
    clean_leftovers,
    state_file_readable,
)

__all__ = ["CheckpointWriteError", "PeriodicCheckpoint", "finish_writes"]

log = logging.getLogger(__name__)


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (a full disk, ...); the ones before are intact."""


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


# Most seconds a queued write waits for the training thread to enter a train call.
GATE_SECONDS = 0.05

# Asynchronous saves in flight at most: one set of host copies, so a save waits for the
# write of the one before it and a crash never loses more than that one save.
MAX_IN_FLIGHT = 1


class _Copies:
    """One set of host copies of a checkpoint's variables and its two traced functions.

    `snapshot(steps)` runs `prepare(steps)`, copies every variable into this set and
    returns whether the `floating` weights are all finite; `write(prefix)` writes the
    set with `tf.train.Checkpoint.write`. `free` is set while no queued job still has
    to read the set.
    """

    def __init__(
        self,
        helper: Any,
        prepare: Callable[[tf.Tensor], None],
        floating: list[Any],
        index: int,
    ):
        self.index = index  # its number in a runner's snapshot (`_HostWriter.use_runner`)
        if not helper._initialized:
            helper._ensure_initialized()  # builds the copies and makes the first one
            _stop_helper_thread(helper)  # kdist writes on its own thread
        self.helper = helper
        self.free = threading.Event()
        self.free.set()

        # TensorFlow's copy function, as plain Python: in a runner's train function it
        # adds its ops there instead of a nested function call.
        copy_to_cpu = type(helper)._copy_to_cpu.python_function

        def body(steps: tf.Tensor) -> tf.Tensor:
            prepare(steps)
            copy_to_cpu(helper)
            checks = [tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(w))) for w in floating]
            return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)

        self.body = tf.autograph.experimental.do_not_convert(body)
        self._snapshot = tf.function(self.body)

        host_checkpoint = helper.checkpointer()
        # Everything on the helper's device (as its own thread does): one data file.
        device = helper._default_device

        @tf.function
        def write(prefix: tf.Tensor) -> tf.Tensor:
            with tf.device(device):
                return host_checkpoint.write(prefix)

        self._write = write

    # Traced at their first call, then called as concrete functions: no argument
    # matching per call (about 0.1 ms of the training thread per save). Not traced when
    # the set is made: a set a runner copies into is made before the first step.

    @functools.cached_property
    def snapshot(self) -> Any:
        """The traced `snapshot(steps)` (an int64 tensor), in a call of its own."""
        return self._snapshot.get_concrete_function(tf.TensorSpec([], tf.int64))

    @functools.cached_property
    def write(self) -> Any:
        """The traced `write(prefix)` (a string tensor); first called on the writer thread."""
        return self._write.get_concrete_function(tf.TensorSpec([], tf.string))

    @property
    def nbytes(self) -> int:
        """The bytes of the host copies."""
        return sum(
            int(v.shape.num_elements() or 0) * tf.as_dtype(v.dtype).size
            for v in self.helper._object_map.values()
            if isinstance(v, tf.Variable) and tf.as_dtype(v.dtype) != tf.string
        )


def _non_finite_message(steps: int) -> str:
    # What the run folder still holds is for the caller to say (`kdist.train`): it may
    # hold no backup at all yet.
    return (
        f"the weights are not finite after step {steps} (the training loss did not "
        "show it); stopped without saving this state"
    )


class _Deferred:
    """A save whose host copy the runner's next call makes (`_HostWriter.defer`)."""

    def __init__(self, copies: _Copies, steps: int):
        self.copies = copies
        self.steps = steps
        # `(job, writes the copies)`, queued in this order once the copy is made.
        self.jobs: list[tuple[Callable[[], None], bool]] = []


class _HostWriter:
    """Asynchronous saves of one `tf.train.Checkpoint`: host copies, then a traced write.

    `snapshot` runs on the training thread: it takes a set of host copies no queued
    write still reads (waiting only when none is free), copies every variable to host
    memory with TensorFlow's async-checkpoint copy function (one traced call) and checks
    the weights are finite. There is one set (`MAX_IN_FLIGHT`): a save soon after
    another (a checkpoint at the end of an epoch, a few steps after a backup) waits for
    the first one's write, so at most one save is ever unwritten. A writer thread
    runs queued jobs (a `tf.train.CheckpointManager.save` whose write is `write`, a
    traced `tf.train.Checkpoint.write` of the set), one at a time, in order.
    Savers that share the checkpoint (periodic checkpoints and backups) share its
    writer, so a set is never overwritten while it is written. An error in the writer
    thread is raised by the next `snapshot` or `sync`.

    The savers of one run save the same state: when one of them saves a step another
    has just saved (the last backup and the last checkpoint of a run), its job links
    the other's files instead of copying and writing them again (`newest`, `link`).

    Args:
        checkpoint: the checkpoint whose variables are saved.
        prepare: called with the step (an int64 tensor) inside the traced snapshot,
            before the copies are made: the savers record the step in the run's
            `TrainingState` there, in the same call.
    """

    def __init__(self, checkpoint: tf.train.Checkpoint, prepare: Callable[[tf.Tensor], None]):
        # Weak: `_WRITERS` keeps a writer only as long as its checkpoint lives.
        self._checkpoint = weakref.ref(checkpoint)
        self._prepare = prepare
        # The sets of host copies, the least recently taken first.
        self._copies: list[_Copies] = []
        self._taken: _Copies | None = None  # by `snapshot`, for the next `submit`
        self._writing: _Copies | None = None  # the set of the job running
        self._jobs: queue.Queue[tuple[Callable[[], None], _Copies | None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        # The step and path of the newest save written from the copies, in this `fit`.
        self.newest: tuple[int, str] | None = None
        # The savers using it (weak: a failed `fit`'s savers never call `detach`).
        self._users: weakref.WeakSet[Any] = weakref.WeakSet()
        # The runner whose next call takes a deferred snapshot (`use_runner`), and the
        # save waiting for it: its set, step and jobs (queued once the copy is made).
        self._runner: Any = None
        self._in_call: _Copies | None = None  # the set the runner's calls copy into
        self._pending: _Deferred | None = None

    def _add_copies(self, weights: list[Any]) -> _Copies:
        checkpoint = self._checkpoint()
        assert checkpoint is not None  # a saver of it is calling
        from tensorflow.python.checkpoint import async_checkpoint_helper

        # The first set is TensorFlow's helper of the checkpoint; another is a helper
        # of its own over the same objects.
        helper = (
            checkpoint._async_checkpointer()
            if not self._copies
            else async_checkpoint_helper.AsyncCheckpointHelper(
                tf.train.Checkpoint, **checkpoint._kwargs
            )
        )
        floating = [w for w in weights if tf.as_dtype(w.dtype).is_floating]
        copies = _Copies(helper, self._prepare, floating, len(self._copies))
        self._copies.append(copies)
        return copies

    def _free_copies(self, weights: list[Any]) -> _Copies:
        """A set of host copies no queued write reads: waits for the save in flight."""
        for copies in self._copies:
            if copies.free.is_set():
                return copies
        if len(self._copies) < MAX_IN_FLIGHT:
            return self._add_copies(weights)
        oldest = self._copies[0]  # taken first, so written first
        TRAIN_CALLS.open()  # this thread now waits: the write need not
        try:
            oldest.free.wait()
        finally:
            TRAIN_CALLS.close()
        return oldest

    def snapshot(self, weights: list[Any], steps: int) -> bool:
        """Record `steps` (`prepare`) and copy the variables to host memory, in one call.

        Returns whether `weights` are all finite. The copies then belong to the next job
        `submit` queues: call it next.
        """
        self.flush()
        self._raise_error()
        copies = self._free_copies(weights)
        self._raise_error()  # a write that failed while this waited
        self._copies.remove(copies)
        self._copies.append(copies)  # now the most recently taken
        copies.free.clear()
        self._taken = copies
        return bool(copies.snapshot(tf.constant(steps, tf.int64)).numpy())

    def write(self, prefix: str) -> None:
        """Write the running job's host copies to `prefix` (on the writer thread)."""
        assert self._writing is not None
        self._writing.write(tf.constant(prefix))

    def submit(self, job: Callable[[], None], *, copies: bool = True) -> None:
        """Run `job` on the writer thread, after the jobs before it.

        With `copies`, `job` writes the set the last `snapshot` took, with one call of
        `write` (the set stays taken until the job ends); without, it must not call it
        (it links files written before, see `_link`).
        """
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="kdist-checkpoint-writer")
            self._thread.daemon = True  # a kill at exit leaves the previous one usable
            self._thread.start()
            atexit.register(self.stop)
        if self._pending is not None:
            # After the deferred write, in order (a link to it, the other saver's save).
            self._pending.jobs.append((job, copies))
            return
        taken = None
        if copies:
            taken, self._taken = self._taken, None
            assert taken is not None, "`submit` a write right after its `snapshot`"
        self._jobs.put((job, taken))

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            try:
                if item is None:
                    return
                # Start while the training thread is in a train call (or waits for
                # the writes), not while it runs the hooks between two calls.
                TRAIN_CALLS.wait(GATE_SECONDS)
                self._writing = item[1]
                item[0]()
            except BaseException as error:  # raised on the training thread by `sync`
                if self._error is None:  # the first one: a later link fails because of it
                    self._error = error
            finally:
                if item is not None and item[1] is not None:
                    self._writing = None
                    item[1].free.set()
                self._jobs.task_done()

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise CheckpointWriteError(
                f"an asynchronous checkpoint save failed: {type(error).__name__}: {first[:300]}"
            ) from error

    def sync(self) -> None:
        """Wait until every queued write is complete; raise the writer's error, if any.

        A deferred save whose copy no call has made yet is made now (`flush`).
        """
        self.flush()
        if self._thread is not None:
            TRAIN_CALLS.open()  # this thread now waits: the writes need not
            try:
                self._jobs.join()
            finally:
                TRAIN_CALLS.close()
        self._raise_error()

    def attach(self, saver: Any) -> None:
        """`saver` uses this writer (until it calls `detach`); made for a new `fit`.

        The steps of one `fit` only grow, so a step saved twice in it is the same
        state; a new `fit` (which may restore an earlier step) links nothing older.
        """
        self._users.add(saver)
        self.newest = None
        self._drop_pending()  # left by a `fit` that failed before its next call

    def detach(self, saver: Any) -> None:
        """`saver` is done: the last one to leave finishes the writes and ends the thread."""
        self._users.discard(saver)
        if not self._users:
            self.stop()

    # -- snapshots made by the runner's next call ----------------------------------------

    def use_runner(self, runner: Any, weights: list[Any]) -> None:
        """Let `runner`'s calls make the host copies of deferred saves (`defer`).

        Makes the first set of host copies now, if no save has: the runner traces its
        train function with it. A save while it is still written (a checkpoint a few
        steps after a backup) waits for that write and copies in a call of its own.
        """
        if runner is self._runner:
            return
        self._drop_pending()
        if not self._copies:
            self._add_copies(weights)
        first = min(self._copies, key=lambda c: c.index)

        @tf.autograph.experimental.do_not_convert
        def snapshot(which: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
            return tf.cond(
                tf.equal(which, first.index),
                lambda: first.body(steps),
                lambda: tf.constant(True),
            )

        self._in_call = first
        self._runner = runner if runner.set_snapshot(snapshot) else None

    def defer(self, steps: int) -> bool:
        """Have the runner's next call copy the variables for a save at `steps`.

        The call copies them before its first step, so the copies hold the state at
        `steps` without a call of their own on the training thread. Returns `False`
        (nothing deferred) without a runner, while a save is already deferred, or when
        no set is free; the caller then saves with `snapshot`. On `True`, `submit` the
        save's write next: it is queued once the copy is made (`resolve`).
        """
        copies = self._in_call
        if self._runner is None or self._pending is not None or copies is None:
            return False
        self._raise_error()
        if not copies.free.is_set():
            return False
        self._copies.remove(copies)
        self._copies.append(copies)  # now the most recently taken
        copies.free.clear()
        self._pending = _Deferred(copies, steps)
        self._runner.snapshot_next_call(copies.index, steps)
        return True

    def resolve(self) -> None:
        """After a runner call: queue the deferred save's jobs if the call made its copy.

        Raises:
            NonFiniteWeightsError: when the copied weights are not finite (nothing of
                that save is written).
        """
        pending = self._pending
        if pending is None or self._runner is None:
            return
        finite = self._runner.pop_snapshot()
        if finite is not None:
            self._queue_pending(bool(finite.numpy()))

    def flush(self) -> None:
        """Make a deferred save's copy now, when no runner call will (end of training).

        Raises:
            NonFiniteWeightsError: when the weights are not finite.
        """
        pending = self._pending
        if pending is None:
            return
        finite = self._runner.pop_snapshot() if self._runner is not None else None
        if finite is None:  # the call has not come: nothing changed since the save
            if self._runner is not None:
                self._runner.cancel_snapshot()
            finite = pending.copies.snapshot(tf.constant(pending.steps, tf.int64))
        self._queue_pending(bool(finite.numpy()))

    def _queue_pending(self, finite: bool) -> None:
        pending = self._pending
        assert pending is not None
        self._pending = None
        if not finite:
            pending.copies.free.set()
            self.newest = None
            raise NonFiniteWeightsError(_non_finite_message(pending.steps))
        for job, copies in pending.jobs:
            if copies:
                self._taken = pending.copies
            self.submit(job, copies=copies)

    def _drop_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.copies.free.set()
            if self._runner is not None:
                self._runner.cancel_snapshot()
                self._runner.pop_snapshot()

    def stop(self) -> None:
        """Finish the queued writes and end the writer thread (a later save restarts it)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._jobs.put(None)
            TRAIN_CALLS.open()
            try:
                thread.join()
            finally:
                TRAIN_CALLS.close()
            atexit.unregister(self.stop)
        self._thread = None
        self.newest = None


_WRITERS: weakref.WeakKeyDictionary[Any, _HostWriter] = weakref.WeakKeyDictionary()


def finish_writes() -> None:
    """Wait for the asynchronous writes already queued in this process (a run that
    stops on an error says which backups it leaves); a save not yet copied is dropped."""
    for writer in list(_WRITERS.values()):
        writer._drop_pending()
        if writer._thread is not None and writer._thread.is_alive():
            TRAIN_CALLS.open()
            try:
                writer._jobs.join()
            finally:
                TRAIN_CALLS.close()


def _writer_for(
    checkpoint: tf.train.Checkpoint, prepare: Callable[[tf.Tensor], None]
) -> _HostWriter:
    """The one `_HostWriter` of `checkpoint` (shared by every saver of it)."""
    if checkpoint not in _WRITERS:
        _WRITERS[checkpoint] = _HostWriter(checkpoint, prepare)
    return _WRITERS[checkpoint]


def _link(source: str, prefix: str) -> None:
    """Make checkpoint `prefix` the same files as checkpoint `source` (hard links).

    The data files first and the index last, as TensorFlow's own write: a checkpoint
    is found by its index, so a kill in between leaves no partial one in view. Copies
    where the folders cannot share a link (another filesystem).
    """
    files = sorted(
        Path(source).parent.glob(f"{Path(source).name}.*"), key=lambda f: f.suffix == ".index"
    )
    if not any(f.suffix == ".index" for f in files):
        raise CheckpointError(f"checkpoint {source} has no index file to link")
    for file in files:
        target = Path(f"{prefix}{file.name[len(Path(source).name) :]}")
        target.unlink(missing_ok=True)
        try:
            os.link(file, target)
        except OSError:
            shutil.copyfile(file, target)


def _stop_helper_thread(helper: Any) -> None:
    """Stop TensorFlow's async checkpoint thread of `helper` (kdist writes on its own).

    TensorFlow starts the thread when its helper initializes and registers it with
    `atexit`, which would hold the model, the optimizer and their host copies for the
    rest of the process (every trial of a tuner). Uses private attributes of TensorFlow
    2.21's `AsyncCheckpointHelper`.
    """
    thread = getattr(helper, "_async_save_thread", None)
    if thread is None or not thread.is_alive():
        return
    helper._join_async_save_thread()
    helper._queue.task_done()  # the stop item: a later `sync` must not wait for it
    atexit.unregister(helper._join_async_save_thread)


class _TracedWrites:
    """What `tf.train.CheckpointManager` uses of a checkpoint, writing through `writer`.

    The manager numbers the checkpoint, calls `_write`, then (through the write
    callbacks) records it in the state file and removes the oldest ones: all of it
    on the writer thread, after the files are complete.
    """

    def __init__(self, checkpoint: tf.train.Checkpoint, writer: _HostWriter):
        self.save_counter = checkpoint.save_counter
        self._writer = writer
        # Set (on the writer thread) while a save links these files instead of writing.
        self.link_from: str | None = None

    def _write(self, file_prefix: str, options: Any = None) -> str:
        if self.link_from is not None:
            _link(self.link_from, file_prefix)
        else:
            self._writer.write(file_prefix)
        for callback in getattr(options, "experimental_write_callbacks", None) or []:
            callback(file_prefix)
        return file_prefix

    def sync(self) -> None:
        """Nothing to wait for: the manager runs on the writer thread."""


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
        asynchronous: copy to host memory on the training thread and write in a
            background thread (`_HostWriter`) where the strategy allows it (see
            `_supports_async`). Defaults to `True`.
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
        self._writer: _HostWriter | None = None
        if self.asynchronous:
            _enable_async_copies()
            self._writer = _writer_for(checkpoint, state.record)
            self._writer.attach(self)
        self._target: _TracedWrites | None = None
        self._manager: tf.train.CheckpointManager | None = None
        self._last_saved = -1
        self._runner: Any = None

    def _ensure_manager(self) -> tf.train.CheckpointManager:
        if self._manager is None:
            self._write_dir.mkdir(parents=True, exist_ok=True)
            if self._is_chief:
                clean_leftovers(self._write_dir)
                if not state_file_readable(self._write_dir):
                    aside = self._write_dir / f"checkpoint.unreadable-{int(time.time())}"
                    log.warning("moving the unreadable checkpoint state file to %s", aside)
                    (self._write_dir / "checkpoint").rename(aside)
            # Asynchronous: the manager runs on the writer thread and writes the host
            # copies (its bookkeeping after the files are complete, as before).
            target: Any = self.checkpoint
            if self._writer is not None:
                target = self._target = _TracedWrites(self.checkpoint, self._writer)
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
        if self._writer is not None:
            path = self._save_async(steps, defer=not wait)
        else:
            path = self._save_now(steps)
        self._last_saved = steps
        if wait:
            self.sync()
        return path

    def _refuse_non_finite(self, steps: int) -> NoReturn:
        raise NonFiniteWeightsError(_non_finite_message(steps))

    def _save_now(self, steps: int) -> str:
        """A synchronous save (multi-worker strategies): every worker takes part."""
        if self._runner is not None:
            # Under a parameter server, steps scheduled before this save may still be
            # running: the save records `steps` steps, so they must all be applied.
            self._runner.settle()
        # Recorded first: the training state is one of the variables saved.
        self.state.advance_to(steps)
        if not _all_finite(list(self.model.weights)):
            self._refuse_non_finite(steps)
        return str(self._ensure_manager().save(checkpoint_number=steps))

    def _save_async(self, steps: int, *, defer: bool) -> str:
        """Copy to host memory; write, record and sweep on the writer thread.

        With `defer`, the runner's next call makes the copy before its first step
        (`_HostWriter.defer`), where the writer has a runner that can; otherwise it is
        made here. A step another saver of the checkpoint has just saved is not copied
        again: the job links its files once they are complete (the writer runs jobs in
        order).
        """
        writer = self._writer
        assert writer is not None
        # The name CheckpointManager gives it (`<directory>/ckpt-<steps>`).
        path = str(self._write_dir / f"ckpt-{steps}")
        manager = self._ensure_manager()
        target = self._target
        assert target is not None
        newest = writer.newest
        if newest is not None and newest[0] == steps and newest[1] != path:
            source = newest[1]

            def link() -> None:
                target.link_from = source
                try:
                    manager.save(checkpoint_number=steps)
                finally:
                    target.link_from = None

            writer.submit(link, copies=False)
            return path
        if defer and writer.defer(steps):
            writer.submit(lambda: manager.save(checkpoint_number=steps))
            writer.newest = (steps, path)
            return path
        if not writer.snapshot(list(self.model.weights), steps):
            self._refuse_non_finite(steps)
        writer.submit(lambda: manager.save(checkpoint_number=steps))
        writer.newest = (steps, path)
        return path

    def sync(self) -> None:
        """Wait until an asynchronous save in progress is complete.

        Raises:
            CheckpointError: when an asynchronous save failed.
        """
        if self._writer is not None:
            self._writer.sync()

    def bind(self, runner: Any) -> None:
        """A `fit` with `runner` starts: its calls make the host copies of this saver's
        asynchronous saves (`_HostWriter.use_runner`), and a synchronous save first waits
        for the steps it was given (`Runner.settle`)."""
        self._runner = runner
        if self._writer is not None:
            self._writer.use_runner(runner, list(self.model.weights))

    def after_steps(self, steps: int) -> None:
        """A call of the runner ended at global step `steps`: save on multiples of N.

        First, a save deferred to this call is queued for writing (`_HostWriter.resolve`).
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
        if self._writer is not None:
            # A tuner runs many trials in one process: no thread holds a finished
            # run's model (the last saver to finish stops it; a later `fit` starts it).
            self._writer.detach(self)
        if not self._is_chief:
            shutil.rmtree(self._write_dir, ignore_errors=True)

    @property
    def latest(self) -> str | None:
        """The newest checkpoint written here (chief: in `directory`)."""
        return self._manager.latest_checkpoint if self._manager else None
