"""Host copies of a checkpoint's variables for saves written in the background.

`HostCopies` holds one set of copies and `Deferred` a save waiting for its copy. Keras
3.15.1's TensorFlow `Variable` cannot take part in TensorFlow's async checkpoint copies as
it is: `enable_async_copies` patches its host copy once per process
(`kdist.compat.tf_private.copy_keras_variable_to_cpu`, through
`kdist.compat.keras_private.patch_variable_copy_to_cpu`); `supports_async` says which
strategies allow the copies. `TRAIN_CALLS` is the process's gate between the training
thread and the background writer.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kdist.compat.keras_private import patch_variable_copy_to_cpu
from kdist.compat.tf_private import (
    copy_keras_variable_to_cpu,
    helper_copy_function,
    helper_device,
    helper_host_variables,
    initialize_helper,
)

__all__ = [
    "TRAIN_CALLS",
    "CallGate",
    "Deferred",
    "HostCopies",
    "enable_async_copies",
    "supports_async",
]


class HostCopies:
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
        self.index = index  # its number in a runner's snapshot (`HostWriter.use_runner`)
        # Builds the copies, makes the first one, and stops TensorFlow's writer thread
        # (kdist writes on its own).
        initialize_helper(helper)
        self.helper = helper
        self.free = threading.Event()
        self.free.set()
        # The save whose copy a runner's call makes into this set (`HostWriter.defer`).
        self.deferred: Deferred | None = None

        # TensorFlow's copy function, as plain Python: in a runner's train function it
        # adds its ops there instead of a nested function call.
        copy_to_cpu = helper_copy_function(helper)

        def body(steps: tf.Tensor) -> tf.Tensor:
            prepare(steps)
            copy_to_cpu(helper)
            checks = [tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(w))) for w in floating]
            finite = tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)
            # Tells the writer thread the copy is made (`Deferred.settle`), while the
            # call goes on with its steps: the save's write runs beside them.
            return tf.py_function(self._copied, [finite], tf.bool)

        self.body = tf.autograph.experimental.do_not_convert(body)
        self._snapshot = tf.function(self.body)

        host_checkpoint = helper.checkpointer()
        # Everything on the helper's device (as its own thread does): one data file.
        device = helper_device(helper)

        @tf.function
        def write(prefix: tf.Tensor) -> tf.Tensor:
            with tf.device(device):
                return host_checkpoint.write(prefix)

        self._write = write

    def _copied(self, finite: tf.Tensor) -> tf.Tensor:
        deferred = self.deferred
        if deferred is not None:
            deferred.settle(bool(finite.numpy()))
        return finite

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
            for v in helper_host_variables(self.helper)
            if isinstance(v, tf.Variable) and tf.as_dtype(v.dtype) != tf.string
        )


class Deferred:
    """A save whose host copy the runner's next call makes (`HostWriter.defer`).

    Its jobs are queued at once; the writer thread runs each once the copy is made
    (`wait`), which the call says before its steps (`HostCopies`'s signal), so the write
    runs beside them. A save dropped before its copy (`cancel`) or whose weights are not
    finite writes nothing.
    """

    def __init__(self, copies: HostCopies, steps: int):
        self.copies = copies
        self.steps = steps
        self._ready = threading.Event()
        self._write = False

    def settle(self, finite: bool) -> None:
        """The copy is made: its jobs run if the weights are `finite` (once)."""
        if not self._ready.is_set():
            self._write = finite
            self._ready.set()

    def cancel(self) -> None:
        """No copy will be made: its jobs write nothing."""
        self.settle(False)

    def wait(self) -> bool:
        """On the writer thread: wait for the copy; whether the jobs may write."""
        self._ready.wait()
        return self._write

    def gate(self, job: Callable[[], None]) -> Callable[[], None]:
        """`job`, run only once the copy is made and only if it may be written."""

        def gated() -> None:
            if self.wait():
                job()

        return gated


def enable_async_copies() -> None:
    """Let Keras variables take part in TensorFlow's asynchronous checkpoints."""
    patch_variable_copy_to_cpu(copy_keras_variable_to_cpu)


def supports_async(strategy: Any) -> bool:
    """Whether `strategy`'s variables can be saved by TensorFlow's async checkpoint thread.

    Not under ParameterServerStrategy: the variables live on the ps tasks, and the async
    helper's host copies would be made on the coordinator (unsupported there); it saves
    synchronously. Under MultiWorkerMirroredStrategy every worker makes the copies, at
    the same step of the same call (a sync-on-read variable's copy is read across the
    workers), and only the chief writes them (`PeriodicCheckpoint`).
    """
    if strategy is None:
        return True
    return not isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


class CallGate:
    """Open while the training thread waits on TensorFlow: background Python waits for it.

    Between two train calls the training thread runs Python (callbacks, savers) and
    needs the GIL; inside a call it holds none. A background thread that runs Python
    (the checkpoint writer) starts its work when the gate is open, so it competes with
    TensorFlow's threads rather than with the training thread's hooks. The controller
    opens it around every train call; a thread that waits for the background work
    (`sync`) opens it too, so that nothing waits on a closed gate.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._open = 0

    def open(self) -> None:
        with self._condition:
            self._open += 1
            self._condition.notify_all()

    def close(self) -> None:
        with self._condition:
            self._open -= 1

    def wait(self, timeout: float) -> None:
        """Return when the gate is open, or after `timeout` seconds at the latest."""
        with self._condition:
            self._condition.wait_for(lambda: self._open > 0, timeout)


# The process's gate: open during train calls (`Controller`).
TRAIN_CALLS = CallGate()
