"""The input pipeline: one `dataset_fn(input_context)` per split, for any strategy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.source import Source

__all__ = ["DatasetFn", "make_dataset_fn", "steps_per_epoch"]

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


def steps_per_epoch(source: Source, global_batch_size: int, requested: int | None) -> int:
    """Training steps in one epoch: `requested`, or every full global batch once.

    Raises:
        ConfigError: when the training split is smaller than one global batch.
    """
    available = source.size("train") // global_batch_size
    if requested:
        return int(requested)
    if available < 1:
        raise ConfigError(
            "trainer.global_batch_size",
            f"is larger than the {source.size('train')} training examples",
            value=global_batch_size,
            hint=f"use at most {source.size('train')}, or set trainer.steps_per_epoch "
            "(the data repeats)",
        )
    return available


def _shard(ds: tf.data.Dataset, context: tf.distribute.InputContext, policy: str) -> Any:
    if context.num_input_pipelines <= 1 or policy == "off":
        return ds
    return ds.shard(context.num_input_pipelines, context.input_pipeline_id)


def make_dataset_fn(
    source: Source,
    split: str,
    data_cfg: Any,
    *,
    global_batch_size: int,
    seed: int,
) -> DatasetFn:
    """The `dataset_fn` that `distribute_datasets_from_function` calls once per pipeline.

    Training data is cached, shuffled with `seed` (a new order every pass, the same on
    every worker), repeated without end, sharded by input pipeline, batched per replica
    with full batches only, and prefetched. Validation data is read once, in order.

    Sharding happens after the shuffle so that, for a given seed, the union of the
    replicas' batches at step `t` is the same global batch under every strategy.

    Args:
        source: the data source.
        split: `"train"` or `"validation"`.
        data_cfg: the `data` config node (shuffle, shuffle_buffer, cache, shard_policy).
        global_batch_size: examples per step over all replicas.
        seed: shuffle seed.

    Returns:
        A function from `tf.distribute.InputContext` to a batched `tf.data.Dataset`.
    """
    training = split == "train"
    policy = str(data_cfg.shard_policy)
    if policy == "file" and source.files is None:
        raise ConfigError(
            "data.shard_policy",
            "file sharding needs a file-based source; this one is in memory",
            value=policy,
            hint="use auto or data",
        )

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = context.get_per_replica_batch_size(global_batch_size)
        ds = source.dataset(split)
        if data_cfg.cache:
            ds = ds.cache()
        if training:
            if data_cfg.shuffle:
                buffer = max(1, min(int(data_cfg.shuffle_buffer), source.size(split)))
                ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
            ds = ds.repeat()
        ds = _shard(ds, context, policy)
        ds = ds.batch(batch, drop_remainder=training)
        options = tf.data.Options()
        # kdist shards by input context itself; auto-sharding would shard twice.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        options.deterministic = True
        return ds.with_options(options).prefetch(tf.data.AUTOTUNE)

    return dataset_fn
