"""The input pipeline: one `dataset_fn(input_context)` per split, for any strategy."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tensorflow as tf

from kdist.config.build import instantiate
from kdist.config.compile_rules import check_class_weight
from kdist.config.errors import ConfigError
from kdist.data.augment import augment, check_augment, is_enabled
from kdist.data.files import FileSource
from kdist.data.source import ArraySource, Source

__all__ = [
    "DatasetFn",
    "build_source",
    "check_batch_split",
    "make_dataset_fn",
    "replica_parts",
    "resolve_shard_policy",
    "run_dataset_fn",
    "steps_per_epoch",
]

log = logging.getLogger(__name__)

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


def check_batch_split(global_batch_size: int, replicas: int) -> None:
    """Check that `global_batch_size` splits evenly over `replicas`.

    Raises:
        ConfigError: naming `trainer.global_batch_size`, with the nearest multiple below.
    """
    if global_batch_size % replicas:
        lower = max(replicas, global_batch_size - global_batch_size % replicas)
        raise ConfigError(
            "trainer.global_batch_size",
            f"is not divisible by the {replicas} replicas",
            value=global_batch_size,
            hint=f"use a multiple of {replicas}, e.g. {lower}",
        )


def steps_per_epoch(source: Source, global_batch_size: int, requested: int | None) -> int:
    """Training steps in one epoch: `requested`, or every full global batch once.

    A source that keeps its partial last batch (data given to `fit`, as Keras's `fit`
    trains it: `partial_batches`) has one step more for it.

    Raises:
        ConfigError: when the training split is smaller than one global batch.
    """
    if requested:
        return int(requested)
    if partial_batches(source):
        return int(source.steps_per_pass(global_batch_size))  # type: ignore[attr-defined]
    available = source.size("train") // global_batch_size
    if available < 1:
        raise ConfigError(
            "trainer.global_batch_size",
            f"is larger than the {source.size('train')} training examples",
            value=global_batch_size,
            hint=f"use at most {source.size('train')}, or set trainer.steps_per_epoch "
            "(the data repeats)",
        )
    return available


def resolve_shard_policy(policy: str, source: Source, num_pipelines: int, split: str) -> str:
    """How one split is divided over `num_pipelines` input pipelines: `file`, `data` or `off`.

    `file` gives each pipeline whole files (training split of a `FileSource` only);
    `data` gives pipeline `i` every `n`-th example; `off` gives every pipeline
    everything. `auto` is `file` when the source has at least one non-empty file per
    pipeline, else `data` (logged). Validation data is always divided by example, so
    each example is evaluated once.

    Raises:
        ConfigError: naming `data.shard_policy` for `file` with an in-memory source,
            fewer files than pipelines, or a pipeline whose files hold no example.
    """
    if num_pipelines <= 1:
        return "off"
    if split != "train":
        return "off" if policy == "off" else "data"
    if policy in ("data", "off"):
        return policy
    files = list(source.files or []) if isinstance(source, FileSource) else []
    problem = None
    if not files:
        problem = "file sharding needs a file-based source; this one is in memory"
    elif len(files) < num_pipelines:
        problem = (
            f"file sharding needs a file per input pipeline: {len(files)} file(s) for "
            f"{num_pipelines} pipelines"
        )
    else:
        assert isinstance(source, FileSource)
        for index in range(num_pipelines):
            if source.count(split, files[index::num_pipelines]) == 0:
                problem = f"file sharding leaves input pipeline {index} without examples"
                break
    if problem is None:
        return "file"
    if policy == "file":
        raise ConfigError(
            "data.shard_policy",
            problem,
            value=policy,
            hint="use data.shard_policy=data (or auto), or write more, smaller files",
        )
    log.info("data.shard_policy=auto: %s; sharding by example instead", problem)
    return "data"


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

        def part(j: tf.Tensor) -> Any:
            low = tf.minimum((first + j) * size, rows)
            high = tf.minimum(low + size, rows)
            return tf.nest.map_structure(lambda t: t[low:high], batch)

        return tf.data.Dataset.range(per_pipeline).map(part)

    return ds.flat_map(parts)


def _replicas_read(ds: tf.data.Dataset, context: tf.distribute.InputContext) -> tf.data.Dataset:
    """Global batches as this pipeline's replicas read them (`replica_parts`), in order:
    no auto-sharding (the cut is the sharding), deterministic, prefetched."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = True
    return replica_parts(ds, context).with_options(options).prefetch(tf.data.AUTOTUNE)


