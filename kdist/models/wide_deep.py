"""A wide-and-deep classifier of categorical ids (Cheng et al. 2016), embedding-heavy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras

from kdist.models.checks import check_dropout, check_num_classes, check_positive

__all__ = ["FieldBuckets", "wide_deep"]

# Distinct fields map the same raw id to different buckets: id + field * stride (a prime).
_FIELD_STRIDE = 1_000_003


@keras.saving.register_keras_serializable(package="kdist")
class FieldBuckets(keras.layers.Layer):
    """Map each field's integer ids into one shared table of `num_buckets` rows.

    Row `(id + field * 1_000_003) mod num_buckets`: fields share a table without sharing
    rows for equal ids (the hashing trick, with collisions when the table is small).

    Args:
        num_buckets: rows of the shared embedding tables.
        **kwargs: `keras.layers.Layer` arguments.
    """

    def __init__(self, num_buckets: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.num_buckets = check_positive("num_buckets", num_buckets)

    def call(self, ids: Any) -> Any:
        ids = keras.ops.cast(ids, "int64")
        fields = keras.ops.arange(keras.ops.shape(ids)[-1], dtype="int64")
        return keras.ops.mod(ids + fields * _FIELD_STRIDE, self.num_buckets)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_buckets": self.num_buckets}


def wide_deep(
    *,
    input_shape: Sequence[int],
    num_classes: int,
    num_buckets: int = 20_000,
    embedding_dim: int = 16,
    units: Sequence[int] = (64,),
    dropout: float = 0.0,
) -> keras.Model:
    """Wide (a linear model of the one-hot ids) plus deep (embeddings and an MLP) logits.

    Both parts look ids up in tables of `num_buckets` rows: the wide table holds one
    weight per class, the deep table `embedding_dim` features. They are the model's
    large variables, which `strategy=parameter_server` with `strategy.min_shard_bytes`
    shards over the parameter servers.

    Args:
        input_shape: `(num_fields,)`: integer ids, one per categorical feature.
        num_classes: number of output logits.
        num_buckets: rows of each embedding table. Defaults to `20_000`.
        embedding_dim: width of the deep embeddings. Defaults to `16`.
        units: width of each hidden layer of the deep part. Defaults to `(64,)`.
        dropout: dropout rate after each hidden layer. Defaults to `0.0`.

    Returns:
        An uncompiled `keras.Model`.

    Raises:
        ValueError: for an input that is not a flat row of ids, or a bad size.

    Example:

    ```python
    model = kdist.models.build("wide_deep", input_shape=(8,), num_classes=2)
    ```
    """
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 1:
        raise ValueError(f"`input_shape` ({shape}) must be (num_fields,) for wide_deep.")
    check_num_classes(num_classes)
    check_positive("embedding_dim", embedding_dim)
    check_dropout(dropout)
    inputs = keras.Input(shape=shape, dtype="int32", name="inputs")
    buckets = FieldBuckets(num_buckets, name="buckets")(inputs)
    wide = keras.layers.Embedding(num_buckets, num_classes, name="wide_embedding")(buckets)
    # The mean over fields: a linear model of the one-hot ids (scaled by 1 / num_fields).
    wide = keras.layers.GlobalAveragePooling1D(name="wide")(wide)
    deep = keras.layers.Embedding(num_buckets, embedding_dim, name="deep_embedding")(buckets)
    deep = keras.layers.Flatten(name="deep_features")(deep)
    for i, width in enumerate(units):
        deep = keras.layers.Dense(int(width), activation="relu", name=f"deep_{i}")(deep)
        if dropout:
            deep = keras.layers.Dropout(dropout)(deep)
    deep = keras.layers.Dense(num_classes, name="deep")(deep)
    # Logits stay float32 under a mixed-precision policy so the loss is computed stably.
    outputs = keras.layers.Add(dtype="float32", name="logits")([wide, deep])
    return keras.Model(inputs, outputs, name="wide_deep")
