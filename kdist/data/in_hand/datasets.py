"""A `tf.data.Dataset` given to `fit`: batched or not, counted, and its source.

A batched dataset is taken as Keras's `fit` takes it (`TFDatasetAdapter`): each of its
batches is one step's global batch, split over the replicas as `tf.distribute` splits
it, in its own order, a partial last batch included (`BatchedSource`). A dataset of
single examples (which Keras would read as batches) is kdist's own convenience: it is
batched per replica and shuffled like config data, full batches only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from kdist.compat.keras_private import batch_op_size
from kdist.compat.tf_private import dataset_inputs
from kdist.config.errors import ConfigError
from kdist.data.given_pipeline import ENDLESS
from kdist.data.in_hand.arrays import length
from kdist.data.in_hand.source import DatasetSource, Given

__all__ = [
    "BatchedSource",
    "StreamedValidation",
    "batch_size_of",
    "count_examples",
    "from_dataset",
    "is_batched",
    "validation_dataset",
]

log = logging.getLogger(__name__)

_BATCHING = ("BatchDataset", "PaddedBatch", "RebatchDataset", "DenseToRagged")


def is_batched(ds: tf.data.Dataset) -> bool:
    """Whether `ds`'s elements are batches: the nearest batch or unbatch op decides.

    Without either, a leading dimension of unknown size in every element (what
    `batch` without `drop_remainder` gives) is taken for a batch.
    """
    seen: list[Any] = [ds]
    while seen:
        node = seen.pop()
        name = type(node).__name__
        if "Unbatch" in name:
            return False
        if any(marker in name for marker in _BATCHING):
            return True
        seen.extend(d for d in dataset_inputs(node) if isinstance(d, tf.data.Dataset))
    shapes = [s.shape for s in tf.nest.flatten(ds.element_spec) if hasattr(s, "shape")]
    return bool(shapes) and all(s.rank and s[0] is None for s in shapes)


def count_examples(ds: tf.data.Dataset, name: str) -> int:
    """Examples in one pass over an unbatched `ds` (one pass when TensorFlow cannot tell)."""
    return _count(ds, name, per_element=lambda *_: tf.constant(1, tf.int64))


def count_batches(batches: tf.data.Dataset, name: str) -> tuple[int, int]:
    """Batches and examples in one pass over a batched dataset whose cardinality
    TensorFlow cannot tell, in one reading of it; the examples are the rows of each
    batch's first component (a zip of datasets batched by different sizes cannot be
    unbatched, as in keras.io's semi-supervised SimCLR, and `fit` never unbatches it).

    Keras would find the number of batches when the first epoch runs out; kdist's
    controller needs it before training, so this dataset is read once before it.
    """
    if int(batches.cardinality()) == tf.data.INFINITE_CARDINALITY:
        _count(batches, name, per_element=None)  # refused in one line, naming `name`
    log.info("%s: counting the dataset's batches (one pass; steps_per_epoch skips it)", name)

    def add(state: tuple[tf.Tensor, tf.Tensor], *batch: Any) -> tuple[tf.Tensor, tf.Tensor]:
        rows = tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0]
        return state[0] + 1, state[1] + rows

    zero = tf.constant(0, tf.int64)
    steps, rows = batches.reduce((zero, zero), add)
    return int(steps), int(rows)


def _count(ds: tf.data.Dataset, name: str, *, per_element: Any, cardinality: bool = True) -> int:
    known = int(ds.cardinality())
    if known == tf.data.INFINITE_CARDINALITY:
        raise ConfigError(
            name,
            "is a dataset without end (repeat())",
            hint="pass steps_per_epoch, or drop the repeat(): kdist repeats it"
            if name == "x"
            else "drop the repeat(): validation reads it once",
        )
    if cardinality and known >= 0:
        return known
    log.info("%s: counting the dataset's examples (one pass; steps_per_epoch skips it)", name)
    return int(ds.reduce(tf.constant(0, tf.int64), lambda n, *e: n + per_element(*e)))


def static_batch_size(ds: tf.data.Dataset) -> int | None:
    """The batch of a batched dataset's elements, from its spec when it fixes it, else
    from its batch op (`batch_op_size`), else `None`, without reading it."""
    sizes = {s.shape[0] for s in tf.nest.flatten(ds.element_spec) if getattr(s, "shape", None)}
    size = sizes.pop() if len(sizes) == 1 else None
    return int(size) if size else batch_op_size(ds)


def batch_size_of(first: Any, name: str) -> int:
    leaves = [np.shape(a) for a in tf.nest.flatten(first) if a is not None]  # None: left out
    if not leaves or not leaves[0]:
        raise ConfigError(name, "yields elements without a batch axis")
    return int(leaves[0][0])


@dataclass(frozen=True)
class StreamedValidation:
    """A generator given as `validation_data` with `validation_steps`: each validation
    reads its next `validation_steps` batches, as Keras's `fit` reads it (its iterator
    goes on where the last validation stopped).

    Args:
        batches: the generator's batches, as a dataset every iteration of which reads on.
    """

    batches: tf.data.Dataset


def validation_dataset(validation: Any) -> tuple[tf.data.Dataset | None, int]:
    """The validation examples and how many: `ENDLESS` for a dataset without end, which
    is read only with `validation_steps` (refused without, before training)."""
    if validation is None:
        return None, 0
    if isinstance(validation, StreamedValidation):
        return validation.batches.unbatch(), ENDLESS
    if isinstance(validation, tf.data.Dataset):
        if int(validation.cardinality()) == tf.data.INFINITE_CARDINALITY:
            return validation, ENDLESS
        return validation, count_examples(validation, "validation_data")
    parts = tuple(p for p in validation if p is not None)
    return tf.data.Dataset.from_tensor_slices(parts), length(parts[0])


class BatchedSource(DatasetSource):
    """Batches given to `fit` (a batched dataset, a `PyDataset`, a generator): each one
    step's global batch, in the data's own order, every pass from its start.

    Without `steps_per_epoch`, an epoch is one pass read by an iterator of its own, as
    Keras's `EpochIterator` makes one each epoch (`epoch_batches`, `on_epoch_end`);
    with it, the passes follow each other in one stream (`train_batches`).

    Args:
        batches: the batches of one pass (a generator's: all it yields).
        steps: batches in one pass, or `None` to count them when asked.
        **kwargs: as `DatasetSource` (`train`: the same examples, unbatched).
    """

    partial_batches = True
    # The next pass's iterator is made as soon as a pass is read, as Keras's
    # `EpochIterator` does (`kdist.data.given_pipeline.partial_dataset_fn`).
    iterator_ahead = True
    # An epoch of unknown length (`OPEN_EPOCH`): a generator read until it ends.
    open_ended = False

    def __init__(self, *, batches: tf.data.Dataset, steps: int | None, **kwargs: Any):
        super().__init__(**kwargs)
        self._batches = batches
        self._steps = steps

    def steps_per_pass(self, global_batch_size: int) -> int:
        """Batches in one pass (`global_batch_size` plays no part: the data brings them)."""
        if self._steps is None:
            cardinality = int(self._batches.cardinality())
            if cardinality < 0:
                log.info("x: counting the batches of one pass (steps_per_epoch skips it)")
                cardinality = int(
                    self._batches.reduce(tf.constant(0, tf.int64), lambda n, *_: n + 1)
                )
            self._steps = cardinality
        return self._steps

    def train_batches(
        self, global_batch_size: int, *, seed: int, shuffle: bool, first_step: int
    ) -> tf.data.Dataset:
        """The batches from `first_step` on: the data read again every pass, and the
        steps already taken skipped (the data's own order must be deterministic for a
        resumed run to read the same batches)."""
        del global_batch_size, seed, shuffle  # the data brings its batches, in its order
        ds = self._batches.repeat()
        return ds.skip(first_step) if first_step else ds

    def epoch_batches(self, first_step: int, *, seed: int, shuffle: bool) -> tf.data.Dataset:
        """One pass, to be iterated afresh every epoch (the same dataset each time, so a
        seeded `shuffle(reshuffle_each_iteration=True)` draws fit's order each pass).
        The runner skips a resumed epoch's first steps (`first_step` plays no part)."""
        del first_step, seed, shuffle
        return self._batches

    def on_epoch_end(self) -> None:
        """What the data does when an epoch ends (a `PyDataset`'s `on_epoch_end`)."""


def from_dataset(
    ds: tf.data.Dataset,
    *,
    validation: Any,
    batch_size: int | None,
    steps_per_epoch: int | None,
    shuffle: bool,
    partial: bool = True,
) -> Given:
    batched = is_batched(ds)
    global_batch = batch_size
    if batched:
        if batch_size is not None:
            raise ConfigError(
                "batch_size",
                "must not be given with a batched tf.data.Dataset: its batches are the "
                "global batch, split over the replicas (as in Keras)",
                value=batch_size,
                hint="leave it out, or pass the dataset unbatched",
            )
        # Keras reads nothing before training: the batch is the spec's when it says
        # (else the configured one stands for it: it only counts the steps).
        global_batch = static_batch_size(ds)
        batches, ds = ds, ds.unbatch()
    steps = int(batches.cardinality()) if batched else -1
    if steps_per_epoch:
        size = int(steps_per_epoch) * int(global_batch or 1)
        if int(ds.cardinality()) >= 0:
            size = min(size, int(ds.cardinality()))
    elif batched and steps >= 0:
        # Known from the dataset's cardinality, without a pass (as Keras's adapter).
        size = steps * int(global_batch or 1)
    elif batched:
        steps, size = count_batches(batches, "x")
    else:
        size = count_examples(ds, "x")
    if size < 1:
        raise ConfigError("x", "is an empty tf.data.Dataset")
    val_ds, val_size = validation_dataset(validation)
    source: DatasetSource
    if batched and partial:
        source = BatchedSource(
            batches=batches,
            steps=steps if steps >= 0 else None,
            train=ds,
            train_size=size,
            validation=val_ds,
            validation_size=val_size,
        )
    else:
        source = DatasetSource(
            train=ds, train_size=size, validation=val_ds, validation_size=val_size
        )
    kind = "batched dataset" if batched else "dataset"
    endless = int((batches if batched else ds).cardinality()) == tf.data.INFINITE_CARDINALITY
    return Given(
        source, kind, global_batch, shuffle and not batched, one_pipeline=True, endless=endless
    )