def _partial_dataset_fn(
    source: Source,
    data_cfg: Any,
    *,
    global_batch_size: int,
    seed: int,
    skip_examples: int,
    class_weight: Mapping[int, float] | None,
) -> DatasetFn:
    """The training `dataset_fn` of a source with partial batches (`partial_batches`).

    The source yields the global batches of the steps from the resumed one on (each pass
    over the data ends with its partial batch; arrays in an order seeded by `seed` and
    the pass); each pipeline takes its replicas' parts of every batch (`replica_parts`).
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
            global_batch_size, seed=seed, shuffle=bool(data_cfg.shuffle), first_step=first_step
        )
        if class_weight:
            ds = ds.map(_batch_class_weighting(class_weight), num_parallel_calls=tf.data.AUTOTUNE)
        return _replicas_read(ds, context)

    dataset_fn.one_pipeline = bool(getattr(source, "one_pipeline", False))  # type: ignore[attr-defined]
    return dataset_fn


def _validation_batches_fn(source: Source, split: str, global_batch_size: int) -> DatasetFn:
    """Validation of data given to `fit`, as Keras's `fit` validates: global batches in
    order, the last one partial, each cut over the replicas (`replica_parts`)."""

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return _replicas_read(source.dataset(split).batch(global_batch_size), context)

    dataset_fn.one_pipeline = bool(getattr(source, "one_pipeline", False))  # type: ignore[attr-defined]
    return dataset_fn


def make_dataset_fn(
    source: Source,
    split: str,
    data_cfg: Any,
    *,
    global_batch_size: int,
    seed: int,
    skip_examples: int = 0,
    class_weight: Mapping[int, float] | None = None,
) -> DatasetFn:
    """The `dataset_fn` that `distribute_datasets_from_function` calls once per pipeline.

    Training data is cached, shuffled with `seed` (a new order every pass, the same on
    every worker), repeated without end, sharded by input pipeline, batched per replica
    with full batches only, and prefetched. Validation data is read once, in order.

    A source with `partial_batches` (data given to `fit`) is read as Keras's `fit` reads
    it instead: its own global batches, each pass ending with its partial batch, cut
    over the replicas (`replica_parts`), resumed at the step (`_partial_dataset_fn`).

    Sharding happens after the shuffle so that, for a given seed, the union of the
    replicas' batches at step `t` is the same global batch under every strategy
    (`shard_policy` data; see `resolve_shard_policy` for file and off). Training
    examples are then augmented (`data.augment`, a parallel map) before batching.

    Args:
        source: the data source.
        split: `"train"` or `"validation"`.
        data_cfg: the `data` config node (shuffle, shuffle_buffer, cache, shard_policy,
            augment).
        global_batch_size: examples per step over all replicas.
        seed: shuffle seed.
        skip_examples: training examples already consumed (a resumed run); the stream
            continues right after them, so no example is used twice or skipped.
            Defaults to `0`.
        class_weight: `{class id: weight}`, as `fit(class_weight=...)`: each
            example's sample weight (1 when the source has none) is multiplied by its
            class's weight. Defaults to `None`.

    Returns:
        A function from `tf.distribute.InputContext` to a batched `tf.data.Dataset`. Its
        `one_pipeline` attribute is true for a source that the replicas of one process
        must read through one input pipeline (data given to `fit` as a dataset or a
        Python stream, see `kdist.data.in_hand`).
    """
    training = split == "train"
    if not training and partial_batches(source):
        return _validation_batches_fn(source, split, global_batch_size)
    if training and partial_batches(source):
        return _partial_dataset_fn(
            source,
            data_cfg,
            global_batch_size=global_batch_size,
            seed=seed,
            skip_examples=skip_examples,
            class_weight=class_weight,
        )
    policy = str(data_cfg.shard_policy)
    if policy == "file" and not isinstance(source, FileSource):
        raise ConfigError(
            "data.shard_policy",
            "file sharding needs a file-based source; this one is in memory",
            value=policy,
            hint="use auto or data",
        )

    augment_cfg = data_cfg.get("augment")
    if training and is_enabled(augment_cfg):
        check_augment(augment_cfg, source.input_shape)
    if training and source.size(split) < 1:
        raise ConfigError("data.source", "has no training examples")

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        check_batch_split(global_batch_size, context.num_replicas_in_sync)
        batch = context.get_per_replica_batch_size(global_batch_size)
        pipelines, index = context.num_input_pipelines, context.input_pipeline_id
        mode = resolve_shard_policy(policy, source, pipelines, split)
        if mode == "file":
            assert isinstance(source, FileSource)
            mine = list(source.split_files(split))[index::pipelines]
            log.info(
                "%s data: input pipeline %d of %d reads %d file(s): %s",
                split,
                index,
                pipelines,
                len(mine),
                ", ".join(Path(f).name for f in mine),
            )
            ds = source.read(split, mine)
        else:
            ds = source.dataset(split)
        if data_cfg.cache:
            ds = ds.cache()
        if training:
            if data_cfg.shuffle:
                buffer = max(1, min(int(data_cfg.shuffle_buffer), source.size(split)))
                ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
            ds = ds.repeat()
            if skip_examples and mode == "file":
                # Each pipeline reads its own files and consumed an equal share.
                ds = ds.skip(skip_examples // pipelines)
            elif skip_examples:
                # Before sharding: a position in the global stream, valid for any
                # replica count.
                ds = ds.skip(skip_examples)
        if mode == "data":
            ds = ds.shard(pipelines, index)
        if training:
            # A different random stream per pipeline, the same for a given seed; a resumed
            # run continues it after the examples this pipeline already consumed.
            ds = augment(
                ds,
                augment_cfg,
                input_shape=source.input_shape,
                seed=seed * 7919 + index,
                skip=skip_examples // pipelines,
            )
        if class_weight:
            ds = ds.map(_class_weighting(class_weight), num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(batch, drop_remainder=training)
        options = tf.data.Options()
        # kdist shards by input context itself; auto-sharding would shard twice.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        options.deterministic = True
        return ds.with_options(options).prefetch(tf.data.AUTOTUNE)

    # Two pipelines over a user's dataset (an unseeded shuffle) or a Python stream would
    # read it in two orders: the runner reads it once per process (`StandardRunner`).
    dataset_fn.one_pipeline = bool(getattr(source, "one_pipeline", False))  # type: ignore[attr-defined]
    return dataset_fn


def _class_weighting(class_weight: Mapping[int, float]) -> Callable[..., Any]:
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


def _batch_class_weighting(class_weight: Mapping[int, float]) -> Callable[..., Any]:
    """`_class_weighting` for batches: each row's weight times its class's weight."""
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


def build_source(node: Any) -> Source:
    """The `Source` a `data.source` node makes.

    Raises:
        ConfigError: naming `data.source._target_` when it makes something else.
    """
    source = instantiate(node, _convert_="all")
    if not isinstance(source, Source):
        raise ConfigError(
            "data.source._target_",
            f"returned {type(source).__name__}, not a kdist.data.Source",
            value=node.get("_target_"),
        )
    return source


def run_dataset_fn(cfg: Any, source: Source, split: str, skip_examples: int = 0) -> DatasetFn:
    """The `dataset_fn` of a train config's `split`: batch, seed, weights from `cfg`.

    Training batches are micro-batches (`trainer.global_batch_size / accumulate_steps`)
    and carry `trainer.class_weight`; `skip_examples` is a resumed run's data position.
    """
    trainer = cfg.trainer
    batch = int(trainer.global_batch_size)
    train = split == "train"
    if train:
        accumulate = int(trainer.get("accumulate_steps", 1))
        # Arrays whose passes split into whole global batches leave no partial batch.
        whole = isinstance(source, ArraySource) and source.size("train") % batch == 0
        if accumulate > 1 and partial_batches(source) and not whole:
            raise ConfigError(
                "trainer.accumulate_steps",
                "does not apply to data given to fit, whose partial last batch cannot be "
                "cut into micro-batches",
                value=accumulate,
                hint="leave it at 1, or use a data.source (e.g. data=npz)",
            )
        batch //= accumulate
    return make_dataset_fn(
        source,
        split,
        cfg.data,
        global_batch_size=batch,
        seed=int(cfg.runtime.seed),
        skip_examples=skip_examples,
        class_weight=check_class_weight(trainer.get("class_weight")) if train else None,
    )
