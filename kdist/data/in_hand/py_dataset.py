"""A `keras.utils.PyDataset` given to `fit` (Keras's `PyDatasetAdapter`), as a dataset.

It is read through `tf.data.Dataset.from_generator` in this process: one input pipeline
(the replicas share one stream, and `on_epoch_end` runs once a pass). Its items are the
steps' global batches, a partial last one included, as in Keras's `fit`
(`BatchedSource`); an item that raises is one line naming `x` and the index.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.in_hand.arrays import as_tuple
from kdist.data.in_hand.datasets import BatchedSource, batch_size_of, validation_dataset
from kdist.data.in_hand.generators import stream_dataset, structured
from kdist.data.in_hand.source import Given, count_classes

__all__ = ["from_pydataset", "item"]


def item(data: keras.utils.PyDataset, index: int) -> Any:
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
    first = structured(item(data, 0))
    batch = batch_size_of(first, "x")
    size = (batches - 1) * batch + batch_size_of(structured(item(data, batches - 1)), "x")

    def one_pass() -> Iterator[Any]:
        for index in range(batches):
            yield item(data, index)
        data.on_epoch_end()

    def classes() -> int:
        # The batches' targets, read without a pass of the stream (no on_epoch_end).
        targets = [as_tuple(data[i])[1:2] for i in range(batches)]
        if not all(targets):
            return 0
        labels = np.concatenate([np.asarray(t[0]) for t in targets])
        return count_classes(tf.data.Dataset.from_tensor_slices((labels, labels)))

    val_ds, val_size = validation_dataset(validation)
    stream = stream_dataset(one_pass, first)
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
