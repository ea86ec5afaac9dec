"""Fewer bytes per all-reduce: gradients cast to 16 bits for the cross-replica sum.

`trainer.allreduce_dtype=bfloat16` (or `float16`) casts each floating gradient to that
type for the all-reduce and back to the variable's type after it, as Horovod's
`Compression.fp16` does: the bytes a step sends halve, and the sum is made in 16 bits.
bfloat16 keeps float32's range (8 bits of mantissa); float16 keeps 11 bits of mantissa
but flushes gradients below about 6e-8 to zero and overflows above 65504.

Keras's TensorFlow optimizer sums the replicas' gradients in `_all_reduce_sum_gradients`
(called from `apply_gradients` in replica context, before any update); kdist replaces
that method on the optimizer that applies the updates (the one a `LossScaleOptimizer`
wraps, which receives unscaled gradients), so Keras's own `train_step`, a model's own
`train_step` and kdist's accumulation all send the compressed gradients. Sparse
gradients (`tf.IndexedSlices`, embedding rows) are cast too: their rows are gathered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from kdist.compat.keras_private import replace_all_reduce
from kdist.config.constants import ALLREDUCE_DTYPES

__all__ = ["ALLREDUCE_DTYPES", "ReducedBytes", "compress_all_reduce", "reduced_bytes"]

log = logging.getLogger(__name__)


@dataclass
class ReducedBytes:
    """Bytes each replica hands the all-reduce in one step, counted while tracing.

    `per_step` is the sum of the `nbytes` of the (cast) gradients of the last traced
    step whose shapes are static; `dynamic` counts gradients of unknown size (the rows of
    a sparse gradient), left out of `per_step`.
    """

    dtype: str
    per_step: int = 0
    dynamic: int = 0
    traces: list[int] = field(default_factory=list)


def _nbytes(value: Any) -> int | None:
    tensor = value.values if isinstance(value, tf.IndexedSlices) else value
    count = tensor.shape.num_elements()
    if count is None or isinstance(value, tf.IndexedSlices):
        return None
    return int(count) * tensor.dtype.size


def _cast(value: Any, dtype: tf.DType) -> Any:
    if not value.dtype.is_floating or value.dtype == dtype:
        return value
    return tf.cast(value, dtype)


def compress_all_reduce(optimizer: Any, dtype: str) -> ReducedBytes:
    """Make `optimizer` all-reduce its gradients in `dtype`, and count the bytes it sends.

    Call it once, before the train function is traced. With `dtype="float32"` nothing is
    cast and the bytes are only counted.

    Args:
        optimizer: a Keras optimizer (a `LossScaleOptimizer`'s inner one is changed).
        dtype: `float32`, `bfloat16` or `float16`.

    Returns:
        The counter of bytes reduced per step (filled when the step is traced).

    Raises:
        ValueError: for another `dtype`.
    """
    if dtype not in ALLREDUCE_DTYPES:
        raise ValueError(f"`dtype` ({dtype!r}) must be one of {', '.join(ALLREDUCE_DTYPES)}.")
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    wire = tf.as_dtype(dtype)
    counter = ReducedBytes(dtype)

    def all_reduce_sum(grads_and_vars: Any) -> list[tuple[Any, Any]]:
        context = tf.distribute.get_replica_context()
        pairs = list(grads_and_vars)
        if context is None:
            return pairs
        present = [i for i, (g, _) in enumerate(pairs) if g is not None]
        if not present:
            return pairs
        originals = [pairs[i][0] for i in present]
        sent = [_cast(g, wire) for g in originals]
        sizes = [_nbytes(g) for g in sent]
        counter.per_step = sum(s for s in sizes if s is not None)
        counter.dynamic = sum(1 for s in sizes if s is None)
        counter.traces.append(counter.per_step)
        reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, sent)
        out = list(pairs)
        for i, original, value in zip(present, originals, reduced, strict=True):
            out[i] = (_cast(value, original.dtype), pairs[i][1])
        return out

    # An instance attribute: Keras's `_backend_update_step` calls it on this optimizer.
    replace_all_reduce(inner, all_reduce_sum)
    inner._kdist_reduced_bytes = counter
    return counter


def reduced_bytes(optimizer: Any) -> ReducedBytes | None:
    """The counter `compress_all_reduce` installed on `optimizer`, or `None`."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return getattr(inner, "_kdist_reduced_bytes", None)
