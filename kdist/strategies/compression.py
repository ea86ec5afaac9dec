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
gradients (`tf.IndexedSlices`, embedding rows) are cast to float16 too (their rows are
gathered); with bfloat16 they travel in their own type, as integer gradients always do
(TensorFlow sums sparse gradients with `unsorted_segment_sum`, which has no bfloat16 kernel).

**Error feedback** (`trainer.allreduce_error_feedback`, on by default): each replica keeps
what the cast dropped from each dense gradient (its residual, `g - float32(bfloat16(g))`)
and adds it to its next gradient before casting, as 1-bit SGD and EF-SGD do. The
rounding errors then cancel over the steps instead of adding up: the sum of what a
replica sent over any run of steps equals the sum of its gradients to within one
rounding. The residuals cost one float32 copy of the trainable weights per replica and
four elementwise operations per step (about 5 ms on the 3.3M-parameter CNN on 2 cores).
They are `SUM` sync-on-read variables (`ErrorFeedback`), saved with the checkpoints
(their sum over the replicas, which a restore spreads evenly over the replicas it finds).
Sparse gradients send their rows without it (a residual would be as large as the table).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import replace_all_reduce
from kdist.config.constants import ALLREDUCE_DTYPES

__all__ = [
    "ALLREDUCE_DTYPES",
    "ErrorFeedback",
    "ReducedBytes",
    "compress_all_reduce",
    "reduced_bytes",
]

log = logging.getLogger(__name__)


@dataclass
class ReducedBytes:
    """Bytes each replica hands the all-reduce in one step, counted while tracing.

    `per_step` is the sum of the `nbytes` of the (cast) gradients of the last traced
    step whose shapes are static; `dynamic` counts gradients of unknown size (the rows of
    a sparse gradient), left out of `per_step`. `error_feedback` is the number of
    gradients that carry a residual (0: none).
    """

    dtype: str
    per_step: int = 0
    error_feedback: int = 0
    dynamic: int = 0
    traces: list[int] = field(default_factory=list)


class ErrorFeedback(tf.Module):
    """Each replica's rounding residual of every dense gradient, added to its next one.

    Build it inside `strategy.scope()`: each residual is a sync-on-read variable with
    one independent value per replica (read and assigned in replica context), saved as
    the sum over the replicas.

    Args:
        variables: the trainable variables whose gradients get a residual.
    """

    def __init__(self, variables: Sequence[Any]):
        super().__init__(name="kdist_allreduce_residuals")
        self.residuals = [
            tf.Variable(
                tf.zeros(v.shape, v.dtype),
                trainable=False,
                name=f"residual_{i}",
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
            )
            for i, v in enumerate(variables)
        ]
        keys = [_key(v) for v in variables]
        # Not an attribute: a tf.Module would track it (and its keys are not strings).
        self._find = dict(zip(keys, range(len(keys)), strict=True)).get

    def residual(self, variable: Any) -> Any | None:
        """The residual of `variable`'s gradient, or `None` for a variable without one."""
        index = self._find(_key(variable))
        return None if index is None else self.residuals[index]

    def feed(self, gradient: Any, variable: Any, wire: tf.DType) -> Any:
        """`gradient` plus its residual, cast to `wire`; the residual keeps what was lost."""
        residual = self.residual(variable)
        if residual is None or isinstance(gradient, tf.IndexedSlices):
            return _cast(gradient, wire)
        if not gradient.dtype.is_floating or gradient.dtype == wire:
            return gradient
        full = gradient + tf.cast(residual, gradient.dtype)
        sent = tf.cast(full, wire)
        # No guard against non-finite values: it cost 12 ms a step on the 3.3M-parameter
        # CNN (2 cores), over twice the rest. A loss-scaled step that overflowed never gets
        # here (LossScaleOptimizer skips the update), and any other non-finite gradient
        # has already made the weights non-finite.
        residual.assign(tf.cast(full - tf.cast(sent, full.dtype), residual.dtype))
        return sent


def _key(variable: Any) -> Any:
    """What identifies a variable in `grads_and_vars` (Keras passes `Variable.value`)."""
    return (variable.value if isinstance(variable, keras.Variable) else variable).ref()


def _nbytes(value: Any) -> int | None:
    tensor = value.values if isinstance(value, tf.IndexedSlices) else value
    count = tensor.shape.num_elements()
    if count is None or isinstance(value, tf.IndexedSlices):
        return None
    return int(count) * tensor.dtype.size


# Wire types TensorFlow cannot sum sparse gradients in: the all-reduce of an
# `IndexedSlices` ends in `unsorted_segment_sum`, which has no bfloat16 kernel (a TypeError
# at the first step of `model=wide_deep data=categorical`). Their rows travel unchanged.
_NO_SPARSE_SUM = (tf.bfloat16,)


def _cast(value: Any, dtype: tf.DType) -> Any:
    if not value.dtype.is_floating or value.dtype == dtype:
        return value  # integer gradients (and ones already in `dtype`) travel as they are
    if isinstance(value, tf.IndexedSlices) and dtype in _NO_SPARSE_SUM:
        return value
    return tf.cast(value, dtype)


def compress_all_reduce(
    optimizer: Any, dtype: str, error_feedback: ErrorFeedback | None = None
) -> ReducedBytes:
    """Make `optimizer` all-reduce its gradients in `dtype`, and count the bytes it sends.

    Call it once, before the train function is traced. With `dtype="float32"` nothing is
    cast and the bytes are only counted.

    Args:
        optimizer: a Keras optimizer (a `LossScaleOptimizer`'s inner one is changed).
        dtype: `float32`, `bfloat16` or `float16`.
        error_feedback: the residuals to carry from step to step (module docstring), or
            `None` to cast each gradient alone. Ignored for `float32`.

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
        if error_feedback is None or wire == tf.float32:
            sent = [_cast(g, wire) for g in originals]
        else:
            sent = [error_feedback.feed(pairs[i][0], pairs[i][1], wire) for i in present]
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
    _COUNTERS[inner] = counter
    if error_feedback is not None and wire != tf.float32:
        counter.error_feedback = len(error_feedback.residuals)
    return counter


# The counter `compress_all_reduce` made for each optimizer (not an attribute of
# Keras's optimizer).
_COUNTERS: weakref.WeakKeyDictionary[Any, ReducedBytes] = weakref.WeakKeyDictionary()


def reduced_bytes(optimizer: Any) -> ReducedBytes | None:
    """The counter `compress_all_reduce` installed on `optimizer`, or `None`."""
    return _COUNTERS.get(getattr(optimizer, "inner_optimizer", optimizer))
