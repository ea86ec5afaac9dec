"""`fit(x, y, ...)`'s data arguments, told apart and checked against the strategy.

Each problem is a `ConfigError` naming the argument (`x`, `y`, `batch_size`, ...) before
any training.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.in_hand.arrays import as_arrays, as_tuple, from_arrays
from kdist.data.in_hand.datasets import from_dataset, is_batched
from kdist.data.in_hand.source import Given
from kdist.data.in_hand.streams import from_generator, from_pydataset

__all__ = ["given_data", "is_stream"]


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
    strategy: tf.distribute.Strategy,
) -> Given:
    """The source for `fit(x, y, ...)`'s data, checked against the strategy.

    Args:
        x: NumPy arrays (or a dict/tuple of them), a `tf.data.Dataset`, a
            `keras.utils.PyDataset` or a Python generator of batches.
        y: targets, with arrays only. Defaults to `None`.
        validation_data: `(x_val, y_val[, sample_weight_val])` arrays, a
            `tf.data.Dataset` or a `PyDataset` (read once into arrays). Defaults to `None`.
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
        strategy: the run's strategy.

    Returns:
        A `Given`.

    Raises:
        ConfigError: naming the argument, for data that does not fit together or that
            the strategy cannot read.
    """
    if isinstance(x, tf.data.Dataset):
        given_kind = "dataset"
    elif isinstance(x, keras.utils.PyDataset):
        given_kind = "PyDataset"
    elif is_stream(x):
        given_kind = "generator"
    else:
        given_kind = "arrays"
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
                hint="pass NumPy arrays or a tf.data.Dataset, or a data.source that each "
                "worker reads (e.g. data=npz data.source.path=FILE)",
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
    validation = _validation(validation_data)
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
    if given_kind == "PyDataset":
        found = from_pydataset(x, validation=validation)
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


def _validation(validation_data: Any) -> tuple[Any, ...] | tf.data.Dataset | None:
    """`validation_data` as arrays `(x, y[, w])`, or an unbatched `tf.data.Dataset`."""
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
        raise ConfigError(
            "validation_data",
            "is a generator, which validation would read once and then find empty",
            hint="pass arrays, a tf.data.Dataset or a keras.utils.PyDataset",
        )
    if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
        raise ConfigError(
            "validation_data",
            "must be (x_val, y_val) or (x_val, y_val, sample_weight_val), a "
            "tf.data.Dataset or a keras.utils.PyDataset",
            value=type(validation_data).__name__,
        )
    return tuple(as_arrays(part, f"validation_data[{i}]") for i, part in enumerate(validation_data))
