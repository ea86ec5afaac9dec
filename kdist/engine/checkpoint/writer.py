"""The writer thread of a checkpoint's asynchronous saves, one per checkpoint.

The saver (`kdist.engine.checkpoint.saver`) and this writer share one protocol over the
sets of host copies (`kdist.engine.checkpoint.host_copies`): a snapshot takes a set no
queued write still reads; the job queued after it writes that set and frees it.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from kdist.compat.tf_private import async_helper
from kdist.engine.checkpoint.finite import NonFiniteWeightsError, non_finite_message
from kdist.engine.checkpoint.host_copies import TRAIN_CALLS, Deferred, HostCopies
from kdist.engine.state import CheckpointError
from kdist.runs.disk_full import disk_full_message, is_disk_full

__all__ = [
    "GATE_SECONDS",
    "MAX_IN_FLIGHT",
    "CheckpointWriteError",
    "HostWriter",
    "finish_writes",
    "writer_for",
]


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (a full disk, ...); the ones before are intact."""


# Most seconds a queued write waits for the training thread to enter a train call.
GATE_SECONDS = 0.05


# Asynchronous saves in flight at most: one set of host copies, so a save waits for the
# write of the one before it and a crash never loses more than that one save.
MAX_IN_FLIGHT = 1


class HostWriter:
    """Asynchronous saves of one `tf.train.Checkpoint`: host copies, then a traced write.

    `snapshot` runs on the training thread: it takes a set of host copies no queued
    write still reads (waiting only when none is free), copies every variable to host
    memory with TensorFlow's async-checkpoint copy function (one traced call) and checks
    the weights are finite. There is one set (`MAX_IN_FLIGHT`): a save soon after
    another (a checkpoint at the end of an epoch, a few steps after a backup) waits for
    the first one's write, so at most one save is ever unwritten. A writer thread
    runs queued jobs (a `tf.train.CheckpointManager.save` whose write is `write`, a
    traced `tf.train.Checkpoint.write` of the set), one at a time, in order. A save
    deferred to the runner's next call (`defer`) is queued at once and written as soon
    as that call has made its copy, beside the call's steps (`Deferred`).
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

    def __init__(
        self,
        checkpoint: tf.train.Checkpoint,
        prepare: Callable[[tf.Tensor], None],
        *,
        lockstep: bool = False,
    ):
        # Several workers copy in lockstep: each decision to copy now or in the runner's
        # next call must not depend on how far this worker's writes are (`defer`).
        self.lockstep = lockstep
        # Weak: `_WRITERS` keeps a writer only as long as its checkpoint lives.
        self._checkpoint = weakref.ref(checkpoint)
        self._prepare = prepare
        # The sets of host copies, the least recently taken first.
        self._copies: list[HostCopies] = []
        self._taken: HostCopies | None = None  # by `snapshot`, for the next `submit`
        self._writing: HostCopies | None = None  # the set of the job running
        self._jobs: queue.Queue[tuple[Callable[[], None], HostCopies | None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._written: tuple[str, int] | None = None  # the last write's prefix and bytes
        # The step and path of the newest save written from the copies, in this `fit`.
        self.newest: tuple[int, str] | None = None
        # The savers using it (weak: a failed `fit`'s savers never call `detach`).
        self._users: weakref.WeakSet[Any] = weakref.WeakSet()
        # The runner whose next call takes a deferred snapshot (`use_runner`), and the
        # save waiting for it: its set, step and jobs (queued once the copy is made).
        self._runner: Any = None
        self._in_call: HostCopies | None = None  # the set the runner's calls copy into
        self._pending: Deferred | None = None

    def _add_copies(self, weights: list[Any]) -> HostCopies:
        checkpoint = self._checkpoint()
        assert checkpoint is not None  # a saver of it is calling
        # The first set is TensorFlow's helper of the checkpoint; another is a helper
        # of its own over the same objects.
        helper = async_helper(checkpoint, own=bool(self._copies))
        floating = [w for w in weights if tf.as_dtype(w.dtype).is_floating]
        copies = HostCopies(helper, self._prepare, floating, len(self._copies))
        self._copies.append(copies)
        return copies

    def _free_copies(self, weights: list[Any]) -> HostCopies:
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
        self._written = (prefix, self._writing.nbytes)  # for a full disk's message
        self._writing.write(tf.constant(prefix))

    def submit(self, job: Callable[[], None], *, copies: bool = True) -> None:
        """Run `job` on the writer thread, after the jobs before it.

        With `copies`, `job` writes the set the last `snapshot` took, with one call of
        `write` (the set stays taken until the job ends); without, it must not call it
        (it links files written before, see `link_checkpoint`).
        """
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="kdist-checkpoint-writer")
            self._thread.daemon = True  # a kill at exit leaves the previous one usable
            self._thread.start()
            atexit.register(self.stop)
        pending = self._pending
        if pending is not None:
            # Queued now, run once the next call has made the copy (a link to it, the
            # other saver's save, in order): the write runs beside the call's steps.
            self._jobs.put((pending.gate(job), pending.copies if copies else None))
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
        if error is not None and is_disk_full(error):
            prefix, needed = self._written or ("", None)
            raise CheckpointWriteError(
                disk_full_message(error, Path(prefix).parent, needed=needed)
            ) from error
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
            if not self.lockstep:
                return False
            # Every worker decides alike, whatever its own writes' speed: the copy is a
            # collective (`lockstep`), so this one waits for its set instead.
            TRAIN_CALLS.open()  # this thread now waits: the write need not
            try:
                copies.free.wait()
            finally:
                TRAIN_CALLS.close()
            self._raise_error()
        self._copies.remove(copies)
        self._copies.append(copies)  # now the most recently taken
        copies.free.clear()
        self._pending = copies.deferred = Deferred(copies, steps)
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
        """The deferred save's copy is made: its queued jobs run (or, not finite, skip)."""
        pending = self._pending
        assert pending is not None
        self._pending = pending.copies.deferred = None
        pending.settle(finite)
        if not finite:
            self.newest = None
            raise NonFiniteWeightsError(non_finite_message(pending.steps))

    def _drop_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            # Its queued jobs write nothing; the save's job frees the set when it ends.
            pending.copies.deferred = None
            pending.cancel()
            if self._runner is not None:
                self._runner.cancel_snapshot()
                self._runner.pop_snapshot()

    def stop(self) -> None:
        """Finish the queued writes and end the writer thread (a later save restarts it)."""
        thread = self._thread
        self._drop_pending()  # a save no call will copy: its queued jobs must not wait
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


_WRITERS: weakref.WeakKeyDictionary[Any, HostWriter] = weakref.WeakKeyDictionary()


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


def writer_for(
    checkpoint: tf.train.Checkpoint,
    prepare: Callable[[tf.Tensor], None],
    *,
    lockstep: bool = False,
) -> HostWriter:
    """The one `HostWriter` of `checkpoint` (shared by every saver of it); `lockstep`:
    several workers make its copies together (`HostWriter.defer`)."""
    if checkpoint not in _WRITERS:
        _WRITERS[checkpoint] = HostWriter(checkpoint, prepare, lockstep=lockstep)
    return _WRITERS[checkpoint]
