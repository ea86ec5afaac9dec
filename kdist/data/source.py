"""What a data source hands the input pipeline."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["ArraySource", "Source"]

SPLITS = ("train", "validation")


class Source(abc.ABC):
    """A labelled dataset with a train and a validation split.

    A source yields single, unbatched `(features, label)` examples; the pipeline in
    `kdist.data.pipeline` shuffles, shards, batches and prefetches them.
    """

    input_shape: tuple[int, ...]
    num_classes: int

    @abc.abstractmethod
    def size(self, split: str) -> int:
        """Number of examples in `split` (`"train"` or `"validation"`)."""

    @abc.abstractmethod
    def dataset(self, split: str) -> tf.data.Dataset:
        """The unbatched examples of `split`, in a fixed order."""

    @property
    def files(self) -> Sequence[str] | None:
        """The files behind the train split, for `shard_policy=file`; `None` if in memory."""
        return None


def _first(structure: Any) -> np.ndarray:
    return next(a for a in tf.nest.flatten(structure) if a is not None)


def _take(structure: Any, index: np.ndarray) -> Any:
    return tf.nest.map_structure(lambda a: None if a is None else a[index], structure)


def _targets(y: Any) -> Any:
    """Targets as the model sees them: integer class ids as int32, floats as float32."""

    def one(array: np.ndarray) -> np.ndarray:
        if np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_:
            return array.astype(np.int32)
        if np.issubdtype(array.dtype, np.floating):
            return array.astype(np.float32)
        return array

    return tf.nest.map_structure(one, y)


class ArraySource(Source):
    """A source from in-memory NumPy arrays, carrying what Keras data carries.

    Features are one array, or a dict (or tuple) of arrays (several inputs); targets are
    an array of any dtype and shape (class ids, one-hot rows, float regression targets),
    a dict keyed by output name, or `None` for a model that needs none (its own
    `train_step`, e.g. an autoencoder: each example is then `(x,)`); optional
    per-example sample weights make each example `(x, y, sample_weight)`, as in `fit`.

    Args:
        x_train: training features, examples on the first axis (or a dict of them).
        y_train: training targets (or a dict of them, by output name), or `None`.
        x_validation: validation features.
        y_validation: validation targets (`None` when `y_train` is).
        num_classes: number of classes. Defaults to `None`: for integer targets one more
            than the largest; otherwise the size of the targets' last axis (1 for a
            vector).
        w_train: per-example sample weights of the training split. Defaults to `None`.
        w_validation: per-example sample weights of the validation split. Defaults to
            `None`.

    Raises:
        ValueError: naming the arrays when their lengths differ.
    """

    def __init__(
        self,
        *,
        x_train: Any,
        y_train: Any,
        x_validation: Any,
        y_validation: Any,
        num_classes: int | None = None,
        w_train: np.ndarray | None = None,
        w_validation: np.ndarray | None = None,
    ):
        splits = {
            "train": (x_train, y_train, w_train),
            "validation": (x_validation, y_validation, w_validation),
        }
        self._arrays: dict[str, tuple[Any, ...]] = {}
        for split, (x, y, w) in splits.items():
            lengths = {len(a) for a in tf.nest.flatten(x) if a is not None}
            if y is not None:
                lengths |= {len(a) for a in tf.nest.flatten(y) if a is not None}
            if w is not None:
                lengths.add(len(w))
            if len(lengths) > 1:
                raise ValueError(
                    f"`x_{split}`, `y_{split}`"
                    + (f" and `w_{split}`" if w is not None else "")
                    + f" have different numbers of examples: {sorted(lengths)}."
                )
            arrays: tuple[Any, ...] = (x,) if y is None else (x, _targets(y))
            if w is not None:
                arrays = (*arrays, np.asarray(w, dtype=np.float32))
            self._arrays[split] = arrays
        self.input_shape = _shapes(x_train)
        self.num_classes = int(num_classes or _num_classes(y_train, y_validation))

    def size(self, split: str) -> int:
        return len(_first(self._arrays[split]))

    def arrays(self, split: str) -> tuple[Any, ...]:
        """The `(features, targets[, sample_weights])` arrays of `split`."""
        return self._arrays[split]

    def dataset(self, split: str) -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(self._arrays[split])


def _shapes(x: Any) -> Any:
    """Each input's shape without its batch axis (`None` for an input left out)."""
    if x is None:
        return None
    if isinstance(x, dict):
        return {name: _shapes(a) for name, a in x.items()}
    if isinstance(x, tuple):
        return tuple(_shapes(a) for a in x)
    return tuple(int(d) for d in x.shape[1:])


def _num_classes(y_train: Any, y_validation: Any) -> int:
    if y_train is None or isinstance(y_train, (dict, list, tuple)):
        return 0  # several outputs: no one class count
    y_train = np.asarray(y_train)
    integer = np.issubdtype(y_train.dtype, np.integer)
    if integer and (y_train.ndim <= 1 or (y_train.ndim == 2 and y_train.shape[1] == 1)):
        labels = (
            np.concatenate([y_train.reshape(-1), np.asarray(y_validation).reshape(-1)])
            if len(y_validation)
            else y_train.reshape(-1)
        )
        return int(labels.max()) + 1 if labels.size else 0
    return int(y_train.shape[-1]) if y_train.ndim > 1 else 1
