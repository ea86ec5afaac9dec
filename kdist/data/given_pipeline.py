"""The input pipeline of data given to `fit` (`kdist.data.in_hand`): Keras's batches.

A source with `partial_batches` hands the pipeline its own global batches, each pass
ending with its partial batch, as Keras's `fit` trains them; every global batch is cut
over the replicas as `tf.distribute` cuts it for `fit` (`replica_parts`). Config data
goes through `kdist.data.pipeline.make_dataset_fn`, which sends such a source here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from kdist.compat.tf_private import dataset_inputs
from kdist.config.errors import ConfigError
from kdist.data.augment import is_enabled
from kdist.data.class_weighting import batch_class_weighting
from kdist.data.source import Source

__all__ = [
    "ENDLESS",
    "OPEN_EPOCH",
    "own_batches",
    "partial_batches",
    "partial_dataset_fn",
    "replica_parts",
    "replicas_read",
    "validation_batches_fn",
]

_DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]

# The size of a split given as a dataset without end (`repeat()`): validation reads it
# only with `validation_steps` (`kdist.data.pipeline.run_dataset_fn`).
ENDLESS = 2**62

# The steps of an epoch of unknown length: a generator given to `fit` without
# `steps_per_epoch` that kdist does not read ahead (longer than it reads, or without end),
# which Keras's `fit` reads until it ends. Its epoch ends at the data's end
# (`Runner.data_ended`), never at this count (a million years at a step a microsecond);
# small enough that `epochs` of them stay within a 64-bit step count.
OPEN_EPOCH = 2**45


def partial_batches(source: Source) -> bool:
    """Whether `source` hands the pipeline whole global batches, a partial last one of
    each pass over the data included (`train_batches`), as Keras's `fit` trains them."""
    return bool(getattr(source, "partial_batches", False))


def replica_parts(ds: tf.data.Dataset, context: tf.distribute.InputContext) -> tf.data.Dataset:
    """A dataset of global batches as this input pipeline's per-replica batches.

    Each global batch of `m` rows is cut as `tf.distribute` cuts it for Keras's `fit`
    (`experimental_distribute_dataset`): replica `q` gets the rows `[q*c, (q+1)*c)` with
    `c = ceil(m / replicas)`, so a partial batch splits as evenly as it can (25 rows on 2
    replicas: 13 and 12; 1 row: 1 and 0). Pipeline `i` yields the parts of its replicas
    `i*r .. i*r + r - 1` (`r` replicas per pipeline), one element per replica and step,
    so every replica reads the same step's part whatever the batch sizes.
    """
    replicas, pipelines = context.num_replicas_in_sync, context.num_input_pipelines
    if replicas == 1 and pipelines == 1:
        return ds
    per_pipeline = max(replicas // pipelines, 1)
    first = context.input_pipeline_id * per_pipeline

    def parts(*element: Any) -> tf.data.Dataset:
        batch = element if len(element) > 1 else element[0]
        rows = tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0]
        size = (rows + replicas - 1) // replicas
        # A global batch of a static size that the replicas divide gives parts of a static
        # size, as `tf.distribute`'s rebatching gives them to Keras's `fit`: the step is
        # traced with the same shapes, so its graph (and its float rounding) is fit's.
        static = tf.nest.flatten(batch)[0].shape[0]
        whole = static // replicas if static is not None and static % replicas == 0 else None

        def part(j: tf.Tensor) -> Any:
            low = tf.minimum((first + j) * size, rows)
            high = tf.minimum(low + size, rows)

            def cut(t: tf.Tensor) -> tf.Tensor:
                if whole is None or t.shape.rank is None:
                    return t[low:high]
                return tf.ensure_shape(t[low:high], [whole, *t.shape[1:]])

            return tf.nest.map_structure(cut, batch)

        return tf.data.Dataset.range(per_pipeline).map(part)

    return ds.flat_map(parts)


