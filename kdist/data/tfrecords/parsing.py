"""Parsing a serialized `tf.train.Example` of a manifest's files into tensors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from kdist.data.tfrecords.manifest import Manifest

__all__ = ["parse_fn"]


def parse_fn(
    manifest: Manifest,
    *,
    batched: bool = False,
    targets: Sequence[str] | None = None,
    weight: str | None = None,
) -> Callable[[tf.Tensor], tuple[Any, ...]]:
    """The function from a serialized `tf.train.Example` to `(features, label)` tensors.

    Features come back in their stored dtype (see `kdist.data.files.model_tensor` for
    what the model gets); integer targets as int32, float targets as float32.

    Args:
        manifest: the files' manifest.
        batched: the function takes a vector of records and returns batches
            (`tf.io.parse_example`), for `list` and `raw` features. Defaults to `False`.
        targets: the target features: one name gives a tensor, several a dict by name.
            Defaults to `None`: the manifest's `label_key`.
        weight: a scalar float feature of per-example sample weights, returned third.
            Defaults to `None`.

    Raises:
        ValueError: for `batched` with an `image` feature (decoded one at a time).
    """
    name = manifest.feature_key
    labels = list(targets or [manifest.label_key])
    spec = manifest.features[name]
    dtype = tf.as_dtype(spec.dtype)
    if spec.encoding == "list":
        stored = tf.float32 if dtype.is_floating else tf.int64
        feature = tf.io.FixedLenFeature(spec.shape, stored)
    else:
        feature = tf.io.FixedLenFeature([], tf.string)
    schema = {name: feature}
    floats = {}
    for label in labels:
        floats[label] = tf.as_dtype(manifest.features[label].dtype).is_floating
        schema[label] = tf.io.FixedLenFeature(
            manifest.features[label].shape, tf.float32 if floats[label] else tf.int64
        )
    if weight:
        schema[weight] = tf.io.FixedLenFeature([], tf.float32)
    if batched and spec.encoding == "image":
        raise ValueError("image features are decoded one record at a time; use batched=False.")

    def target(parsed: dict[str, tf.Tensor], label: str) -> tf.Tensor:
        return tf.cast(parsed[label], tf.float32 if floats[label] else tf.int32)

    def parse(record: tf.Tensor) -> tuple[Any, ...]:
        parsed = (tf.io.parse_example if batched else tf.io.parse_single_example)(record, schema)
        value = parsed[name]
        if spec.encoding == "raw":
            shape = [-1, *spec.shape] if batched else list(spec.shape)
            value = tf.reshape(tf.io.decode_raw(value, dtype), shape)
        elif spec.encoding == "image":
            value = tf.io.decode_image(value, channels=spec.shape[-1], expand_animations=False)
            value = tf.reshape(value, spec.shape)
        y: Any = (
            target(parsed, labels[0])
            if targets is None or len(labels) == 1
            else {label: target(parsed, label) for label in labels}
        )
        if weight:
            return tf.cast(value, dtype), y, parsed[weight]
        return tf.cast(value, dtype), y

    return parse
