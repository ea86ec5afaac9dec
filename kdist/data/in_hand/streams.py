"""A `keras.utils.PyDataset` or a Python generator given to `fit`, as a dataset.

Both are read through `tf.data.Dataset.from_generator` in this process: one input
pipeline (so the replicas share one stream, and `PyDataset.on_epoch_end` runs once a
pass). Their batches are the steps' global batches, a partial last one included, as in
Keras's `fit` (`BatchedSource`). Strategies whose workers build their own input pipeline (multi-worker, parameter
servers) cannot read them (`kdist.data.in_hand.fit_data` refuses them).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.in_hand.arrays import as_tuple
from kdist.data.in_hand.datasets import BatchedSource, batch_size_of, validation_dataset
from kdist.data.in_hand.source import Given, count_classes

__all__ = ["from_generator", "from_pydataset", "structured"]

log = logging.getLogger(__name__)


def _signature(batch: tuple[Any, ...]) -> Any:
    def spec(value: Any) -> tf.TensorSpec:
        array = np.asarray(value)
        dtype = tf.float32 if np.issubdtype(array.dtype, np.floating) else array.dtype
        return tf.TensorSpec((None, *array.shape[1:]), tf.as_dtype(dtype))

    return tf.nest.map_structure(spec, batch)


def structured(batch: Any) -> tuple[Any, ...]:
    """A batch as `from_generator` yields it: a tuple, dicts kept, lists made tuples."""
    return tuple(tuple(p) if isinstance(p, list) else p for p in as_tuple(batch))


def _stream_dataset(make: Callable[[], Iterator[Any]], first: tuple[Any, ...]) -> tf.data.Dataset:
    signature = _signature(first)

    def generate() -> Iterator[Any]:
        for batch in make():
            yield tf.nest.map_structure(
                lambda v, s: np.asarray(v, s.dtype.as_numpy_dtype), structured(batch), signature
            )

    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def _item(data: keras.utils.PyDataset, index: int) -> Any:
    """`data[index]`, or one line naming `x`, the index and what it raised."""
    try:
        return data[index]
    except Exception as error:
        lines = str(error).strip().splitlines()
        raise ConfigError(
            "x",
            f"{type(data).__name__}[{index}] raised {type(error).__name__}"
            + (f": {lines[0]}" if lines else ""),
            hint="fix its __getitem__",
        ) from None


def from_pydataset(data: keras.utils.PyDataset, *, validation: Any) -> Given:
    batches = len(data)
    if not batches:
        raise ConfigError("x", "is an empty keras.utils.PyDataset (len 0)")
    first = structured(_item(data, 0))
    batch = batch_size_of(first, "x")
    size = (batches - 1) * batch + batch_size_of(structured(_item(data, batches - 1)), "x")

    def one_pass() -> Iterator[Any]:
        for index in range(batches):
            yield _item(data, index)
        data.on_epoch_end()

    def classes() -> int:
        # The batches' targets, read without a pass of the stream (no on_epoch_end).
        targets = [as_tuple(data[i])[1:2] for i in range(batches)]
        if not all(targets):
            return 0
        labels = np.concatenate([np.asarray(t[0]) for t in targets])
        return count_classes(tf.data.Dataset.from_tensor_slices((labels, labels)))

    val_ds, val_size = validation_dataset(validation)
    stream = _stream_dataset(one_pass, first)
    source = BatchedSource(
        batches=stream,
        steps=batches,
        train=stream.unbatch(),
        train_size=size,
        validation=val_ds,
        validation_size=val_size,
        classes=classes,
    )
    return Given(source, "PyDataset", batch, False, one_pipeline=True)


def from_generator(stream: Iterator[Any], *, validation: Any, steps_per_epoch: int | None) -> Given:
    if not steps_per_epoch:
        raise ConfigError(
            "steps_per_epoch",
            "is needed with a generator: it has no length to make epochs of",
            hint="pass steps_per_epoch=N (the generator must yield epochs x N batches)",
        )
    try:
        first = structured(next(stream))
    except StopIteration:
        raise ConfigError("x", "is a generator that yields nothing") from None
    batch = batch_size_of(first, "x")
    rest = itertools.chain([first], stream)
    taken: list[bool] = []

    def once() -> Iterator[Any]:
        # A generator runs once: a second pass (a repeat) finds it empty, as in Keras.
        if taken:
            return iter(())
        taken.append(True)
        return rest

    def classes() -> int:
        # A stream has no end to read to: its first batch tells.
        count = count_classes(tf.data.Dataset.from_tensor_slices(first))
        log.info("x: %d classes, from the generator's first batch", count)
        return count

    val_ds, val_size = validation_dataset(validation)
    stream = _stream_dataset(once, first)
    source = BatchedSource(
        batches=stream,
        steps=int(steps_per_epoch),
        train=stream.unbatch(),
        train_size=int(steps_per_epoch) * batch,
        validation=val_ds,
        validation_size=val_size,
        classes=classes,
    )
    return Given(source, "generator", batch, False, one_pipeline=True)