def replicas_read(ds: tf.data.Dataset, context: tf.distribute.InputContext) -> tf.data.Dataset:
    """Global batches as this pipeline's replicas read them (`replica_parts`), in order:
    no auto-sharding (the cut is the sharding), deterministic, prefetched."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = True
    return replica_parts(ds, context).with_options(options).prefetch(tf.data.AUTOTUNE)


def partial_dataset_fn(
    source: Source,
    data_cfg: Any,
    *,
    shuffle: bool,
    global_batch_size: int,
    seed: int,
    skip_examples: int,
    class_weight: Mapping[int, float] | None,
    epoch_passes: bool = False,
) -> _DatasetFn:
    """The training `dataset_fn` of a source with partial batches (`partial_batches`).

    The source yields the global batches of the steps from the resumed one on (each pass
    over the data ends with its partial batch; arrays in an order seeded by `seed` and
    the pass, shuffled when `shuffle` says so); each pipeline takes its replicas' parts of
    every batch (`replica_parts`).

    With `epoch_passes` (no `steps_per_epoch`) and batches given as they are (a dataset
    or a `PyDataset`: `epoch_batches`), the function also carries `epoch_pass`, the
    `dataset_fn` of one pass that a runner iterates afresh each epoch as Keras's
    `EpochIterator` does, and `on_epoch_end`, the data's hook for the epoch's end.
    """
    if is_enabled(data_cfg.get("augment")):
        raise ConfigError(
            "data.augment",
            "does not apply to data given to fit",
            hint="augment in the model (keras.layers.RandomFlip, ...) or in your dataset",
        )
    first_step = skip_examples // global_batch_size

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = source.train_batches(  # type: ignore[attr-defined]
            global_batch_size, seed=seed, shuffle=shuffle, first_step=first_step
        )
        if class_weight:
            ds = ds.map(batch_class_weighting(class_weight), num_parallel_calls=tf.data.AUTOTUNE)
        return replicas_read(ds, context)

    one_pipeline = bool(getattr(source, "one_pipeline", False))
    dataset_fn.one_pipeline = one_pipeline  # type: ignore[attr-defined]
    # Each pipeline reads every global batch and hands each of its replicas a part (maybe
    # empty) of every one: the passes end at the same step on every worker.
    dataset_fn.every_replica_every_step = True  # type: ignore[attr-defined]
    # Read until the data ends (`OPEN_EPOCH`): the runner watches for the end.
    dataset_fn.open_ended = bool(getattr(source, "open_ended", False))  # type: ignore[attr-defined]
    if epoch_passes and hasattr(source, "epoch_batches"):

        def epoch_pass(context: tf.distribute.InputContext) -> tf.data.Dataset:
            ds = source.epoch_batches(first_step, seed=seed, shuffle=shuffle)
            if class_weight:
                weigh = batch_class_weighting(class_weight)
                ds = ds.map(weigh, num_parallel_calls=tf.data.AUTOTUNE)
            return replicas_read(ds, context)

        epoch_pass.one_pipeline = one_pipeline  # type: ignore[attr-defined]
        epoch_pass.every_replica_every_step = True  # type: ignore[attr-defined]
        # Keras makes the next pass's iterator as soon as a pass is read (a dataset's
        # seeded shuffle draws an order then); a PyDataset's order is kdist's own.
        epoch_pass.iterator_ahead = bool(getattr(source, "iterator_ahead", False))  # type: ignore[attr-defined]
        dataset_fn.epoch_pass = epoch_pass  # type: ignore[attr-defined]
        dataset_fn.on_epoch_end = source.on_epoch_end  # type: ignore[attr-defined]
    return dataset_fn


def own_batches(examples: tf.data.Dataset) -> tf.data.Dataset | None:
    """The dataset of batches that `examples` unbatches (validation data given as a
    batched dataset, unbatched by `kdist.data.in_hand`), or `None`: Keras validates a
    dataset by its own batches, which `validation_steps` counts."""
    if "Unbatch" not in type(examples).__name__:
        return None
    inputs = dataset_inputs(examples)
    return inputs[0] if len(inputs) == 1 else None


def validation_batches_fn(
    source: Source, split: str, global_batch_size: int, steps: int | None = None
) -> _DatasetFn:
    """Validation of data given to `fit`, as Keras's `fit` validates: global batches in
    order (a dataset of batches: its own, `own_batches`), the last one partial, the
    first `steps` only (`validation_steps`, each validation from the start, as Keras's
    `evaluate` resets its iterator), each cut over the replicas (`replica_parts`)."""

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        examples = source.dataset(split)
        batches = own_batches(examples)
        if batches is None:
            batches = examples.batch(global_batch_size)
        return replicas_read(batches.take(steps) if steps else batches, context)

    dataset_fn.one_pipeline = bool(getattr(source, "one_pipeline", False))  # type: ignore[attr-defined]
    # The count of global batches where the data's size says it (arrays; not a dataset of
    # batches): Keras's `evaluate` knows it from its adapter and makes no call past it,
    # where a distributed dataset's cardinality is unknown (`StandardRunner`'s hooks).
    size, own = source.size(split), own_batches(source.dataset(split))
    known = -1
    if own is None and 0 < size < ENDLESS:
        known = -(-size // global_batch_size)
    elif own is not None:
        known = int(own.cardinality())  # negative when unknown or infinite
    if steps and known >= 0:
        known = min(known, steps)
    elif steps:
        known = steps
    dataset_fn.batches = known  # type: ignore[attr-defined]
    return dataset_fn
