"""One set of host copies of a checkpoint's variables, and a save waiting for its copy."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kdist.compat.tf_private import (
    helper_copy_function,
    helper_device,
    helper_host_variables,
    initialize_helper,
)

__all__ = ["Deferred", "HostCopies"]


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

        # TensorFlow's copy function, as plain Python: in a runner's train function it
        # adds its ops there instead of a nested function call.
        copy_to_cpu = helper_copy_function(helper)

        def body(steps: tf.Tensor) -> tf.Tensor:
            prepare(steps)
            copy_to_cpu(helper)
            checks = [tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(w))) for w in floating]
            return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)

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
    """A save whose host copy the runner's next call makes (`HostWriter.defer`)."""

    def __init__(self, copies: HostCopies, steps: int):
        self.copies = copies
        self.steps = steps
        # `(job, writes the copies)`, queued in this order once the copy is made.
        self.jobs: list[tuple[Callable[[], None], bool]] = []
