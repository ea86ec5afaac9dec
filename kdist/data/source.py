"""What a data source hands the input pipeline."""

from __future__ import annotations

import abc
from collections.abc import Sequence

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


class ArraySource(Source):
    """A source from in-memory NumPy arrays.

    Args:
        x_train: training features, examples on the first axis.
        y_train: integer class labels of the training examples.
        x_validation: validation features.
        y_validation: validation labels.
        num_classes: number of classes. Defaults to `None`: one more than the largest label.
    """

    def __init__(
        self,
        *,
        x_train: np.ndarray,
        y_train: np.ndarray,
        x_validation: np.ndarray,
        y_validation: np.ndarray,
        num_classes: int | None = None,
    ):
        if len(x_train) != len(y_train):
            raise ValueError(
                f"`x_train` has {len(x_train)} examples but `y_train` has {len(y_train)}."
            )
        if len(x_validation) != len(y_validation):
            raise ValueError(
                f"`x_validation` has {len(x_validation)} examples but `y_validation` has "
                f"{len(y_validation)}."
            )
        self._arrays = {
            "train": (x_train, y_train.astype(np.int32)),
            "validation": (x_validation, y_validation.astype(np.int32)),
        }
        self.input_shape = tuple(int(d) for d in x_train.shape[1:])
        labels = np.concatenate([y_train, y_validation]) if len(y_validation) else y_train
        self.num_classes = int(num_classes or int(labels.max()) + 1)

    def size(self, split: str) -> int:
        return len(self._arrays[split][0])

    def arrays(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """The `(features, labels)` arrays of `split`."""
        return self._arrays[split]

    def dataset(self, split: str) -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(self._arrays[split])
