"""Keras variables in TensorFlow's asynchronous checkpoints, and which strategies allow them.

Keras 3.15.1's TensorFlow `Variable` cannot take part in TensorFlow's async checkpoint
copies as it is: `enable_async_copies` patches its host copy once per process, through
`kdist.compat.keras_private.patch_variable_copy_to_cpu`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from kdist.compat.keras_private import patch_variable_copy_to_cpu
from kdist.compat.tf_private import copy_trackable_to_cpu

__all__ = ["copy_keras_variable_to_cpu", "enable_async_copies", "supports_async"]


def copy_keras_variable_to_cpu(self: Any, object_map: dict[Any, Any]) -> None:
    """`_copy_trackable_to_cpu` for a Keras 3 TensorFlow variable that can run twice.

    Keras 3.15.1 (its TensorFlow backend's `Variable`) makes a new `tf.Variable` for
    the host copy at every call; TensorFlow's async checkpoint helper calls it inside a
    `tf.function` at every save after the first, which fails ("tf.function only supports
    singleton tf.Variables created on the first call"). This one creates the copy once
    and assigns to it afterwards, as `ResourceVariable._copy_trackable_to_cpu` does.
    """
    copy_trackable_to_cpu(self.value, object_map)
    if self in object_map:
        object_map[self].assign(object_map[self.value])
    else:
        object_map[self] = tf.Variable(object_map[self.value])


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
