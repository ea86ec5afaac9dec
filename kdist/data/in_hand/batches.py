"""Data given to `evaluate` or `predict` in Python, as the global batches Keras reads.

As `model.evaluate`/`model.predict` take it: NumPy arrays (or a dict, list or tuple of
them) are read in order `batch_size` at a time (32 when not given), the last batch
partial; a batched `tf.data.Dataset` gives its own batches; a `keras.utils.PyDataset`
its items; a generator its batches (with `steps`). `steps` reads that many batches.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.in_hand.arrays import as_arrays, length
from kdist.data.in_hand.datasets import is_batched
from kdist.data.in_hand.fit_data import is_stream
from kdist.data.in_hand.streams import _item, structured

__all__ = ["given_batches"]

DEFAULT_BATCH = 32  # Keras's default `batch_size` for arrays


def given_batches(
    x: Any,
    y: Any = None,
    *,
    sample_weight: Any = None,
    batch_size: int | None = None,
    steps: int | None = None,
) -> tf.data.Dataset:
    """The global batches of `evaluate(x, y, ...)` or `predict(x, ...)`, in order.

    Args:
        x: arrays (or a structure of them), a `tf.data.Dataset`, a
            `keras.utils.PyDataset` or a generator.
        y: targets of arrays `x`. Defaults to `None`.
        sample_weight: per-example weights of arrays `x`. Defaults to `None`.
        batch_size: rows per batch of arrays (or of a dataset of single examples).
            Defaults to `None`: 32, as in Keras.
        steps: batches to read. Defaults to `None`: all of them.

    Returns:
        A `tf.data.Dataset` of batches `x`, `(x, y)` or `(x, y, sample_weight)`.

    Raises:
        ConfigError: naming the argument for data that cannot be read.
    """
    for name, value in (("batch_size", batch_size), ("steps", steps)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ConfigError(name, "must be a positive integer", value=value)
    made = isinstance(x, (tf.data.Dataset, keras.utils.PyDataset)) or is_stream(x)
    if made:
        for name, value in (("y", y), ("sample_weight", sample_weight)):
            if value is not None:
                raise ConfigError(
                    name,
                    f"must not be given with a {type(x).__name__}: its elements carry "
                    "(x, y[, sample_weight]), as in Keras",
                )
    if isinstance(x, tf.data.Dataset):
        ds = x if is_batched(x) else x.batch(batch_size or DEFAULT_BATCH)
    elif isinstance(x, keras.utils.PyDataset):
        count = len(x)
        if not count:
            raise ConfigError("x", "is an empty keras.utils.PyDataset (len 0)")
        items = [structured(_item(x, i)) for i in range(count if steps is None else steps)]
        ds = _from_batches(items)
    elif is_stream(x):
        if steps is None:
            raise ConfigError("steps", "is needed with a generator: it has no length")
        ds = _from_batches([structured(next(x)) for _ in range(steps)])
    else:
        if x is None:
            raise ConfigError("x", "is missing: give the data to evaluate or predict on")
        parts = [as_arrays(x, "x")]
        if y is not None:
            parts.append(as_arrays(y, "y"))
        if sample_weight is not None:
            if y is None:
                raise ConfigError("sample_weight", "needs targets: give y too")
            parts.append(as_arrays(sample_weight, "sample_weight"))
        count = length(parts[0])
        if count < 1:
            raise ConfigError("x", "has no examples (0 rows)")
        for name, part in zip(("y", "sample_weight"), parts[1:], strict=False):
            if length(part) != count:
                raise ConfigError(
                    name, f"has {length(part)} examples, x has {count}", hint="one row each"
                )
        # `(x,)`: a tuple of inputs is never read as `(x, y)`.
        ds = tf.data.Dataset.from_tensor_slices(tuple(parts)).batch(batch_size or DEFAULT_BATCH)
    if steps is not None and not isinstance(x, keras.utils.PyDataset) and not is_stream(x):
        ds = ds.take(steps)
    return ds


def _from_batches(batches: list[Any]) -> tf.data.Dataset:
    """Python batches (tuples of arrays) as a dataset of those batches, in order."""
    if not batches:
        raise ConfigError("x", "yields no batches")
    first = batches[0]
    ds = tf.data.Dataset.from_tensors(first[0] if len(first) == 1 else first)
    for batch in batches[1:]:
        ds = ds.concatenate(tf.data.Dataset.from_tensors(batch[0] if len(batch) == 1 else batch))
    return ds
