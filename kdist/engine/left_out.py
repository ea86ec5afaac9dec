"""Inputs left out as `None` (Keras's `Input(optional=True)`) in data a strategy distributes.

tf.data carries a `None` in a batch (`NoneTensorSpec`), but a distributed dataset
cannot iterate one ("'NoneTensorSpec' object has no attribute 'shape'"). The dataset
is distributed without its `None`s, and the replica step gets them back: the model sees
the batch Keras's `fit` gives it.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["NonesLeftOut", "first_given", "holds_nones"]


def first_given(x: Any) -> Any:
    """The first input of `x` that is not `None` (an optional input left out), as
    Keras's `train_step` sizes the loss tracker's batch."""
    return next(leaf for leaf in tf.nest.flatten(x) if leaf is not None)


def holds_nones(element_spec: Any) -> bool:
    """Whether a dataset's batches hold a `None` (a spec with no shape)."""
    return any(not hasattr(spec, "shape") for spec in tf.nest.flatten(element_spec))


class NonesLeftOut:
    """A `dataset_fn` whose batches have their `None`s taken out; `restore` puts them
    back (call it on a batch inside the replica step).

    Args:
        dataset_fn: the `dataset_fn` to wrap; its `batches` count, if any, is kept.
    """

    def __init__(self, dataset_fn: Any):
        self._dataset_fn = dataset_fn
        self.batches = getattr(dataset_fn, "batches", -1)
        self._spec: Any = None
        self._kept: list[int] = []
        self._count = 0

    def __call__(self, context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = self._dataset_fn(context)
        self._spec = dataset.element_spec
        leaves = tf.nest.flatten(self._spec)
        self._count = len(leaves)
        self._kept = [i for i, spec in enumerate(leaves) if hasattr(spec, "shape")]
        kept = self._kept

        def drop(*element: Any) -> tuple[Any, ...]:
            flat = tf.nest.flatten(element[0] if len(element) == 1 else element)
            return tuple(flat[i] for i in kept)

        return dataset.map(drop)

    def restore(self, parts: Any) -> Any:
        """The batch as the model takes it: `parts` with the `None`s back in place."""
        given = dict(zip(self._kept, tf.nest.flatten(parts), strict=True))
        leaves = [given.get(i) for i in range(self._count)]
        return tf.nest.pack_sequence_as(self._spec, leaves)
