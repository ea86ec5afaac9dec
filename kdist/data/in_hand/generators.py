"""A Python generator given to `fit` (Keras's `GeneratorDataAdapter`), as a dataset.

It is read through `tf.data.Dataset.from_generator` in this process: one input pipeline
(the replicas share one stream). Its batches are the steps' global batches, a partial
one included, as in Keras's `fit` (`BatchedSource`); it runs once, so `steps_per_epoch`
says how many make an epoch, or, left out, kdist reads it to its end before training (an
epoch is all its batches, as Keras's `fit` runs it to its end). Strategies whose workers
build their own input pipeline (multi-worker, parameter servers) cannot read it
(`kdist.data.in_hand.dispatch` refuses it).
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.given_pipeline import OPEN_EPOCH
from kdist.data.in_hand.arrays import as_tuple
from kdist.data.in_hand.datasets import BatchedSource, batch_size_of, validation_dataset
from kdist.data.in_hand.raised import remember
from kdist.data.in_hand.source import Given, count_classes

__all__ = ["from_generator", "stream_dataset", "structured"]

log = logging.getLogger(__name__)


@functools.cache
def none_spec() -> Any:
    """tf.data's spec of a `None` in an element (an optional input left out)."""
    return tf.data.Dataset.from_tensors((0, None)).element_spec[1]


def as_tf_sparse(value: Any) -> Any:
    """A SciPy sparse matrix as a `tf.SparseTensor` (as Keras's data adapters read it);
    anything else as it is."""
    if not hasattr(value, "tocoo") or isinstance(value, (np.ndarray, tf.Tensor)):
        return value
    coo = value.tocoo()
    indices = np.stack([coo.row, coo.col], axis=1).astype(np.int64)
    return tf.sparse.reorder(tf.SparseTensor(indices, coo.data, coo.shape))


def signature_of(batch: tuple[Any, ...]) -> Any:
    def spec(value: Any) -> Any:
        if value is None:  # an optional input left out: tf.data carries it
            return none_spec()
        if isinstance(value, tf.SparseTensor):  # kept sparse, as Keras's fit keeps it
            return tf.SparseTensorSpec((None, *value.shape[1:]), value.dtype)
        array = np.asarray(value)
        dtype = tf.float32 if np.issubdtype(array.dtype, np.floating) else array.dtype
        return tf.TensorSpec((None, *array.shape[1:]), tf.as_dtype(dtype))

    return tf.nest.map_structure(spec, batch)


def structured(batch: Any) -> tuple[Any, ...]:
    """A batch as `from_generator` yields it: a tuple, dicts kept, lists made tuples,
    SciPy sparse matrices as `tf.SparseTensor`s."""
    parts = tuple(tuple(p) if isinstance(p, list) else p for p in as_tuple(batch))
    return tf.nest.map_structure(as_tf_sparse, parts)


def stream_dataset(
    make: Callable[..., Iterator[Any]], first: tuple[Any, ...], args: Any = None
) -> tf.data.Dataset:
    """The batches `make(*args)` yields, as a dataset of the first batch's signature
    (`args`: tensors `from_generator` passes on, as NumPy values)."""
    signature = signature_of(first)

    def generate(*given: Any) -> Iterator[Any]:
        index = 0
        try:
            for batch in make(*given):
                yield tf.nest.map_structure(
                    lambda v, s: (
                        v
                        if isinstance(s, (tf.SparseTensorSpec, type(none_spec())))
                        else np.asarray(v, s.dtype.as_numpy_dtype)
                    ),
                    structured(batch),
                    signature,
                )
                index += 1
        # TensorFlow wraps what a generator raises: `data_errors` says it once instead.
        except ConfigError as error:
            raise remember(error) from None
        except Exception as error:
            lines = str(error).strip().splitlines()
            raise remember(
                ConfigError(
                    "x",
                    f"the generator raised {type(error).__name__} at batch {index}"
                    + (f": {lines[0]}" if lines else ""),
                    hint="fix the generator",
                )
            ) from None

    return tf.data.Dataset.from_generator(generate, args=args, output_signature=signature)


# The batches a generator without `steps_per_epoch` may yield: kdist reads it to its end
# before training (Keras's `fit` reads it to its end as it trains), so one without end
# must not fill the memory.
MAX_READ_BATCHES = 10_000


def from_generator(stream: Iterator[Any], *, validation: Any, steps_per_epoch: int | None) -> Given:
    try:
        first = structured(next(stream))
    except StopIteration:
        raise ConfigError("x", "is a generator that yields nothing") from None
    batch = batch_size_of(first, "x")
    rest: Iterator[Any] = itertools.chain([first], stream)
    if not steps_per_epoch:
        # Keras's `fit` runs a generator without `steps_per_epoch` to its end: an epoch
        # is all of its batches. kdist needs the epoch's length before training: it reads
        # them all first.
        read = [first, *itertools.islice(stream, MAX_READ_BATCHES)]
        if len(read) > MAX_READ_BATCHES:
            # Longer, or without end: one epoch of unknown length, as Keras's `fit`
            # reads it, until it ends or a callback stops training.
            log.info(
                "x: a generator of more than %d batches and no steps_per_epoch: streamed, "
                "one epoch until it ends (or a callback stops training)",
                MAX_READ_BATCHES,
            )
            return _streamed(itertools.chain(read, stream), read[0], batch, validation)
        log.info("x: a generator of %d batches, read to its end (no steps_per_epoch)", len(read))
        return _read_to_its_end(read, batch, validation)
    return _streamed(rest, first, batch, validation, steps_per_epoch=int(steps_per_epoch))


def _streamed(
    rest: Iterator[Any],
    first: tuple[Any, ...],
    batch: int,
    validation: Any,
    *,
    steps_per_epoch: int | None = None,
) -> Given:
    """A generator's batches read as they come: `steps_per_epoch` an epoch, or (`None`)
    one epoch of unknown length (`OPEN_EPOCH` steps, ended by the data's end)."""
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
    batches = stream_dataset(once, first)
    steps = OPEN_EPOCH if steps_per_epoch is None else steps_per_epoch
    source = BatchedSource(
        batches=batches,
        steps=steps,
        train=batches.unbatch(),
        train_size=steps * batch,
        validation=val_ds,
        validation_size=val_size,
        classes=classes,
    )
    if steps_per_epoch is None:
        source.open_ended = True
        source.iterator_ahead = False  # a stream has no second pass to make ahead
    return Given(source, "generator", batch, False, one_pipeline=True, endless=True)


def _read_to_its_end(read: list[Any], batch: int, validation: Any) -> Given:
    """A generator's batches, all read: each epoch reads them once, in their order.

    Keras's `fit` reads the generator once, so its later epochs find it empty; kdist's
    later epochs read the same batches again.
    """
    batches = stream_dataset(lambda: iter(read), read[0])
    val_ds, val_size = validation_dataset(validation)
    source = BatchedSource(
        batches=batches,
        steps=len(read),
        train=batches.unbatch(),
        train_size=sum(batch_size_of(structured(b), "x") for b in read),
        validation=val_ds,
        validation_size=val_size,
        classes=lambda: count_classes(tf.data.Dataset.from_tensor_slices(read[0])),
    )
    return Given(source, "generator", batch, False, one_pipeline=True)
