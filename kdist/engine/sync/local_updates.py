"""Each replica applies its own gradients: no gradient all-reduce between two averages."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kdist.compat.keras_private import all_reduce_sum_gradients, replace_all_reduce

__all__ = ["install_local_updates"]


# Each optimizer's sum from before the first install (not an attribute of the optimizer).
_SUMS: weakref.WeakKeyDictionary[Any, Callable[..., Any]] = weakref.WeakKeyDictionary()


def install_local_updates(optimizer: Any, reducing: Callable[[], bool]) -> None:
    """Make `optimizer` skip the cross-replica gradient sum while `reducing()` is false.

    Keras's TensorFlow optimizer sums the replicas' gradients (`_all_reduce_sum_gradients`)
    and then updates each replica's copy of a mirrored variable with the sum, through
    `strategy.extended.update`. Without the sum each copy is updated with its own
    replica's gradient: the replicas' weights (and optimizer slots) drift apart until
    `WeightAverager` averages them. Keras scales each replica's loss by
    `1 / num_replicas_in_sync` for the sum; the local gradient is multiplied back, so a
    replica steps as one device on its share of the batch, and `local_sgd` with
    `sync_every=1` and plain SGD makes the `every_step` update.

    `reducing()` is read while the train function is traced: the runner traces one
    function with the sum (warm-up steps) and one without.

    Args:
        optimizer: a Keras optimizer (a `LossScaleOptimizer`'s inner one is changed).
        reducing: whether steps traced now all-reduce their gradients.
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    # The sum in place before the first install (Keras's, or the 16-bit one of
    # `kdist.strategies.compression`): a second runner of the same optimizer wraps it
    # again, not its own wrapper.
    summed = _SUMS.get(inner)
    if summed is None:
        summed = _SUMS[inner] = all_reduce_sum_gradients(inner)

    def all_reduce_sum(grads_and_vars: Any) -> list[tuple[Any, Any]]:
        if reducing():
            return list(summed(grads_and_vars))
        context = tf.distribute.get_replica_context()
        pairs = list(grads_and_vars)
        if context is None:
            return pairs
        replicas = context.num_replicas_in_sync
        return [(_times(g, replicas), v) for g, v in pairs]

    replace_all_reduce(inner, all_reduce_sum)


def _times(gradient: Any, factor: int) -> Any:
    if gradient is None or factor == 1:
        return gradient
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * factor, gradient.indices, gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)
