"""`fit`'s `class_weight` as a map over the input pipeline: each example's (or each
batch row's) sample weight times its class's weight, by Keras's rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from kdist.config.errors import ConfigError

__all__ = ["batch_class_weighting", "class_weighting"]


def class_weighting(class_weight: Mapping[int, float]) -> Callable[..., Any]:
    """A map from `(x, y[, w])` to `(x, y, w * class_weight[class of y])`, as Keras's `fit`.

    The class of a target is its value for class ids, and its argmax for one-hot rows.
    Every class id from 0 to the largest key needs a weight, as in Keras.
    """
    size = max(class_weight) + 1
    missing = [i for i in range(size) if i not in class_weight]
    if missing:
        raise ConfigError(
            "trainer.class_weight",
            f"has no weight for class {missing[0]}",
            hint=f"give a weight for every class id 0..{size - 1}",
        )
    table = tf.constant([class_weight[i] for i in range(size)], tf.float32)

    def weigh(*example: Any) -> Any:
        if len(example) not in (2, 3) or isinstance(example[1], Mapping):
            raise ConfigError(
                "trainer.class_weight",
                "needs one target per example (not several outputs)",
                hint="use sample weights (data.source.weight_key) for several outputs",
            )
        x, y = example[0], example[1]
        if y.shape.rank and y.shape[-1] > 1:
            classes = tf.argmax(y, axis=-1, output_type=tf.int32)
        else:
            classes = tf.cast(tf.round(tf.reshape(y, [-1])[0] if y.shape.rank else y), tf.int32)
        weight = tf.gather(table, classes)
        if len(example) == 3:
            weight = weight * tf.cast(example[2], tf.float32)
        return x, y, weight

    return weigh


def batch_class_weighting(class_weight: Mapping[int, float]) -> Callable[..., Any]:
    """`class_weighting` for batches: each row's weight times its class's weight."""
    size = max(class_weight) + 1
    table = tf.constant([class_weight.get(i, 1.0) for i in range(size)], tf.float32)

    def weigh(*batch: Any) -> Any:
        if len(batch) not in (2, 3) or isinstance(batch[1], Mapping):
            raise ConfigError(
                "class_weight",
                "needs one target per example (not several outputs), as in Keras",
                hint="use sample weights for several outputs",
            )
        x, y = batch[0], batch[1]
        if y.shape.rank and y.shape.rank > 1 and y.shape[-1] != 1:
            classes = tf.argmax(y, axis=-1, output_type=tf.int32)
        else:
            classes = tf.cast(tf.round(tf.reshape(y, [-1])), tf.int32)
        weight = tf.gather(table, classes)
        if len(batch) == 3:
            weight = weight * tf.cast(tf.reshape(batch[2], tf.shape(weight)), tf.float32)
        return x, y, weight

    return weigh
