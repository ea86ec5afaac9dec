"""A `keras.utils.PyDataset` given to `fit` (Keras's `PyDatasetAdapter`), as a dataset.

It is read through `tf.data.Dataset.from_generator` in this process: one input pipeline
(the replicas share one stream, and `on_epoch_end` runs once a pass). Its items are the
steps' global batches, a partial last one included, and `shuffle` reads them in a new
order every pass, as in Keras's `fit` (`PyDatasetSource`: the order drawn from
`runtime.seed` and the pass, so a resumed run reads the same batches); an item that
raises is one line naming `x` and the index.
"""

from __future__ import annotations

import itertools
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

__all__ = [
    "PyDatasetSource",
    "batch_count",
    "endless_items",
    "from_pydataset",
    "is_endless",
    "item",
]


def batch_count(data: keras.utils.PyDataset) -> int:
    """Its batches: Keras's `num_batches` (its own, or `len`), as Keras's adapter reads it.

    Raises:
        ConfigError: naming `x`, for a `PyDataset` without end (`num_batches` is `None`)
            or with neither `num_batches` nor `__len__`.
    """
    try:
        count = data.num_batches
    except NotImplementedError:
        raise ConfigError(
            "x",
            f"{type(data).__name__} has neither num_batches nor __len__",
            hint="define the num_batches property (the batches of one epoch)",
        ) from None
    if count is None:
        raise ConfigError(
            "x",
            f"{type(data).__name__} has no end (num_batches is None)",
            hint="give num_batches a count",
        )
    return int(count)


def is_endless(data: keras.utils.PyDataset) -> bool:
    """Whether `data` has no end (`num_batches` is `None`): Keras reads `data[0]`,
    `data[1]`, ... until a callback or `steps_per_epoch` stops it."""
    try:
        return data.num_batches is None
    except NotImplementedError:
        return False


def endless_items(data: keras.utils.PyDataset) -> Iterator[Any]:
    """The items of a `PyDataset` without end, in index order (Keras's
    `PyDatasetAdapter._infinite_generator`), read as a generator is."""
    for index in itertools.count():
        yield item(data, index)


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


class PyDatasetSource(BatchedSource):
    """A `PyDataset`'s items as the steps' global batches (`BatchedSource`), each pass in
    index order, or shuffled as Keras's `PyDatasetAdapter` shuffles them.

    Args:
        data: the `PyDataset`.
        first: its first item, as `from_generator` yields it (the signature).
        **kwargs: as `BatchedSource`.
    """

    iterator_ahead = False  # its order is kdist's own, by pass number

    def __init__(self, *, data: keras.utils.PyDataset, first: tuple[Any, ...], **kwargs: Any):
        super().__init__(**kwargs)
        self._data, self._first = data, first
        self._next_pass = 0  # the pass `epoch_batches`'s next iteration reads

    def _order(self, number: int, *, seed: int, shuffle: bool) -> np.ndarray:
        count = batch_count(self._data)
        if not shuffle:
            return np.arange(count)
        return np.random.default_rng([int(seed) % 2**32, int(number)]).permutation(count)

    def epoch_batches(self, first_step: int, *, seed: int, shuffle: bool) -> tf.data.Dataset:
        """One pass a fresh iterator reads each epoch, the pass after the last one (from
        the resumed step's pass on), in its order (`train_batches`); `on_epoch_end` is
        the runner's, at each epoch's end, as Keras's adapter calls it."""
        data = self._data
        self._next_pass = int(first_step) // batch_count(data)

        def one_pass() -> Iterator[Any]:
            number, self._next_pass = self._next_pass, self._next_pass + 1
            for index in self._order(number, seed=seed, shuffle=shuffle):
                yield item(data, int(index))

        return stream_dataset(one_pass, self._first)

    def on_epoch_end(self) -> None:
        self._data.on_epoch_end()

    def train_batches(
        self, global_batch_size: int, *, seed: int, shuffle: bool, first_step: int
    ) -> tf.data.Dataset:
        """The items from `first_step` on: pass `p` in the order
        `default_rng([seed, p]).permutation(len)` with `shuffle`, else in index order;
        `on_epoch_end` after each pass. The resumed pass's first items are read and
        skipped."""
        del global_batch_size  # the items bring their batches
        data, count = self._data, batch_count(self._data)
        first_pass, within = divmod(int(first_step), count)

        def one_pass(number: Any) -> Iterator[Any]:
            for index in self._order(int(number), seed=seed, shuffle=shuffle):
                yield item(data, int(index))
            data.on_epoch_end()

        first = self._first
        passes = tf.data.Dataset.range(first_pass, 2**62)
        ds = passes.flat_map(lambda number: stream_dataset(one_pass, first, args=(number,)))
        return ds.skip(within) if within else ds


def from_pydataset(data: keras.utils.PyDataset, *, validation: Any, shuffle: bool = False) -> Given:
    batches = batch_count(data)
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
    source = PyDatasetSource(
        data=data,
        first=first,
        batches=stream,
        steps=batches,
        train=stream.unbatch(),
        train_size=size,
        validation=val_ds,
        validation_size=val_size,
        classes=classes,
    )
    return Given(source, "PyDataset", batch, shuffle, one_pipeline=True)
