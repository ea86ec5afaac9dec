"""The one dispatch of data in hand, as Keras's `data_adapters.get_data_adapter`.

`kind_of` tells the kinds apart in Keras's order (a `tf.data.Dataset`, a
`keras.utils.PyDataset`, a generator, else arrays, or a dict, list or tuple of them);
`given_data` hands `fit`'s data to the module of its kind (`arrays`, `datasets`,
`py_dataset`, `generators`) and checks it against the strategy; `given_batches` reads
the data of `evaluate` and `predict` as the global batches Keras reads. Each problem is a
`ConfigError` naming the argument (`x`, `y`, `batch_size`, ...) before any training.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.in_hand.arrays import as_arrays, as_tuple, from_arrays, length
from kdist.data.in_hand.datasets import StreamedValidation, from_dataset, is_batched
from kdist.data.in_hand.generators import (
    MAX_READ_BATCHES,
    from_generator,
    stream_dataset,
    structured,
)
from kdist.data.in_hand.py_dataset import (
    batch_count,
    endless_items,
    from_pydataset,
    is_endless,
    item,
)
from kdist.data.in_hand.source import Given

__all__ = ["given_batches", "given_data", "is_stream", "kind_of"]

DEFAULT_BATCH = 32  # Keras's `batch_size` for arrays when none is given


def _strategy_kind(strategy: tf.distribute.Strategy) -> str | None:
    """The name of a strategy whose workers build their own input pipelines, else `None`."""
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        return "parameter_server"
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "multi_worker_mirrored"
    return None


def is_stream(x: Any) -> bool:
    return inspect.isgenerator(x) or (
        isinstance(x, Iterator) and not isinstance(x, (np.ndarray, tf.data.Dataset))
    )


def kind_of(x: Any) -> str:
    """`"dataset"`, `"PyDataset"`, `"generator"` or `"arrays"`: which adapter reads `x`."""
    if isinstance(x, tf.data.Dataset):
        return "dataset"
    if isinstance(x, keras.utils.PyDataset):
        return "PyDataset"
    if is_stream(x):
        return "generator"
    return "arrays"


def _refuse(name: str, value: Any, kind: str, hint: str) -> None:
    if value is not None:
        raise ConfigError(name, f"must not be given with a {kind}", hint=hint)


def given_data(
    x: Any,
    y: Any = None,
    *,
    validation_data: Any = None,
    validation_split: float = 0.0,
    sample_weight: Any = None,
    batch_size: int | None = None,
    steps_per_epoch: int | None = None,
    shuffle: bool | None = None,
    class_weight: dict[int, float] | None = None,
    validation_steps: int | None = None,
    strategy: tf.distribute.Strategy,
) -> Given:
    """The source for `fit(x, y, ...)`'s data, checked against the strategy.

    Args:
        x: NumPy arrays (or a dict/tuple of them), a `tf.data.Dataset`, a
            `keras.utils.PyDataset` or a Python generator of batches.
        y: targets, with arrays only. Defaults to `None`.
        validation_data: `(x_val, y_val[, sample_weight_val])` arrays, a
            `tf.data.Dataset`, a `PyDataset` (read once into arrays) or a generator
            (`_validation`). Defaults to `None`.
        validation_split: the last fraction of the arrays kept for validation (before
            any shuffle), as in Keras. Defaults to `0.0`.
        sample_weight: per-example weights, with arrays only. Defaults to `None`.
        batch_size: the global batch of arrays or an unbatched dataset (made data
            brings its own). Defaults to `None`.
        steps_per_epoch: steps per epoch; required for a generator. Defaults to `None`.
        shuffle: shuffle arrays and unbatched datasets. Defaults to `None`: `True`.
        class_weight: `{class id: weight}`; for arrays it becomes per-example sample
            weights here (Keras's rule), for other data the pipeline weighs each batch
            (`Given.class_weight`). Defaults to `None`.
        validation_steps: the batches each validation reads. Defaults to `None`: all.
        strategy: the run's strategy.

    Returns:
        A `Given`.

    Raises:
        ConfigError: naming the argument, for data that does not fit together or that
            the strategy cannot read.
    """
    rows = tensor_rows(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle is not False)
    if rows is not None:
        batch_size = None  # in the rows' batches
        if validation_split:
            raise ConfigError(
                "validation_split",
                "works with NumPy arrays, not ragged or sparse tensors",
                value=validation_split,
                hint="pass validation_data",
            )
        x, y, sample_weight = rows, None, None
    given_kind = kind_of(x)
    if given_kind != "arrays":
        what = "tf.data.Dataset" if given_kind == "dataset" else given_kind
        hint = f"a {what}'s elements carry (x, y[, sample_weight]), as in Keras's fit"
        _refuse("y", y, what, hint)
        _refuse("sample_weight", sample_weight, what, hint)
        if validation_split:
            raise ConfigError(
                "validation_split",
                f"works with NumPy arrays only, not a {what} (as in Keras)",
                value=validation_split,
                hint="pass validation_data",
            )
    if given_kind in ("PyDataset", "generator"):
        refused = _strategy_kind(strategy)
        if refused is not None:
            raise ConfigError(
                "x",
                f"a {given_kind} runs in this Python process, but under {refused} every "
                "worker builds its own input pipeline",
                # Parameter servers take no tf.data.Dataset made here either.
                hint=(
                    "pass NumPy arrays"
                    + (" or a tf.data.Dataset" if refused == "multi_worker_mirrored" else "")
                    + ", or a data.source that each worker reads (e.g. data=npz "
                    "data.source.path=FILE)"
                ),
            )
    if given_kind == "dataset" and isinstance(strategy, tf.distribute.ParameterServerStrategy):
        raise ConfigError(
            "x",
            "a tf.data.Dataset cannot feed parameter_server: each worker builds its input "
            "pipeline from a function, which cannot hold a dataset made here",
            hint="pass NumPy arrays, or a data.source (e.g. data=npz data.source.path=FILE)",
        )
    if given_kind == "arrays" and not 0.0 <= float(validation_split) < 1.0:
        raise ConfigError(
            "validation_split", "must be in [0, 1)", value=validation_split, hint="e.g. 0.2"
        )
    _check_batch_size(batch_size)
    validation = _validation(validation_data, validation_steps)
    # Parameter servers take steps in any order on any worker: full batches only.
    partial = not isinstance(strategy, tf.distribute.ParameterServerStrategy)

    if given_kind == "arrays":
        found = from_arrays(
            x,
            y,
            sample_weight=sample_weight,
            validation=validation,
            validation_split=validation_split,
            shuffle=True if shuffle is None else bool(shuffle),
            class_weight=class_weight,
            partial=partial,
        )
        return dataclasses.replace(found, class_weight=None)  # in its sample weights
    if given_kind == "dataset":
        found = from_dataset(
            x,
            validation=validation,
            batch_size=batch_size,
            steps_per_epoch=steps_per_epoch,
            shuffle=True if shuffle is None else bool(shuffle),
            partial=partial,
        )
        return dataclasses.replace(found, class_weight=class_weight)
    if batch_size is not None:
        raise ConfigError(
            "batch_size",
            f"must not be given with a {given_kind}: its batches are the global batch",
            value=batch_size,
        )
    if given_kind == "PyDataset" and is_endless(x):
        # Keras reads one without end by index, never shuffled, as a generator.
        found = from_generator(
            endless_items(x), validation=validation, steps_per_epoch=steps_per_epoch
        )
        found = dataclasses.replace(found, kind="PyDataset")
    elif given_kind == "PyDataset":
        # Keras shuffles a PyDataset's batches every epoch unless told not to.
        found = from_pydataset(x, validation=validation, shuffle=shuffle is not False)
    else:
        found = from_generator(x, validation=validation, steps_per_epoch=steps_per_epoch)
    return dataclasses.replace(found, class_weight=class_weight)


def _check_batch_size(batch_size: Any) -> None:
    """Refuse a `batch_size` that is not a positive integer (Keras's `fit` would fail
    in its arithmetic, or train on nothing)."""
    if batch_size is None:
        return
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise ConfigError("batch_size", "must be a positive integer", value=batch_size)
    if batch_size < 1:
        raise ConfigError(
            "batch_size", "must be a positive integer", value=batch_size, hint="e.g. 32"
        )


def _validation(
    validation_data: Any, validation_steps: int | None = None
) -> tuple[Any, ...] | tf.data.Dataset | StreamedValidation | None:
    """`validation_data` as arrays `(x, y[, w])`, an unbatched `tf.data.Dataset`, or a
    generator's stream (`StreamedValidation`).

    A generator with `validation_steps` is read on from one validation to the next, as
    Keras's `fit` reads it. Without, it is read to its end before training (at most
    `MAX_READ_BATCHES` batches) and each validation reads those batches: Keras's first
    validation reads it to its end, and its later ones find it empty.
    """
    if validation_data is None:
        return None
    if isinstance(validation_data, tf.data.Dataset):
        ds = validation_data
        return ds.unbatch() if is_batched(ds) else ds
    if isinstance(validation_data, keras.utils.PyDataset):
        batches = [as_tuple(validation_data[i]) for i in range(len(validation_data))]
        return tuple(
            as_arrays(np.concatenate(parts), "validation_data")
            for parts in zip(*batches, strict=True)
        )
    if is_stream(validation_data):
        try:
            first = structured(next(validation_data))
        except StopIteration:
            raise ConfigError("validation_data", "is a generator that yields nothing") from None
        rest = itertools.chain([first], validation_data)
        if validation_steps:
            return StreamedValidation(stream_dataset(lambda: rest, first))
        read = list(itertools.islice(rest, MAX_READ_BATCHES + 1))
        if len(read) > MAX_READ_BATCHES:
            raise ConfigError(
                "validation_data",
                f"is a generator of more than {MAX_READ_BATCHES} batches (or without end): "
                "each validation would read it all",
                hint="pass validation_steps=N (the batches each validation reads), as in Keras",
            )
        return stream_dataset(lambda: iter(read), first).unbatch()
    if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
        raise ConfigError(
            "validation_data",
            "must be (x_val, y_val) or (x_val, y_val, sample_weight_val), a "
            "tf.data.Dataset or a keras.utils.PyDataset",
            value=type(validation_data).__name__,
        )
    return tuple(as_arrays(part, f"validation_data[{i}]") for i, part in enumerate(validation_data))


def tensor_rows(
    x: Any,
    y: Any = None,
    sample_weight: Any = None,
    *,
    batch_size: int | None,
    shuffle: bool,
) -> tf.data.Dataset | None:
    """The batches of data holding `tf.RaggedTensor`s or `tf.SparseTensor`s, read by
    rows as Keras's array adapter slices them (NumPy cannot hold them): shuffled each
    epoch when `shuffle`, `batch_size` rows a batch (32 by default). `None` for other
    data."""
    parts = tuple(p for p in (x, y, sample_weight) if p is not None)
    composite = (tf.RaggedTensor, tf.SparseTensor)
    if not any(isinstance(leaf, composite) for leaf in tf.nest.flatten(parts)):
        return None
    rows = tf.data.Dataset.from_tensor_slices(parts if len(parts) > 1 else parts[0])
    if shuffle:
        count = int(rows.cardinality())
        rows = rows.shuffle(max(count, 1), reshuffle_each_iteration=True)
    return rows.batch(batch_size or DEFAULT_BATCH)


def given_batches(
    x: Any,
    y: Any = None,
    *,
    sample_weight: Any = None,
    batch_size: int | None = None,
    steps: int | None = None,
) -> tf.data.Dataset:
    """The global batches of `evaluate(x, y, ...)` or `predict(x, ...)`, in order.

    Args:
        x: arrays (or a structure of them), a `tf.data.Dataset`, a
            `keras.utils.PyDataset` or a generator.
        y: targets of arrays `x`. Defaults to `None`.
        sample_weight: per-example weights of arrays `x`. Defaults to `None`.
        batch_size: rows per batch of arrays (or of a dataset of single examples).
            Defaults to `None`: 32, as in Keras.
        steps: batches to read. Defaults to `None`: all of them (a generator's: to its
            end, at most `MAX_READ_BATCHES`).

    Returns:
        A `tf.data.Dataset` of batches `x`, `(x, y)` or `(x, y, sample_weight)`.

    Raises:
        ConfigError: naming the argument for data that cannot be read.
    """
    for name, value in (("batch_size", batch_size), ("steps", steps)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ConfigError(name, "must be a positive integer", value=value)
    rows = tensor_rows(x, y, sample_weight, batch_size=batch_size, shuffle=False)
    if rows is not None:
        x, y, sample_weight, batch_size = rows, None, None, None
    made = isinstance(x, (tf.data.Dataset, keras.utils.PyDataset)) or is_stream(x)
    if made:
        for name, value in (("y", y), ("sample_weight", sample_weight)):
            if value is not None:
                raise ConfigError(
                    name,
                    f"must not be given with a {type(x).__name__}: its elements carry "
                    "(x, y[, sample_weight]), as in Keras",
                )
    if isinstance(x, keras.utils.PyDataset) and is_endless(x):
        x = endless_items(x)  # read as a generator is, as Keras reads it
    if isinstance(x, tf.data.Dataset):
        ds = x if is_batched(x) else x.batch(batch_size or DEFAULT_BATCH)
    elif isinstance(x, keras.utils.PyDataset):
        count = batch_count(x)
        if not count:
            raise ConfigError("x", "is an empty keras.utils.PyDataset (len 0)")
        items = [structured(item(x, i)) for i in range(count if steps is None else steps)]
        ds = _from_batches(items)
    elif is_stream(x):
        # Without `steps`, to its end, as Keras's `evaluate` and `predict` read it.
        read = list(itertools.islice(x, MAX_READ_BATCHES + 1 if steps is None else steps))
        if len(read) > MAX_READ_BATCHES:
            # Longer (or without end): streamed, until it ends or a callback stops the
            # loop (`model.stop_evaluating`, `model.stop_predicting`), as in Keras.
            rest = x
            ds = stream_dataset(lambda: itertools.chain(read, rest), structured(read[0]))
        else:
            ds = _from_batches([structured(batch) for batch in read])
    else:
        if x is None:
            raise ConfigError("x", "is missing: give the data to evaluate or predict on")
        parts = [as_arrays(x, "x")]
        if y is not None:
            parts.append(as_arrays(y, "y"))
        if sample_weight is not None:
            if y is None:
                raise ConfigError("sample_weight", "needs targets: give y too")
            parts.append(as_arrays(sample_weight, "sample_weight"))
        count = length(parts[0])
        if count < 1:
            raise ConfigError("x", "has no examples (0 rows)")
        for name, part in zip(("y", "sample_weight"), parts[1:], strict=False):
            if length(part) != count:
                raise ConfigError(
                    name, f"has {length(part)} examples, x has {count}", hint="one row each"
                )
        # `(x,)`: a tuple of inputs is never read as `(x, y)`.
        ds = tf.data.Dataset.from_tensor_slices(tuple(parts)).batch(batch_size or DEFAULT_BATCH)
    if steps is not None and not isinstance(x, keras.utils.PyDataset) and not is_stream(x):
        ds = ds.take(steps)
    return ds


def _from_batches(batches: list[Any]) -> tf.data.Dataset:
    """Python batches (tuples of arrays) as a dataset of those batches, in order."""
    if not batches:
        raise ConfigError("x", "yields no batches")
    first = batches[0]
    ds = tf.data.Dataset.from_tensors(first[0] if len(first) == 1 else first)
    for batch in batches[1:]:
        ds = ds.concatenate(tf.data.Dataset.from_tensors(batch[0] if len(batch) == 1 else batch))
    return ds
