"""What data given to `fit` becomes: a `Given` and, for datasets and streams, its source."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.given_pipeline import ENDLESS
from kdist.data.source import Source

__all__ = ["DatasetSource", "Given", "count_classes", "given"]


@dataclass(frozen=True)
class Given:
    """What `given_data` found: the source and what it implies for the run.

    Attributes:
        source: the examples, for the input pipeline.
        kind: `"arrays"`, `"dataset"`, `"batched dataset"`, `"PyDataset"` or `"generator"`.
        global_batch_size: the batch the data brings (a batched dataset's, a PyDataset's
            or a generator's first batch), or `None` to keep the configured one.
        shuffle: whether kdist shuffles the examples (arrays and unbatched datasets:
            `fit`'s `shuffle`; batches that come made: never, as in Keras).
        one_pipeline: the replicas read one input pipeline (a dataset or a Python
            stream, which two pipelines would read in two different orders).
        class_weight: the `class_weight` for the input pipeline to apply
            (`trainer.class_weight`), `None` when none is left to apply (arrays carry
            theirs in their sample weights).
        endless: the data has no end (a Python generator, a `repeat()`ed dataset):
            every call of `steps_per_execution` steps runs whole, as Keras's `fit`.
    """

    source: Source
    kind: str
    global_batch_size: int | None
    shuffle: bool
    one_pipeline: bool
    class_weight: dict[int, float] | None = None
    endless: bool = False

    def describe(self) -> str:
        sizes = f"{self.source.size('train')} training"
        validation = self.source.size("validation")
        if validation >= ENDLESS:
            sizes += " and endless validation"
        elif validation:
            sizes += f" and {validation} validation"
        return f"{self.kind} given to fit ({sizes} examples)"


class DatasetSource(Source):
    """A source over `tf.data.Dataset`s of single examples (data given to `fit`).

    Args:
        train: the training examples, unbatched, in their order.
        train_size: how many examples one pass over `train` holds.
        validation: the validation examples, unbatched. Defaults to `None`: none.
        validation_size: how many examples `validation` holds. Defaults to `0`.
        one_pipeline: the replicas must share one input pipeline (see `Given`).
            Defaults to `True`.
        classes: how to find the number of classes when a model built from the config
            asks. Defaults to `None`: the largest integer target of one pass + 1 (or
            the size of one-hot rows).
    """

    def __init__(
        self,
        *,
        train: tf.data.Dataset,
        train_size: int,
        validation: tf.data.Dataset | None = None,
        validation_size: int = 0,
        one_pipeline: bool = True,
        classes: Callable[[], int] | None = None,
    ):
        self._datasets = {"train": train, "validation": validation}
        self._sizes = {"train": int(train_size), "validation": int(validation_size)}
        self.one_pipeline = one_pipeline
        x, _, _ = keras.utils.unpack_x_y_sample_weight(train.element_spec)
        self.input_shape = tf.nest.map_structure(lambda spec: tuple(getattr(spec, "shape", ())), x)
        self._num_classes: int | None = None
        self._classes = classes or (lambda: count_classes(train))

    @property
    def num_classes(self) -> int:  # type: ignore[override]  # Source's attribute, read lazily
        """Classes of integer (or one-hot) targets; read from the data once, when asked."""
        if self._num_classes is None:
            self._num_classes = self._classes()
        return self._num_classes

    def size(self, split: str) -> int:
        return self._sizes[split]

    def dataset(self, split: str) -> tf.data.Dataset:
        ds = self._datasets[split]
        if ds is None:
            return self._datasets["train"].take(0)
        return ds


def count_classes(ds: tf.data.Dataset) -> int:
    _, y, _ = keras.utils.unpack_x_y_sample_weight(ds.element_spec)
    if not isinstance(y, tf.TensorSpec):
        return 0
    if y.shape.rank and y.shape[-1] and y.shape[-1] > 1:
        return int(y.shape[-1])  # one-hot rows
    if not y.dtype.is_integer:
        return 1

    def largest(top: tf.Tensor, example: Any) -> tf.Tensor:
        _, label, _ = keras.utils.unpack_x_y_sample_weight(example)
        return tf.maximum(top, tf.cast(tf.reduce_max(label), tf.int64))

    return int(ds.reduce(tf.constant(-1, tf.int64), largest)) + 1


def given(**description: Any) -> Source:
    """What `data.source` says in the config of a run trained on data given to `fit`.

    That data is not in the run folder, so a later command cannot read it again.

    Raises:
        ConfigError: naming `data.source`, always.
    """
    raise ConfigError(
        "data.source",
        f"the run trained on {description.get('kind', 'data')} given to fit() in Python, "
        "which the run folder does not hold",
        hint="give the data again (exp.predict(x=...), exp.fit(x, ...)), or set data=... "
        "to a source that reads it (e.g. data=npz data.source.path=FILE)",
    )
