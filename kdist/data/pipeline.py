"""The input pipeline: one `dataset_fn(input_context)` per split, for any strategy."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.config.targets import instantiate
from kdist.data.augment import augment, check_augment, is_enabled
from kdist.data.class_weighting import class_weighting
from kdist.data.files import FileSource
from kdist.data.given_pipeline import (
    partial_batches,
    partial_dataset_fn,
    replica_parts,
    validation_batches_fn,
)
from kdist.data.source import Source

__all__ = [
    "DatasetFn",
    "build_source",
    "check_batch_split",
    "make_dataset_fn",
    "replica_parts",
    "resolve_shard_policy",
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


def make_dataset_fn(
    source: Source,
    split: str,
    data_cfg: Any,
    *,
    global_batch_size: int,
    seed: int,
    skip_examples: int = 0,
    class_weight: Mapping[int, float] | None = None,
    validation_steps: int | None = None,
    epoch_passes: bool = False,
    shuffle: bool | None = None,
    shuffle_buffer: int | None = None,
    cache: bool | None = None,
) -> DatasetFn:
    """The `dataset_fn` that `distribute_datasets_from_function` calls once per pipeline.

    Training data is cached, shuffled with `seed` (a new order every pass, the same on
    every worker), repeated without end, sharded by input pipeline, batched per replica
    with full batches only, and prefetched. Validation data is read once, in order.

    A source with `partial_batches` (data given to `fit`) is read as Keras's `fit` reads
    it instead: its own global batches, each pass ending with its partial batch, cut
    over the replicas (`replica_parts`), resumed at the step
    (`kdist.data.given_pipeline`).

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
        validation_steps: the batches each validation reads, from the start of the
            validation data (Keras's `validation_steps`). Defaults to `None`: all.
        epoch_passes: an epoch is one pass over data given to `fit` (no
            `steps_per_epoch`), read afresh each epoch (`partial_dataset_fn`).
            Defaults to `False`.
        shuffle: a new order every pass. Defaults to `None`: `data_cfg.shuffle`.
        shuffle_buffer: examples the shuffle draws from. Defaults to `None`:
            `data_cfg.shuffle_buffer`.
        cache: cache the examples after their first pass. Defaults to `None`:
            `data_cfg.cache`.

    Returns:
        A function from `tf.distribute.InputContext` to a batched `tf.data.Dataset`. Its
        `one_pipeline` attribute is true for a source that the replicas of one process
        must read through one input pipeline (data given to `fit` as a dataset or a
        Python stream, see `kdist.data.in_hand`).
    """
    training = split == "train"
    shuffle = bool(data_cfg.shuffle if shuffle is None else shuffle)
    cache = bool(data_cfg.cache if cache is None else cache)
    buffer_size = int(data_cfg.shuffle_buffer if shuffle_buffer is None else shuffle_buffer)
    if not training and partial_batches(source):
        return validation_batches_fn(source, split, global_batch_size, validation_steps)
    if training and partial_batches(source):
        return partial_dataset_fn(
            source,
            data_cfg,
            shuffle=shuffle,
            global_batch_size=global_batch_size,
            seed=seed,
            skip_examples=skip_examples,
            class_weight=class_weight,
            epoch_passes=epoch_passes,
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
        if cache:
            ds = ds.cache()
        if training:
            if shuffle:
                buffer = max(1, min(buffer_size, source.size(split)))
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
            ds = ds.map(class_weighting(class_weight), num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(batch, drop_remainder=training)
        if validation_steps and not training:
            ds = ds.take(validation_steps)
        options = tf.data.Options()
        # kdist shards by input context itself; auto-sharding would shard twice.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        options.deterministic = True
        return ds.with_options(options).prefetch(tf.data.AUTOTUNE)

    # Two pipelines over a user's dataset (an unseeded shuffle) or a Python stream would
    # read it in two orders: the runner reads it once per process (`StandardRunner`).
    dataset_fn.one_pipeline = bool(getattr(source, "one_pipeline", False))  # type: ignore[attr-defined]
    return dataset_fn


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
